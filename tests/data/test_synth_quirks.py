"""The synthetic corpus's release quirks, each found where the summary says, and each handled by
the preparers as configured (the tree is shared with the SWB recipe tests)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from asr.data.config import DataConfig
from asr.data.prepare import prepare_data
from asr.data.sphere import read_sphere_header
from asr.utils.errors import InputError
from tests.fixtures.swb_corpus import quirky_corpus, quirks_done

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus():
    root = quirky_corpus()
    return root, quirks_done(root)


def config(root, out, **overrides):
    cfg = DataConfig(
        name="quirky",
        swbd_dir=str(root / "LDC97S62"),
        ms98_dir=str(root / "swb_ms98_transcriptions"),
        eval2000_dir=str(root / "LDC2002S09/hub5e_00"),
        eval2000_text_dir=str(root / "LDC2002T43"),
        data_dir=str(out),
        dev_utts=20,
        expected_sph_files=4,
        prepare_sets=["train", "dev"],
        fisher_dirs=[],
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    return OmegaConf.structured(cfg)


def test_each_quirk_is_in_the_tree(corpus):
    root, quirks = corpus
    assert sorted(quirks) == ["asides", "missing_side", "past_end", "shorten", "stm_typos", "unsorted"]
    assert not any((root / f).exists() for f in quirks["missing_side"]["removed"])
    assert "<b_aside>" in (root / quirks["asides"]["file"]).read_text().splitlines()[quirks["asides"]["line"] - 1]
    assert read_sphere_header(root / quirks["shorten"]["file"]).sample_coding == "pcm,embedded-shorten-v2.00"
    assert (root / quirks["stm_typos"]["file"]).read_text().count("((%HESITATION)") == quirks["stm_typos"]["lines"] > 0
    last = (root / quirks["past_end"]["file"]).read_text().splitlines()[-1].split()
    assert float(last[2]) == pytest.approx(quirks["past_end"]["audio_seconds"] + 0.3)


def test_missing_side_refused_with_the_side_named(corpus, tmp_path):
    root, quirks = corpus
    side = quirks["missing_side"]["side"]
    with pytest.raises(InputError) as err:
        prepare_data(config(root, tmp_path / "data", missing_transcript="error"))
    assert f"{side}: expected {root / quirks['missing_side']['removed'][0]}" in str(err.value)
    assert not (tmp_path / "data").exists()
