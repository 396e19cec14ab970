"""Export of hybrid-model log-likelihoods (log posterior - log prior) as a Kaldi ark/scp."""

import math

import kaldiio
import numpy as np
import pytest
import torch
from tests.fixtures.hybrid_corpus import FEAT_DIM, hybrid_overrides, write_hybrid_set

from asr.config import load_config
from asr.data.datadir import read_data_dir
from asr.decode.loglikes import UNSEEN_LOG_PRIOR, log_priors, loglike_archive, upsample
from asr.decode.stage import decode
from asr.features.featureset import FeatureReader
from asr.models.blstm import build_model
from asr.models.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, model_from_checkpoint, save_checkpoint
from asr.models.config import ModelConfig
from asr.kaldi.pdf_counts import write_pdf_counts
from asr.utils.errors import InputError

torch.set_num_threads(1)

NUM_PDFS = 6
COUNTS = np.array([50, 30, 0, 10, 8, 2])  # pdf 2 never a training target


def test_log_priors_follow_kaldi_nnet1():
    priors = log_priors(np.array([3, 1, 0]))
    assert priors[0] == pytest.approx(math.log(0.75)) and priors[1] == pytest.approx(math.log(0.25))
    assert priors[2] == UNSEEN_LOG_PRIOR == pytest.approx(1.8446743e19, rel=1e-6)  # sqrt(FLT_MAX): the pdf is ruled out
    assert priors.dtype == np.float32


def test_upsampling_repeats_each_model_frame_and_cuts_to_the_input_length():
    frames = torch.tensor([[1.0], [2.0], [3.0]])
    assert upsample(frames, 3, 8).flatten().tolist() == [1, 1, 1, 2, 2, 2, 3, 3]
    assert upsample(frames, 1, 3).flatten().tolist() == [1, 2, 3]


def test_archive_reads_back_with_kaldiio_and_appears_only_when_complete(tmp_path):
    rng = np.random.default_rng(0)
    matrices = {u: rng.normal(size=(n, 4)).astype(np.float32) for u, n in [("b-2", 3), ("a-1", 5), ("B-0", 1)]}
    with loglike_archive(tmp_path / "out") as archive:
        for utt, matrix in matrices.items():
            archive.write(utt, matrix)
    scp = (tmp_path / "out" / "loglikes.scp").read_text().splitlines()
    assert [line.split()[0] for line in scp] == ["B-0", "a-1", "b-2"]  # C-locale order
    assert all(line.split()[1].startswith(str((tmp_path / "out" / "loglikes.ark").resolve()) + ":") for line in scp)
    by_scp = kaldiio.load_scp(str(tmp_path / "out" / "loglikes.scp"))
    by_ark = dict(kaldiio.load_ark(str(tmp_path / "out" / "loglikes.ark")))
    for utt, matrix in matrices.items():
        assert np.array_equal(by_scp[utt], matrix) and np.array_equal(by_ark[utt], matrix)

    with pytest.raises(RuntimeError):
        with loglike_archive(tmp_path / "failed") as archive:
            archive.write("u", matrices["a-1"])
            raise RuntimeError("model crashed")
    assert not (tmp_path / "failed").exists() or not any((tmp_path / "failed").iterdir())


@pytest.fixture(scope="module")
def exp(tmp_path_factory):
    """Features of an eval set, an (untrained) frame_ce checkpoint and its pdf counts."""
    root = tmp_path_factory.mktemp("loglikes")
    write_hybrid_set(root, "eval", 7, seed=5)
    torch.manual_seed(3)
    model_cfg = ModelConfig(num_layers=1, hidden_size=16, stack_frames=3, subsample=3, dropout=0.0, head="frame_ce")
    model = build_model(model_cfg, FEAT_DIM, NUM_PDFS)
    save_checkpoint(root / "exp" / "checkpoints" / "last.pt", checkpoint_state(model, model_cfg))
    write_pdf_counts(root / "exp" / "pdf_counts", COUNTS)
    return root


