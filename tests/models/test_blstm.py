"""BLSTM model: shapes and lengths, frame stacking, padding invariance."""

import pytest
import torch

from asr.models.blstm import FrameStacker, build_model
from asr.models.config import ModelConfig

torch.set_num_threads(1)


def test_frame_stacker_values_and_edge_repeat():
    feats = torch.arange(1.0, 8.0).reshape(1, 7, 1)  # frames 1..7, one dimension
    stacked, lens = FrameStacker(stack=3, subsample=3)(feats, torch.tensor([7]))
    assert lens.tolist() == [3]
    assert stacked[0].tolist() == [[1, 2, 3], [4, 5, 6], [7, 7, 7]]


def test_frame_stacker_never_reads_padding():
    feats = torch.zeros(2, 6, 2)
    feats[0] = torch.arange(12.0).reshape(6, 2)
    feats[1, :4] = torch.arange(8.0).reshape(4, 2)
    feats[1, 4:] = 99.0  # padding
    stacked, lens = FrameStacker(stack=2, subsample=2)(feats, torch.tensor([6, 4]))
    assert lens.tolist() == [3, 2]
    assert stacked[1, 1].tolist() == [4, 5, 6, 7]  # frames 2, 3
    assert 99.0 not in stacked[1, : lens[1]]


@pytest.mark.parametrize(
    "stack, subsample, bottleneck, bidirectional, layers",
    [(1, 1, 0, True, 1), (3, 3, 0, True, 2), (2, 4, 16, False, 2), (5, 2, 8, True, 3)],
)
def test_shapes_and_lengths(stack, subsample, bottleneck, bidirectional, layers):
    cfg = ModelConfig(
        num_layers=layers,
        hidden_size=12,
        bidirectional=bidirectional,
        bottleneck=bottleneck,
        stack_frames=stack,
        subsample=subsample,
        dropout=0.0,
    )
    model = build_model(cfg, input_dim=5, num_outputs=7)
    lens = torch.tensor([23, 10, 1])
    log_probs, out_lens = model(torch.randn(3, 23, 5), lens)
    expected = [(n + subsample - 1) // subsample for n in lens.tolist()]
    assert out_lens.tolist() == expected
    assert log_probs.shape == (3, max(expected), 7)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3, max(expected)), atol=1e-5)
    assert model.encoder.output_dim == (bottleneck or 12 * (2 if bidirectional else 1))
    assert model.subsample == subsample


@pytest.mark.parametrize("bidirectional", [True, False])
def test_padding_does_not_change_output(bidirectional):
    torch.manual_seed(0)
    cfg = ModelConfig(
        num_layers=2, hidden_size=8, bidirectional=bidirectional, bottleneck=6, stack_frames=3, subsample=2, dropout=0.3
    )
    model = build_model(cfg, input_dim=4, num_outputs=5).eval()
    short, long = torch.randn(1, 9, 4), torch.randn(1, 20, 4)
    alone, alone_len = model(short, torch.tensor([9]))
    batch = torch.full((2, 20, 4), 1e3)  # padding with large junk must not leak in
    batch[0] = long[0]
    batch[1, :9] = short[0]
    batched, batch_lens = model(batch, torch.tensor([20, 9]))
    assert batch_lens.tolist() == [10, 5] and alone_len.tolist() == [5]
    torch.testing.assert_close(batched[1, :5], alone[0], atol=1e-6, rtol=1e-5)


def test_config_from_dict_and_unknown_head():
    model = build_model(
        {"num_layers": 1, "hidden_size": 4, "stack_frames": 1, "subsample": 1, "unknown_future_key": 1}, 3, 4
    )
    assert len(model.encoder.layers) == 1
    with pytest.raises(ValueError, match="unknown model.head"):
        build_model(ModelConfig(head="nope"), 3, 4)
