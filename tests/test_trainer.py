"""The one training loop (:mod:`inference.training.loop`) on a toy family: what it owns, checked directly.

The families' own numbers are checked by ``benchmarks/training_parity.py`` (the same losses as before the loops
were one) and by each family's tests; here: the order strategies, selection in either direction, early stopping,
the best and last checkpoints, resuming (and refusing to resume with other options), and runs without a folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from coref.io.checkpoint import Checkpoint, load
from inference.training.loop import ORDERS, STREAMS, Run, Trainer

DATA = torch.linspace(-1, 1, 12).reshape(6, 2)


class Toy:
    """A linear model fitted to a fixed target by SGD, one row per batch; its dev score is given by ``scores``."""

    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, order: str = "torch-per-epoch", scores: list[float] | None = None) -> None:
        self.name, self.order = "toy", order
        self.modules = {"model": nn.Linear(2, 1)}
        self.optimizer = torch.optim.SGD(self.modules["model"].parameters(), lr=0.1)
        self.scores = list(scores or [])
        self.seen: list[list[int]] = []

    def epoch_batches(self, source: Any) -> list[int]:
        count = len(DATA)
        order = (torch.randperm(count, generator=source).tolist() if isinstance(source, torch.Generator)
                 else source.permutation(count).tolist())
        self.seen.append(order)
        return order

    def step(self, index: int) -> tuple[dict[str, float], float]:
        loss = (self.modules["model"](DATA[index]) - 1.0).pow(2).sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": float(loss.detach())}, float(loss.detach())

    def evaluate(self) -> dict[str, float]:
        return {"model": self.scores.pop(0)} if self.scores else {}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "loss": totals["loss"], "dev": scores.get("model")}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return Checkpoint("toy", {}, {}, weights, training)


def run(out: Path | None, epochs: int = 3, recorded: dict[str, Any] | None = None, **options: Any) -> Run:
    """A quiet CPU run of the toy, seed 0, its recorded options ``lr`` 0.1 unless ``recorded`` says otherwise."""
    settings = {"device": "cpu", "progress": False, "report": lambda record: None, **options}
    return Run(out, epochs, 0, {"lr": 0.1, **(recorded or {})}, **settings)


def test_the_per_epoch_orders_are_seed_plus_epoch_and_the_streams_one_generator():
    assert torch.equal(torch.randperm(9, generator=ORDERS["torch-per-epoch"](4, 3)),
                       torch.randperm(9, generator=torch.Generator().manual_seed(7)))
    assert ORDERS["numpy-per-epoch"](4, 3).permutation(9).tolist() == np.random.default_rng(7).permutation(9).tolist()
    toy = Toy("numpy-stream")
    Trainer(run(None)).fit(toy)
    stream = np.random.default_rng(0)
    assert toy.seen == [stream.permutation(6).tolist() for _ in range(3)]
    assert set(STREAMS) == {"numpy-stream", "torch-stream"}


def test_selection_in_either_direction_keeps_the_best_weights_and_stops_early(tmp_path):
    for higher, scores, best_epoch in ((False, [3.0, 1.0, 2.0, 5.0, 6.0], 2), (True, [0.1, 0.5, 0.4, 0.3], 2)):
        trainer = Trainer(run(tmp_path / str(higher), epochs=10, patience=2, higher_is_better=higher))
        toy = Toy(scores=scores)
        state = trainer.fit(toy)
        assert state["epoch"] == 4 and state["bad_epochs"] == 2  # stopped two epochs after the best
        best = load(tmp_path / str(higher) / "model.pt")
        assert best.training["state"]["best"]["model"] == scores[best_epoch - 1]
        assert all(torch.equal(best.weights["model"][name], trainer.best["model"][name])
                   for name in trainer.best["model"])
        last = load(tmp_path / str(higher) / "last.pt")
        assert torch.equal(last.weights["model"]["weight"], toy.modules["model"].weight.detach())
        assert set(last.training["resume"]) == {"optimizer", "best", "rng"}


def test_a_perfect_score_stops_and_without_a_score_the_last_epoch_is_kept():
    trainer = Trainer(run(None, epochs=5, higher_is_better=True, stop_at=1.0))
    assert trainer.fit(Toy(scores=[0.5, 1.0, 0.2]))["epoch"] == 2
    trainer = Trainer(run(None, epochs=3))
    toy = Toy()
    trainer.fit(toy)
    assert torch.equal(trainer.best["model"]["weight"], toy.modules["model"].weight.detach())


def test_a_resumed_run_goes_on_as_if_never_stopped(tmp_path):
    whole = Trainer(run(tmp_path / "whole", epochs=3))
    whole.fit(Toy())
    Trainer(run(tmp_path / "cut", epochs=2)).fit(Toy())
    resumed = Trainer(run(tmp_path / "cut", epochs=3, resume=True, resumable={"epochs", "resume"}))
    resumed.check_out_folder(load)
    toy = Toy()
    state = resumed.fit(toy)
    assert state["epoch"] == 3 and [record["epoch"] for record in state["history"]] == [1, 2, 3]
    assert torch.equal(toy.modules["model"].weight.detach(),
                       load(tmp_path / "whole" / "last.pt").weights["model"]["weight"])


def test_an_earlier_run_or_other_options_are_refused_in_one_line(tmp_path):
    Trainer(run(tmp_path, epochs=1)).fit(Toy())
    with pytest.raises(ValueError, match="holds an earlier run \\(model.pt, last.pt\\); pass --resume"):
        Trainer(run(tmp_path)).check_out_folder(load)
    other = Trainer(run(tmp_path, resume=True, recorded={"lr": 0.5}))
    with pytest.raises(ValueError, match="last.pt: was trained with --lr 0.1 \\(now 0.5\\)"):
        other.check_out_folder(load)


def test_a_single_file_run_writes_only_its_best_weights_and_records_go_to_the_report(tmp_path, capsys):
    path = tmp_path / "best.pt"
    records: list[dict] = []
    Trainer(run(path, epochs=2, single_file=True, report=records.append)).fit(Toy(scores=[2.0, 1.0]))
    assert path.is_file() and sorted(p.name for p in tmp_path.iterdir()) == ["best.pt"]
    assert [record["epoch"] for record in records] == [1, 2] and capsys.readouterr().err == ""
    Trainer(Run(None, 1, 0, {}, device="cpu", progress=False)).fit(Toy())
    assert json.loads(capsys.readouterr().err)["epoch"] == 1  # the default report: a JSON line on stderr
