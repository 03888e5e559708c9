"""Reranking k-best coreference structures with a language model's score (Ji et al. 2017, §5.2, Table 2).

A base mention-ranking resolver gives each document a score table; :mod:`coref.resolution.kbest` turns it into a k-best
list of antecedent trees. Each distinct partition on the list is a *candidate*, scored by a language model
(EntityNLM's log p(R, E, L, X), eq. 12) through any callable, so that this module needs no model and its tests
no training. The systems compared, as in the paper's Table 2:

- **base one-best**: the resolver's greedy tree (the first candidate);
- **rerank: language model**: the candidate of highest log p (eq. 12);
- **rerank: language model + base**: the highest log p + lambda * resolver tree score, lambda grid-searched for
  the CoNLL F1 on dev (the paper's "linear combination ... coefficients found via grid search"; only the
  ratio of the two coefficients matters to an argmax, so one weight suffices). ``lambda = inf`` ranks by the
  resolver score alone, which gives back the base one-best;
- **oracle**: per document, the candidate of best CoNLL F1 against the gold: the ceiling of the list.

Every argmax breaks ties to the earlier candidate, i.e. towards the resolver's order. Responses drop singleton
entities, as the gold (preprocessed without singletons) and cort's output have none. Significance is the
paired approximate randomization test (Noreen 1989; the paper used ``smartschat/art``): documents' outputs are
swapped between the two systems at random and the statistic is the absolute difference of micro-averaged
CoNLL F1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np
from numpy.typing import ArrayLike

from coref.corpora.preprocess import drop_singletons
from coref.document import Document
from coref.metrics.coreference import CorefEvaluation, DocumentKey, score_document
from coref.resolution.kbest import (
    Partition,
    ScoredTree,
    document_with_clusters,
    exact_kbest,
    greedy_tree,
    heuristic_kbest,
)

GENERATORS = ("heuristic", "exact")
RESOLVER_ONLY = math.inf  # the interpolation weight that ranks by the resolver score alone
DEFAULT_GRID = (0.0, *(10.0 ** (exponent / 4) for exponent in range(-12, 13)), RESOLVER_ONLY)  # 1e-3 .. 1e3
CONLL_METRICS = ("muc", "bcub", "ceafe")  # the three metrics the CoNLL F1 averages
TIE_TOLERANCE = 1e-12  # randomized statistics this close to the observed one count as reaching it

# Log-probabilities of candidate partitions of a document (mention j is ``document.mentions[j - 1]``).
LanguageModel = Callable[[Document, Sequence[Partition]], Sequence[float]]


@dataclass(frozen=True)
class Candidate:
    """One distinct partition on a document's k-best list: its tree, its language-model score, its evaluation."""

    tree: ScoredTree
    log_prob: float
    evaluation: CorefEvaluation  # against the gold document, singletons dropped from the response

    @property
    def partition(self) -> Partition:
        return self.tree.partition

    @property
    def resolver_score(self) -> float:
        return self.tree.score


@dataclass(frozen=True)
class CandidateList:
    """A document's candidates: the base one-best first, then the k-best list's other partitions in list order.

    ``list_length`` is how many entries the generator returned (the heuristic pads to k with repeats).
    """

    key: DocumentKey
    candidates: tuple[Candidate, ...]
    list_length: int


def kbest_trees(scores: ArrayLike, generator: str, k: int) -> list[ScoredTree]:
    """The k-best list of ``generator`` for a score table: :func:`coref.resolution.kbest.heuristic_kbest` or
    :func:`coref.resolution.kbest.exact_kbest`."""
    if generator == "heuristic":
        return heuristic_kbest(scores, k)
    if generator == "exact":
        return exact_kbest(scores, k)
    raise ValueError(f"unknown k-best generator {generator!r}: choose from {', '.join(GENERATORS)}")


def distinct_trees(trees: Iterable[ScoredTree]) -> list[ScoredTree]:
    """The first tree of every partition, in order: the padding and overlaps of k-best lists removed."""
    seen: set[Partition] = set()
    kept = []
    for tree in trees:
        if tree.partition not in seen:
            seen.add(tree.partition)
            kept.append(tree)
    return kept


def response_document(document: Document, partition: Partition) -> Document:
    """``document`` relabelled by ``partition``, singleton entities dropped: a response to score."""
    clustered = document_with_clusters(document, partition)
    return clustered.replace(mentions=drop_singletons(clustered.mentions))


