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
The arguments for the runs are checked before the first starts; a folder whose runs are of another model or
corpus is refused, and so (by inference.training.train) is resuming a run with options that define another configuration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from coref.io.atomic import atomic_path, write_text_atomic
from coref.cli import Parser, integer, output_folder, real, run_main
from inference.training import train
from inference.training.checkpoint import PROPOSAL_WEIGHTS, Checkpoint
from inference.commands.cli import USER_ERRORS

PAPER_SIZES = (32, 48, 64, 128, 256)
PAPER_DROPOUTS = (0.2, 0.5)
PAPER_OPTIMIZERS = ("adagrad", "adam")


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    """The grid's options, and the arguments after ``--`` for every run, checked by inference.training.train's parser
    before the first run starts (a bad one fails in one line, not after hours of training)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    for _, command in run_commands(args, extra):
        train.parse_args(command)
    return args, extra


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.grid", description=__doc__,
                    epilog="arguments after -- go to every inference.training.train run")
    parser.add_argument("--model", choices=("entitynlm", "rnnlm"), required=True, help="the model to search for")
    parser.add_argument("--corpus", default="sample", help="corpus name, or several joined with '+'")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--out", required=True, type=output_folder,
                        help="one folder per configuration, grid.json, curves.png, best.pt")
    parser.add_argument("--sizes", type=integer(1), nargs="+", default=PAPER_SIZES, help="embedding = hidden size")
    parser.add_argument("--dropouts", type=real(0, 1), nargs="+", default=PAPER_DROPOUTS, help="dropout rates")
    parser.add_argument("--optimizers", nargs="+", choices=PAPER_OPTIMIZERS, default=PAPER_OPTIMIZERS,
                        help="optimisers, each at the paper's learning rate")
    parser.add_argument("--plot-only", action="store_true", help="only collect the runs there are and plot")
    return parser


def configurations(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(folder name, inference.training.train arguments) of every point of the grid, in the order given."""
    grid = []
    for size, dropout, optimizer in itertools.product(args.sizes, args.dropouts, args.optimizers):
        name = f"h{size}-d{dropout}-{optimizer}"
        grid.append((name, ["--embedding-size", str(size), "--hidden-size", str(size), "--dropout", str(dropout),
                            "--optimizer", optimizer]))
    return grid


def run_commands(args: argparse.Namespace, extra: list[str]) -> list[tuple[str, list[str]]]:
    """(folder name, inference.training.train arguments) of every run of the grid; a run with a last.pt is resumed."""
    commands = []
    for name, options in configurations(args):
        folder = Path(args.out) / name
        command = ["--model", args.model, "--corpus", args.corpus, "--out", str(folder), *options, *extra]
        if args.data_dir:
            command += ["--data-dir", args.data_dir]
        if (folder / "last.pt").exists():
            command.append("--resume")
        commands.append((name, command))
    return commands


def run_grid(args: argparse.Namespace, extra: list[str]) -> int:
    """Every run in turn; the first that fails (bad input: one line, or Ctrl-C) stops the grid with its status."""
    commands = run_commands(args, extra)
    for number, (name, command) in enumerate(commands, start=1):
        status = train.main(command)
        if status:
            return status
        print(f"grid: {name} finished ({number}/{len(commands)})", file=sys.stderr)
    return 0


def collect(args: argparse.Namespace) -> dict:
    """Each finished or partial run's learning curve and best dev NLL; the best configuration."""
    runs = {}
    for name, _ in configurations(args):
        path = Path(args.out) / name / "model.pt"
        if path.exists():
            training = Checkpoint.load(path).training
            trained = training.get("args", {})
            if (trained.get("model"), trained.get("corpus")) != (args.model, args.corpus):
                raise ValueError(f"{path}: a {trained.get('model')} run on {trained.get('corpus')}, not one of this "
                                 f"grid's ({args.model} on {args.corpus}): choose another --out")
            state = training["state"]
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


def main(argv: Sequence[str] | None = None) -> int:
    args, extra = parse_args(argv)
    return run_main(lambda: run(args, extra), USER_ERRORS)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Run (or resume) the grid, then write grid.json, curves.png and best.pt from the runs there are."""
    if not args.plot_only:
        status = run_grid(args, extra)
        if status:
            return status
    summary = collect(args)
    if not summary["runs"]:
        raise ValueError(f"{args.out}: holds no run of this grid to plot")
    write_text_atomic(Path(args.out) / "grid.json", json.dumps(summary, indent=2) + "\n")
    plot_curves(summary, Path(args.out) / "curves.png")
    best_checkpoint(args, summary).save(Path(args.out) / "best.pt")
    print(json.dumps({name: run["best_dev_nll"] for name, run in summary["runs"].items()} | {"best": summary["best"]},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
