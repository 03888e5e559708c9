"""The entity_cloze command: entity cloze by sentence likelihood, scored by the Mean Quantile, as
:mod:`inference.evaluation.entity_cloze` computes it (its docstring, below in ``--help``, says how).

    python -m inference.entity_cloze --checkpoint runs/dntm/both-gru_relu/model.pt --corpus ontogum \\
        --split test --data-dir DATA --json result.json

``--max-clozes`` scores a seeded random sample of the clozes; the JSON says how many of how many.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, help_text, run_command
from inference.commands.options import evaluation_parser
from inference.evaluation import entity_cloze as cloze
from inference.evaluation.entity_cloze import entity_cloze, format_result


def build_parser() -> Parser:
    """The checkpoint, the corpus split, how many clozes and how it runs."""
    parser = evaluation_parser("python -m inference.entity_cloze", help_text(__doc__, cloze),
                               "a checkpoint of a model of the anonymised data (dntm)")
    parser.add_argument("--max-clozes", type=integer(1), default=200,
                        help="score a random sample of this many clozes (seeded by --seed); all if fewer")
    return parser


def run(args: argparse.Namespace) -> dict:
    """The Mean Quantile the options ask for."""
    return entity_cloze(args.checkpoint, corpus=args.corpus, split=args.split, data_dir=args.data_dir,
                        max_clozes=args.max_clozes, batch_tokens=args.batch_tokens, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
