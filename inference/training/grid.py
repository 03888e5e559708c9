"""The paper's hyper-parameter grid (§5.1) as a library: its configurations, their runs in turn (each a
:func:`inference.training.train.train_language_model` run in ``OUT/<name>``, resumed where it has a ``last.pt``),
and what is collected from them (``grid.json``, ``curves.png``, ``best.pt``). The command, whose help describes
the search, is :mod:`inference.commands.grid`.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coref.io.atomic import atomic_path, write_text_atomic
from inference.training.checkpoint import PROPOSAL_WEIGHTS, Checkpoint
from inference.training.train import LanguageModelTraining, train_language_model

PAPER_SIZES = (32, 48, 64, 128, 256)
PAPER_DROPOUTS = (0.2, 0.5)
PAPER_OPTIMIZERS = ("adagrad", "adam")


@dataclass
class GridSearch:
    """The grid of ``python -m inference.grid``: the model and corpus, the folder of the runs, and the sizes
    (embedding = hidden), dropouts and optimisers (each at the paper's learning rate) whose product it searches."""

    model: str
    out: str | Path
    corpus: str = "sample"
    data_dir: str | None = None
    sizes: Sequence[int] = PAPER_SIZES
    dropouts: Sequence[float] = PAPER_DROPOUTS
    optimizers: Sequence[str] = PAPER_OPTIMIZERS
    plot_only: bool = False


def configurations(search: GridSearch) -> list[tuple[str, dict[str, Any]]]:
    """(folder name, the options it sets) of every point of the grid, in the order given."""
    return [(f"h{size}-d{dropout}-{optimizer}",
             {"embedding_size": size, "hidden_size": size, "dropout": dropout, "optimizer": optimizer})
            for size, dropout, optimizer in itertools.product(search.sizes, search.dropouts, search.optimizers)]


def run_options(search: GridSearch, base: dict[str, Any]) -> list[tuple[str, LanguageModelTraining]]:
    """(folder name, its run's options) of every run of the grid: ``base`` (the options of every run) with the
    grid's own; a run with a last.pt is resumed. Made (and so checked) before the first run starts: a bad option
    fails in one line, not after hours of training."""
    runs = []
    for name, values in configurations(search):
        folder = Path(search.out) / name
        grid = {"model": search.model, "corpus": search.corpus, "data_dir": search.data_dir or base.get("data_dir"),
                "out": str(folder), "resume": (folder / "last.pt").exists()}
        runs.append((name, LanguageModelTraining(**{**base, **values, **grid})))
    return runs


def search_grid(search: GridSearch, runs: list[tuple[str, LanguageModelTraining]]) -> dict[str, Any]:
    """Run (or resume) the grid's ``runs`` in turn, unless ``plot_only``, then write grid.json, curves.png and
    best.pt from the runs there are; the summary (each run's best dev NLL and curve, the best run)."""
    if not search.plot_only:
        for number, (name, options) in enumerate(runs, start=1):
            train_language_model(options)
            print(f"grid: {name} finished ({number}/{len(runs)})", file=sys.stderr)
    summary = collect(search)
    if not summary["runs"]:
        raise ValueError(f"{search.out}: holds no run of this grid to plot")
    write_text_atomic(Path(search.out) / "grid.json", json.dumps(summary, indent=2) + "\n")
    plot_curves(summary, Path(search.out) / "curves.png")
    best_checkpoint(search, summary).save(Path(search.out) / "best.pt")
    return summary


def collect(search: GridSearch) -> dict[str, Any]:
    """Each finished or partial run's learning curve and best dev NLL; the best configuration."""
    runs = {}
    for name, _ in configurations(search):
        path = Path(search.out) / name / "model.pt"
        if path.exists():
            training = Checkpoint.load(path).training
            trained = training.get("args", {})
            if (trained.get("model"), trained.get("corpus")) != (search.model, search.corpus):
                raise ValueError(f"{path}: a {trained.get('model')} run on {trained.get('corpus')}, not one of this "
                                 f"grid's ({search.model} on {search.corpus}): choose another --out")
            state = training["state"]
            runs[name] = {"epochs": state["epoch"], "best_dev_nll": state["best"], "history": state["history"]}
    scored = {name: run["best_dev_nll"]["model"] for name, run in runs.items() if "model" in run["best_dev_nll"]}
    best = min(scored, key=scored.get) if scored else None
    return {"model": search.model, "corpus": search.corpus, "runs": runs, "best": best}


def best_checkpoint(search: GridSearch, summary: dict[str, Any]) -> Checkpoint:
    """The best configuration's checkpoint. Each EntityNLM proposal in it comes from the run whose dev NLL of
    that proposal is lowest: a proposal's supervised fit does not involve the model, so a grid may train the
    proposals once, beside one configuration (``-- --proposals`` with no name trains a model alone)."""
    folder = Path(search.out)
    best = Checkpoint.load(folder / summary["best"] / "model.pt")
    for key in PROPOSAL_WEIGHTS.values():
        trained = {name: run["best_dev_nll"][key] for name, run in summary["runs"].items()
                   if key in run["best_dev_nll"]}
        if trained:
            source = min(trained, key=trained.get)
            best.weights[key] = Checkpoint.load(folder / source / "model.pt").weights[key]
            best.training.setdefault("proposals_from", {})[key] = source
    return best


def plot_curves(summary: dict, path: Path) -> None:
    """Dev (solid) and train (dashed) per-token NLL of the model by epoch, one colour per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for (name, run), colour in zip(sorted(summary["runs"].items()), itertools.cycle(plt.cm.tab10.colors)):
        epochs = [record["epoch"] for record in run["history"]]
        axis.plot(epochs, [r["dev_nll"]["model"] for r in run["history"]], "-o", ms=3, color=colour, label=name)
        axis.plot(epochs, [r["train_nll"]["model"] for r in run["history"]], "--", color=colour, alpha=0.5)
    what = "joint NLL of gold R, E, L, X" if summary["model"] == "entitynlm" else "NLL"
    axis.set(xlabel="epoch", ylabel=f"{what} per token (nats)")
    axis.set_title(f"{summary['model']} on {summary['corpus']}: dev (solid), train (dashed)\nbest on dev: "
                   f"{summary['best']}", fontsize=10)
    axis.legend(fontsize=8)
    figure.tight_layout()
    with atomic_path(path) as temporary:
        figure.savefig(temporary, dpi=120, format="png")
    plt.close(figure)
