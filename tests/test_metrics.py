"""Coreference metrics: the official scorer's worked example, cases derived by hand, properties, real data.

Hand derivations use the notation of coref.metrics.coreference: K_i key entities, R_j response entities, spans
(start, end).
"""

from __future__ import annotations

import csv
from itertools import combinations, permutations
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from coref.document import Document, Mention
from coref.io.conll import read_conll
from coref.metrics.coreference import (
    METRICS,
    Alignment,
    Contingency,
    CorefEvaluation,
    EvaluationError,
    Score,
    _blanc,
    _blanc_by_pairs,
    evaluate,
    scorer_chains,
)

SCORES = ("mentions", "muc", "bcub", "ceafe", "ceafm", "lea")  # the plain Scores; BLANC has two halves


def document(*entities: list[tuple[int, int]], id: str = "d", size: int = 12) -> Document:
    """A document of ``size`` dummy tokens whose i-th entity has the given spans."""
    mentions = [Mention(start, end, label) for label, spans in enumerate(entities) for start, end in spans]
    return Document(id, [f"w{i}" for i in range(size)], mentions=mentions)


def assert_counts(score: Score, recall_num, recall_den, precision_num, precision_den, abs=1e-9) -> None:
    actual = (score.recall_num, score.recall_den, score.precision_num, score.precision_den)
    assert actual == pytest.approx((recall_num, recall_den, precision_num, precision_den), abs=abs)


def assert_rpf(score, recall, precision, f1, abs=1e-9) -> None:
    assert (score.recall, score.precision, score.f1) == pytest.approx((recall, precision, f1), abs=abs)


# --------------------------------------------------------------------------- reference-notes §3.5 example

WORDS = "John said he saw Mary . She waved at him .".split()
EXAMPLE_KEY = Document(
    "example",
    WORDS,
    [(0, 6), (6, 11)],
    [Mention(0, 1, 0), Mention(2, 3, 0), Mention(4, 5, 1), Mention(6, 7, 1), Mention(9, 10, 0)],
)
# She linked to the wrong entity, "him" missed, "waved" a spurious singleton.
EXAMPLE_RESPONSE = EXAMPLE_KEY.replace(
    mentions=[Mention(0, 1, 0), Mention(2, 3, 0), Mention(4, 5, 1), Mention(6, 7, 0), Mention(7, 8, 2)]
)


def test_worked_example_matches_the_official_scorer():
    result = evaluate([EXAMPLE_KEY], [EXAMPLE_RESPONSE])
    assert_counts(result.mentions, 4, 5, 4, 5, abs=1e-4)
    assert_counts(result.muc, 1, 3, 1, 2, abs=1e-4)
    assert result.muc.f1 == pytest.approx(0.40, abs=1e-4)
    assert_counts(result.bcub, 2.3333, 5, 2.6667, 5, abs=1e-4)
    assert result.bcub.f1 == pytest.approx(0.4978, abs=1e-4)  # printed truncated as 49.77
    assert_counts(result.ceafm, 3, 5, 3, 5, abs=1e-4)
    assert_counts(result.ceafe, 1.3333, 2, 1.3333, 3, abs=1e-4)
    assert result.ceafe.f1 == pytest.approx(0.5333, abs=1e-4)
    assert result.blanc.f1 == pytest.approx(0.2967, abs=1e-4)
    assert_counts(result.lea, 1, 5, 1, 5, abs=1e-4)
    assert result.lea.f1 == pytest.approx(0.20, abs=1e-4)


def test_worked_example_blanc_halves_and_conll_f1():
    # K0 = {John, he, him}, K1 = {Mary, She}; R0 = {John, he, She}, R1 = {Mary}, R2 = {waved}.
    # Coreference links: key 3 + 1 = 4, response 3, shared {John-he} = 1.
    # Non-coreference links: key 3*2 = 6, response 3*1 + 3*1 + 1*1 = 7, shared {John-Mary, he-Mary} = 2.
    result = evaluate([EXAMPLE_KEY], [EXAMPLE_RESPONSE])
    assert_counts(result.blanc.coreference, 1, 4, 1, 3)
    assert_counts(result.blanc.non_coreference, 2, 6, 2, 7)
    assert result.blanc.recall == pytest.approx((1 / 4 + 2 / 6) / 2)
    assert result.blanc.precision == pytest.approx((1 / 3 + 2 / 7) / 2)
    assert result.blanc.f1 == pytest.approx((2 / 7 + 4 / 13) / 2)  # mean of the halves' F1
    assert result.conll_f1 == pytest.approx((0.4 + 0.49778 + 0.53333) / 3, abs=1e-4)


