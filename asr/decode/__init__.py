"""Decoding: CTC greedy search, CTC prefix beam search with a word n-gram LM (lexicon from the
LM vocabulary, LM weight tuned on the dev set), word timings, hyp.txt and CTM output."""
