"""The one training loop: what every trainable family shares, so that a family supplies only its data, its
model(s) with their optimiser, and its loss and dev scores (a :class:`Family`).

The loop owns:

- the seed (:func:`inference.runtime.set_seed` before the family builds its modules) and the device;
- the batch order, by a named strategy (:data:`ORDERS`, :data:`STREAMS`) that the family picks, each exactly what
  that family's loop drew before the loops were one (so that the same seed gives the same losses):
  ``"torch-per-epoch"`` (a :class:`torch.Generator` seeded ``seed + epoch``: the language models and the story
  LMs permute their batches with it), ``"numpy-per-epoch"`` (a numpy generator seeded ``seed + epoch``: the
  Coref-GRU readers' bucketed order), ``"numpy-stream"`` (one numpy generator seeded ``seed`` for the whole
  run: the mention detector, the tagger and the ranker) and ``"torch-stream"`` (one torch generator seeded
  ``seed`` for the whole run, which the family may draw from before training, :meth:`Trainer.stream`: the
  context encoder holds its sentences out with it). The per-epoch strategies make a resumed run draw what an
  uninterrupted one would;
- epochs (or, for a family trained in steps, evaluation periods: an "epoch" is then the steps between two
  evaluations), early stopping on a dev score (each run says in which direction the score improves; a family
  with several components, EntityNLM's model and proposals, keeps each component's weights of its own best
  score, and only the first component's score counts for stopping);
- ``OUT/model.pt`` (the best weights) and ``OUT/last.pt`` (the state to resume from: the weights, the
  optimiser's, the schedule's and torch's RNG state, the best weights), both written atomically after every
  epoch; resuming from ``last.pt`` with the option check (only :attr:`Run.resumable` options may change);
- the progress bar (:func:`coref.io.progress.progress`) and the history: one record per epoch, printed as one
  JSON line on stderr unless the run reports it otherwise (:attr:`Run.report`: the coreference models' one-line
  logs).
- its place under ``torchrun`` (:attr:`Trainer.ranks`, :mod:`inference.distributed`): the same seed on every
  rank (the same initial weights and batch order), progress, records and checkpoints from rank 0 only, and each
  rank's random state in ``last.pt``, so a resumed run goes on as it would have. A family trains data-parallel by
  taking its rank's share of each batch and summing the ranks' gradients before its update.

A run with ``single_file`` writes only the best weights, to the file ``out`` (no ``last.pt``: it cannot be
resumed); a run without ``out`` writes no checkpoint (a library function that returns its model, such as
:func:`inference.training.resolution.train_detector`). A family whose dev gives no score for its selecting
component (none given, or a model without components, such as the ranker's perceptron) keeps its last epoch.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from coref.io.checkpoint import module_weights
from coref.io.progress import progress
from inference.distributed import Ranks, ranks
from inference.runtime import changed_options, resolve_device, set_seed

ORDERS: dict[str, Callable[[int, int], Any]] = {  # strategy -> (seed, epoch) -> the epoch's random source
    "torch-per-epoch": lambda seed, epoch: torch.Generator().manual_seed(seed + epoch),
    "numpy-per-epoch": lambda seed, epoch: np.random.default_rng(seed + epoch),
}
STREAMS: dict[str, Callable[[int], Any]] = {  # strategy -> seed -> the one random source of the whole run
    "numpy-stream": lambda seed: np.random.default_rng(seed),
    "torch-stream": lambda seed: torch.Generator().manual_seed(seed),
}


Report = Callable[[dict[str, Any]], None]  # where each epoch's record goes


class Saveable(Protocol):
    def save(self, path: Path) -> None: ...


class Family(Protocol):
    """What a trainable family supplies to the loop."""

    name: str  # shown on the progress bar
    order: str  # a key of ORDERS or of STREAMS
    modules: dict[str, nn.Module]  # the components scored on dev; the first one decides early stopping
    optimizer: torch.optim.Optimizer | None  # None: the family updates its model itself (the perceptron)
    schedule: Any  # a torch LR scheduler stepped after every update, or None
    initial: dict[str, float]  # the dev scores before training (the weights to beat), or none

    def epoch_batches(self, source: Any) -> Iterable[Any]:
        """The training batches of one epoch, in the order ``source`` (the strategy's generator) draws."""

    def step(self, batch: Any) -> tuple[dict[str, Any], float | None]:
        """One update on ``batch`` (forward, backward, clipping, ``optimizer.step``): the amounts to add to the
        epoch's totals (numbers, or 0-d tensors summed on the device without a sync per step), and the loss shown
        on the progress bar (None: none shown)."""

    def evaluate(self) -> dict[str, float]:
        """The dev score of each component (named as in :attr:`modules`)."""

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        """The epoch's history record (printed as one JSON line)."""

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Saveable:
        """A checkpoint of ``weights`` (component name -> state dict) with the training record ``training``."""


def print_record(record: dict[str, Any]) -> None:
    """An epoch's record as one JSON line on stderr (the default :attr:`Run.report`)."""
    print(json.dumps(record), file=sys.stderr)


@dataclass
class Run:
    """How a run goes: where it writes, how long, how it selects, and what a resumed run may change."""

    out: Path | None  # the folder of model.pt and last.pt (the file, with single_file); None: nothing written
    epochs: int
    seed: int
    options: dict[str, Any]  # the run's options, recorded in every checkpoint (the option check compares them)
    patience: float = math.inf  # epochs without a dev gain before stopping (an integer; inf: never stop early)
    higher_is_better: bool = False  # the direction of the dev score (NLL: lower; accuracy, F1: higher)
    stop_at: float | None = None  # stop once the selecting score reaches this (a reader's perfect accuracy)
    resume: bool = False
    resumable: Collection[str] = frozenset()
    device: str = "auto"
    single_file: bool = False  # out is the file of the best weights, and no last.pt is written
    progress: bool = True  # draw the progress bar (on a terminal)
    report: Report | None = None  # where each epoch's record goes (None: one JSON line on stderr)


@dataclass
class Trainer:
    """One run of the loop. Made before the family (it seeds and reads ``last.pt``), then :meth:`fit` it."""

    run: Run
    resumed: Any = None  # the last.pt checkpoint of the run being resumed (read by ``check_out_folder``)
    device: torch.device = field(init=False)
    best: dict[str, Any] = field(init=False, default_factory=dict)  # component -> its best weights so far
    ranks: Ranks = field(init=False)  # this process's place under torchrun (one process: rank 0 of 1)

    def __post_init__(self) -> None:
        set_seed(self.run.seed)  # the same on every rank: the same initial weights and batch order
        self.device = resolve_device(self.run.device)
        self.ranks = ranks()
        self._streams: dict[str, Any] = {}

    def stream(self, order: str) -> Any:
        """The run's one random source of a stream strategy (:data:`STREAMS`), made on first use."""
        if order not in self._streams:
            self._streams[order] = STREAMS[order](self.run.seed)
        return self._streams[order]

    def check_out_folder(self, load_last: Callable[[Path], Any]) -> Any:
        """Refuse a folder holding an earlier run unless resuming it, and a resumed run with other options than
        the :attr:`Run.resumable` ones; the ``last.pt`` read by ``load_last`` when resuming, else None."""
        out = self.run.out
        if not self.run.resume:
            earlier = [name for name in ("model.pt", "last.pt") if (out / name).exists()]
            if earlier:
                raise ValueError(f"{out}: holds an earlier run ({', '.join(earlier)}); pass --resume to continue "
                                 "it with the same options, or choose another --out")
            return None
        self.resumed = load_last(out / "last.pt")
        changed = changed_options(self.resumed.training.get("args", {}), self.run.options, self.run.resumable)
        if changed:
            raise ValueError(f"{out / 'last.pt'}: was trained with {', '.join(changed)}; --resume continues a run "
                             "with its options (or choose another --out)")
        return self.resumed

    def fit(self, family: Family) -> dict[str, Any]:
        """Train ``family`` until the epochs are done or early stopping; the final state (epoch, best scores,
        history), the best weights being in :attr:`best` and ``OUT/model.pt``."""
        run = self.run
        state: dict[str, Any] = {"epoch": 0, "best": dict(family.initial), "bad_epochs": 0, "history": []}
        self.best = {name: module_weights(module) for name, module in family.modules.items()}
        if self.resumed is not None:
            resume = self.resumed.training["resume"]
            for name, module in family.modules.items():
                module.load_state_dict(self.resumed.weights[name])
            if family.optimizer is not None:
                family.optimizer.load_state_dict(resume["optimizer"])
            if family.schedule is not None:
                family.schedule.load_state_dict(resume["schedule"])
            by_rank = resume.get("rng_by_rank", [])
            if len(by_rank) == self.ranks.world:  # each rank goes on from its own random state
                torch.set_rng_state(by_rank[self.ranks.rank])
            elif "rng" in resume:
                torch.set_rng_state(resume["rng"])
            self.best, state = resume["best"], self.resumed.training["state"]
            if self.ranks.leader:
                print(f"resumed from {run.out / 'last.pt'} after epoch {state['epoch']}", file=sys.stderr)
        selecting = next(iter(family.modules), None)
        while self._goes_on(state, selecting):
            for module in family.modules.values():
                module.train(True)
            started, totals = time.perf_counter(), {}
            if family.order in STREAMS:
                source = self.stream(family.order)
            else:
                source = ORDERS[family.order](run.seed, state["epoch"])
            bar = progress(family.epoch_batches(source), desc=f"{family.name}: epoch {state['epoch'] + 1}/"
                           f"{run.epochs}", unit="batch", enabled=run.progress and self.ranks.leader, leave=False)
            for batch in bar:
                amounts, shown = family.step(batch)
                if family.schedule is not None:
                    family.schedule.step()
                for name, value in amounts.items():
                    totals[name] = totals.get(name, 0.0) + value
                if shown is not None:
                    bar.set_postfix(loss=f"{shown:.3f}")
            seconds = time.perf_counter() - started
            scores = family.evaluate()
            improved = selecting not in scores  # nothing selects: the last epoch is kept
            for name, module in family.modules.items():
                if name not in scores or self._better(scores[name], state["best"].get(name)):
                    state["best"][name] = scores.get(name)
                    self.best[name] = module_weights(module)
                    improved |= name == selecting
            state["bad_epochs"] = 0 if improved else state["bad_epochs"] + 1
            state["epoch"] += 1
            record = family.record(state["epoch"], seconds, totals, scores)
            state["history"].append(record)
            if self.ranks.leader:
                (run.report or print_record)(record)
            if run.out is not None:
                self.save(family, state)
        return state

    def save(self, family: Family, state: dict[str, Any]) -> None:
        """Write ``model.pt`` (the best weights) and ``last.pt`` (or, with ``single_file``, the best weights to
        ``out``), their training record the run's options and state: rank 0 writes, with every rank's random
        state, and the others go on once it has."""
        rng_by_rank = self.ranks.gather([torch.get_rng_state()])
        if self.ranks.leader:
            self._write(family, state, rng_by_rank)
        self.ranks.barrier()

    def _write(self, family: Family, state: dict[str, Any], rng_by_rank: list[torch.Tensor]) -> None:
        training = {"args": self.run.options, "state": state}
        if self.run.single_file:
            family.checkpoint(self.best, training).save(self.run.out)
            return
        family.checkpoint(self.best, training).save(self.run.out / "model.pt")
        resume = {"best": self.best, "rng": rng_by_rank[0]}
        if self.ranks.world > 1:
            resume["rng_by_rank"] = rng_by_rank
        if family.optimizer is not None:
            resume["optimizer"] = family.optimizer.state_dict()
        if family.schedule is not None:
            resume["schedule"] = family.schedule.state_dict()
        family.checkpoint({name: module_weights(module) for name, module in family.modules.items()},
                          {**training, "resume": resume}).save(self.run.out / "last.pt")

    def _better(self, value: float, best: float | None) -> bool:
        if best is None:
            return True
        return value > best if self.run.higher_is_better else value < best

    def _goes_on(self, state: dict[str, Any], selecting: str | None) -> bool:
        """Whether another epoch runs: epochs left, patience left, and the selecting score short of
        :attr:`Run.stop_at`."""
        best = state["best"].get(selecting)
        reached = self.run.stop_at is not None and best is not None and best >= self.run.stop_at
        return state["epoch"] < self.run.epochs and state["bad_epochs"] < self.run.patience and not reached
