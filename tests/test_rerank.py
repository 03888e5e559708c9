"""Coreference reranking (paper §5.2, Table 2): the rerankers, the weight search, the oracle and the significance
test on hand-made score tables with a fake language model; EntityNLM's candidate scores and the command line
on the embedded sample corpus."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from coref.document import Document, Mention
from coref.metrics.coreference import score_document
from coref.resolution.kbest import Partition, exact_kbest, greedy_tree, heuristic_kbest
from coref.resolution.ranker import resolver_documents
from coref.resolution.rerank import (
    DEFAULT_GRID,
    RESOLVER_ONLY,
    approximate_randomization,
    base_choice,
    document_candidates,
    format_table,
    grid_search,
    interpolated_choice,
    kbest_trees,
    micro_average,
    oracle_choice,
    response_document,
    system_rows,
)
from generative.layers.batch import make_batch
from inference.commands import rerank as rerank_command
from inference.data import prepared_documents
from inference.evaluation import rerank as reranking
from inference.training.checkpoint import Checkpoint, pretrained
from inference.training.resolution import train_ranker
from tests.test_kbest import random_table, table


def story(entities: list[int], name: str = "story") -> Document:
    """A document of one-token mentions separated by a filler word, mention j of gold entity ``entities[j-1]``."""
    tokens = [word for j in range(len(entities)) for word in (f"m{j}", "and")]
    return Document(name, tokens, mentions=[Mention(2 * j, 2 * j + 1, e) for j, e in enumerate(entities)])


def gold_partition(document: Document) -> Partition:
    groups: dict[int, set[int]] = {}
    for j, mention in enumerate(document.mentions, start=1):
        groups.setdefault(mention.entity, set()).add(j)
    return frozenset(frozenset(group) for group in groups.values())


def fake_model(values: dict[Partition, float], default: float = -20.0, calls: list | None = None):
    """A language model that knows some partitions' scores; ``calls`` records what it was asked."""

    def score(document: Document, partitions):
        if calls is not None:
            calls.append(list(partitions))
        return [values.get(partition, default) for partition in partitions]

    return score


def hashed_model(document: Document, partitions):
    """A deterministic pseudo-random log-probability per partition."""
    return [-10.0 - (hash(tuple(sorted(tuple(sorted(c)) for c in p))) % 1000) / 100 for p in partitions]


def P(*clusters: set[int]) -> Partition:
    """The partition of the given clusters of mention numbers."""
    return frozenset(frozenset(cluster) for cluster in clusters)

# Three mentions of one entity. The resolver prefers three singletons; EntityNLM prefers {1}{2,3}, which the
# resolver scores badly; the gold {1,2,3} wins only for weights in (1/3, 2.5) (see the interpolation test).
TRIANGLE = table([[0.0], [0.0, -1.0], [0.0, -1.0, -5.0]])
TRIANGLE_LM = {P({1, 2, 3}): -10.0, P({1}, {2, 3}): -9.0, P({1}, {2}, {3}): -15.0}


def triangle_candidates(name: str = "triangle"):
    return document_candidates(story([1, 1, 1], name), TRIANGLE, ["exact"], 10, fake_model(TRIANGLE_LM))["exact"]


# Candidate lists --------------------------------------------------------------------------------------------------


def test_unknown_generator_is_refused():
    with pytest.raises(ValueError, match="unknown k-best generator 'beam'"):
        kbest_trees(TRIANGLE, "beam", 5)


def test_candidates_are_distinct_partitions_base_first_each_scored_once():
    rng = np.random.default_rng(1)
    document = story([1, 2, 1, 1, 2, 3, 3])
    scores = random_table(rng, 7)
    calls: list = []
    lists = document_candidates(document, scores, ["heuristic", "exact"], 30, fake_model({}, calls=calls))
    assert len(calls) == 1 and len(set(calls[0])) == len(calls[0])  # one call, every partition once
    for generator, kbest in (("heuristic", heuristic_kbest), ("exact", exact_kbest)):
        candidates = lists[generator].candidates
        partitions = [candidate.partition for candidate in candidates]
        assert partitions[0] == greedy_tree(scores).partition and len(set(partitions)) == len(partitions)
        assert set(partitions) == {entry.partition for entry in kbest(scores, 30)}
        assert set(partitions) <= set(calls[0])
        assert lists[generator].list_length == len(kbest(scores, 30))
    assert lists["heuristic"].list_length == 30  # padded, as the paper does