def checkpoint_state(model, model_cfg) -> dict:
    info = {"config": vars(model_cfg), "input_dim": FEAT_DIM, "num_outputs": model.head.linear.out_features}
    return {
        "format": CHECKPOINT_FORMAT, "model": model.state_dict(), "model_info": info, "updater": {}, "sampler": {},
        "rng": {}, "step": 7, "epoch": 1, "progress": {}, "config": {},
    }  # fmt: skip


def expected_loglikes(root, prior_scale: float) -> dict[str, np.ndarray]:
    """log_softmax of the output layer minus the scaled log prior, per model frame, computed
    one utterance at a time (the export batches and pads them)."""
    model = model_from_checkpoint(load_checkpoint(root / "exp" / "checkpoints" / "last.pt"))
    data = read_data_dir(root / "data" / "eval")
    reader = FeatureReader(root / "feats" / "hybrid" / "eval", data.utt2spk)
    frequencies = COUNTS / COUNTS.sum()
    log_prior = np.where(COUNTS > 0, np.log(np.maximum(frequencies, 1e-30)), 1.8446743e19)
    out = {}
    with torch.no_grad():
        for utt in reader.utts():
            feats = reader(utt)[None]
            hidden, _ = model.encoder(feats, torch.tensor([feats.shape[1]]))
            log_posteriors = torch.log_softmax(model.head.linear(hidden[0]), dim=-1).double().numpy()
            out[utt] = log_posteriors - prior_scale * log_prior
    return out


@pytest.mark.parametrize("upsampled", [True, False])
def test_exported_loglikes_are_log_posteriors_minus_log_priors(exp, upsampled):
    overrides = [
        "decode.sets=[eval]",
        "decode.batch_size=3",
        "decode.prior_scale=0.7",
        f"decode.upsample={str(upsampled).lower()}",
    ]
    (out_dir,) = decode(load_config(hybrid_overrides(exp, overrides)))
    got = kaldiio.load_scp(str(out_dir / "loglikes.scp"))
    expected = expected_loglikes(exp, prior_scale=0.7)
    num_frames = dict(
        line.split() for line in (exp / "feats" / "hybrid" / "eval" / "utt2num_frames").read_text().splitlines()
    )
    assert sorted(got) == sorted(expected)
    for utt, model_rate in expected.items():
        frames = int(num_frames[utt])
        want = np.repeat(model_rate, 3, axis=0)[:frames] if upsampled else model_rate
        assert got[utt].shape == ((frames if upsampled else math.ceil(frames / 3)), NUM_PDFS)
        seen = COUNTS > 0
        np.testing.assert_allclose(got[utt][:, seen], want[:, seen], rtol=0, atol=1e-4)
        assert (got[utt][:, ~seen] < -1e18).all()  # the never-seen pdf is ruled out


def test_export_refuses_ctc_models_and_mismatched_counts(exp, tmp_path):
    with pytest.raises(InputError, match="counts of 3 pdfs, but the model has 6 outputs"):
        write_pdf_counts(tmp_path / "counts", np.array([1, 2, 3]))
        decode(load_config(hybrid_overrides(exp, ["decode.sets=[eval]", f"decode.pdf_counts={tmp_path / 'counts'}"])))
    model_cfg = ModelConfig(num_layers=1, hidden_size=8, head="ctc")
    ctc_path = tmp_path / "ctc.pt"
    save_checkpoint(ctc_path, checkpoint_state(build_model(model_cfg, FEAT_DIM, 5), model_cfg))
    with pytest.raises(InputError, match="a model with a 'ctc' head; log-likelihoods need a frame_ce"):
        decode(load_config(hybrid_overrides(exp, ["decode.sets=[eval]", f"decode.checkpoint={ctc_path}"])))
    with pytest.raises(
        InputError,
        match=(
            "a model with a 'frame_ce' head; not CTC; "
            "export a frame_ce model's log-likelihoods for Kaldi with decode=loglikes"
        ),
    ):
        decode(load_config(hybrid_overrides(exp, ["decode.sets=[eval]", "decode=greedy"])))
