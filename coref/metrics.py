"""Coreference metrics with the semantics of the official CoNLL-2012 scorer.

MUC, B3 (``bcub``), CEAFm, CEAFe, BLANC, LEA, mention identification and the CoNLL F1 (the mean of the MUC, B3
and CEAFe F1), computed the way the reference Perl scorer (``conll/reference-coreference-scorers`` v8.01, LEA
from its ``LEA-scorer`` branch; Pradhan et al. 2014) computes them:

- Documents are matched by :attr:`Document.key` ``(id, part)``. A key document missing from the response counts
  all its mentions as missed; documents only in the response are ignored (both are listed in the result).
- Mentions match by exact span; there is no head or partial matching.
- A span that occurs twice in one document is kept at its first occurrence in document order
  (``Document.mentions`` order, so the lowest entity label wins a tie) and the repeats are dropped and counted.
  The scorer does this for the response; we do it for the key too, where the scorer's behaviour is undefined.
- Singletons count wherever they appear (B3, CEAF, BLANC, LEA): a response that outputs singleton entities
  against a key without singletons loses precision. MUC counts links, so singletons never matter to it.
- Scores are micro-averaged: each metric's recall and precision numerators and denominators are summed over
  documents before R, P and F1 are formed. :class:`Score` holds those four numbers, so averaging is addition.
- CEAF aligns key and response entities per document with an optimal one-to-one assignment
  (``scipy.optimize.linear_sum_assignment``; the scorer uses Munkres, which finds the same optimum value).
- BLANC (Recasens & Hovy 2011; Luo et al. 2014) averages a coreference-link and a non-coreference-link score.
  Like the scorer, which decides on its corpus totals, a half whose KEY has no links is left out, whatever the
  response has: a key with no coreference links is scored on non-coreference links alone, and one with no
  non-coreference links on coreference links alone (Recasens & Hovy's edge cases; Luo et al. 2014 would instead
  average in a 0 when the response has links the key lacks). A key with no links at all scores 0. BLANC's F1
  is the mean of the two halves' F1, not the harmonic mean of its recall and precision.
- LEA (Moosavi & Strube 2016): each entity weighs its size; its resolution is the fraction of its links found
  in one entity of the other side; a singleton has one "self-link", resolved iff the other side has the same
  singleton.

Why our own code: no PyPI package is faithful and maintained. ``scorch`` 0.2.0 (last release 2020) has no
LEA and averages per-document scores instead of summing counts; ``coreference-eval`` 0.0.2 skips singletons in
B3 and LEA (the e2e-coref convention, not the scorer's); ``metric4coref`` 0.0.2 computes MUC from pairwise
links. (The faithful ``coval`` code is not on PyPI.) On a contingency table the formulas are a few lines each.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, fields
from math import comb

import numpy as np
from scipy.optimize import linear_sum_assignment

from coref.document import Document

Span = tuple[int, int]
DocumentKey = tuple[str, int]

# The metrics of a CoNLL evaluation, in the order the JSON output and the score table use.
METRICS = ("muc", "bcub", "ceafe", "ceafm", "blanc", "lea")


class EvaluationError(ValueError):
    """Key and response documents that cannot be matched (repeated document names, differing token counts)."""


class _Additive:
    """Field-wise addition, so that the scores of documents add up to the scores of their corpus."""

    def __add__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return type(self)(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def _harmonic_mean(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class Score(_Additive):
    """Recall and precision as numerators and denominators; every ratio is 0 when its denominator is 0."""

    recall_num: float = 0.0
    recall_den: float = 0.0
    precision_num: float = 0.0
    precision_den: float = 0.0

    @property
    def recall(self) -> float:
        return _ratio(self.recall_num, self.recall_den)

    @property
    def precision(self) -> float:
        return _ratio(self.precision_num, self.precision_den)

    @property
    def f1(self) -> float:
        return _harmonic_mean(self.recall, self.precision)

    def to_json(self) -> dict[str, float]:
        return {"recall": self.recall, "precision": self.precision, "f1": self.f1}


@dataclass(frozen=True)
class BlancScore(_Additive):
    """BLANC: the mean of a coreference-link and a non-coreference-link score, over the halves the key has."""

    coreference: Score = Score()
    non_coreference: Score = Score()

    @property
    def halves(self) -> tuple[Score, ...]:
        """The halves that count: those whose key has links (recall denominator above 0)."""
        return tuple(half for half in (self.coreference, self.non_coreference) if half.recall_den)

    @property
    def recall(self) -> float:
        return _mean(half.recall for half in self.halves)

    @property
    def precision(self) -> float:
        return _mean(half.precision for half in self.halves)

    @property
    def f1(self) -> float:
        return _mean(half.f1 for half in self.halves)

    def to_json(self) -> dict[str, float]:
        return {"recall": self.recall, "precision": self.precision, "f1": self.f1}


@dataclass(frozen=True)
class CorefEvaluation(_Additive):
    """All metrics of a response against a key, summed over documents, and what was dropped or unmatched."""

    mentions: Score = Score()
    muc: Score = Score()
    bcub: Score = Score()
    ceafe: Score = Score()
    ceafm: Score = Score()
    blanc: BlancScore = BlancScore()
    lea: Score = Score()
    documents: int = 0  # key documents scored
    missing_documents: tuple[DocumentKey, ...] = ()  # key documents absent from the response (all misses)
    ignored_documents: tuple[DocumentKey, ...] = ()  # response documents absent from the key
    key_duplicates: int = 0  # repeated key spans dropped
    response_duplicates: int = 0  # repeated response spans dropped

    @property
    def conll_f1(self) -> float:
        """The CoNLL-2012 score: the mean F1 of MUC, B3 and CEAFe."""
        return (self.muc.f1 + self.bcub.f1 + self.ceafe.f1) / 3

    def to_json(self) -> dict[str, object]:
        """Recall, precision and F1 (fractions) of every metric, mention identification and the CoNLL F1."""
        result: dict[str, object] = {name: getattr(self, name).to_json() for name in METRICS}
        result["conll_f1"] = self.conll_f1
        result["mentions"] = self.mentions.to_json()
        return result


@dataclass(frozen=True)
class Contingency:
    """The key and response entities of one document and how many mentions each pair shares.

    ``common[i, j] = |K_i & R_j|``; ``key_sizes[i] = |K_i|``, ``response_sizes[j] = |R_j|``. Every metric is a
    function of this table, and swapping key and response (:meth:`transposed`) swaps recall and precision.
    """

    key_sizes: np.ndarray
    response_sizes: np.ndarray
    common: np.ndarray

    @classmethod
    def of(cls, key: Sequence[Collection[Span]], response: Sequence[Collection[Span]]) -> Contingency:
        """The table of two lists of entities, each a collection of distinct spans."""
        entity_of = {span: i for i, entity in enumerate(key) for span in entity}
        common = np.zeros((len(key), len(response)))
        for j, entity in enumerate(response):
            for span in entity:
                if span in entity_of:
                    common[entity_of[span], j] += 1
        sizes = [np.array([len(entity) for entity in side], dtype=float) for side in (key, response)]
        return cls(sizes[0], sizes[1], common)

    def transposed(self) -> Contingency:
        return Contingency(self.response_sizes, self.key_sizes, self.common.T)


def _pairs(counts: np.ndarray) -> float:
    """Number of unordered pairs within groups of the given sizes: sum of n(n-1)/2."""
    return float((counts * (counts - 1) / 2).sum())


RecallSide = Callable[[Contingency], tuple[float, float]]


def _symmetric(recall_side: RecallSide, table: Contingency) -> Score:
    """A Score whose precision is its recall computed with key and response swapped."""
    return Score(*map(float, recall_side(table) + recall_side(table.transposed())))


def _mentions_recall(table: Contingency) -> tuple[float, float]:
    return table.common.sum(), table.key_sizes.sum()


def _muc_recall(table: Contingency) -> tuple[float, float]:
    """Correct links sum(|K & R| - 1) over overlapping pairs, out of sum(|K| - 1) key links (Vilain et al. 1995)."""
    correct = table.common.sum() - np.count_nonzero(table.common)
    return correct, table.key_sizes.sum() - len(table.key_sizes)


def _bcub_recall(table: Contingency) -> tuple[float, float]:
    """Sum over key mentions m of |K_m & R_m| / |K_m| (0 for a missed m), out of the number of key mentions."""
    return (table.common**2 / table.key_sizes[:, None]).sum(), table.key_sizes.sum()


def _lea_recall(table: Contingency) -> tuple[float, float]:
    """Sum over key entities K of |K| * resolved(K) / links(K), out of the number of key mentions."""
    sizes = table.key_sizes
    links = sizes * (sizes - 1) / 2
    resolved = (table.common * (table.common - 1) / 2).sum(axis=1)
    singleton = sizes == 1
    links[singleton] = 1
    resolved[singleton] = ((table.common == 1) & (table.response_sizes == 1)).any(axis=1)[singleton]
    return (sizes * resolved / links).sum(), sizes.sum()


def _ceaf(similarity: np.ndarray, key_total: float, response_total: float) -> Score:
    """CEAF (Luo 2005): the best one-to-one entity alignment's total similarity over each side's self-similarity."""
    rows, columns = linear_sum_assignment(similarity, maximize=True)
    aligned = float(similarity[rows, columns].sum())
    return Score(aligned, float(key_total), aligned, float(response_total))


def _ceafe(table: Contingency) -> Score:
    """Entity similarity 2|K & R| / (|K| + |R|); each entity's self-similarity is 1."""
    similarity = 2 * table.common / (table.key_sizes[:, None] + table.response_sizes[None, :])
    return _ceaf(similarity, len(table.key_sizes), len(table.response_sizes))


