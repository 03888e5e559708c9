"""Antecedent trees and k-best lists of coreference structures (Ji et al. 2017, §5.2).

A mention-ranking resolver (cort, Martschat & Strube 2015; reference-notes §2.1) lets every mention ``m_j`` pick
one antecedent: an earlier mention, or a dummy root meaning "new entity". Those choices form an *antecedent
tree*, and its transitive closure is the coreference *partition* of the mentions. EntityNLM reranks a k-best
list of such structures; this module builds the list.

Conventions:

- Mentions are the integers ``1..n`` in document order (``Document.mentions`` order); :data:`ROOT` ``= 0`` is
  the dummy antecedent. Integers keep the trees independent of spans; :func:`document_with_clusters` maps a
  partition back onto a :class:`~coref.document.Document`.
- A tree is a :class:`networkx.DiGraph` on nodes ``0..n`` with exactly one arc ``antecedent -> mention`` into
  every mention. Antecedents always precede their mention, so every such choice is a tree.
- A score table is a float array of shape ``(n + 1, n + 1)``: ``scores[j, i]`` is the score of the arc
  ``i -> j``. Only entries with ``i < j`` are read (row 0 and the upper triangle are ignored); ``-inf`` marks an
  impossible arc, which is never chosen. cort scores the root arc 0 at test time; here it is whatever the table
  says. A tree scores the sum of its arcs.
- Ties are broken as cort breaks them: among equal scores the closest antecedent wins, the root (the farthest
  candidate) last.

Two k-best lists, both deduplicated by partition, because many trees encode the same clusters
(``{1, 2, 3}`` is ``1 <- 2 <- 3`` or ``1 <- 2, 1 <- 3``):

- :func:`heuristic_kbest` is the paper's approximation: single antecedent swaps of the greedy tree, by
  increasing score loss, padded to ``k`` with the last tree added.
- :func:`exact_kbest` gives the ``k`` partitions whose best trees score highest, each with that best tree.
  Because every mention chooses independently, trees can be enumerated lazily in score order as rank vectors
  over per-mention candidate lists (no graph search needed); networkx's ``ArborescenceIterator`` enumerates the
  same trees on the graph of allowed arcs, and the tests check the two agree, but it re-solves a spanning
  arborescence problem per tree, which is far slower.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from numpy.typing import ArrayLike

from coref.document import Document, Mention

ROOT = 0  # the dummy antecedent: an arc ROOT -> j means "mention j starts a new entity"

Partition = frozenset[frozenset[int]]


@dataclass(frozen=True)
class ScoredTree:
    """One entry of a k-best list: an antecedent tree, its score, and the partition it induces.

    ``antecedents[j - 1]`` is the antecedent of mention ``j`` (the tree's arcs, as a hashable value); entries
    compare by it, their score and partition, not by the identity of the graph object.
    """

    antecedents: tuple[int, ...]
    score: float
    partition: Partition
    tree: nx.DiGraph = field(compare=False, repr=False)


def tree_from_antecedents(antecedents: Sequence[int]) -> nx.DiGraph:
    """The antecedent tree in which mention ``j`` (1-based) has antecedent ``antecedents[j - 1]``.

    ``antecedents[j - 1]`` must be :data:`ROOT` or an earlier mention ``1..j-1``.
    """
    tree = nx.DiGraph()
    tree.add_nodes_from(range(len(antecedents) + 1))
    for mention, antecedent in enumerate(antecedents, start=1):
        if not ROOT <= antecedent < mention:
            raise ValueError(
                f"mention {mention} has antecedent {antecedent}; it must be {ROOT} (new entity) or in 1..{mention - 1}"
            )
        tree.add_edge(antecedent, mention)
    return tree


def clusters(tree: nx.DiGraph) -> Partition:
    """The partition of the mentions induced by ``tree``: its weakly connected components below the root."""
    mentions = tree.subgraph(node for node in tree if node != ROOT)
    return frozenset(frozenset(component) for component in nx.weakly_connected_components(mentions))


def tree_score(tree: nx.DiGraph, scores: ArrayLike) -> float:
    """The sum of the scores of the tree's arcs (``scores[j, i]`` for every arc ``i -> j``)."""
    table = np.asarray(scores, dtype=float)
    return float(sum(table[mention, antecedent] for antecedent, mention in tree.edges))


def greedy_tree(scores: ArrayLike) -> ScoredTree:
    """cort's decoding: every mention takes its best-scoring antecedent, ties to the closest."""
    table = _score_table(scores)
    return _scored(tuple(ranked[0] for ranked in _ranked_antecedents(table)), table)


def heuristic_kbest(scores: ArrayLike, k: int) -> list[ScoredTree]:
    """The paper's approximate k-best list (§5.2), exactly ``k`` entries long.

    Starting from the greedy tree, every alternative (mention ``j``, antecedent ``i``) is tried in increasing
    order of its loss ``scores[j, best_j] - scores[j, i]`` (ties: earlier mention first, then the better-ranked
    antecedent); the tree that swaps ``j``'s antecedent to ``i`` joins the list if its partition is new. When
    the swaps run out before ``k`` partitions, the list is padded with the last tree added, as the paper does.
    """
    _check_k(k)
    table = _score_table(scores)
    ranked = _ranked_antecedents(table)
    best = tuple(candidates[0] for candidates in ranked)
    kbest = [_scored(best, table)]
    seen = {kbest[0].partition}
    swaps = sorted(
        (table[j, best[j - 1]] - table[j, antecedent], j, rank)
        for j, candidates in enumerate(ranked, start=1)
        for rank, antecedent in enumerate(candidates)
        if rank > 0
    )
    for _, j, rank in swaps:
        if len(kbest) == k:
            break
        swapped = _scored(best[: j - 1] + (ranked[j - 1][rank],) + best[j:], table)
        if swapped.partition not in seen:
            seen.add(swapped.partition)
            kbest.append(swapped)
    return kbest + [kbest[-1]] * (k - len(kbest))


def exact_kbest(scores: ArrayLike, k: int) -> list[ScoredTree]:
    """The ``k`` partitions whose best antecedent trees score highest, best first, each with that tree.

    Trees are enumerated in decreasing score and a tree is kept when its partition is new, so each kept tree
    is the best tree of its partition. Fewer than ``k`` entries come back only when the table allows fewer
    partitions (no padding). The enumeration may pass many trees of already-seen partitions before a new one
    (a cluster of ``m`` mentions has ``(m-1)!`` trees), so it is exact but its cost depends on the scores.
    """
    _check_k(k)
    table = _score_table(scores)
    kbest: list[ScoredTree] = []
    seen: set[Partition] = set()
    for antecedents in _trees_in_score_order(_ranked_antecedents(table), table):
        candidate = _scored(antecedents, table)
        if candidate.partition not in seen:
            seen.add(candidate.partition)
            kbest.append(candidate)
            if len(kbest) == k:
                break
    return kbest


def document_with_clusters(document: Document, partition: Partition) -> Document:
    """``document`` with its mentions relabelled by ``partition`` (mention ``j`` is ``document.mentions[j-1]``).

    Entities are numbered ``1..K`` by first mention, as in the R/E/L encoding.
    """
    n = len(document.mentions)
    covered = sorted(mention for cluster in partition for mention in cluster)
    if covered != list(range(1, n + 1)):
        raise ValueError(
            f"document {document.id!r}: the partition must cover mentions 1..{n} exactly once each, got {covered}"
        )
    numbered = enumerate(sorted(partition, key=min), start=1)
    entity = {mention: number for number, cluster in numbered for mention in cluster}
    mentions = [Mention(m.start, m.end, entity[j]) for j, m in enumerate(document.mentions, start=1)]
    return document.replace(mentions=mentions)


def _trees_in_score_order(ranked: list[list[int]], table: np.ndarray) -> Iterator[tuple[int, ...]]:
    """Every antecedent tree, as its antecedent tuple, in decreasing score order (best-first search).

    A tree is a rank vector: mention ``j`` takes the ``r_j``-th entry of its candidate list ``ranked[j-1]``
    (best first), and loses ``scores[j, best] - scores[j, that entry] >= 0`` relative to the greedy tree. The
    vector is stored sparsely as its nonzero ``(mention index, rank)`` pairs, in mention order. Each vector is
    reached from all zeros along one path only (raise the ranks mention by mention: raise the last raised
    mention again, or start a later one at rank 1), so no tree is produced twice, and every step adds a
    non-negative loss, so popping the smallest total loss yields the trees in score order.
    """
    loss = [[table[j, candidates[0]] - table[j, i] for i in candidates] for j, candidates in enumerate(ranked, start=1)]
    heap: list[tuple[float, tuple[tuple[int, int], ...]]] = [(0.0, ())]
    while heap:
        total, raised = heapq.heappop(heap)
        ranks = dict(raised)
        yield tuple(candidates[ranks.get(index, 0)] for index, candidates in enumerate(ranked))
        if raised:
            index, rank = raised[-1]
            if rank + 1 < len(ranked[index]):
                step = loss[index][rank + 1] - loss[index][rank]
                heapq.heappush(heap, (total + step, raised[:-1] + ((index, rank + 1),)))
        first_unraised = raised[-1][0] + 1 if raised else 0
        for index in range(first_unraised, len(ranked)):
            if len(ranked[index]) > 1:
                heapq.heappush(heap, (total + loss[index][1], raised + ((index, 1),)))


def _ranked_antecedents(table: np.ndarray) -> list[list[int]]:
    """Per mention, its possible antecedents best first; ties go to the closest (the root is farthest)."""
    return [
        sorted((i for i in range(j) if table[j, i] > -math.inf), key=lambda i: (-table[j, i], -i))
        for j in range(1, len(table))
    ]


def _scored(antecedents: tuple[int, ...], table: np.ndarray) -> ScoredTree:
    tree = tree_from_antecedents(antecedents)
    return ScoredTree(antecedents, tree_score(tree, table), clusters(tree), tree)


def _score_table(scores: ArrayLike) -> np.ndarray:
    """``scores`` as a float array, refused with a reason unless it is a usable score table."""
    table = np.asarray(scores, dtype=float)
    if table.ndim != 2 or table.shape[0] != table.shape[1] or table.shape[0] < 1:
        raise ValueError(f"a score table must have shape (n + 1, n + 1) for n mentions, got {table.shape}")
    arcs = np.tril(np.ones(table.shape, dtype=bool), k=-1)  # i < j
    bad = arcs & (np.isnan(table) | (table == math.inf))
    if bad.any():
        j, i = np.argwhere(bad)[0]
        raise ValueError(f"arc {i} -> {j} scores {table[j, i]}; scores must be finite or -inf (impossible arc)")
    for j in range(1, len(table)):
        if np.all(table[j, :j] == -math.inf):
            raise ValueError(f"mention {j} has no possible antecedent: all its arcs, the root's included, are -inf")
    return table


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