def test_a_document_against_itself_scores_one_everywhere():
    result = evaluate([EXAMPLE_KEY], [EXAMPLE_KEY])
    values = result.to_json()
    assert values.pop("conll_f1") == pytest.approx(1.0)
    for name, rpf in values.items():
        assert rpf == pytest.approx({"recall": 1.0, "precision": 1.0, "f1": 1.0}), name


def test_json_has_every_metric_as_fractions():
    values = evaluate([EXAMPLE_KEY], [EXAMPLE_RESPONSE]).to_json()
    assert set(values) == set(METRICS) | {"conll_f1", "mentions"}
    for name in (*METRICS, "mentions"):
        assert set(values[name]) == {"recall", "precision", "f1"}
        assert all(isinstance(v, float) and 0 <= v <= 1 for v in values[name].values())
    assert values["muc"] == pytest.approx({"recall": 1 / 3, "precision": 0.5, "f1": 0.4})


# ----------------------------------------------------------------------------------- derived by hand


def test_singleton_only_response():
    # Key: A = {(0,1), (2,3)}, B = {(4,5)}. Response: R1 = {(0,1)}, R2 = {(2,3)}, R3 = {(4,5)}.
    key = document([(0, 1), (2, 3)], [(4, 5)])
    response = document([(0, 1)], [(2, 3)], [(4, 5)])
    result = evaluate([key], [response])
    assert_counts(result.mentions, 3, 3, 3, 3)
    # MUC: key links 1, response links 0, none correct.
    assert_counts(result.muc, 0, 1, 0, 0)
    assert result.muc.f1 == 0.0
    # B3 recall: A meets R1, R2 once each: 1/2 + 1/2; B meets R3: 1/1. Precision: each Rj: 1/1.
    assert_counts(result.bcub, 2, 3, 3, 3)
    # CEAFm: best alignment A-R1 (1) + B-R3 (1) = 2 over 3 mentions each side.
    assert_counts(result.ceafm, 2, 3, 2, 3)
    # CEAFe: A-R1 = 2*1/(2+1) = 2/3, B-R3 = 2*1/(1+1) = 1; total 5/3 over 2 key, 3 response entities.
    assert_counts(result.ceafe, 5 / 3, 2, 5 / 3, 3)
    # LEA recall: A: 2 * 0/1 = 0; B singleton, its mention a response singleton: 1 * 1/1. Out of 3.
    # LEA precision: R1, R2 are singletons whose mentions are in a 2-mention key entity: 0; R3: 1. Out of 3.
    assert_counts(result.lea, 1, 3, 1, 3)
    # BLANC: coreference links key 1, response 0; non-coreference links key 3-1 = 2, response 3, both shared.
    assert_counts(result.blanc.coreference, 0, 1, 0, 0)
    assert_counts(result.blanc.non_coreference, 2, 2, 2, 3)
    assert_rpf(result.blanc, (0 + 1) / 2, (0 + 2 / 3) / 2, (0 + 0.8) / 2)


def test_missing_response_document_counts_as_misses_and_extra_ones_are_ignored():
    # Key: a = {(0,1), (2,3)}; b = {(0,1), (1,2)}, {(3,4)}. Response: a perfect, b missing, c not in the key.
    key_a = document([(0, 1), (2, 3)], id="a")
    key_b = document([(0, 1), (1, 2)], [(3, 4)], id="b")
    extra = document([(0, 1), (5, 6)], id="c")
    result = evaluate([key_a, key_b], [extra, key_a])
    assert result.documents == 2
    assert result.missing_documents == (("b", 0),)
    assert result.ignored_documents == (("c", 0),)
    assert_counts(result.mentions, 2, 5, 2, 2)
    assert_counts(result.muc, 1, 2, 1, 1)  # b's key link is missed; it has no response links
    assert_counts(result.bcub, 2, 5, 2, 2)
    assert_counts(result.ceafe, 1, 3, 1, 1)
    assert_counts(result.lea, 2, 5, 2, 2)
    assert result == evaluate([key_a, key_b], [key_a]) + CorefEvaluation(ignored_documents=(("c", 0),))


