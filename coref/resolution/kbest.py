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
- :func:`exact_kbest` gives the ``k`` partitions whose best trees score highest, each with that best tree, by
  a lazy best-first (Lawler) search over partitions built mention by mention. The tests check it against brute
  force and against networkx's ``ArborescenceIterator`` (which enumerates the trees of the graph of allowed
  arcs, re-solving a spanning arborescence problem per tree: exact, but far too slow for real documents).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
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


@dataclass(frozen=True)
class _Solution:
    """A partition met by :func:`exact_kbest`: its score, the cluster label of every mention (0-based
    mention ``m`` is in the cluster labelled by its first mention's index) and the last mention whose decision
    deviates from the greedy one (-1 for the greedy partition)."""

    score: float
    labels: np.ndarray
    deviation: int


class _PartitionSearch:
    """The decisions of a partition built mention by mention, and their values (see :func:`exact_kbest`)."""

    def __init__(self, table: np.ndarray) -> None:
        self.table = table
        self.size = len(table) - 1
        self.greedy = greedy_tree(table).antecedents  # validates the table
        self.best = np.array([table[j, antecedent] for j, antecedent in enumerate(self.greedy, start=1)])

    def complete(self, labels: np.ndarray, start: int) -> np.ndarray:
        """``labels`` with mentions ``start..`` following their greedy antecedents: the best completion."""
        for m in range(start, self.size):
            antecedent = self.greedy[m]
            labels[m] = m if antecedent == ROOT else labels[antecedent - 1]
        return labels

    def alternatives(self, labels: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The non-greedy decisions of mention ``m`` given the clusters of the mentions before it, as (losses,
        cluster labels; ``m`` means a new cluster), by increasing loss. Joining a cluster is worth its best arc
        into ``m``; a cluster with no possible arc into ``m`` is no option."""
        row = self.table[m + 1]
        values = np.full(self.size, -math.inf)
        np.maximum.at(values, labels[:m], row[1 : m + 1])
        values[m] = row[ROOT]
        antecedent = self.greedy[m]
        values[m if antecedent == ROOT else labels[antecedent - 1]] = -math.inf  # the greedy decision itself
        options = np.flatnonzero(values > -math.inf)
        losses = self.best[m] - values[options]
        order = np.argsort(losses, kind="stable")
        return losses[order], options[order]

    def tree(self, labels: np.ndarray) -> ScoredTree:
        """The best tree of a partition: every mention's best arc from its cluster's earlier mentions (ties to the
        closest), the root for a cluster's first mention."""
        antecedents = []
        for m in range(self.size):
            members = np.flatnonzero(labels[:m] == labels[m])
            if len(members) == 0:
                antecedents.append(ROOT)
            else:
                values = self.table[m + 1, members + 1]
                antecedents.append(int(members[np.flatnonzero(values == values.max())[-1]]) + 1)
        tree = tree_from_antecedents(antecedents)
        return ScoredTree(tuple(antecedents), tree_score(tree, self.table), clusters(tree), tree)


def exact_kbest(scores: ArrayLike, k: int) -> list[ScoredTree]:
    """The ``k`` partitions whose best antecedent trees score highest, best first, each with that tree. Fewer
    than ``k`` entries come back only when the table allows fewer partitions (no padding).

    Enumerating trees in score order and skipping repeated partitions would be exact too, but a partition with
    large clusters has astronomically many near-optimal trees (on a LitBank document such an enumeration met
    330,000 trees in a minute and only 2 partitions). So partitions are searched instead, built mention by
    mention: mention m joins a cluster of the earlier
    mentions (worth that cluster's best arc into m) or starts one (the root arc). Every partition is exactly one
    such sequence and scores its sum, its best tree's score. Any prefix is best completed greedily (each later
    mention's best antecedent is in some cluster), so this is Lawler's k-best search: a partition's successors
    deviate from it at one mention after its last deviation and continue greedily, and each deviation's next
    alternative is offered only once the previous one is taken.
    """
    _check_k(k)
    search = _PartitionSearch(np.asarray(scores, dtype=float))
    first = _Solution(float(search.best.sum()), search.complete(np.zeros(search.size, dtype=int), 0), -1)
    found = [first]
    heap: list[tuple[float, int, int, int, int]] = []  # (-score, tie order, solution, mention, rank)
    order = itertools.count()  # equal scores pop in the order they were offered
    options: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def offer(index: int, m: int, rank: int) -> None:
        losses, _ = options[index, m]
        if rank < len(losses):
            heapq.heappush(heap, (-(found[index].score - losses[rank]), next(order), index, m, rank))

    def expand(index: int) -> None:
        solution = found[index]
        for m in range(solution.deviation + 1, search.size):
            options[index, m] = search.alternatives(solution.labels, m)
            offer(index, m, 0)

    expand(0)
    while heap and len(found) < k:
        negative_score, _, parent, m, rank = heapq.heappop(heap)
        losses, labels = options[parent, m]
        child = found[parent].labels.copy()
        child[m] = labels[rank]
        found.append(_Solution(-negative_score, search.complete(child, m + 1), m))
        offer(parent, m, rank + 1)
        expand(len(found) - 1)
    return [search.tree(solution.labels) for solution in found]


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
