"""Kaldi HMM models through kaldi-hmm-gmm: context-dependency trees (statistics, questions,
building) and what the GMM-HMM system needs around them; their files (`tree`, `final.mdl`)
are read and written by asr.kaldi."""