def document_candidates(
    document: Document, scores: ArrayLike, generators: Sequence[str], k: int, language_model: LanguageModel,
    key: Document | None = None,
) -> dict[str, CandidateList]:
    """The candidate list of ``document`` for each generator.

    Every distinct partition over all the lists is scored once by ``language_model`` and evaluated once
    against ``key`` (the gold; by default ``document`` itself, whose mentions are then the gold ones), because
    the lists of two generators overlap heavily. A partition keeps the tree (and so the resolver score) its own
    list found it with.
    """
    base = greedy_tree(scores)
    lists = {generator: kbest_trees(scores, generator, k) for generator in generators}
    trees = {generator: distinct_trees([base, *lists[generator]]) for generator in generators}
    partitions = list(dict.fromkeys(tree.partition for generator in generators for tree in trees[generator]))
    values = [float(value) for value in language_model(document, partitions)]
    if len(values) != len(partitions):
        raise ValueError(f"document {document.id!r}: the language model gave {len(values)} scores for "
                         f"{len(partitions)} candidates")
    if not all(math.isfinite(value) for value in values):
        raise ValueError(f"document {document.id!r}: the language model gave a non-finite score")
    log_prob = dict(zip(partitions, values))
    evaluation = {partition: score_document(key or document, response_document(document, partition))
                  for partition in partitions}
    return {
        generator: CandidateList(
            document.key,
            tuple(Candidate(tree, log_prob[tree.partition], evaluation[tree.partition]) for tree in trees[generator]),
            len(lists[generator]),
        )
        for generator in generators
    }


# ---- choosing a candidate per document -----------------------------------------------------------------------

Chooser = Callable[[CandidateList], int]


def base_choice(candidates: CandidateList) -> int:
    """The base resolver's one-best (always the first candidate)."""
    return 0


def interpolated_index(log_prob: ArrayLike, resolver_score: ArrayLike, weight: float) -> int:
    """The index of highest ``log_prob + weight * resolver_score``, the earliest among equals; ``weight = inf``
    ranks by the resolver score alone, ``weight = 0`` by the language model alone (eq. 12)."""
    resolver = np.asarray(resolver_score, dtype=float)
    if weight == RESOLVER_ONLY:
        return int(np.argmax(resolver))
    return int(np.argmax(np.asarray(log_prob, dtype=float) + weight * resolver))


def interpolated_choice(candidates: CandidateList, weight: float) -> int:
    """The candidate of highest ``log_prob + weight * resolver_score`` (:func:`interpolated_index`): ``weight =
    inf`` gives the base one-best."""
    return interpolated_index([candidate.log_prob for candidate in candidates.candidates],
                              [candidate.resolver_score for candidate in candidates.candidates], weight)


def oracle_choice(candidates: CandidateList) -> int:
    """The candidate of best per-document CoNLL F1 against the gold; ties to the higher resolver score."""
    return max(
        range(len(candidates.candidates)),
        key=lambda i: (candidates.candidates[i].evaluation.conll_f1, candidates.candidates[i].resolver_score),
    )


def chosen_evaluations(documents: Sequence[CandidateList], choose: Chooser) -> list[CorefEvaluation]:
    """The evaluation of the chosen candidate of every document, in document order."""
    return [lists.candidates[choose(lists)].evaluation for lists in documents]


def micro_average(evaluations: Iterable[CorefEvaluation]) -> CorefEvaluation:
    """The corpus evaluation: per-document counts summed (as the CoNLL scorer does)."""
    return sum(evaluations, CorefEvaluation())


def grid_search(dev: Sequence[CandidateList], grid: Sequence[float] = DEFAULT_GRID) -> tuple[float, dict[float, float]]:
    """The interpolation weight of best dev CoNLL F1 (the first in ``grid`` order among equals), and the dev
    CoNLL F1 of every weight."""
    if not grid:
        raise ValueError("the interpolation grid is empty")
    f1 = {weight: micro_average(chosen_evaluations(dev, partial(interpolated_choice, weight=weight))).conll_f1
          for weight in grid}
    return max(grid, key=f1.__getitem__), f1


# ---- significance ---------------------------------------------------------------------------------------------


def _counts(evaluation: CorefEvaluation) -> np.ndarray:
    """The recall and precision numerators and denominators of MUC, B3 and CEAFe, shape (3, 4)."""
    return np.array([[score.recall_num, score.recall_den, score.precision_num, score.precision_den]
                     for score in (getattr(evaluation, name) for name in CONLL_METRICS)])


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator != 0)


def _conll_f1(counts: np.ndarray) -> np.ndarray:
    """The CoNLL F1 of count arrays (..., 3, 4), as :attr:`CorefEvaluation.conll_f1` computes it."""
    recall = _ratio(counts[..., 0], counts[..., 1])
    precision = _ratio(counts[..., 2], counts[..., 3])
    return _ratio(2 * recall * precision, recall + precision).mean(axis=-1)