def test_repeated_response_span_keeps_its_first_occurrence():
    # Key: {(0,1), (2,3)}. Response: entity 1 = {(0,1), (2,3)}, entity 2 = {(2,3)} repeats (2,3). Entity 1's
    # brackets come first in the file, so (2,3) stays there; entity 2 is left empty and goes.
    key = document([(0, 1), (2, 3)])
    tokens = key.tokens
    response = Document("d", tokens, mentions=[Mention(0, 1, 1), Mention(2, 3, 1), Mention(2, 3, 2)])
    result = evaluate([key], [response])
    assert result.response_duplicates == 1
    for name in SCORES:
        assert_rpf(getattr(result, name), 1, 1, 1)


def test_the_first_entity_in_the_file_keeps_a_repeated_span_whatever_its_label():
    # Key: {(1,2), (3,4)}. Response: entity 1 = {(0,1), (3,4)} comes first in the file (token 0), entity 0 =
    # {(1,2), (3,4)}: (3,4) stays in entity 1, so the key's link (1,2)-(3,4) is not found.
    key = Document("d", [f"w{i}" for i in range(6)], mentions=[Mention(1, 2, 0), Mention(3, 4, 0)])
    response = key.replace(mentions=[Mention(0, 1, 1), Mention(3, 4, 1), Mention(1, 2, 0), Mention(3, 4, 0)])
    result = evaluate([key], [response])
    assert result.response_duplicates == 1
    assert_counts(result.muc, 0, 1, 0, 1)
    assert_counts(result.mentions, 2, 2, 2, 3)


def test_repeats_the_scorer_keeps():
    # A response span not in the key, repeated in one entity, is one mention twice: entity {(4,5), (4,5)}
    # has a MUC link and two B3 mentions. It is not a "repeat" the scorer drops.
    key = document([(0, 1), (2, 3)])
    response = key.replace(mentions=[*key.mentions, Mention(4, 5, 7), Mention(4, 5, 7)])
    result = evaluate([key], [response])
    assert result.response_duplicates == 0
    assert_counts(result.muc, 1, 1, 1, 2)
    assert_counts(result.bcub, 2, 2, 2, 4)
    assert_counts(result.mentions, 2, 2, 2, 3)
    # A repeated key span stays too: key entity {(0,1), (0,1)} has one link and two mentions to recall; the
    # response's one mention recalls |K & R| / |K| = 1/2 (B3 sums over response mentions).
    key = document([(0, 1), (0, 1)])
    result = evaluate([key], [document([(0, 1)])])
    assert_counts(result.muc, 0, 1, 0, 0)
    assert_counts(result.bcub, 0.5, 2, 1, 1)
    assert_counts(result.ceafm, 2, 2, 2, 1)  # precision 2/1, exactly as scorer.pl prints it
    assert result.key_duplicates == 1
    assert_counts(result.mentions, 1, 1, 1, 1)


def test_more_than_ten_repeated_key_spans_are_refused_like_the_official_scorer():
    key = document(*[[(i, i + 1)] for i in range(11)])
    repeated = key.replace(mentions=[*key.mentions, *(Mention(m.start, m.end, 20) for m in key.mentions)])
    with pytest.raises(EvaluationError, match="repeats key mention spans 11 times"):
        evaluate([key], [repeated])
    assert evaluate([key], [repeated.replace(mentions=repeated.mentions[:-1])]).response_duplicates == 10


def test_crossing_mentions_are_scored():
    key = document([(0, 2), (5, 6)], [(1, 3)])  # (0,2) and (1,3) cross
    assert evaluate([key], [key]).mentions.recall_den == 3
    assert_rpf(evaluate([key], [key]).muc, 1, 1, 1)


