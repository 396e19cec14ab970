"""The log-mel recipe (features.kind=fbank): Kaldi-compatible filterbanks (fbank) and the
extraction driver over a data dir's recordings (extract), local jobs or cluster shares."""
