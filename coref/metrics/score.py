"""Score a coreference response file against a key file, as the official CoNLL-2012 scorer does.

``python -m coref.score KEY RESPONSE [--json OUT]`` (console script ``entitylm-score``) reads both
CoNLL-2012-family files with :func:`coref.io.conll.read_conll`, scores every metric of :mod:`coref.metrics.coreference`, and
prints recall, precision and F1 as percentages (rounded to 2 decimals; the Perl scorer truncates instead) with
the CoNLL F1. ``--json`` writes :meth:`CorefEvaluation.to_json` (fractions in [0, 1]).

It reads exactly what the official scorer reads: every mention, nested, crossing or repeated, nothing repaired.
What the official scorer dies on (an unclosed bracket, a close without an open) and what it cannot score (a
file with no document) is an error naming FILE:LINE, found before key and response are compared; it exits with
status 2 and one line. What the scoring did the official way (repeated response spans dropped, unmatched
documents) is reported on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from coref.io.atomic import write_text_atomic
from coref.cli import Parser, output_file, run_main
from coref.io.conll import read_conll
from coref.metrics.coreference import METRICS, CorefEvaluation, EvaluationError, evaluate


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m coref.score", description=__doc__)
    parser.add_argument("key", type=Path, help="gold CoNLL-2012 file")
    parser.add_argument("response", type=Path, help="system CoNLL-2012 file")
    parser.add_argument("--json", type=output_file, metavar="OUT", help="also write the scores as JSON to OUT")
    return parser


TABLE_ROWS = ("mentions", *METRICS)  # mention identification, then every metric


def format_table(evaluation: CorefEvaluation, metrics: Sequence[str] = TABLE_ROWS) -> str:
    """Recall, precision and F1 of ``metrics`` (default: mention identification and every metric), in percent,
    then the CoNLL F1."""
    lines = [f"{'metric':<10}{'recall':>10}{'precision':>11}{'F1':>9}"]
    for name in metrics:
        score = getattr(evaluation, name)
        lines.append(f"{name:<10}{100 * score.recall:>10.2f}{100 * score.precision:>11.2f}{100 * score.f1:>9.2f}")
    lines.append(f"CoNLL F1: {100 * evaluation.conll_f1:.2f}   (key documents scored: {evaluation.documents})")
    return "\n".join(lines)


def scoring_warnings(evaluation: CorefEvaluation) -> list[str]:
    """What the scoring did the official scorer's way that changes figures, one line ("warning: ...") each."""
    lines = []
    if evaluation.key_duplicates:
        lines.append(
            f"warning: the key repeats spans {evaluation.key_duplicates} time(s); like the official scorer, each "
            "occurrence counts, which can push figures above 100%"
        )
    if evaluation.response_duplicates:
        lines.append(
            f"warning: the response repeats key spans {evaluation.response_duplicates} time(s); like the official "
            "scorer, each is kept at its first occurrence and the repeats dropped"
        )
    for documents, what in (
        (evaluation.missing_documents, "key document(s) missing from the response, scored as misses"),
        (evaluation.ignored_documents, "response document(s) not in the key, ignored"),
    ):
        if documents:
            names = ", ".join(f"{id} part {part}" for id, part in documents)
            lines.append(f"warning: {len(documents)} {what}: {names}")
    return lines


def _score(args: argparse.Namespace) -> int:
    key, _ = read_conll(args.key, strict=True)
    response, _ = read_conll(args.response, strict=True)
    try:
        evaluation = evaluate(key, response)
    except EvaluationError as error:
        raise EvaluationError(f"{args.key} against {args.response}: {error}") from None
    if args.json is not None:
        write_text_atomic(args.json, json.dumps(evaluation.to_json(), indent=2) + "\n")
    for line in scoring_warnings(evaluation):
        print(line, file=sys.stderr)
    print(format_table(evaluation))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status: 0, 2 for input that cannot be scored (one line on stderr, nothing
    written), 130 for Ctrl-C."""
    args = _parser().parse_args(argv)
    return run_main(lambda: _score(args))


if __name__ == "__main__":
    sys.exit(main())
