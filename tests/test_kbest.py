"""Antecedent trees and the two k-best lists (paper §5.2), checked on hand-made tables and against brute force."""

from __future__ import annotations

import itertools
import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from networkx.algorithms.tree.branchings import ArborescenceIterator

from coref.document import Document, Mention
from coref.resolution.kbest import (
    ROOT,
    clusters,
    document_with_clusters,
    exact_kbest,
    greedy_tree,
    heuristic_kbest,
    tree_from_antecedents,
    tree_score,
)

NO = -math.inf


def table(rows: list[list[float]]) -> np.ndarray:
    """A score table from its lower-triangular rows: ``rows[j-1]`` holds the scores of arcs 0..j-1 -> j."""
    n = len(rows)
    scores = np.full((n + 1, n + 1), NO)
    for j, row in enumerate(rows, start=1):
        assert len(row) == j
        scores[j, :j] = row
    return scores


def antecedents_of(tree: nx.DiGraph) -> tuple[int, ...]:
    return tuple(next(iter(tree.predecessors(j))) for j in range(1, len(tree)))


def random_table(rng: np.random.Generator, n: int, impossible: float = 0.0) -> np.ndarray:
    """Gaussian arc scores; each non-root arc is impossible (-inf) with probability ``impossible``."""
    scores = table([list(rng.normal(size=j)) for j in range(1, n + 1)])
    for j in range(2, n + 1):
        scores[j, 1:j][rng.random(j - 1) < impossible] = NO
    return scores


def brute_force_kbest(scores: np.ndarray, k: int) -> list[tuple[float, frozenset]]:
    """(score, partition) of the k best partitions, by enumerating every antecedent tree."""
    n = len(scores) - 1
    best: dict[frozenset, float] = {}
    for antecedents in itertools.product(*(range(j) for j in range(1, n + 1))):
        score = sum(scores[j, i] for j, i in enumerate(antecedents, start=1))
        if score > NO:
            partition = clusters(tree_from_antecedents(antecedents))
            best[partition] = max(best.get(partition, NO), score)
    return sorted(((score, partition) for partition, score in best.items()), key=lambda entry: -entry[0])[:k]


# Trees -----------------------------------------------------------------------------------------------------------


def test_tree_has_one_arc_into_every_mention_and_clusters_are_components_below_the_root():
    tree = tree_from_antecedents([ROOT, 1, ROOT, 2, 3])
    assert sorted(tree.edges) == [(0, 1), (0, 3), (1, 2), (2, 4), (3, 5)]
    assert nx.is_arborescence(tree)
    assert clusters(tree) == {frozenset({1, 2, 4}), frozenset({3, 5})}
    assert clusters(tree_from_antecedents([])) == frozenset()


@pytest.mark.parametrize("antecedents", [[1], [ROOT, 2], [ROOT, -1]])
def test_an_antecedent_must_precede_its_mention(antecedents):
    with pytest.raises(ValueError, match=f"mention {len(antecedents)} has antecedent"):
        tree_from_antecedents(antecedents)


def test_tree_score_sums_the_chosen_arcs():
    scores = table([[0.0], [0.0, 2.5], [0.0, -1.0, 4.0]])
    assert tree_score(tree_from_antecedents([ROOT, 1, 2]), scores) == 6.5
    assert tree_score(tree_from_antecedents([ROOT, ROOT, 1]), scores) == -1.0


# Score tables ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "reason"),
    [
        (np.zeros((2, 3)), r"shape \(n \+ 1, n \+ 1\)"),
        (np.zeros(0), r"shape"),
        (table([[0.0], [math.nan, 1.0]]), r"arc 0 -> 2 scores nan"),
        (table([[0.0], [0.0, math.inf]]), r"arc 1 -> 2 scores inf"),
        (table([[0.0], [NO, NO]]), r"mention 2 has no possible antecedent"),
    ],
)
def test_unusable_score_tables_are_refused_with_the_reason(scores, reason):
    with pytest.raises(ValueError, match=reason):
        greedy_tree(scores)


def test_upper_triangle_and_row_zero_are_ignored():
    scores = table([[0.0], [0.0, 1.0]])
    garbage = scores.copy()
    garbage[0, :] = math.nan
    garbage[1, 1:] = 99.0
    assert greedy_tree(garbage).antecedents == greedy_tree(scores).antecedents == (ROOT, 1)


@pytest.mark.parametrize("kbest", [heuristic_kbest, exact_kbest])
def test_k_must_be_positive(kbest):
    with pytest.raises(ValueError, match="k must be at least 1"):
        kbest(table([[0.0]]), 0)


# Greedy decoding (cort) ------------------------------------------------------------------------------------------


def test_greedy_takes_the_argmax_per_mention():
    scores = table([[0.0], [0.0, 1.0], [0.0, 3.0, 2.0], [5.0, 1.0, 1.0, 1.0]])
    best = greedy_tree(scores)
    assert best.antecedents == (ROOT, 1, 1, ROOT)
    assert best.score == 9.0
    assert best.partition == {frozenset({1, 2, 3}), frozenset({4})}


