"""Coreference of book-length text: bounded antecedent candidates, predictions equal to the full table's on
corpus-length documents, a long text through the pipeline, long unpunctuated sentences, and CoNLL headers
written back as read (so the official scorer matches the documents)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coref.corpora.registry import joined_text, load_corpus
from coref.io.conll import read_conll, write_conll
from coref.io.text import tokenize
from coref.metrics.coreference import evaluate
from coref.resolution import ranker as resolver
from coref.resolution.kbest import ROOT, document_with_clusters, greedy_tree
from coref.resolution.mentions import MAX_SENTENCE_TOKENS, sentence_windows
from coref.resolution.pipeline import BUNDLED, resolve
from coref.resolution.ranker import (
    ANTECEDENT_WINDOW,
    FAR_MATCHES,
    MentionRanker,
    candidate_antecedents,
    describe_mentions,
    resolver_documents,
)
from inference.commands.resolve import main
from inference.training.resolution import train_ranker
from tests.official_scorer import official_score, require_official_scorer


@pytest.fixture(scope="module")
def sample_model() -> MentionRanker:
    return train_ranker(resolver_documents("sample", "train", None), epochs=3, progress=False)


def _candidate_lists(candidates: resolver.Candidates) -> list[list[int]]:
    offsets = candidates.offsets
    return [candidates.antecedents[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def _greedy_over(table: np.ndarray, candidates: resolver.Candidates) -> list[int]:
    """cort's greedy decoding of the full score table with every arc outside the candidate lists made
    impossible: what the bounded decoding must reproduce."""
    masked = np.full_like(table, -np.inf)
    masked[:, ROOT] = table[:, ROOT]
    for j, antecedents in enumerate(_candidate_lists(candidates), start=1):
        masked[j, np.array(antecedents, dtype=int) + 1] = table[j, np.array(antecedents, dtype=int) + 1]
    return list(greedy_tree(masked).antecedents)


# ---- the candidate rule -------------------------------------------------------------------------------------


def test_candidates_are_the_window_plus_recent_same_head_or_string_mentions():
    document = resolver_documents("sample", "dev", None)[0]
    mentions = describe_mentions(document)
    n = len(mentions)
    assert _candidate_lists(candidate_antecedents(mentions, window=n)) == [list(range(j)) for j in range(n)]
    window, matches = 3, 1
    head, text = mentions.head_word, mentions.text
    for j, antecedents in enumerate(_candidate_lists(candidate_antecedents(mentions, window, matches))):
        first = max(0, j - window)
        same_head = [k for k in range(j) if head[k] == head[j]][-matches:]
        same_text = [k for k in range(j) if text[k] == text[j]][-matches:]
        assert antecedents == sorted({k for k in same_head + same_text if k < first}) + list(range(first, j))
        assert len(antecedents) <= window + 2 * matches


# ---- bounded prediction = the full table's on corpus-length documents ----------------------------------------


def test_bounded_decoding_equals_greedy_decoding_of_the_full_table(sample_model, monkeypatch):
    monkeypatch.setattr(resolver, "CHUNK_ARCS", 7)  # many chunks, some of a single anaphor
    for document in resolver_documents("sample", "dev", None) + resolver_documents("sample", "test", None):
        table = sample_model.arc_scores(document)
        greedy = greedy_tree(table)
        assert sample_model.best_antecedents(document) == list(greedy.antecedents)
        assert sample_model.predict(document) == document_with_clusters(document, greedy.partition)
        mentions = describe_mentions(document)
        for window, matches in ((2, 1), (5, 0)):  # long-document mode: the masked table's greedy decoding
            bounded = sample_model.best_antecedents(document, window=window, matches=matches)
            assert bounded == _greedy_over(table, candidate_antecedents(mentions, window, matches))


def test_litbank_test_documents_are_decoded_exactly_as_by_the_full_table(litbank_dir):
    model = MentionRanker.load(BUNDLED["resolver"])
    documents = resolver_documents("litbank", "test", litbank_dir.parent)
    assert max(len(document.mentions) for document in documents) <= ANTECEDENT_WINDOW + 1
    for document in sorted(documents, key=lambda document: len(document.mentions))[-2:]:  # the largest
        assert model.best_antecedents(document) == list(greedy_tree(model.arc_scores(document)).antecedents)


# ---- long text -----------------------------------------------------------------------------------------------


def test_a_50k_token_text_resolves_with_bounded_candidates():
    text = joined_text("sample", "train", None, words=50_000)
    tokenized = tokenize(text)
    assert len(tokenized.tokens) == 50_000
    document = resolve(text)
    assert document.tokens == tokenized.tokens and len(document.mentions) > 5_000
    assert all(0 <= mention.start < mention.end <= len(document.tokens) for mention in document.mentions)
    assert sorted(set(document.entities())) == list(range(1, len(document.entities()) + 1))
    counts = np.diff(candidate_antecedents(describe_mentions(document)).offsets)
    assert counts.max() <= ANTECEDENT_WINDOW + 2 * FAR_MATCHES and (counts >= ANTECEDENT_WINDOW).mean() > 0.9


def test_joined_text_has_exactly_the_tokens_asked_for_and_repeats_the_documents():
    documents = load_corpus("sample", "train", None).documents
    whole = joined_text("sample", "train", None)
    assert whole.split() == [token for document in documents for token in document.tokens]
    assert whole.count("\n\n") == len(documents) - 1
    for words in (1, 100, 1234):
        assert len(tokenize(joined_text("sample", "train", None, words=words)).tokens) == words
    with pytest.raises(ValueError, match="at least 1"):
        joined_text("sample", "train", None, words=0)


def test_a_sentence_longer_than_the_detector_window_is_read_in_windows():
    assert sentence_windows([(0, 3), (3, 1200)], 512) == [(0, 3), (3, 515), (515, 1027), (1027, 1200)]
    words = ("the old man saw his dog and the dog saw him " * 120).split()
    assert len(words) > 2 * MAX_SENTENCE_TOKENS
    document = resolve(" ".join(words))  # one sentence: no punctuation
    assert len(document.sentences) == 1 and document.mentions


# ---- CoNLL headers -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("part", ["0", "000"])
def test_resolve_conll_keeps_the_headers_so_the_official_scorer_matches_the_documents(part, tmp_path, capsys):
    require_official_scorer()
    key = tmp_path / f"key_{part}.conll"
    write_conll(load_corpus("sample", "test", None).documents, key)
    key.write_text(key.read_text().replace("; part 000\n", f"; part {part}\n"), encoding="utf-8")
    out = tmp_path / "out.conll"
    assert main(["--conll", str(key), "--out", str(out)]) == 0
    capsys.readouterr()
    headers = [line for line in out.read_text().splitlines() if line.startswith("#begin")]
    assert headers == [line for line in key.read_text().splitlines() if line.startswith("#begin")]
    assert all(line.endswith(f"; part {part}") for line in headers)
    official = official_score("muc", key, out)
    ours = evaluate(read_conll(key)[0], read_conll(out)[0]).muc
    assert official.coreference.recall_num > 0 and official.mentions.recall_num > 0
    assert official.coreference.recall == pytest.approx(ours.recall, abs=1e-4)
    assert official.coreference.precision == pytest.approx(ours.precision, abs=1e-4)


def test_documents_from_raw_text_keep_the_three_digit_part(tmp_path: Path):
    path = tmp_path / "text.conll"
    write_conll([resolve("Anna met her brother. She thanked him.")], path)
    assert path.read_text().startswith("#begin document (text); part 000\n")
