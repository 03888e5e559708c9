"""Scoring a coreference response file against a key file as the official CoNLL-2012 scorer does: both read
strictly (:func:`coref.io.conll.read_conll`), every metric of :mod:`coref.metrics.coreference`, the table of
recall, precision and F1 in percent, and the warnings about what the official way of scoring changed. Its command
is :mod:`inference.commands.score` (``python -m coref.score``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from coref.io.conll import read_conll
from coref.metrics.coreference import METRICS, CorefEvaluation, EvaluationError, evaluate

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


def score_files(key: str | Path, response: str | Path) -> CorefEvaluation:
    """Every metric of ``response`` against ``key``, both CoNLL-2012-family files read strictly: what the official
    scorer dies on is an error naming FILE:LINE, found before the two are compared; a pair that cannot be
    scored (no document) is an :class:`EvaluationError` naming both files."""
    key_documents, _ = read_conll(key, strict=True)
    response_documents, _ = read_conll(response, strict=True)
    try:
        return evaluate(key_documents, response_documents)
    except EvaluationError as error:
        raise EvaluationError(f"{key} against {response}: {error}") from None