def test_documents_are_micro_averaged():
    # a: key {(0,1), (1,2)} found exactly: MUC 1/1, 1/1.
    # b: key {(0,1), (1,2), (2,3), (3,4)} (3 links), response {(0,1), (1,2)}, {(2,3), (3,4)}: 2 correct of 2.
    key_a, key_b = document([(0, 1), (1, 2)], id="a"), document([(0, 1), (1, 2), (2, 3), (3, 4)], id="b")
    response_b = document([(0, 1), (1, 2)], [(2, 3), (3, 4)], id="b")
    result = evaluate([key_a, key_b], [key_a, response_b])
    assert_counts(result.muc, 3, 4, 3, 3)
    assert result.muc.recall == pytest.approx(3 / 4)  # the macro average would be (1 + 2/3) / 2 = 5/6
    assert result.muc.f1 == pytest.approx(6 / 7)


def test_blanc_key_without_coreference_links_uses_non_coreference_links_only():
    # Key: three singletons. Response: {(0,1), (1,2)}, {(2,3)}.
    # Non-coreference links: key 3, response 3 - 1 = 2, shared {(0,1)-(2,3), (1,2)-(2,3)} = 2.
    # The response's coreference link is not averaged in as a 0 (Luo et al. 2014 would give (0 + 0.8) / 2).
    key = document([(0, 1)], [(1, 2)], [(2, 3)])
    response = document([(0, 1), (1, 2)], [(2, 3)])
    result = evaluate([key], [response])
    assert_counts(result.blanc.coreference, 0, 0, 0, 1)
    assert_counts(result.blanc.non_coreference, 2, 3, 2, 2)
    assert_rpf(result.blanc, 2 / 3, 1, 0.8)


def test_blanc_key_with_one_entity_uses_coreference_links_only():
    # Key: {(0,1), (1,2), (2,3)}: 3 coreference links, no non-coreference link.
    # Response: {(0,1), (1,2)}, {(2,3)}: 1 coreference link (correct), 2 non-coreference links.
    key = document([(0, 1), (1, 2), (2, 3)])
    response = document([(0, 1), (1, 2)], [(2, 3)])
    result = evaluate([key], [response])
    assert_counts(result.blanc.coreference, 1, 3, 1, 1)
    assert_counts(result.blanc.non_coreference, 0, 0, 0, 2)
    assert_rpf(result.blanc, 1 / 3, 1, 0.5)


def test_blanc_key_without_links_scores_zero():
    key = document([(0, 1)])
    assert_rpf(evaluate([key], [key]).blanc, 0, 0, 0)


def test_blanc_edge_cases_are_decided_on_corpus_totals():
    # a: the three-singleton case above: coreference (0, 0, 0, 1), non-coreference (2, 3, 2, 2).
    # b: key {(0,1), (1,2)} found exactly: coreference (1, 1, 1, 1), no non-coreference links.
    # Totals: coreference (1, 1, 1, 2) -> R 1, P 1/2, F 2/3; non-coreference (2, 3, 2, 2) -> R 2/3, P 1, F 4/5.
    key_a, response_a = document([(0, 1)], [(1, 2)], [(2, 3)], id="a"), document([(0, 1), (1, 2)], [(2, 3)], id="a")
    key_b = document([(0, 1), (1, 2)], id="b")
    result = evaluate([key_a, key_b], [response_a, key_b])
    assert_rpf(result.blanc, (1 + 2 / 3) / 2, (1 / 2 + 1) / 2, (2 / 3 + 4 / 5) / 2)


def test_lea_resolves_singletons_only_against_singletons():
    # Key: {(0,1), (1,2)}, {(2,3)}, {(3,4)}. Response: {(0,1), (1,2)}, {(2,3), (3,4)}.
    # Recall: 2 * 1/1 + key singletons (2,3), (3,4) sit in a 2-mention response entity: 0 + 0; out of 4.
    # Precision: 2 * 1/1 + {(2,3), (3,4)} has 1 link, split in the key: 0; out of 4.
    key = document([(0, 1), (1, 2)], [(2, 3)], [(3, 4)])
    result = evaluate([key], [document([(0, 1), (1, 2)], [(2, 3), (3, 4)])])
    assert_counts(result.lea, 2, 4, 2, 4)
    # Key: {(0,1), (1,2)}, {(2,3)}. Response adds a spurious singleton {(3,4)}:
    # recall (2 + 1) / 3; precision (2 + 1 + 0) / 4. MUC does not see singletons at all.
    key = document([(0, 1), (1, 2)], [(2, 3)])
    result = evaluate([key], [document([(0, 1), (1, 2)], [(2, 3)], [(3, 4)])])
    assert_counts(result.lea, 3, 3, 3, 4)
    assert_counts(result.muc, 1, 1, 1, 1)


