"""Kaldi HMM models through kaldi-hmm-gmm: context-dependency trees (statistics, questions,
building, Kaldi's `tree` file), Kaldi's `final.mdl` (transition model + diagonal GMMs) and what
the GMM-HMM system needs around them."""
