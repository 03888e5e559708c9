"""The anonymise command: statistics of the anonymised language modelling data of :mod:`coref.corpora.anonymise`
(its docstring, below in ``--help``, says how a corpus is anonymised).

Command line::

    python -m coref.anonymise stats --corpus NAME [--data-dir D] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from coref.corpora import anonymise
from coref.corpora.anonymise import anonymised_corpus, dropped_lines, format_table, stats_json
from coref.corpora.registry import available_splits
from coref.io.atomic import write_text_atomic
from inference.commands.cli import Parser, command_parser, help_text, run_subcommand
from inference.commands.options import add_command, add_data_dir, add_json


def stats(args: argparse.Namespace) -> int:
    """Print the paper's Table 1 (documents, average sentences, chains, chains mentioned more than once, mentions
    per chain) with one column per split of the anonymised corpus, the documents dropped for more than 50 chains,
    and what preprocessing changed."""
    splits = [anonymised_corpus(args.corpus, split, args.data_dir) for split in available_splits(args.corpus)]
    print(format_table(args.corpus, splits))
    print("\n".join(dropped_lines(split) for split in splits))
    if args.json:
        write_text_atomic(args.json, json.dumps(stats_json(args.corpus, splits), indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    """``stats``."""
    parser, commands = command_parser("python -m coref.anonymise", help_text(__doc__, anonymise))
    command = add_command(commands, "stats", stats, help="the paper's Table 1 for each split of an anonymised corpus")
    command.add_argument("--corpus", required=True, help="a corpus of coref.corpora.registry (ontogum, litbank, "
                         "sample, ...), or several joined with '+'")
    add_data_dir(command)
    add_json(command, help="also write the numbers as JSON to OUT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)
