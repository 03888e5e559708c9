"""Score a coreference response file against a key file, as the official CoNLL-2012 scorer does.

``python -m coref.score KEY RESPONSE [--json OUT] [--strict]`` (console script ``entitylm-score``) reads both
CoNLL-2012-family files with :func:`coref.conll.read_conll`, scores every metric of :mod:`coref.metrics`, and
prints recall, precision and F1 as percentages (rounded to 2 decimals; the Perl scorer truncates instead) with
the CoNLL F1. ``--json`` writes :meth:`CorefEvaluation.to_json` (fractions in [0, 1]). What the scoring
worked around (malformed brackets skipped in lenient mode, repeated spans, unmatched documents) is reported on
stderr. Unreadable input exits with status 2 and a ``file:line: reason`` message.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from coref.conll import ConllError, Problem, read_conll
from coref.document import Document
from coref.metrics import METRICS, CorefEvaluation, EvaluationError, evaluate

SHOWN_PROBLEMS = 5  # malformed mentions listed per file before "... and N more"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m coref.score",
        description="Score coreference (MUC, B3, CEAFe, CEAFm, BLANC, LEA, CoNLL F1) with the official scorer's "
        "semantics: exact spans, singletons count, micro-averaged over documents matched by name and part.",
    )
    parser.add_argument("key", type=Path, help="gold CoNLL-2012 file")
    parser.add_argument("response", type=Path, help="system CoNLL-2012 file")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the scores as JSON to OUT")
    parser.add_argument(
        "--strict", action="store_true", help="refuse malformed mentions instead of skipping them with a warning"
    )
    return parser


def format_table(evaluation: CorefEvaluation) -> str:
    """Recall, precision and F1 of mention identification and every metric, in percent, then the CoNLL F1."""
    lines = [f"{'metric':<10}{'recall':>10}{'precision':>11}{'F1':>9}"]
    for name in ("mentions", *METRICS):
        score = getattr(evaluation, name)
        lines.append(f"{name:<10}{100 * score.recall:>10.2f}{100 * score.precision:>11.2f}{100 * score.f1:>9.2f}")
    lines.append(f"CoNLL F1: {100 * evaluation.conll_f1:.2f}   (key documents scored: {evaluation.documents})")
    return "\n".join(lines)


def _read(path: Path, strict: bool) -> tuple[list[Document], list[Problem]]:
    """:func:`read_conll`, with bytes that are not UTF-8 reported by file and line like any other bad input."""
    try:
        return read_conll(path, strict=strict)
    except UnicodeDecodeError as error:
        line = error.object[: error.start].count(b"\n") + 1
        raise ConllError(str(path), line, f"not UTF-8 text ({error.reason})") from None


def _warnings(evaluation: CorefEvaluation, problems: dict[Path, list[Problem]]) -> list[str]:
    """What was skipped or left unmatched, one headline ("warning: ...") each, malformed mentions listed."""
    lines = []
    for path, found in problems.items():
        if found:
            lines.append(f"warning: {path}: {len(found)} malformed mention(s) skipped (--strict refuses them):")
            lines.extend(f"  {problem}" for problem in found[:SHOWN_PROBLEMS])
            if len(found) > SHOWN_PROBLEMS:
                lines.append(f"  ... and {len(found) - SHOWN_PROBLEMS} more")
    for count, side in ((evaluation.key_duplicates, "key"), (evaluation.response_duplicates, "response")):
        if count:
            lines.append(
                f"warning: {count} repeated span(s) in the {side} dropped (each span is kept at its first occurrence)"
            )
    for documents, what in (
        (evaluation.missing_documents, "key document(s) missing from the response, scored as misses"),
        (evaluation.ignored_documents, "response document(s) not in the key, ignored"),
    ):
        if documents:
            names = ", ".join(f"{id} part {part}" for id, part in documents)
            lines.append(f"warning: {len(documents)} {what}: {names}")
    return lines


def _fail(message: str) -> int:
    print(f"coref.score: error: {message}", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status: 0, or 2 for input that cannot be scored (message on stderr)."""
    args = _parser().parse_args(argv)
    try:
        key, key_problems = _read(args.key, args.strict)
        response, response_problems = _read(args.response, args.strict)
        evaluation = evaluate(key, response)
    except (ConllError, EvaluationError) as error:
        return _fail(str(error))
    except OSError as error:
        return _fail(f"{error.filename}: {error.strerror}")
    for line in _warnings(evaluation, {args.key: key_problems, args.response: response_problems}):
        print(line, file=sys.stderr)
    print(format_table(evaluation))
    if args.json is not None:
        try:
            args.json.write_text(json.dumps(evaluation.to_json(), indent=2) + "\n")
        except OSError as error:
            return _fail(f"{error.filename}: {error.strerror}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
