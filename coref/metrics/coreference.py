"""Coreference metrics with the semantics of the official CoNLL-2012 scorer.

MUC, B3 (``bcub``), CEAFm, CEAFe, BLANC, LEA, mention identification and the CoNLL F1 (the mean of the MUC, B3
and CEAFe F1), computed the way the reference Perl scorer (``conll/reference-coreference-scorers`` v8.01, LEA
from its ``LEA-scorer`` branch; Pradhan et al. 2014) computes them:

- Documents are matched by :attr:`Document.key` ``(id, part)``. A key document missing from the response counts
  all its mentions as missed; documents only in the response are ignored (both are listed in the result).
- Mentions match by exact span; there is no head or partial matching. Every annotated mention counts: nested,
  crossing and repeated ones (the R/E/L encoding's restrictions belong to the model's preprocessing).
- Repeated spans, as the scorer treats them (:class:`Alignment`): a response span that is also a key span is kept
  at its first occurrence, entities taken in the scorer's order (:func:`scorer_chains`), and dropped at the
  others (counted; more than 10 in a corpus and the scorer refuses, so :func:`evaluate` raises). A repeated
  response span that is not in the key, and a repeated key span, stay: the same mention twice, in one entity
  or two (a repeated key span belongs to the LAST of its entities where the scorer looks its entity up). So a
  key that repeats a span can score above 100% (CEAFm precision 2/1 for key {a, a} against response {a}), as
  the official scorer does; ``coref.metrics.score`` warns about such a key.
- Singletons count wherever they appear (B3, CEAF, BLANC, LEA): a response that outputs singleton entities
  against a key without singletons loses precision. MUC counts links, so singletons never matter to it.
- Scores are micro-averaged: each metric's recall and precision numerators and denominators are summed over
  documents before R, P and F1 are formed. :class:`Score` holds those four numbers, so averaging is addition.
- CEAF aligns key and response entities per document with an optimal one-to-one assignment
  (``scipy.optimize.linear_sum_assignment``; the scorer uses Munkres, which finds the same optimum value).
- BLANC (Recasens & Hovy 2011; Luo et al. 2014) averages a coreference-link and a non-coreference-link score,
  links being SETS of mention pairs (so a span in two entities gives a pair of itself).
  Like the scorer, which decides on its corpus totals, a half whose KEY has no links is left out, whatever the
  response has: a key with no coreference links is scored on non-coreference links alone, and one with no
  non-coreference links on coreference links alone (Recasens & Hovy's edge cases; Luo et al. 2014 would instead
  average in a 0 when the response has links the key lacks). A key with no links at all scores 0. BLANC's F1
  is the mean of the two halves' F1, not the harmonic mean of its recall and precision.
- LEA (Moosavi & Strube 2016): each entity weighs its size; its resolution is the fraction of its links found
  in one entity of the other side; a singleton has one "self-link", resolved iff the other side has the same
  singleton.

Two differences remain in what is read (:mod:`coref.io.conll`): documents match by ``(id, part)``, where the scorer
compares the whole text after ``#begin document`` (``part 0`` and ``part 000`` match here, not there); and on a
line without TABs we read the last column, where the scorer searches the whole line for brackets (a word
``(1)`` in a space-separated file would be a mention to it). ``tests/test_official_scorer.py`` checks
everything else against ``scorer.pl``: its own test suite, and perturbed responses to real keys.

Why our own code: no PyPI package is faithful and maintained. ``scorch`` 0.2.0 (last release 2020) has no
LEA and averages per-document scores instead of summing counts; ``coreference-eval`` 0.0.2 skips singletons in
B3 and LEA (the e2e-coref convention, not the scorer's); ``metric4coref`` 0.0.2 computes MUC from pairwise
links. (The faithful ``coval`` code is not on PyPI.) On a contingency table the formulas are a few lines each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
    key_duplicates: int = 0  # later occurrences of repeated key spans, kept and counted as the scorer does
    response_duplicates: int = 0  # later occurrences of key spans the response repeats, dropped

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


Chain = tuple[int, ...]  # an entity as the scorer holds it: the ids of its mentions (a repeated span repeats its id)


def scorer_chains(document: Document) -> list[list[Span]]:
    """The document's entities in the official scorer's order, each the list of its mention spans, repeats kept.

    The scorer numbers entities as their brackets first appear in the file, reading each token's one-token
    mentions ``(N)`` before its opens ``(N``; in a file from :func:`coref.io.conll.write_conll` that is by each
    entity's first mention, one-token mentions before longer ones, longer before shorter, then by label. The
    order decides which entity keeps a span the response repeats, and which key entity a repeated key span
    belongs to (the last).
    """
    def first_bracket(mention):
        return (mention.start, 0, 0) if len(mention) == 1 else (mention.start, 1, -mention.end)

    chains: dict[int, list[Span]] = {}
    first: dict[int, tuple[int, int, int]] = {}
    for mention in document.mentions:
        chains.setdefault(mention.entity, []).append(mention.span)
        first[mention.entity] = min(first.get(mention.entity, first_bracket(mention)), first_bracket(mention))
    return [chains[entity] for entity in sorted(chains, key=lambda entity: (first[entity], entity))]


@dataclass(frozen=True)
class Alignment:
    """Key and response entities of one document as the scorer compares them, mentions as ids of distinct spans.

    Like the scorer, a response span that is a key span and occurs again (in any entity) is dropped at its
    later occurrences (``response_repeats``); other repeats stay, in the key too, as the same id twice.
    """

    key: tuple[Chain, ...]
    response: tuple[Chain, ...]
    key_spans: int  # distinct key spans
    response_spans: int  # distinct response spans
    matched: int  # distinct spans in both
    response_repeats: int  # repeated key spans dropped from the response

    @classmethod
    def of(cls, key: Sequence[Sequence[Span]], response: Sequence[Sequence[Span]]) -> Alignment:
        ids: dict[Span, int] = {}
        key_chains = tuple(tuple(ids.setdefault(span, len(ids)) for span in chain) for chain in key)
        key_spans = len(ids)
        kept, seen_key_spans, repeats = [], set(), 0
        for chain in response:
            mentions = []
            for span in chain:
                if span in ids and ids[span] < key_spans:
                    if span in seen_key_spans:
                        repeats += 1
                        continue
                    seen_key_spans.add(span)
                mentions.append(ids.setdefault(span, len(ids)))
            if mentions:
                kept.append(tuple(mentions))
        return cls(key_chains, tuple(kept), key_spans, len(ids) - key_spans + len(seen_key_spans),
                   len(seen_key_spans), repeats)

    @property
    def repeats(self) -> bool:
        """Whether a side holds an id twice: then only the pair-set definition of BLANC applies."""
        return any(len(set(ids)) < len(ids) for ids in (_flat(self.key), _flat(self.response)))


def _flat(chains: Sequence[Chain]) -> list[int]:
    return [mention for chain in chains for mention in chain]


@dataclass(frozen=True)
class Contingency:
    """How the mentions of key entities K_i and response entities R_j meet, as the scorer's metrics see them.

    ``key_in[i, j]``: mentions of K_i whose span is in R_j; ``response_in[i, j]``: mentions of R_j whose span
    is in K_i; ``response_by_key[i, j]``: mentions of R_j whose span's key entity is K_i (the LAST key entity
    holding it, as the scorer indexes spans); ``key_by_response[i, j]``: the converse. Without repeated spans all
    four are the common-mention table |K_i & R_j|. Sizes count repeats. Swapping key and response
    (:meth:`transposed`) swaps recall and precision.
    """

    key_sizes: np.ndarray
    response_sizes: np.ndarray
    key_in: np.ndarray
    response_in: np.ndarray
    key_by_response: np.ndarray
    response_by_key: np.ndarray

    @classmethod
    def of(cls, key: Sequence[Chain], response: Sequence[Chain]) -> Contingency:
        def tables(rows: Sequence[Chain], columns: Sequence[Chain]) -> tuple[np.ndarray, np.ndarray]:
            """(mentions of columns[j] in rows[i], mentions of columns[j] whose last row is i)."""
            holders: dict[int, list[int]] = {}
            for i, chain in enumerate(rows):
                for mention in dict.fromkeys(chain):
                    holders.setdefault(mention, []).append(i)
            inside, by_last = np.zeros((len(rows), len(columns))), np.zeros((len(rows), len(columns)))
            for j, chain in enumerate(columns):
                for mention in chain:
                    for i in holders.get(mention, ()):
                        inside[i, j] += 1
                    if mention in holders:
                        by_last[holders[mention][-1], j] += 1
            return inside, by_last

        response_in, response_by_key = tables(key, response)
        key_in_t, key_by_response_t = tables(response, key)
        sizes = [np.array([len(chain) for chain in side], dtype=float) for side in (key, response)]
        return cls(sizes[0], sizes[1], key_in_t.T, response_in, key_by_response_t.T, response_by_key)

    def transposed(self) -> Contingency:
        return Contingency(self.response_sizes, self.key_sizes, self.response_in.T, self.key_in.T,
                           self.response_by_key.T, self.key_by_response.T)


def _pairs(counts: np.ndarray) -> float:
    """Number of unordered pairs within groups of the given sizes: sum of n(n-1)/2."""
    return float((counts * (counts - 1) / 2).sum())


def _muc(table: Contingency) -> Score:
    """Correct links: per response entity, its mentions grouped by key entity, each group of n giving n - 1;
    out of sum(|K| - 1) key links and sum(|R| - 1) response links (Vilain et al. 1995)."""
    found = table.response_by_key
    correct = found.sum() - np.count_nonzero(found)
    return Score(correct, (table.key_sizes - 1).sum(), correct, (table.response_sizes - 1).sum())


def _bcub(table: Contingency) -> Score:
    """Per response mention m in R with key entity K: |K & R| / |K| towards recall, / |R| towards precision; out
    of the number of key and of response mentions (a mention missing from the other side adds 0)."""
    shared = table.response_by_key * table.response_in
    recall = float((shared.sum(axis=1) / table.key_sizes).sum())
    precision = float((shared.sum(axis=0) / table.response_sizes).sum())
    return Score(recall, table.key_sizes.sum(), precision, table.response_sizes.sum())


def _lea_recall(table: Contingency) -> tuple[float, float]:
    """Sum over key entities K of |K| * resolved(K) / links(K), out of the number of key mentions; a singleton
    has one self-link, resolved when its mention is a singleton on the other side too."""
    sizes = table.key_sizes
    links = sizes * (sizes - 1) / 2
    resolved = (table.key_by_response * (table.key_by_response - 1) / 2).sum(axis=1)
    singleton = sizes == 1
    links[singleton] = 1
    resolved[singleton] = ((table.key_by_response == 1) & (table.response_sizes == 1)).any(axis=1)[singleton]
    return float((sizes * resolved / links).sum()), float(sizes.sum())


def _ceaf(similarity: np.ndarray, key_total: float, response_total: float) -> Score:
    """CEAF (Luo 2005): the best one-to-one entity alignment's total similarity over each side's self-similarity."""
    rows, columns = linear_sum_assignment(similarity, maximize=True)
    aligned = float(similarity[rows, columns].sum())
    return Score(aligned, float(key_total), aligned, float(response_total))


def _ceafe(table: Contingency) -> Score:
    """Entity similarity 2|K & R| / (|K| + |R|), |K & R| counting K's mentions found in R; self-similarity 1."""
    similarity = 2 * table.key_in / (table.key_sizes[:, None] + table.response_sizes[None, :])
    return _ceaf(similarity, len(table.key_sizes), len(table.response_sizes))