def test_greedy_ties_go_to_the_closest_antecedent_and_the_root_last():
    scores = table([[0.0], [0.0, 0.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0, -1.0]])
    assert greedy_tree(scores).antecedents == (ROOT, 1, 2, 2)


def test_impossible_arcs_are_never_chosen():
    # Mention 3 must link to 1 (its root and 2 arcs are impossible), however bad that arc is.
    scores = table([[0.0], [0.0, 5.0], [NO, -100.0, NO]])
    assert greedy_tree(scores).antecedents == (ROOT, 1, 1)
    for kbest in (heuristic_kbest, exact_kbest):
        for entry in kbest(scores, 5):
            assert entry.antecedents[2] == 1
            assert entry.score > NO


# The paper's heuristic -------------------------------------------------------------------------------------------


def test_heuristic_swaps_one_antecedent_at_a_time_by_increasing_loss():
    # Greedy: 2 -> 1 (loss 0), 3 -> 1 (0). Swaps by loss: 3 -> ROOT (0.5, new partition), 3 -> 2 (1, same
    # partition as greedy: skipped), 2 -> ROOT (2, new), so k = 3 stops before anything else.
    scores = table([[0.0], [0.0, 2.0], [1.5, 2.0, 1.0]])
    kbest = heuristic_kbest(scores, 3)
    assert [entry.antecedents for entry in kbest] == [(ROOT, 1, 1), (ROOT, 1, ROOT), (ROOT, ROOT, 1)]
    assert [entry.score for entry in kbest] == [4.0, 3.5, 2.0]
    assert kbest[0] == greedy_tree(scores)


def test_heuristic_pads_with_the_last_tree_when_swaps_run_out():
    # Two mentions have two partitions only; the swap 2 -> ROOT gives the second.
    scores = table([[0.0], [0.0, 1.0]])
    kbest = heuristic_kbest(scores, 4)
    assert [entry.partition for entry in kbest] == [{frozenset({1, 2})}] + [{frozenset({1}), frozenset({2})}] * 3
    assert kbest[1] is kbest[2] is kbest[3]


def test_heuristic_skips_swaps_that_keep_the_partition():
    # Every swap of mention 3 within the cluster {1, 2, 3} keeps the partition; only ROOT swaps are new.
    scores = table([[0.0], [-5.0, 0.0], [-5.0, 0.0, 0.1]])
    partitions = [entry.partition for entry in heuristic_kbest(scores, 10)]
    # Greedy: 2 -> 1, 3 -> 2. Swaps: 3 -> 1 (loss 0.1, same partition), 2 -> ROOT (5), 3 -> ROOT (5.1).
    assert partitions[:3] == [
        {frozenset({1, 2, 3})},
        {frozenset({1}), frozenset({2, 3})},
        {frozenset({1, 2}), frozenset({3})},
    ]
    assert set(partitions[3:]) == {partitions[2]}


def test_single_mention_document_has_one_partition():
    kbest = heuristic_kbest(table([[0.0]]), 3)
    assert [entry.partition for entry in kbest] == [{frozenset({1})}] * 3
    assert [entry.partition for entry in exact_kbest(table([[0.0]]), 3)] == [{frozenset({1})}]


def test_no_mentions_gives_the_empty_partition():
    assert [entry.partition for entry in exact_kbest(np.zeros((1, 1)), 2)] == [frozenset()]
    assert len(heuristic_kbest(np.zeros((1, 1)), 2)) == 2


