"""The entity_prediction command: InScript's entity prediction, as :mod:`inference.evaluation.entity_prediction`
runs it (its docstring, below in ``--help``, gives the protocol and the predictors).

    python -m inference.entity_prediction --checkpoint runs/inscript/model.pt --data-dir DATA --json out.json
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, help_text, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device_seed_json
from inference.evaluation import entity_prediction
from inference.evaluation.entity_prediction import evaluate_entity_prediction, format_result


def build_parser() -> Parser:
    """The checkpoint, the corpus and its splits, the protocol."""
    parser = Parser(prog="python -m inference.entity_prediction", description=help_text(__doc__, entity_prediction))
    parser.add_argument("--checkpoint", required=True,
                        help="EntityNLM trained on InScript with --keep-singletons (entitylm train)")
    add_corpus_split(parser, corpus="inscript", split_help="the split the accuracy is reported on")
    parser.add_argument("--train-split", default="train", help="fits the shallow-feature baseline")
    parser.add_argument("--dev-split", default="dev", help="tunes the new-entity bias")
    add_data_dir(parser)
    parser.add_argument("--skip-sentences", type=integer(0), default=3,
                        help="predict after this many sentences (paper 3)")
    parser.add_argument("--max-slots", type=integer(1), default=30,
                        help="at most this many slots per story (paper 30)")
    add_device_seed_json(parser)
    return parser


def run(args: argparse.Namespace) -> dict:
    """The accuracies the options ask for."""
    return evaluate_entity_prediction(
        args.checkpoint, corpus=args.corpus, split=args.split, train_split=args.train_split,
        dev_split=args.dev_split, data_dir=args.data_dir, skip_sentences=args.skip_sentences,
        max_slots=args.max_slots, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
