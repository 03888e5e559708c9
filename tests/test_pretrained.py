"""The bundled checkpoints load, stay small, share one vocabulary, and reproduce the documented sample figure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from inference.commands import marginal_ppl
from inference.training.checkpoint import Checkpoint, entitynlm_modules, language_model, pretrained

# The main job's output on the embedded sample, as the EntityNLM page shows it (after <!-- main-job-output -->).
MAIN_JOB_PAGE = Path(__file__).resolve().parents[1] / "docs" / "entitynlm.md"
BUNDLED = ("entitynlm.pt", "rnnlm.pt")


def test_bundled_checkpoints_are_small_and_share_one_vocabulary():
    checkpoints = {name: Checkpoint.load(pretrained(name)) for name in BUNDLED}
    assert sum(pretrained(name).stat().st_size for name in BUNDLED) <= 20 * 2**20
    fingerprints = {checkpoint.vocabulary.fingerprint for checkpoint in checkpoints.values()}
    assert fingerprints == {checkpoints["entitynlm.pt"].vocabulary.fingerprint}
    assert len(checkpoints["entitynlm.pt"].vocabulary) == 10_000
    assert checkpoints["entitynlm.pt"].training["args"]["corpus"] == "litbank+ontogum"
    entitynlm_modules(checkpoints["entitynlm.pt"]), language_model(checkpoints["rnnlm.pt"])


def documented_sample_figures() -> dict[str, float]:
    """The perplexities the docs report for `python -m inference.marginal_ppl` with no arguments."""
    text = MAIN_JOB_PAGE.read_text(encoding="utf-8")
    block = text[text.index("<!-- main-job-output -->") :]
    return {
        "entitynlm": float(re.search(r"EntityNLM perplexity \(SMC\): +([\d.]+)", block)[1]),
        "rnnlm": float(re.search(r"rnnlm perplexity: +([\d.]+)", block)[1]),
    }


def test_the_main_job_reproduces_the_documented_figure(tmp_path):
    out = tmp_path / "result.json"
    assert marginal_ppl.main(["--device", "cpu", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    expected = documented_sample_figures()
    assert (result["corpus"], result["split"], result["particles"]) == ("sample", "test", 100)
    assert result["perplexity"] == pytest.approx(expected["entitynlm"], abs=0.01)
    assert result["baselines"]["rnnlm"] == pytest.approx(expected["rnnlm"], abs=0.01)