def test_responses_drop_singletons_and_are_evaluated_against_the_gold():
    document = story([1, 1, 2, 2])
    response = response_document(document, P({1, 2}, {3}, {4}))
    assert [m.span for m in response.mentions] == [(0, 1), (2, 3)]
    lists = document_candidates(document, random_table(np.random.default_rng(2), 4), ["exact"], 15, hashed_model)
    for candidate in lists["exact"].candidates:
        expected = score_document(document, response_document(document, candidate.partition))
        assert candidate.evaluation == expected


@pytest.mark.parametrize(
    ("broken", "message"),
    [(lambda document, partitions: [1.0], "gave 1 scores for 5"),
     (lambda document, partitions: [math.nan] * len(partitions), "non-finite")],
)
def test_a_language_model_with_missing_or_broken_scores_is_refused(broken, message):
    with pytest.raises(ValueError, match=message):
        document_candidates(story([1, 1, 1]), TRIANGLE, ["exact"], 10, broken)


# Rerankers --------------------------------------------------------------------------------------------------------


def test_entitynlm_reranker_picks_the_candidate_with_the_best_language_model_score():
    rng = np.random.default_rng(3)
    for trial in range(20):
        document = story(list(rng.integers(1, 4, size=6)), f"doc{trial}")
        lists = document_candidates(document, random_table(rng, 6), ["heuristic"], 20, hashed_model)["heuristic"]
        chosen = lists.candidates[interpolated_choice(lists, 0.0)]
        assert chosen.log_prob == max(candidate.log_prob for candidate in lists.candidates)
        assert chosen.log_prob == hashed_model(document, [chosen.partition])[0]


def test_interpolation_with_a_large_weight_is_the_base_one_best():
    rng = np.random.default_rng(4)
    for trial in range(20):
        document, scores = story(list(rng.integers(1, 4, size=6)), f"doc{trial}"), random_table(rng, 6)
        lists = document_candidates(document, scores, ["exact"], 20, hashed_model)["exact"]
        for weight in (1e6, RESOLVER_ONLY):
            assert interpolated_choice(lists, weight) == base_choice(lists) == 0
        assert lists.candidates[0].partition == greedy_tree(scores).partition


def test_interpolation_trades_language_model_against_resolver_score():
    lists = triangle_candidates()
    chosen = {weight: lists.candidates[interpolated_choice(lists, weight)].partition for weight in (0.0, 1.0, 10.0)}
    assert chosen == {0.0: P({1}, {2, 3}), 1.0: P({1, 2, 3}), 10.0: P({1}, {2}, {3})}


def test_grid_search_picks_the_weight_of_best_dev_f1():
    dev = [triangle_candidates(f"triangle{i}") for i in range(3)]
    weight, f1 = grid_search(dev, DEFAULT_GRID)
    assert 1 / 3 < weight < 2.5 and f1[weight] == 1.0 == max(f1.values())
    assert weight == min(w for w in DEFAULT_GRID if w > 1 / 3)  # the first of the equally good weights
    assert f1[0.0] < 1.0 and f1[RESOLVER_ONLY] < 1.0
    assert set(f1) == set(DEFAULT_GRID)


def test_oracle_is_at_least_every_other_row():
    rng = np.random.default_rng(5)
    documents = []
    for trial in range(15):
        document = story(list(rng.integers(1, 4, size=7)), f"doc{trial}")
        documents.append(document_candidates(document, random_table(rng, 7), ["heuristic"], 25, hashed_model)[
            "heuristic"])
    for lists in documents:
        best = lists.candidates[oracle_choice(lists)].evaluation.conll_f1
        assert best == max(candidate.evaluation.conll_f1 for candidate in lists.candidates)
    rows = system_rows(documents, 1.0, "fake", trials=200, seed=0)
    assert [row.name for row in rows] == ["base one-best", "rerank: fake", "rerank: fake + base", "oracle"]
    assert all(rows[-1].evaluation.conll_f1 >= row.evaluation.conll_f1 for row in rows)
    assert rows[-1].evaluation.conll_f1 > rows[0].evaluation.conll_f1
    assert rows[0].p_value is None and all(0 < row.p_value <= 1 for row in rows[1:])


def test_oracle_ties_go_to_the_higher_resolver_score():
    # Gold {1,2}{3,4}: finding either entity alone scores the same, but the resolver prefers {1,2}.
    scores = table([[0.0], [0.0, 2.0], [0.0, -3.0, -3.0], [0.0, -3.0, -3.0, 1.0]])
    lists = document_candidates(story([1, 1, 2, 2]), scores, ["exact"], 10, hashed_model)["exact"]
    halves = {candidate.partition: candidate for candidate in lists.candidates}
    first, second = halves[P({1, 2}, {3}, {4})], halves[P({1}, {2}, {3, 4})]
    assert first.evaluation.conll_f1 == second.evaluation.conll_f1 and first.resolver_score > second.resolver_score
    without_gold = dataclasses.replace(lists, candidates=(second, first))  # the worse-scored one listed first
    assert without_gold.candidates[oracle_choice(without_gold)] is first


