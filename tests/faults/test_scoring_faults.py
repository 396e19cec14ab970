"""score=hub5 never changes metric behind the user's back: a missing or mistyped stm and a
missing or disabled GLM end the score stage with one line and exit 2, and no WER file."""

from __future__ import annotations

import pytest

from tests.faults.conftest import run_stage
from tests.fixtures.hub5_cases import GLM
from tests.score.test_hub5_stage import CTM, STM  # a case NIST SCTK scores (it fails on a single segment)


@pytest.fixture
def scored(tmp_path):
    data = tmp_path / "data" / "eval2000"
    data.mkdir(parents=True)
    (data / "stm").write_text(STM)
    (data / "glm").write_text(GLM)
    decode = tmp_path / "exp" / "decode_eval2000"
    decode.mkdir(parents=True)
    (decode / "hyp.ctm").write_text(CTM)
    return tmp_path


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["score.stm=data/eval2000/stm.typo"],
            "data/eval2000/stm.typo: no stm (score.stm); score=hub5 scores against a Hub5 stm",
        ),
        (["score.glm=none"], "score.glm=none: Hub5 scores are defined with the GLM"),
    ],
)
def test_hub5_without_its_references_exits_2(scored, overrides, message):
    proc = run_stage("asr.score", ["score=hub5", "data.data_dir=data", "exp_dir=exp", *overrides], cwd=scored)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and message in errors[0]
    assert not (scored / "exp/decode_eval2000/wer.json").exists()  # no WER of another metric
