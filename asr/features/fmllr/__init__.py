"""The fMLLR recipes (features.kind=fmllr | fmllr_fbank | fmllr_ivector_fbank): the per-speaker
transform (transform), the speaker-adaptation model trained on log-mel frames (model), the
stage that adapts each set (recipe), and where a SAT GMM-HMM system's adapted sets lie (system)."""