def test_table_lists_every_row_with_its_p_value():
    rows = system_rows([triangle_candidates()], 1.0, "EntityNLM", trials=100, seed=0)
    text = format_table(rows)
    assert "base one-best" in text and "rerank: EntityNLM + base" in text and "oracle" in text
    oracle_line = text.splitlines()[-1].split()
    assert oracle_line[-2] == "100.00" and oracle_line[-1] == "1.0000"  # perfect, but one document proves nothing


# Significance -----------------------------------------------------------------------------------------------------


def many_stories(count: int) -> list[Document]:
    rng = np.random.default_rng(6)
    return [story(list(rng.integers(1, 4, size=8)), f"doc{i}") for i in range(count)]


def test_identical_systems_are_not_significantly_different():
    evaluations = [score_document(d, response_document(d, P(*[{j} for j in range(1, 9)]))) for d in many_stories(20)]
    assert approximate_randomization(evaluations, evaluations, trials=1000) == 1.0


def test_a_clearly_better_system_is_significant():
    documents = many_stories(30)
    perfect = [score_document(d, d) for d in documents]
    pairs = [score_document(d, response_document(d, P(*[{j, j + 1} for j in range(1, 9, 2)]))) for d in documents]
    p_value = approximate_randomization(perfect, pairs, trials=2000, seed=1)
    assert p_value == pytest.approx(1 / 2001)
    assert micro_average(perfect).conll_f1 == 1.0 > micro_average(pairs).conll_f1


def test_systems_that_differ_in_one_document_only_are_not_significant():
    # Swapping the one document that differs only flips the sign of the difference: every trial reaches it.
    documents = many_stories(10)
    first = [score_document(d, d) for d in documents]
    second = first[:-1] + [score_document(documents[-1], response_document(documents[-1], P(*[{j} for j in
                                                                                              range(1, 9)])))]
    assert approximate_randomization(first, second, trials=500) == 1.0


def test_significance_needs_paired_evaluations():
    evaluations = [score_document(d, d) for d in many_stories(3)]
    with pytest.raises(ValueError, match="evaluated on 3 and 2 documents"):
        approximate_randomization(evaluations, evaluations[:2])


# EntityNLM as the language model ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled() -> Checkpoint:
    return Checkpoint.load(pretrained("entitynlm.pt"))


def test_candidate_scores_are_entitynlm_log_joint_of_each_annotation(bundled):
    document = prepared_documents("sample", "dev", None, bundled.preprocess, bundled.vocabulary, quiet=True)[0]
    gold = gold_partition(document)
    largest = max(gold, key=len)
    corrupted = (gold - {largest}) | {frozenset({j}) for j in largest}  # the largest entity torn into singletons
    model = reranking.entitynlm_modules(reranking.noise_free(bundled), "cpu")[0]
    scores = reranking.candidate_log_joint(model, bundled, document, [gold, corrupted, gold], torch.device("cpu"))
    with torch.no_grad():
        expected = float(model.log_likelihood(make_batch([document], bundled.vocabulary))[0])
    assert scores[0] == pytest.approx(expected, abs=1e-4) and scores[2] == pytest.approx(expected, abs=1e-4)
    assert scores[1] < scores[0]  # the trained model prefers the gold to a torn-apart entity


def test_scorer_caches_scores_and_checks_the_documents_agree(bundled, tmp_path):
    resolver_docs = resolver_documents("sample", "dev", None)
    model_docs = prepared_documents("sample", "dev", None, bundled.preprocess, bundled.vocabulary, quiet=True)
    path = tmp_path / "cache.json"
    scorer = reranking.EntityNLMScorer(bundled, model_docs, torch.device("cpu"), 2, reranking.ScoreCache(path, "fp"))
    document = resolver_docs[0]
    partitions = [gold_partition(document), P(*[{j} for j in range(1, len(document.mentions) + 1)])]
    first = scorer(document, partitions)
    assert (scorer.scored, scorer.reused) == (2, 0)
    assert scorer(document, partitions[::-1]) == first[::-1] and (scorer.scored, scorer.reused) == (2, 2)
    reloaded = reranking.EntityNLMScorer(bundled, model_docs, torch.device("cpu"), 2, reranking.ScoreCache(path, "fp"))
    assert reloaded(document, partitions) == first and reloaded.scored == 0
    assert reranking.ScoreCache(path, "another checkpoint").scores == {}
    shifted = document.replace(mentions=[Mention(m.start, m.end + 1, m.entity) for m in document.mentions[:1]]
                               + list(document.mentions[1:]))
    with pytest.raises(ValueError, match="preprocessing disagree"):
        scorer(shifted, partitions)


