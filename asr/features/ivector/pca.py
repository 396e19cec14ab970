"""Principal component analysis of feature frames, as Kaldi's `est-pca --normalize-mean=true
--normalize-variance=true`: the top `dim` eigenvectors of the frames' covariance, each row
scaled to give unit variance, and the mean folded into an offset column, so the transform is
a d x (D+1) matrix that `transform-feats` applies as y = A x + b (the i-vector recipe's front
end, as Kaldi's `steps/online/nnet2/get_pca_transform.sh`)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from asr.utils.errors import InputError

EIGENVALUE_FLOOR = 1e-10  # relative to the largest: directions without variance are not scaled up


def estimate_pca(x: Tensor | np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The (dim, D+1) whitening PCA transform of frames `x` (T, D) and all eigenvalues (descending)."""
    x = torch.as_tensor(x, dtype=torch.float64)
    if dim > x.shape[1]:
        raise InputError(f"PCA to {dim} dimensions of {x.shape[1]}-dimensional frames: lower the dimension")
    mean = x.mean(dim=0)
    centred = x - mean
    covariance = (centred.T @ centred / max(x.shape[0], 1)).numpy()
    values, vectors = np.linalg.eigh(0.5 * (covariance + covariance.T))
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    scales = 1.0 / np.sqrt(np.maximum(values[:dim], EIGENVALUE_FLOOR * max(values[0], EIGENVALUE_FLOOR)))
    linear = vectors[:, :dim].T * scales[:, None]
    return np.hstack([linear, -(linear @ mean.numpy())[:, None]]), values
