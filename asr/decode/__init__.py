"""Decoding: CTC greedy search, word timings, hyp.txt and CTM output."""