@given(st.integers(1, 6), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_heuristic_list_is_k_long_starts_greedy_and_repeats_only_as_padding(n, k, seed):
    scores = random_table(np.random.default_rng(seed), n, impossible=0.3)
    kbest = heuristic_kbest(scores, k)
    assert len(kbest) == k
    assert kbest[0] == greedy_tree(scores)
    distinct = len({entry.partition for entry in kbest})
    assert all(entry is kbest[distinct - 1] for entry in kbest[distinct:])
    for entry in kbest:
        assert antecedents_of(entry.tree) == entry.antecedents
        assert entry.partition == clusters(entry.tree)
        assert entry.score == pytest.approx(tree_score(entry.tree, scores))
        assert entry.score <= kbest[0].score
        changed = sum(a != b for a, b in zip(entry.antecedents, kbest[0].antecedents))
        assert changed <= 1


# Exact k-best ----------------------------------------------------------------------------------------------------


def test_exact_differs_from_the_heuristic_when_two_swaps_beat_one():
    # Greedy: 2 -> 1, 3 -> ROOT, 4 -> 3. Sending 2 and 4 to ROOT loses 0.3, less than any other single swap
    # (9 or more); the heuristic never combines two swaps.
    scores = table([[0.0], [0.0, 0.1], [0.0, -9.0, -9.0], [0.0, -9.0, -9.0, 0.2]])
    exact = [entry.partition for entry in exact_kbest(scores, 4)]
    heuristic = [entry.partition for entry in heuristic_kbest(scores, 4)]
    both_split = {frozenset({1}), frozenset({2}), frozenset({3}), frozenset({4})}
    assert exact[:4] == [
        {frozenset({1, 2}), frozenset({3, 4})},
        {frozenset({1}), frozenset({2}), frozenset({3, 4})},
        {frozenset({1, 2}), frozenset({3}), frozenset({4})},
        both_split,
    ]
    assert both_split not in heuristic


@pytest.mark.parametrize("seed", range(8))
def test_exact_kbest_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 3 + seed % 4
    scores = random_table(rng, n, impossible=0.25 * (seed % 2))
    expected = brute_force_kbest(scores, 40)
    kbest = exact_kbest(scores, 40)
    assert [entry.partition for entry in kbest] == [partition for _, partition in expected]
    assert [entry.score for entry in kbest] == pytest.approx([score for score, _ in expected])
    assert kbest[0] == greedy_tree(scores)


@given(st.integers(1, 5), st.integers(1, 60), st.data())
def test_exact_kbest_scores_equal_brute_force_even_with_ties(n, k, data):
    # Small integer scores tie often: which of two tied partitions comes first is arbitrary, but the score
    # sequence is not, and each entry must be the best tree of its own partition.
    scores = table([data.draw(st.lists(st.integers(-2, 2), min_size=j, max_size=j)) for j in range(1, n + 1)])
    expected = brute_force_kbest(scores, k)
    best_of = dict((partition, score) for score, partition in brute_force_kbest(scores, 10**6))
    kbest = exact_kbest(scores, k)
    assert [entry.score for entry in kbest] == [score for score, _ in expected]
    assert len({entry.partition for entry in kbest}) == len(kbest)
    assert all(entry.score == best_of[entry.partition] for entry in kbest)
    assert kbest[0] == greedy_tree(scores)


@pytest.mark.parametrize("seed", range(4))
def test_trees_agree_with_networkx_arborescence_iterator(seed):
    # The spanning arborescences of the graph of allowed arcs are exactly the antecedent trees (the root has no
    # incoming arc, every arc goes forward), so networkx's enumeration in decreasing weight, deduplicated by
    # partition, must give the same partitions and scores as the lazy enumeration.
    rng = np.random.default_rng(100 + seed)
    n = 4
    scores = random_table(rng, n, impossible=0.2)
    allowed = nx.DiGraph()
    arcs = [(i, j, scores[j, i]) for j in range(1, n + 1) for i in range(j) if scores[j, i] > NO]
    allowed.add_weighted_edges_from(arcs)
    networkx_best: dict[frozenset, float] = {}
    for arborescence in ArborescenceIterator(allowed, minimum=False):
        partition = clusters(arborescence)
        networkx_best.setdefault(partition, tree_score(arborescence, scores))
    expected = sorted(networkx_best.values(), reverse=True)
    kbest = exact_kbest(scores, 1000)
    assert [entry.score for entry in kbest] == pytest.approx(expected)
    assert {entry.partition for entry in kbest} == set(networkx_best)


def test_exact_kbest_handles_a_long_document_with_a_large_cluster():
    # 150 mentions whose every arc scores alike: far too many trees per partition for the tree enumeration.
    scores = table([[0.0] + [1.0 + 0.001 * i for i in range(j - 1)] for j in range(1, 151)])
    kbest = exact_kbest(scores, 100)
    assert len({entry.partition for entry in kbest}) == 100
    assert kbest[0].partition == greedy_tree(scores).partition
    assert all(a.score >= b.score - 1e-9 for a, b in zip(kbest, kbest[1:]))


# Back to documents -----------------------------------------------------------------------------------------------


def test_document_with_clusters_relabels_mentions_in_document_order():
    mentions = [Mention(0, 1, 40), Mention(2, 4, 17), Mention(5, 6, 40), Mention(7, 8, 17), Mention(9, 10, 3)]
    document = Document("d", [str(t) for t in range(11)], mentions=mentions)
    gold = frozenset(
        frozenset(j for j, m in enumerate(document.mentions, start=1) if m.entity == entity)
        for entity in document.entities()
    )
    assert document_with_clusters(document, gold).partition() == document.partition()
    relabelled = document_with_clusters(document, frozenset({frozenset({1, 2, 3, 4}), frozenset({5})}))
    assert [m.entity for m in relabelled.mentions] == [1, 1, 1, 1, 2]
    assert relabelled.tokens == document.tokens


@pytest.mark.parametrize("partition", [{frozenset({1})}, {frozenset({1, 2}), frozenset({2})}, {frozenset({0, 1, 2})}])
def test_document_with_clusters_needs_a_partition_of_its_mentions(partition):
    document = Document("d", ["a", "b"], mentions=[Mention(0, 1, 1), Mention(1, 2, 1)])
    with pytest.raises(ValueError, match="must cover mentions 1..2 exactly once"):
        document_with_clusters(document, frozenset(partition))