def test_unmatchable_documents_are_refused():
    with pytest.raises(EvaluationError, match="two documents named 'd' part 0"):
        evaluate([document([(0, 1)]), document([(1, 2)])], [])
    with pytest.raises(EvaluationError, match="key has 12 tokens, the response 11"):
        evaluate([document([(0, 1)])], [document([(0, 1)], size=11)])


def test_empty_evaluation_scores_zero():
    result = evaluate([], [])
    assert result.documents == 0
    assert result.conll_f1 == 0.0 and result.blanc.f1 == 0.0


# ----------------------------------------------------------------------------------------- properties

SIZE = 10


@st.composite
def documents(draw, distinct_spans: bool = False) -> Document:
    """Documents of SIZE tokens with up to 12 mentions, nested and crossing, repeated spans unless told not."""
    mentions = draw(
        st.lists(
            st.builds(
                lambda start, length, entity: Mention(start, min(start + length, SIZE), entity),
                st.integers(0, SIZE - 1),
                st.integers(1, 4),
                st.integers(0, 4),
            ),
            max_size=12,
            unique_by=(lambda mention: mention.span) if distinct_spans else None,
        )
    )
    return Document("d", [f"w{i}" for i in range(SIZE)], mentions=mentions)


def _plain_and_blanc_scores(result: CorefEvaluation) -> list[Score]:
    return [getattr(result, name) for name in SCORES] + [result.blanc.coreference, result.blanc.non_coreference]


@given(documents(distinct_spans=True), documents())
def test_scores_are_fractions(key, response):
    # A key that repeats a span can go above 1, as in the official scorer (test_repeats_the_scorer_keeps).
    result = evaluate([key], [response])
    values = result.to_json()
    assert 0 <= values.pop("conll_f1") <= 1
    for rpf in values.values():
        assert all(0 <= value <= 1 + 1e-12 for value in rpf.values())


def entity_sets(document: Document) -> list[frozenset[tuple[int, int]]]:
    return [frozenset(spans) for spans in scorer_chains(document)]


@given(documents(distinct_spans=True), documents(distinct_spans=True))
def test_swapping_key_and_response_swaps_recall_and_precision(key, response):
    # Distinct spans: the scorer treats repeated key spans and repeated response spans differently.
    forward, backward = evaluate([key], [response]), evaluate([response], [key])
    for score, swapped in zip(_plain_and_blanc_scores(forward), _plain_and_blanc_scores(backward)):
        assert_counts(swapped, score.precision_num, score.precision_den, score.recall_num, score.recall_den)


@given(documents(distinct_spans=True))
def test_a_document_against_itself_finds_everything(doc):
    result = evaluate([doc], [doc])
    for score in _plain_and_blanc_scores(result):
        assert_counts(score, score.recall_den, score.recall_den, score.precision_den, score.precision_den)
    assume(any(len(entity) > 1 for entity in entity_sets(doc)))  # a coreference link: every ratio is defined
    assert result.conll_f1 == pytest.approx(1.0) and result.blanc.f1 == pytest.approx(1.0)


@given(documents(), documents(distinct_spans=True), st.permutations(range(5)))
def test_entity_labels_do_not_matter(key, response, relabelling):
    # Distinct spans: with a repeated span, the label decides which occurrence is first and kept.
    relabelled = response.replace(mentions=[Mention(m.start, m.end, relabelling[m.entity]) for m in response.mentions])
    original, renamed = evaluate([key], [response]), evaluate([key], [relabelled])
    for score, same in zip(_plain_and_blanc_scores(original), _plain_and_blanc_scores(renamed)):
        assert_counts(same, score.recall_num, score.recall_den, score.precision_num, score.precision_den)