def approximate_randomization(
    first: Sequence[CorefEvaluation], second: Sequence[CorefEvaluation], trials: int = 10_000, seed: int = 0
) -> float:
    """The p-value of the paired approximate randomization test that two systems' CoNLL F1 differ.

    ``first[d]`` and ``second[d]`` evaluate the two systems on document d. Each trial swaps the two outputs of
    every document with probability 1/2; the statistic is |micro CoNLL F1 of one - of the other|, and
    p = (trials reaching the observed statistic + 1) / (trials + 1). Per-document counts are summed with one
    matrix product per test, so 10,000 trials take milliseconds.
    """
    if len(first) != len(second):
        raise ValueError(f"the systems were evaluated on {len(first)} and {len(second)} documents")
    if trials < 1:
        raise ValueError(f"trials must be at least 1, got {trials}")
    a = np.stack([_counts(evaluation) for evaluation in first]).reshape(len(first), -1)
    b = np.stack([_counts(evaluation) for evaluation in second]).reshape(len(second), -1)
    observed = abs(_conll_f1(a.sum(0).reshape(3, 4)) - _conll_f1(b.sum(0).reshape(3, 4)))
    swaps = np.random.default_rng(seed).random((trials, len(first))) < 0.5
    moved = swaps @ (b - a)  # what swapping moves from the second system's counts into the first's
    statistics = np.abs(_conll_f1((a.sum(0) + moved).reshape(trials, 3, 4))
                        - _conll_f1((b.sum(0) - moved).reshape(trials, 3, 4)))
    reached = int(np.count_nonzero(statistics >= observed - TIE_TOLERANCE))
    return (reached + 1) / (trials + 1)


# ---- the Table 2 experiment ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SystemResult:
    """One row of Table 2: a system's micro-averaged evaluation and its significance against the base."""

    name: str
    evaluation: CorefEvaluation
    p_value: float | None  # None for the base itself

    def to_json(self) -> dict[str, object]:
        scores = self.evaluation.to_json()
        result: dict[str, object] = {name: scores[name] for name in CONLL_METRICS}
        result.update(name=self.name, conll_f1=self.evaluation.conll_f1, p_value_vs_base=self.p_value)
        return result


@dataclass(frozen=True)
class RerankResult:
    """The reranking experiment of one generator: the weight chosen on dev and the rows on dev and test."""

    weight: float
    dev_f1_by_weight: dict[float, float]
    dev: tuple[SystemResult, ...]
    test: tuple[SystemResult, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "weight": weight_json(self.weight),
            "grid": [{"weight": weight_json(w), "dev_conll_f1": f1} for w, f1 in self.dev_f1_by_weight.items()],
            "dev": [row.to_json() for row in self.dev],
            "test": [row.to_json() for row in self.test],
        }


def weight_json(weight: float) -> float | str:
    return "inf" if weight == RESOLVER_ONLY else weight


def format_weight(weight: float) -> str:
    return "inf (resolver only)" if weight == RESOLVER_ONLY else f"{weight:.3g}"


def system_rows(
    documents: Sequence[CandidateList], weight: float, model_name: str, trials: int, seed: int
) -> tuple[SystemResult, ...]:
    """The four rows of Table 2 on ``documents``, each reranker tested against the base one-best."""
    systems: list[tuple[str, Chooser]] = [
        ("base one-best", base_choice),
        (f"rerank: {model_name}", partial(interpolated_choice, weight=0.0)),
        (f"rerank: {model_name} + base", partial(interpolated_choice, weight=weight)),
        ("oracle", oracle_choice),
    ]
    base = chosen_evaluations(documents, base_choice)
    rows = []
    for name, choose in systems:
        evaluations = chosen_evaluations(documents, choose)
        p_value = None if choose is base_choice else approximate_randomization(base, evaluations, trials, seed)
        rows.append(SystemResult(name, micro_average(evaluations), p_value))
    return tuple(rows)


def rerank_experiment(
    dev: Sequence[CandidateList],
    test: Sequence[CandidateList],
    grid: Sequence[float] = DEFAULT_GRID,
    model_name: str = "EntityNLM",
    trials: int = 10_000,
    seed: int = 0,
) -> RerankResult:
    """Choose the interpolation weight on ``dev``, then score the four systems of Table 2 on dev and test."""
    weight, dev_f1 = grid_search(dev, grid)
    return RerankResult(
        weight,
        dev_f1,
        system_rows(dev, weight, model_name, trials, seed),
        system_rows(test, weight, model_name, trials, seed),
    )


def format_table(rows: Sequence[SystemResult]) -> str:
    """Table 2 of the paper: MUC, B3 and CEAFe precision, recall and F1, the CoNLL F1 (percent), p vs base."""
    header = (f"{'':<28}{'MUC':^21}{'B3':^21}{'CEAFe':^21}\n"
              f"{'system':<28}" + f"{'P':>7}{'R':>7}{'F1':>7}" * 3 + f"{'CoNLL':>8}{'p vs base':>11}")
    lines = [header]
    for row in rows:
        cells = "".join(f"{100 * score.precision:>7.2f}{100 * score.recall:>7.2f}{100 * score.f1:>7.2f}"
                        for score in (getattr(row.evaluation, name) for name in CONLL_METRICS))
        p_value = "" if row.p_value is None else f"{row.p_value:.4f}"
        lines.append(f"{row.name[:27]:<28}{cells}{100 * row.evaluation.conll_f1:>8.2f}{p_value:>11}")
    return "\n".join(lines)
