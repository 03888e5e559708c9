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
corpus is refused, and so (by entitylm train) is resuming a run with options that define another
configuration.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import fields

from inference.checks import integer, output_folder, real
from inference.commands import train
from inference.commands.cli import USER_ERRORS, Parser, config_of, run_main
from inference.commands.options import add_data_dir
from inference.training.grid import PAPER_DROPOUTS, PAPER_OPTIMIZERS, PAPER_SIZES, GridSearch, run_options, search_grid
from inference.training.train import LanguageModelTraining


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.grid", description=__doc__,
                    epilog="arguments after -- go to every entitylm train run")
    parser.add_argument("--model", choices=("entitynlm", "rnnlm"), required=True, help="the model to search for")
    parser.add_argument("--corpus", default="sample", help="corpus name, or several joined with '+'")
    add_data_dir(parser)
    parser.add_argument("--out", required=True, type=output_folder,
                        help="one folder per configuration, grid.json, curves.png, best.pt")
    parser.add_argument("--sizes", type=integer(1), nargs="+", default=PAPER_SIZES, help="embedding = hidden size")
    parser.add_argument("--dropouts", type=real(0, 1), nargs="+", default=PAPER_DROPOUTS, help="dropout rates")
    parser.add_argument("--optimizers", nargs="+", choices=PAPER_OPTIMIZERS, default=PAPER_OPTIMIZERS,
                        help="optimisers, each at the paper's learning rate")
    parser.add_argument("--plot-only", action="store_true", help="only collect the runs there are and plot")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[GridSearch, list]:
    """The grid, and its runs' options: the arguments after ``--`` (for every run) read by the parser of
    ``python -m inference.train``, with the grid's own, checked before the first run starts."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    search = config_of(GridSearch, build_parser().parse_args(argv))
    every = vars(train.build_parser().parse_args(["--model", search.model, "--out", str(search.out), *extra]))
    base = {field.name: every[field.name] for field in fields(LanguageModelTraining)}
    return search, run_options(search, base)


def main(argv: Sequence[str] | None = None) -> int:
    """Run (or resume) the grid and collect it; print each run's best dev NLL and the best as JSON."""
    search, runs = parse_args(argv)

    def body() -> int:
        summary = search_grid(search, runs)
        print(json.dumps({name: run["best_dev_nll"] for name, run in summary["runs"].items()}
                         | {"best": summary["best"]}, indent=2))
        return 0

    return run_main(body, USER_ERRORS)
