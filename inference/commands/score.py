"""Score a coreference response file against a key file, as the official CoNLL-2012 scorer does.

``python -m coref.score KEY RESPONSE [--json OUT]`` (console script ``entitylm-score``) reads both CoNLL-2012-family
files with :func:`coref.io.conll.read_conll`, scores every metric of :mod:`coref.metrics.coreference`, and prints
recall, precision and F1 as percentages (rounded to 2 decimals; the Perl scorer truncates instead) with the CoNLL
F1. ``--json`` writes :meth:`CorefEvaluation.to_json` (fractions in [0, 1]).

It reads exactly what the official scorer reads: every mention, nested, crossing or repeated, nothing repaired.
What the official scorer dies on (an unclosed bracket, a close without an open) and what it cannot score (a
file with no document) is an error naming FILE:LINE, found before key and response are compared; it exits with
status 2 and one line. What the scoring did the official way (repeated response spans dropped, unmatched
documents) is reported on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from coref.io.atomic import write_text_atomic
from coref.metrics.score import format_table, score_files, scoring_warnings
from inference.commands.cli import Parser, run_main
from inference.commands.options import add_json


def build_parser() -> Parser:
    """KEY RESPONSE [--json OUT]."""
    parser = Parser(prog="python -m coref.score", description=__doc__)
    parser.add_argument("key", type=Path, help="gold CoNLL-2012 file")
    parser.add_argument("response", type=Path, help="system CoNLL-2012 file")
    add_json(parser, help="also write the scores as JSON to OUT")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status: 0, 2 for input that cannot be scored (one line on stderr, nothing
    written), 130 for Ctrl-C."""
    args = build_parser().parse_args(argv)

    def score() -> int:
        evaluation = score_files(args.key, args.response)
        if args.json is not None:
            write_text_atomic(args.json, json.dumps(evaluation.to_json(), indent=2) + "\n")
        for line in scoring_warnings(evaluation):
            print(line, file=sys.stderr)
        print(format_table(evaluation))
        return 0

    return run_main(score)
