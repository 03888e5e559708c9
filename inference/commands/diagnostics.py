"""The diagnostics command: where EntityNLM wins and loses against the RNNLM, token by token, as
:mod:`inference.evaluation.diagnostics` computes it (its docstring, below in ``--help``, says what each figure is).

    python -m inference.diagnostics                                   # bundled models, embedded sample corpus
    python -m inference.diagnostics --checkpoint runs/entitynlm/model.pt --baseline runs/rnnlm/model.pt \\
        --corpus litbank --split dev --data-dir DATA --particles 100 --json diagnostics.json
    python -m inference.diagnostics --corpus ontogum --split test --documents 6 --particles 20   # a quick look
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, config_of, help_text, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device_seed_json
from inference.evaluation import diagnostics
from inference.evaluation.diagnostics import DiagnosticsConfig, diagnose, format_result


def build_parser() -> Parser:
    """The models, the corpus, the sampling and how much is listed."""
    parser = Parser(prog="python -m inference.diagnostics", description=help_text(__doc__, diagnostics))
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--proposal", choices=("forward", "bidirectional"),
                        help="the checkpoint's proposal to sample with (default: the one it names)")
    parser.add_argument("--baseline", metavar="CKPT",
                        help="RNNLM checkpoint to compare with, or 'none' (default: the bundled RNNLM with the "
                             "bundled model, none with --checkpoint)")
    add_corpus_split(parser, split_help="the split to diagnose")
    add_data_dir(parser)
    parser.add_argument("--documents", type=integer(1), metavar="N",
                        help="only the first N documents of the split (a quick look; default: all)")
    parser.add_argument("--particles", type=integer(1), default=100,
                        help="importance samples per document (paper: 100)")
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000, help="particles x padded tokens per batch")
    parser.add_argument("--top", type=integer(0), default=10,
                        help="list this many tokens and word types where EntityNLM's word|gold differs most from "
                             "the RNNLM, each way (0: none)")
    add_device_seed_json(parser)
    return parser


def run(args: argparse.Namespace) -> dict:
    """The diagnosis the options ask for."""
    return diagnose(config_of(DiagnosticsConfig, args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
