"""The link probe's pairing and its summary; the probe itself runs under torchrun in every
cluster benchmark test (test_cluster_bench.py), on rate-limited links."""

from asr.bench.link_probe import partner, round_times
from asr.distributed.topology import Layout


def test_every_learner_swaps_its_share_with_its_counterpart_as_training_does():
    # 2 hosts x 2: node 0 active, learner i of node 0 with learner i of node 1
    assert [partner(Layout(rank, 4, 2), 0) for rank in range(4)] == [(2, True), (3, True), (0, False), (1, False)]
    assert [partner(Layout(rank, 2, 1), 5) for rank in range(2)] == [(1, True), (0, False)]


def test_a_round_lasts_until_its_slowest_share_has_landed_and_the_warm_up_is_left_out():
    per_learner = [[2.0, 0.1, 0.5, 0.2], [2.5, 0.3, 0.4, 0.6]]
    assert round_times(per_learner) == [0.3, 0.5, 0.6]


def test_fewer_rounds_than_a_warm_up_and_one_timed_are_refused(tmp_path, capsys):
    import pytest

    from asr.bench.link_probe import main

    with pytest.raises(SystemExit) as end:
        main(["--parameters", "10", "--rounds", "1", "--out", str(tmp_path / "probe.json")])
    assert end.value.code == 2 and "--rounds 1: at least 2" in capsys.readouterr().err
    assert not (tmp_path / "probe.json").exists()