def _ceafm(table: Contingency) -> Score:
    """Mention similarity |K & R|; each entity's self-similarity is its size."""
    return _ceaf(table.common, table.key_sizes.sum(), table.response_sizes.sum())


def _blanc(table: Contingency) -> BlancScore:
    """Coreference links (pairs in one entity) and non-coreference links (pairs across entities) of each side.

    A non-coreference link is correct when both mentions are in key and response and fall in different
    entities on both sides; among the shared mentions that is all pairs, less those in one key entity, less
    those in one response entity, plus those in one entity on both sides (counted twice).
    """
    coreference_correct = _pairs(table.common)
    key_links, response_links = _pairs(table.key_sizes), _pairs(table.response_sizes)
    shared = table.common.sum()
    non_coreference_correct = (
        comb(int(shared), 2) - _pairs(table.common.sum(axis=1)) - _pairs(table.common.sum(axis=0)) + coreference_correct
    )
    key_non_links = comb(int(table.key_sizes.sum()), 2) - key_links
    response_non_links = comb(int(table.response_sizes.sum()), 2) - response_links
    return BlancScore(
        Score(coreference_correct, key_links, coreference_correct, response_links),
        Score(non_coreference_correct, key_non_links, non_coreference_correct, response_non_links),
    )


def document_entities(document: Document) -> tuple[list[frozenset[Span]], int]:
    """The document's entities as sets of spans, each span kept at its first occurrence; and how many repeats
    were dropped. Entities left empty by the dropping disappear."""
    seen: set[Span] = set()
    entities: dict[int, list[Span]] = {}
    for mention in document.mentions:
        if mention.span not in seen:
            seen.add(mention.span)
            entities.setdefault(mention.entity, []).append(mention.span)
    return [frozenset(spans) for spans in entities.values()], len(document.mentions) - len(seen)