def _ceafm(table: Contingency) -> Score:
    """Mention similarity |K & R| (K's mentions found in R); each entity's self-similarity is its size."""
    return _ceaf(table.key_in, table.key_sizes.sum(), table.response_sizes.sum())


def _blanc(alignment: Alignment, table: Contingency) -> BlancScore:
    """Coreference links (pairs in one entity) and non-coreference links (pairs across entities) of each side.

    Without repeated spans, from the table: a non-coreference link is correct when both mentions are on both
    sides and in different entities on both; among the shared mentions that is all pairs, less those in one key
    entity, less those in one response entity, plus those in one entity on both sides (counted twice).
    """
    if alignment.repeats:
        return _blanc_by_pairs(alignment)
    coreference_correct = _pairs(table.key_in)
    key_links, response_links = _pairs(table.key_sizes), _pairs(table.response_sizes)
    shared = table.key_in.sum()
    non_coreference_correct = (
        comb(int(shared), 2) - _pairs(table.key_in.sum(axis=1)) - _pairs(table.key_in.sum(axis=0))
        + coreference_correct
    )
    key_non_links = comb(int(table.key_sizes.sum()), 2) - key_links
    response_non_links = comb(int(table.response_sizes.sum()), 2) - response_links
    return BlancScore(
        Score(coreference_correct, key_links, coreference_correct, response_links),
        Score(non_coreference_correct, key_non_links, non_coreference_correct, response_non_links),
    )


