"""Frame targets from alignments: the pdf of each (subsampled) frame."""

import numpy as np

from asr.train.frame_targets import subsample_targets


def test_targets_are_the_centre_frames_of_each_subsampled_block():
    pdfs = np.array([0, 0, 0, 1, 1, 1, 2, 2])
    assert subsample_targets(pdfs, 8, 3).tolist() == [0, 1, 2]  # frames 1, 4, 7
    assert subsample_targets(pdfs, 8, 2).tolist() == [0, 1, 1, 2]  # frames 1, 3, 5, 7
    assert subsample_targets(pdfs, 8, 1).tolist() == pdfs.tolist()
    assert subsample_targets(pdfs[:7], 8, 3).tolist() == [0, 1, 2]  # one frame short: last label repeated
    assert subsample_targets(pdfs, 7, 3).tolist() == [0, 1, 2]  # one frame long: surplus ignored
