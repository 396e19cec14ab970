"""The pronunciation lexicon, the Kaldi lang dir (L.fst, topology), decoding graphs (HCLG) and WFST search."""
