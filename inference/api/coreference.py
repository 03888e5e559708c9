"""Coreference of raw text by the bundled resolver (:func:`coreference`) and scoring against a key (:func:`score`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from coref.document import Document
from coref.io.conll import format_conll, read_conll
from coref.io.html import document_html
from coref.io.text import TokenizedText
from coref.metrics.coreference import CorefEvaluation, Score, evaluate
from coref.metrics.score import TABLE_ROWS, format_table, scoring_warnings
from coref.resolution.pipeline import (
    CorefPipeline,
    Span,
    bundled_pipeline,
    clusters,
    format_clusters,
    replaced_text,
    resolve,
    tokenize_texts,
)
from inference.api.tables import html_table

# ---- coreference resolution and scoring -------------------------------------------------------------------------


@dataclass(frozen=True)
class Coreference:
    """The coreference of a text by the mention detector and mention ranker of :mod:`coref.resolution.pipeline`."""

    document: Document
    tokenized: TokenizedText

    def clusters(self) -> list[list[dict[str, object]]]:
        """The entities, each its mentions in text order (words, token span, character span in the text)."""
        return clusters(self.document, self.tokenized)

    def to_conll(self) -> str:
        return format_conll([self.document])

    def replaced(self) -> str:
        """The text with each mention replaced by its entity's representative name (its first proper-name
        mention, else its longest mention that is not a pronoun; a pronoun-only entity keeps its words), the rest
        as written: :func:`coref.resolution.pipeline.replaced_text`, as ``python -m coref.resolve --replace``
        prints it."""
        return replaced_text(self.document, self.tokenized)

    def __repr__(self) -> str:
        return format_clusters(self.document, self.tokenized)

    def _repr_html_(self) -> str:
        return document_html(self.document)


@overload
def coreference(text: str, detector: str | os.PathLike | None = None, resolver: str | os.PathLike | None = None, *,
                mentions: Sequence[Span] | None = None, singletons: bool | None = None) -> Coreference: ...
@overload
def coreference(text: Sequence[str], detector: str | os.PathLike | None = None,
                resolver: str | os.PathLike | None = None, *, mentions: Sequence[Sequence[Span]] | None = None,
                singletons: bool | None = None) -> list[Coreference]: ...
def coreference(text, detector=None, resolver=None, *, mentions=None, singletons=None):
    """The coreference of a raw text by a mention detector and the mention ranker trained on its mentions (the
    bundled ones by default; see ``python -m coref.resolve``), or of each text of a list, in one batch.
    Tokenised with :func:`coref.io.text.tokenize`. ``mentions``: the spans to cluster instead of detecting them,
    ``[(start_char, end_char), ...]`` (one such list per text for a list); ``singletons``: keep (True) or drop
    (False) the one-mention entities, by default the model's corpus convention (kept for given mentions). See
    :func:`coref.resolution.pipeline.resolve`."""
    many = isinstance(text, (list, tuple))
    texts = list(text) if many else [text]
    odd = [type(each).__name__ for each in texts if not isinstance(each, str)]
    if odd:
        raise ValueError(f"coreference takes a str or a list of them, not a {odd[0]}")
    tokenized = tokenize_texts(texts)
    pipeline = bundled_pipeline() if detector is None and resolver is None else CorefPipeline.load(detector, resolver)
    documents = resolve(tokenized if many else tokenized[0], pipeline, mentions=mentions, singletons=singletons)
    found = [Coreference(document, each) for document, each in zip(documents if many else [documents], tokenized)]
    return found if many else found[0]


Annotations = Document | str | os.PathLike | Sequence[Document]


def _annotations(value: Annotations, side: str) -> list[Document]:
    if isinstance(value, Document):
        return [value]
    if isinstance(value, (str, os.PathLike)):
        return read_conll(value, strict=True)[0]  # a CoNLL file, read as coref.metrics.score reads it
    documents = list(value)
    if not all(isinstance(document, Document) for document in documents):
        raise ValueError(f"the {side} must be a Document, a CoNLL file's path, or a list of Documents")
    return documents


@dataclass(frozen=True)
class Scores:
    """A response's scores against a key (:class:`coref.metrics.coreference.CorefEvaluation`): ``scores["muc"].f1``
    etc., fractions in [0, 1]; ``conll_f1`` the mean F1 of MUC, B3 and CEAFe; ``warnings`` what the official scorer's
    rules did that changes figures (repeated spans, unmatched documents)."""

    evaluation: CorefEvaluation
    metrics: tuple[str, ...]

    def __getitem__(self, metric: str) -> Score:
        return getattr(self.evaluation, metric)

    @property
    def conll_f1(self) -> float:
        return self.evaluation.conll_f1

    @property
    def warnings(self) -> list[str]:
        return scoring_warnings(self.evaluation)

    def __repr__(self) -> str:
        return "\n".join([format_table(self.evaluation, self.metrics), *self.warnings])

    def _repr_html_(self) -> str:
        rows = [(name, *(f"{100 * value:.2f}" for value in (self[name].recall, self[name].precision, self[name].f1)))
                for name in self.metrics]
        caption = f"CoNLL F1 {100 * self.conll_f1:.2f} ({self.evaluation.documents} key documents)"
        return html_table(("metric", "recall", "precision", "F1"), rows, caption)


def score(key: Annotations, response: Annotations, metrics: Sequence[str] = TABLE_ROWS) -> Scores:
    """Score a response's coreference against a key's, with the official CoNLL-2012 scorer's semantics (exact
    span matches, micro-averaged over documents matched by name). Each side: a Document, a CoNLL file's path, or
    a list of Documents. Two single Documents are compared whatever their names. ``metrics``: which rows the
    table shows, of ``mentions``, ``muc``, ``bcub``, ``ceafe``, ``ceafm``, ``blanc`` and ``lea``."""
    unknown = [metric for metric in metrics if metric not in TABLE_ROWS]
    if unknown or not metrics:
        raise ValueError(f"unknown metrics {unknown}; choose from {TABLE_ROWS}")
    keys, responses = _annotations(key, "key"), _annotations(response, "response")
    if isinstance(key, Document) and isinstance(response, Document):
        responses = [response.replace(id=key.id, part=key.part)]
    return Scores(evaluate(keys, responses), tuple(metrics))
