"""GMM-HMM training without Kaldi, as Kaldi's s5c first stages: monophones from a flat start,
then triphones on a decision tree; Kaldi's final.mdl, tree and ali.N.gz, jobs over shares."""
