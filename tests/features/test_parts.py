"""Parts of a set joined: arks concatenated, scp offsets moved, tables merged in key order."""

from __future__ import annotations

import tracemalloc

import kaldiio
import numpy as np

from asr.features.parts import join_parts, merge_part_tables


def _write_part(tmp, index, keys):
    with kaldiio.WriteHelper(f"ark,scp:{tmp / f'feats.{index}.ark'},{tmp / f'feats.{index}.scp'}") as writer:
        for key in keys:
            writer(key, np.full((2, 3), float(int(key[1:])), dtype=np.float32))


def test_join_parts_moves_offsets_and_sorts_unsorted_parts(tmp_path):
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    _write_part(tmp, 0, ["u1", "u4", "u5"])  # in key order: streamed
    _write_part(tmp, 1, ["u3", "u2", "u6"])  # a recording's order: sorted first
    join_parts(tmp, out, 2)
    lines = (tmp / "feats.scp").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["u1", "u2", "u3", "u4", "u5", "u6"]
    assert all(line.split()[1].startswith(str(out.absolute() / "feats.ark") + ":") for line in lines)
    reread = {
        line.split()[0]: kaldiio.load_mat(line.split()[1].replace(str(out.absolute()), str(tmp))) for line in lines
    }
    assert all(float(reread[key][0, 0]) == int(key[1:]) for key in reread)
    assert sorted(p.name for p in tmp.iterdir()) == ["feats.ark", "feats.scp"]


def test_merge_part_tables_in_key_order_with_extra_rows(tmp_path):
    (tmp_path / "skipped.0").write_text("b-1 too short\nd-1 nan\n")
    (tmp_path / "skipped.1").write_text("")
    (tmp_path / "skipped.2").write_text("c-1 inf\n")
    count = merge_part_tables(tmp_path, "skipped", 3, iter([("a-1", "unreadable audio")]))
    assert count == 4
    assert (tmp_path / "skipped").read_text() == "a-1 unreadable audio\nb-1 too short\nc-1 inf\nd-1 nan\n"
    assert not list(tmp_path.glob("skipped.*"))


def test_merging_sorted_parts_holds_no_line_per_key(tmp_path):
    """Parts written in key order are merged as they stream: 50,000 lines cost no more traced
    memory than 5,000 (a dict of them would take several MB)."""

    def peak(lines: int) -> int:
        for part in range(2):
            with open(tmp_path / f"utt2num_frames.{part}", "w") as f:
                f.writelines(f"spk{part}-utt{i:07d} {i % 900}\n" for i in range(lines // 2))
        tracemalloc.start()
        merge_part_tables(tmp_path, "utt2num_frames", 2)
        peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return peak_bytes

    small, large = peak(5_000), peak(50_000)
    assert large - small < 200_000, (small, large)
