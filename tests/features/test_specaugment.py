"""SpecAugment-style masking and its hook in the training loader."""

import kaldiio
import numpy as np
import torch

from asr.features.config import SpecAugmentConfig
from asr.features.featureset import FeatureReader
from asr.features.specaugment import SpecAugment, warp_frequency
from asr.train.data import EpochAugment


def test_off_by_default():
    assert SpecAugment.from_config(SpecAugmentConfig()) is None
    assert SpecAugment.from_config(SpecAugmentConfig(time_masks=1)) == SpecAugment(0, 10, 1, 40, 0.2)
    assert SpecAugment.from_config(SpecAugmentConfig(freq_warp=0.1)) == SpecAugment(0, 10, 0, 40, 0.2, 0.1)


def test_frequency_warp_moves_spectral_peaks_and_keeps_the_edges():
    ramp = torch.arange(40, dtype=torch.float32).repeat(3, 1)  # value = bin index
    assert torch.equal(warp_frequency(ramp, 1.0), ramp)
    for alpha in (0.9, 1.1):
        out = warp_frequency(ramp, alpha)
        assert out[0, 0] == 0 and out[0, -1] == 39  # edges stay in place
        assert bool((out[0, 1:] > out[0, :-1]).all())  # monotone: no bins swapped
        assert torch.allclose(out[:, :20], alpha * ramp[:, :20])  # linear below the knee
    peak = torch.exp(-0.5 * (torch.arange(40.0) - 20.0) ** 2)[None, :]
    assert int(warp_frequency(peak, 1.1).argmax()) == 18  # 20 / 1.1 = 18.2: a longer vocal tract
    assert int(warp_frequency(peak, 0.9).argmax()) == 22  # 20 / 0.9 = 22.2


def test_warp_factor_is_drawn_within_its_range():
    ramp = torch.arange(40, dtype=torch.float32)[None, :]
    augment = SpecAugment(freq_warp=0.1)
    slopes = [float(augment(ramp, torch.Generator().manual_seed(seed))[0, 10] / 10) for seed in range(200)]
    assert 0.9 <= min(slopes) < 0.92 and 1.08 < max(slopes) <= 1.1
    assert abs(np.mean(slopes) - 1.0) < 0.01


def test_masks_bands_and_runs_within_their_limits():
    feats = torch.arange(1, 1 + 200 * 40, dtype=torch.float32).reshape(200, 40)  # no zeros
    augment = SpecAugment(freq_masks=2, freq_width=5, time_masks=3, time_width=30, time_ratio=0.1)
    widths_f, widths_t = [], []
    for seed in range(50):
        out = augment(feats, torch.Generator().manual_seed(seed))
        zero_cols = (out == 0).all(dim=0)
        zero_rows = (out == 0).all(dim=1)
        unmasked = out != 0
        assert torch.equal(out[unmasked], feats[unmasked])  # everything else untouched
        assert torch.equal((out == 0), zero_cols[None, :] | zero_rows[:, None])  # whole bands and runs only
        widths_f.append(int(zero_cols.sum()))
        widths_t.append(int(zero_rows.sum()))
    assert max(widths_f) <= 2 * 5 and max(widths_t) <= 3 * 20  # runs limited to 10% of 200 frames
    assert np.mean(widths_f) > 2 and np.mean(widths_t) > 10
    assert torch.equal(
        augment(feats, torch.Generator().manual_seed(7)), augment(feats, torch.Generator().manual_seed(7))
    )
    assert feats.min() > 0  # the input is not modified


def test_training_reader_applies_the_hook(tmp_path):
    mat = np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32) + 3
    with kaldiio.WriteHelper(f"ark,scp:{tmp_path / 'feats.ark'},{tmp_path / 'feats.scp'}") as writer:
        writer("u1", mat)
    (tmp_path / "feat_dim").write_text("8\n")
    (tmp_path / "cmvn_type").write_text("none\n")
    reader = FeatureReader(tmp_path, {"u1": "s1"})
    assert torch.equal(reader("u1"), torch.from_numpy(mat))
    reader.augment = EpochAugment(SpecAugment(freq_masks=1, freq_width=8, time_masks=0), seed=3)
    masked = reader("u1", index=0)
    assert masked.shape == (50, 8) and bool(((masked == 0).all(dim=0)).any())
    # Drawn from (seed, epoch, utterance): the same masks whenever and wherever it is read.
    torch.manual_seed(99)
    assert torch.equal(reader("u1", index=0), masked)
    reader.augment.epoch = 1
    assert any(not torch.equal(reader("u1", index=i), masked) for i in range(5))