def _link_sets(chains: Sequence[Chain], base: int) -> tuple[np.ndarray, np.ndarray]:
    """The scorer's link SETS, as codes ``low * base + high`` of unordered id pairs: any two mentions
    (positions) in one entity, and in two different entities; a pair of equal ids is a link too."""
    ids = np.array(_flat(chains), dtype=np.int64)
    entity = np.repeat(np.arange(len(chains)), [len(chain) for chain in chains])
    first, second = np.triu_indices(len(ids), k=1)
    pair = np.minimum(ids[first], ids[second]) * base + np.maximum(ids[first], ids[second])
    same = entity[first] == entity[second]
    return np.unique(pair[same]), np.unique(pair[~same])


def _blanc_by_pairs(alignment: Alignment) -> BlancScore:
    """BLANC as the scorer defines it, on sets of id pairs (the only definition when a span repeats)."""
    base = max(_flat(alignment.key) + _flat(alignment.response), default=0) + 1
    (key_links, key_non_links), (response_links, response_non_links) = (
        _link_sets(chains, base) for chains in (alignment.key, alignment.response)
    )
    correct = len(np.intersect1d(key_links, response_links))
    correct_non = len(np.intersect1d(key_non_links, response_non_links))
    return BlancScore(
        Score(correct, len(key_links), correct, len(response_links)),
        Score(correct_non, len(key_non_links), correct_non, len(response_non_links)),
    )


