"""The perplexity command: a language model checkpoint's test perplexity in total and per token group, as
:mod:`inference.evaluation.perplexity` computes it (its docstring, below in ``--help``, defines the groups).

    python -m inference.perplexity --checkpoint runs/dntm/both-gru_relu/model.pt --corpus ontogum --split test \\
        --data-dir DATA --json result.json
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.commands.cli import Parser, help_text, run_command
from inference.commands.options import evaluation_parser
from inference.evaluation import perplexity
from inference.evaluation.perplexity import format_result, perplexity_by_group


def build_parser() -> Parser:
    """The checkpoint, the corpus split and how it runs."""
    return evaluation_parser("python -m inference.perplexity", help_text(__doc__, perplexity),
                             "a checkpoint of an exact model (rnnlm, dntm, ngram)")


def run(args: argparse.Namespace) -> dict:
    """The perplexities the options ask for."""
    return perplexity_by_group(args.checkpoint, corpus=args.corpus, split=args.split, data_dir=args.data_dir,
                               batch_tokens=args.batch_tokens, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
