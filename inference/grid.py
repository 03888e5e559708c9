"""The paper's hyper-parameter grid (§5.1), searched on dev, resumable, with the learning curves plotted.

    python -m inference.grid --model rnnlm --corpus litbank+ontogum --data-dir DATA --out runs/grid/rnnlm \\
        --sizes 128 256 --dropouts 0.2 0.5 --optimizers adam -- --train-chunk 200 --epochs 40 --patience 2

Every configuration (embedding = hidden size from ``--sizes``, dropout, optimiser at the paper's learning
rate) is one ``python -m inference.train`` run in ``OUT/<name>``, trained with early stopping on dev. The
runs go one after another; rerunning the same command after an interruption resumes the unfinished run from
its ``last.pt`` and passes over the finished ones (a finished run resumed trains no further). Then
``OUT/grid.json`` lists each configuration's best dev NLL and its learning curve, ``OUT/curves.png`` plots
the curves, and ``OUT/best.pt`` is the best configuration's ``model.pt`` (lowest dev NLL of the model: the
joint for EntityNLM, as the paper selects), each EntityNLM proposal taken from the run with its lowest dev NLL.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from coref.atomic import write_text_atomic
from inference.checkpoint import PROPOSAL_WEIGHTS, Checkpoint
from inference.train import main as train_main

PAPER_SIZES = (32, 48, 64, 128, 256)
PAPER_DROPOUTS = (0.2, 0.5)
PAPER_OPTIMIZERS = ("adagrad", "adam")


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m inference.grid", description=__doc__.split("\n")[0],
                                     epilog="arguments after -- go to every inference.train run")
    parser.add_argument("--model", choices=("entitynlm", "rnnlm"), required=True)
    parser.add_argument("--corpus", default="sample")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--out", required=True, help="one folder per configuration, grid.json, curves.png")
    parser.add_argument("--sizes", type=int, nargs="+", default=PAPER_SIZES, help="embedding = hidden size")
    parser.add_argument("--dropouts", type=float, nargs="+", default=PAPER_DROPOUTS)
    parser.add_argument("--optimizers", nargs="+", choices=PAPER_OPTIMIZERS, default=PAPER_OPTIMIZERS)
    parser.add_argument("--plot-only", action="store_true", help="only collect the runs there are and plot")
    args = parser.parse_args(argv)
    if min(args.sizes) < 1 or not all(0 <= dropout < 1 for dropout in args.dropouts):
        parser.error("--sizes must be positive and --dropouts in [0, 1)")
    return args, extra


def configurations(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(folder name, inference.train arguments) of every point of the grid, in the order given."""
    grid = []
    for size, dropout, optimizer in itertools.product(args.sizes, args.dropouts, args.optimizers):
        name = f"h{size}-d{dropout}-{optimizer}"
        grid.append((name, ["--embedding-size", str(size), "--hidden-size", str(size), "--dropout", str(dropout),
                            "--optimizer", optimizer]))
    return grid


def run_grid(args: argparse.Namespace, extra: list[str]) -> int:
    out = Path(args.out)
    for name, options in configurations(args):
        folder = out / name
        command = ["--model", args.model, "--corpus", args.corpus, "--out", str(folder), *options, *extra]
        if args.data_dir:
            command += ["--data-dir", args.data_dir]
        if (folder / "last.pt").exists():
            command.append("--resume")
        print(f"grid: {name}", file=sys.stderr)
        status = train_main(command)
        if status:
            return status
    return 0


def collect(args: argparse.Namespace) -> dict:
    """Each finished or partial run's learning curve and best dev NLL; the best configuration."""
    runs = {}
    for name, _ in configurations(args):
        path = Path(args.out) / name / "model.pt"
        if path.exists():
            state = Checkpoint.load(path).training["state"]
            runs[name] = {"epochs": state["epoch"], "best_dev_nll": state["best"], "history": state["history"]}
    scored = {name: run["best_dev_nll"]["model"] for name, run in runs.items() if "model" in run["best_dev_nll"]}
    best = min(scored, key=scored.get) if scored else None
    return {"model": args.model, "corpus": args.corpus, "runs": runs, "best": best}


def best_checkpoint(args: argparse.Namespace, summary: dict) -> Checkpoint:
    """The best configuration's checkpoint. Each EntityNLM proposal in it comes from the run whose dev NLL of
    that proposal is lowest: a proposal's supervised fit does not involve the model, so a grid may train the
    proposals once, beside one configuration (``-- --proposals`` with no name trains a model alone)."""
    folder = Path(args.out)
    best = Checkpoint.load(folder / summary["best"] / "model.pt")
    for key in PROPOSAL_WEIGHTS.values():
        trained = {name: run["best_dev_nll"][key] for name, run in summary["runs"].items() if key in run["best_dev_nll"]}
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
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.plot_only:
        status = run_grid(args, extra)
        if status:
            return status
    summary = collect(args)
    write_text_atomic(Path(args.out) / "grid.json", json.dumps(summary, indent=2) + "\n")
    if summary["runs"]:
        plot_curves(summary, Path(args.out) / "curves.png")
    if summary["best"]:
        best_checkpoint(args, summary).save(Path(args.out) / "best.pt")
    print(json.dumps({name: run["best_dev_nll"] for name, run in summary["runs"].items()} | {"best": summary["best"]},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