# The command line -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resolver_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("resolver") / "sample.npz"
    train_ranker(resolver_documents("sample", "train", None), progress=False).save(path)
    return path


def test_command_line_reranks_the_sample_corpus_and_resumes_from_its_cache(resolver_model, tmp_path, capsys):
    out = tmp_path / "rerank.json"
    argv = ["--resolver", str(resolver_model), "--corpus", "sample", "--k", "10", "--trials", "300",
            "--device", "cpu", "--json", str(out)]
    assert rerank_command.main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("p vs base") == 2 and "lambda chosen on dev" in printed
    result = json.loads(out.read_text())
    assert set(result["generators"]) == {"heuristic", "exact"}
    for figures in result["generators"].values():
        names = [row["name"] for row in figures["test"]]
        assert names == ["base one-best", "rerank: EntityNLM", "rerank: EntityNLM + base", "oracle"]
        assert figures["test"][3]["conll_f1"] >= figures["test"][0]["conll_f1"]
        assert len(figures["grid"]) == len(DEFAULT_GRID) and len(figures["test_choices"]) == 2
    sizes = result["documents"]["test"]
    assert len(sizes) == 2 and all(row["list_length"]["heuristic"] == 10 for row in sizes)
    assert result["entitynlm"]["scored"] == sum(row["scored_candidates"] for split in ("dev", "test")
                                                for row in result["documents"][split])
    assert Path(result["cache"]).is_file()

    assert rerank_command.main(argv) == 0  # a rerun scores nothing again and reports the same figures
    rerun = json.loads(out.read_text())
    assert rerun["entitynlm"]["scored"] == 0
    assert rerun["generators"] == result["generators"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--corpus", "nonsense"], "unknown corpus 'nonsense'"),
        (["--corpus", "litbank", "--data-dir", "/nonexistent"], "data directory /nonexistent"),
        (["--corpus", "sample", "--checkpoint", "MISSING"], "no such checkpoint file"),
    ],
)
def test_command_line_errors_are_one_line(resolver_model, options, message, capsys):
    assert rerank_command.main(["--resolver", str(resolver_model), *options]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1


def test_a_bad_resolver_file_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "resolver.npz"
    bad.write_text("not a model")
    assert rerank_command.main(["--resolver", str(bad), "--corpus", "sample"]) == 2
    assert "not a resolver model" in capsys.readouterr().err


def test_reranking_detected_mentions_scores_against_entitynlm_mentions_of_the_gold(bundled, tmp_path, capsys):
    from coref.corpora.preprocess import entitynlm_mentions
    from coref.corpora.registry import load_corpus
    from coref.resolution.mentions import MentionDetectorConfig
    from coref.resolution.ranker import with_predicted_mentions
    from inference.training.resolution import train_detector

    train = load_corpus("sample", "train", None).documents
    detector = train_detector(train, load_corpus("sample", "dev", None).documents,
                              MentionDetectorConfig(embedding_size=16, hidden_size=16, layers=1, mlp_size=16),
                              epochs=30, progress=False)
    detector.save(tmp_path / "mentions.pt")
    labelled = [with_predicted_mentions(d, spans) for d, spans in zip(train, detector.predict(train))]
    train_ranker(labelled, epochs=2, progress=False).save(tmp_path / "resolver.npz")
    split = reranking.detected_mention_split("sample", "test", None, bundled, str(tmp_path / "mentions.pt"))
    gold = load_corpus("sample", "test", None).documents
    assert split.keys == [entitynlm_mentions(document) for document in gold]
    for document, model_document in zip(split.documents, split.model_documents):
        assert document.tokens == next(g for g in gold if g.key == document.key).tokens  # the raw text
        reranking.check_same_mentions(document, model_document)  # the same mentions, EntityNLM's preprocessing
        assert len(model_document.tokens) <= len(document.tokens)
    out = tmp_path / "rerank.json"
    assert rerank_command.main(["--resolver", str(tmp_path / "resolver.npz"), "--detector",
                                str(tmp_path / "mentions.pt"), "--corpus", "sample", "--k", "5", "--trials", "100",
                                "--generator", "exact", "--device", "cpu", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["detector"] == str(tmp_path / "mentions.pt")
    rows = result["generators"]["exact"]["test"]
    assert rows[3]["conll_f1"] >= rows[0]["conll_f1"]  # the oracle
