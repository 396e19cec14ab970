"""The i-vector recipes (features.kind=ivector, and the i-vectors of fmllr_ivector_fbank): the
PCA front end (pca), the full-covariance UBM (full_gmm), the total-variability model and
extraction (extractor), the trained extractor (model) and the stage that extracts each set (recipe)."""