def score_document(key: Document, response: Document | None) -> CorefEvaluation:
    """Every metric for one key document and its response (``None``: missing, so every key mention is missed)."""
    if response is not None and len(response.tokens) != len(key.tokens):
        raise EvaluationError(
            f"document {key.id!r} part {key.part}: the key has {len(key.tokens)} tokens, "
            f"the response {len(response.tokens)}; spans cannot be compared"
        )
    key_entities, key_duplicates = document_entities(key)
    response_entities, response_duplicates = document_entities(response) if response is not None else ([], 0)
    table = Contingency.of(key_entities, response_entities)
    return CorefEvaluation(
        mentions=_symmetric(_mentions_recall, table),
        muc=_symmetric(_muc_recall, table),
        bcub=_symmetric(_bcub_recall, table),
        ceafe=_ceafe(table),
        ceafm=_ceafm(table),
        blanc=_blanc(table),
        lea=_symmetric(_lea_recall, table),
        documents=1,
        missing_documents=() if response is not None else (key.key,),
        key_duplicates=key_duplicates,
        response_duplicates=response_duplicates,
    )


def _by_key(documents: Sequence[Document], side: str) -> dict[DocumentKey, Document]:
    index: dict[DocumentKey, Document] = {}
    for document in documents:
        if document.key in index:
            raise EvaluationError(
                f"the {side} has two documents named {document.id!r} part {document.part}; "
                "documents are matched by name, so names must be unique"
            )
        index[document.key] = document
    return index


def evaluate(key: Sequence[Document], response: Sequence[Document]) -> CorefEvaluation:
    """Score ``response`` against ``key``, matching documents by ``(id, part)``, micro-averaged over documents."""
    keys = _by_key(key, "key")
    responses = _by_key(response, "response")
    ignored = tuple(name for name in responses if name not in keys)
    scores = (score_document(document, responses.get(name)) for name, document in keys.items())
    return sum(scores, CorefEvaluation(ignored_documents=ignored))