# The definitions mention by mention, as the papers state them, for the largest entity lists the strategy makes.


def _entity_of(mention, entities):
    return next((entity for entity in entities if mention in entity), frozenset())


def _muc_recall(key, response):
    found = sum(len(k) - len({_entity_of(m, response) or m for m in k}) for k in key)
    return found, sum(len(k) - 1 for k in key)


def _bcub_recall(key, response):
    return sum(len(k & _entity_of(m, response)) / len(k) for k in key for m in k), sum(map(len, key))


def _lea_recall(key, response):
    def resolution(k):
        if len(k) == 1:
            return float(_entity_of(next(iter(k)), response) == k)
        pairs = list(combinations(k, 2))
        return sum(_entity_of(a, response) == _entity_of(b, response) != frozenset() for a, b in pairs) / len(pairs)

    return sum(len(k) * resolution(k) for k in key), sum(map(len, key))


def _links(entities):
    mentions = sorted(set().union(*entities))
    pairs = {frozenset(pair) for pair in combinations(mentions, 2)}
    coreference = {pair for pair in pairs if any(pair <= entity for entity in entities)}
    return coreference, pairs - coreference


def _best_alignment(key, response, similarity):
    padded = list(response) + [frozenset()] * len(key)
    return max(
        sum(similarity(k, r) for k, r in zip(key, chosen) if r)
        for chosen in permutations(padded, len(key))
    ) if key else 0.0


@given(documents(distinct_spans=True), documents(distinct_spans=True))
def test_matches_the_mention_level_definitions(key_doc, response_doc):
    # Distinct spans: where a span repeats, only the official scorer's procedure defines the figures
    # (tests/test_official_scorer.py compares with it).
    key, response = entity_sets(key_doc), entity_sets(response_doc)
    result = evaluate([key_doc], [response_doc])
    for name, recall_side in (("muc", _muc_recall), ("bcub", _bcub_recall), ("lea", _lea_recall)):
        assert_counts(getattr(result, name), *recall_side(key, response), *recall_side(response, key))
    entity_similarity = lambda k, r: 2 * len(k & r) / (len(k) + len(r))  # noqa: E731
    aligned = _best_alignment(key, response, entity_similarity)
    assert_counts(result.ceafe, aligned, len(key), aligned, len(response))
    aligned = _best_alignment(key, response, lambda k, r: len(k & r))
    assert_counts(result.ceafm, aligned, sum(map(len, key)), aligned, sum(map(len, response)))
    (key_links, key_non_links), (response_links, response_non_links) = _links(key), _links(response)
    correct, correct_non = len(key_links & response_links), len(key_non_links & response_non_links)
    assert_counts(result.blanc.coreference, correct, len(key_links), correct, len(response_links))
    assert_counts(result.blanc.non_coreference, correct_non, len(key_non_links), correct_non, len(response_non_links))


@given(documents(distinct_spans=True), documents(distinct_spans=True))
def test_blanc_from_the_table_equals_blanc_from_link_sets(key_doc, response_doc):
    alignment = Alignment.of(scorer_chains(key_doc), scorer_chains(response_doc))
    assert _blanc(alignment, Contingency.of(alignment.key, alignment.response)) == _blanc_by_pairs(alignment)


# ------------------------------------------------------------------------------------------ real data


def test_litbank_test_split_scored_against_itself_is_perfect(litbank_dir: Path):
    with open(litbank_dir / "splits.tsv", newline="") as splits:
        names = [row["document"] for row in csv.DictReader(splits, delimiter="\t") if row["split"] == "test"]
    assert len(names) == 10
    documents_ = [doc for name in names for doc in read_conll(litbank_dir / "conll" / f"{name}.conll", strict=True)[0]]
    result = evaluate(documents_, documents_)
    assert result.documents == 10 and result.response_duplicates == 0
    values = result.to_json()
    assert values.pop("conll_f1") == pytest.approx(1.0)
    for name, rpf in values.items():
        assert rpf == pytest.approx({"recall": 1.0, "precision": 1.0, "f1": 1.0}), name
