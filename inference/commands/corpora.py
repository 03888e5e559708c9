"""The corpora command: statistics of the named corpora of :mod:`coref.corpora.registry` (its docstring, below in
``--help``, says what each is and where it lives), and fetching the public ones.

Command line::

    python -m coref.corpora stats --corpus NAME [--split S] [--data-dir D] [--json OUT] [--strict] [--preprocess]
    python -m coref.corpora download litbank|ontogum --to DIR [--mirror URL]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from coref.corpora import registry
from coref.corpora.registry import DOWNLOADERS, RAW_GITHUB, SPLITS, corpus_summary
from coref.io.atomic import write_text_atomic
from inference.checks import output_folder
from inference.commands.cli import Parser, command_parser, help_text, run_subcommand
from inference.commands.options import add_command, add_data_dir, add_json


def stats(args: argparse.Namespace) -> int:
    """Count documents, sentences, tokens, mentions and entities of each split as the files hold them (before
    preprocessing), and list every problem the lenient reader worked around as FILE:LINE: reason."""
    result, text = corpus_summary(args.corpus, args.split, args.data_dir, strict=args.strict,
                                  preprocess=args.preprocess)
    print(text)
    if args.json:
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def download(args: argparse.Namespace) -> int:
    """Fetch a public corpus (pinned commits, over HTTPS) into the layout the loader expects; files are written
    atomically, so a re-run resumes an interrupted download."""
    table = DOWNLOADERS[args.corpus](Path(args.to), args.mirror)
    sizes = ", ".join(f"{split} {len(documents)}" for split, documents in table.items())
    print(f"{args.corpus}: documents {sizes} in {Path(args.to) / args.corpus}; load with --data-dir {args.to}")
    return 0


def build_parser() -> Parser:
    """``stats`` and ``download``."""
    parser, commands = command_parser("python -m coref.corpora", help_text(__doc__, registry))

    stats_parser = add_command(commands, "stats", stats,
                               help="count documents, sentences, tokens, mentions and entities per split")
    stats_parser.add_argument("--corpus", required=True, help=f"{', '.join(SPLITS)}, or several joined with '+'")
    stats_parser.add_argument("--split", help="one split (default: all the corpus has)")
    add_data_dir(stats_parser)
    add_json(stats_parser, help="also write the numbers as JSON to OUT")
    stats_parser.add_argument("--strict", action="store_true",
                              help="make every problem (malformed mention) an error")
    stats_parser.add_argument("--preprocess", action="store_true",
                              help="also report what the paper's preprocessing removes from each split")

    download_parser = add_command(commands, "download", download,
                                  help="fetch a public corpus into the layout the loader expects")
    download_parser.add_argument("corpus", choices=sorted(DOWNLOADERS), help="the corpus to fetch")
    download_parser.add_argument("--to", required=True, metavar="DIR", type=output_folder,
                                 help="data directory to create or complete")
    download_parser.add_argument("--mirror", default=RAW_GITHUB, metavar="URL",
                                 help="replaces the GitHub prefix of every URL (file:// works)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)
