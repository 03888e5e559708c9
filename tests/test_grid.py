"""The grid search: one resumable training run per configuration, learning curves, and the best checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from inference.commands import grid
from inference.training.checkpoint import Checkpoint, entitynlm_modules

TRAIN = ["--batch-tokens", "1000", "--epochs", "2", "--patience", "5", "--device", "cpu", "--seed", "0"]


def test_grid_trains_each_configuration_resumes_and_keeps_the_best(tmp_path, capsys):
    out = tmp_path / "grid"
    common = ["--model", "entitynlm", "--out", str(out), "--sizes", "8", "--optimizers", "adam"]
    assert grid.main([*common, "--dropouts", "0.2", "--", *TRAIN]) == 0  # model and both proposals
    assert grid.main([*common, "--dropouts", "0.5", "--", *TRAIN, "--proposals"]) == 0  # the model alone
    capsys.readouterr()

    assert grid.main([*common, "--dropouts", "0.2", "0.5", "--plot-only"]) == 0
    summary = json.loads((out / "grid.json").read_text())
    assert set(summary["runs"]) == {"h8-d0.2-adam", "h8-d0.5-adam"}
    for run in summary["runs"].values():
        assert run["epochs"] == 2 and len(run["history"]) == 2
    assert summary["runs"]["h8-d0.2-adam"]["history"][-1]["dev_nll"].keys() == {
        "model", "proposal", "bidirectional_proposal"}
    dev = {name: run["best_dev_nll"]["model"] for name, run in summary["runs"].items()}
    assert summary["best"] == min(dev, key=dev.get)
    assert (out / "curves.png").stat().st_size > 1000

    best = Checkpoint.load(out / "best.pt")
    chosen = Checkpoint.load(out / summary["best"] / "model.pt")
    assert all(torch.equal(best.weights["model"][k], v) for k, v in chosen.weights["model"].items())
    assert best.training["proposals_from"] == {"proposal": "h8-d0.2-adam", "bidirectional_proposal": "h8-d0.2-adam"}
    for context in ("forward", "bidirectional"):
        entitynlm_modules(best, "cpu", context)  # the best model with both proposals, whichever trained them


def test_finished_runs_are_not_trained_again(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["--model", "rnnlm", "--out", str(out), "--sizes", "8", "--dropouts", "0.2", "--optimizers", "adam",
            "--", *TRAIN]
    assert grid.main(argv) == 0
    history = Checkpoint.load(out / "h8-d0.2-adam" / "model.pt").training["state"]["history"]
    assert grid.main(argv) == 0
    assert "resumed from" in capsys.readouterr().err
    assert Checkpoint.load(out / "h8-d0.2-adam" / "model.pt").training["state"]["history"] == history


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--dropouts", "1.5"], ["--optimizers", "sgd"]])
def test_bad_grid_points_are_refused_in_one_line(argv, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        grid.main(["--model", "rnnlm", "--out", str(tmp_path), *argv])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("python -m inference.grid: error:")
    assert not list(tmp_path.iterdir())  # nothing trained, nothing written
