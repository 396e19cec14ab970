"""The GMM front end's normalisation: per utterance as the set stores it, or per speaker."""

import numpy as np
import pytest

from asr.features.cmvn import compute_stats, write_stats
from asr.features.featureset import FeatureWriter
from asr.gmm.frontend import GmmFeatures, cepstra
from asr.utils.errors import InputError

UTT2SPK = {"a1": "spk_a", "a2": "spk_a", "b1": "spk_b"}


@pytest.fixture
def logmel_set(tmp_path):
    """A 40-bin log-mel set with CMVN statistics per utterance; a1 is mostly silence, a2 speech."""
    rng = np.random.default_rng(0)
    silence, speech = -5.0 + rng.normal(size=(60, 40)), 5.0 + rng.normal(size=(140, 40))
    feats = {
        "a1": np.concatenate([silence[:40], speech[:10]]).astype(np.float32),
        "a2": np.concatenate([silence[40:], speech[10:]]).astype(np.float32),
        "b1": rng.normal(size=(30, 40)).astype(np.float32),
    }
    with FeatureWriter(tmp_path / "feats.ark", tmp_path / "feats.scp", compress=False) as writer:
        for utt in sorted(feats):
            writer(utt, feats[utt])
    (tmp_path / "feat_dim").write_text("40\n")
    (tmp_path / "utt2num_frames").write_text("".join(f"{u} {len(f)}\n" for u, f in sorted(feats.items())))
    write_stats(compute_stats("utterance", feats, UTT2SPK), tmp_path, "utterance")
    return tmp_path, feats


def test_speaker_cmvn_subtracts_the_mean_of_all_the_speakers_utterances(logmel_set):
    set_dir, feats = logmel_set
    by_speaker = GmmFeatures(set_dir, UTT2SPK, "mfcc", 13, 22.0, cmvn="speaker")
    speaker_mean = np.concatenate([feats["a1"], feats["a2"]]).mean(axis=0)
    for utt in ("a1", "a2"):
        np.testing.assert_allclose(by_speaker.statics(utt), cepstra(feats[utt] - speaker_mean, 13, 22.0), atol=1e-4)
    both = np.concatenate([by_speaker.statics("a1"), by_speaker.statics("a2")])
    np.testing.assert_allclose(both.mean(axis=0), 0.0, atol=1e-4)


def test_the_same_silence_stays_the_same_under_speaker_cmvn_but_not_per_utterance(logmel_set):
    set_dir, _ = logmel_set
    silence_c0 = {}
    for unit in ("set", "speaker"):
        front = GmmFeatures(set_dir, UTT2SPK, "mfcc", 13, 0.0, cmvn=unit)
        silence_c0[unit] = (front.statics("a1")[:40, 0].mean(), front.statics("a2")[:20, 0].mean())
    per_utt, per_speaker = silence_c0["set"], silence_c0["speaker"]
    assert abs(per_utt[0] - per_utt[1]) > 10.0  # a1's mean is mostly silence, a2's mostly speech
    assert abs(per_speaker[0] - per_speaker[1]) < 1.0


def test_a_speaker_alone_is_normalised_by_its_own_utterance(logmel_set):
    set_dir, _ = logmel_set
    by_speaker = GmmFeatures(set_dir, UTT2SPK, "mfcc", 13, 22.0, cmvn="speaker")
    per_utt = GmmFeatures(set_dir, UTT2SPK, "mfcc", 13, 22.0)
    np.testing.assert_allclose(by_speaker.statics("b1"), per_utt.statics("b1"), atol=1e-5)


def test_an_unknown_cmvn_unit_is_an_input_error(logmel_set):
    with pytest.raises(InputError, match="gmm.cmvn="):
        GmmFeatures(logmel_set[0], UTT2SPK, "mfcc", 13, 22.0, cmvn="global")