# The official scorer refuses a response that repeats more key spans than this (v8.01: "a sign of a systematic
# error/manipulation").
MAX_RESPONSE_REPEATS = 10


def score_document(key: Document, response: Document | None) -> CorefEvaluation:
    """Every metric for one key document and its response (``None``: missing, so every key mention is missed)."""
    if response is not None and len(response.tokens) != len(key.tokens):
        raise EvaluationError(
            f"document {key.id!r} part {key.part}: the key has {len(key.tokens)} tokens, "
            f"the response {len(response.tokens)}; spans cannot be compared"
        )
    alignment = Alignment.of(scorer_chains(key), scorer_chains(response) if response is not None else [])
    table = Contingency.of(alignment.key, alignment.response)
    matched = float(alignment.matched)
    return CorefEvaluation(
        mentions=Score(matched, alignment.key_spans, matched, alignment.response_spans),
        muc=_muc(table),
        bcub=_bcub(table),
        ceafe=_ceafe(table),
        ceafm=_ceafm(table),
        blanc=_blanc(alignment, table),
        lea=Score(*_lea_recall(table), *_lea_recall(table.transposed())),
        documents=1,
        missing_documents=() if response is not None else (key.key,),
        key_duplicates=len(_flat(alignment.key)) - alignment.key_spans,
        response_duplicates=alignment.response_repeats,
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
    evaluation = sum(scores, CorefEvaluation(ignored_documents=ignored))
    if evaluation.response_duplicates > MAX_RESPONSE_REPEATS:
        raise EvaluationError(
            f"the response repeats key mention spans {evaluation.response_duplicates} times (more than "
            f"{MAX_RESPONSE_REPEATS}); the official scorer refuses to score such output, so fix it first"
        )
    return evaluation
