"""Quotations found by rule (coref.quotations) in each common convention, LitBank's quotation layer read to
token spans, and a floor under the dev scores of benchmarks/quotations.py."""

from __future__ import annotations

import pytest

from coref.corpora.litbank_quotations import load_litbank_quotations
from coref.io.text import tokenize
from coref.quotations import find_quotations, span_scores


def quoted(text: str, depth: int = 0) -> list[str]:
    """The text of each quotation found at ``depth``, tokens joined by spaces."""
    tokens = tokenize(text).tokens
    return [" ".join(tokens[q.start:q.end]) for q in find_quotations(text) if q.depth == depth]


def test_curly_double_quotes():
    assert quoted("“Come here,” she said. “Now!”") == ["“ Come here , ”", "“ Now ! ”"]


def test_straight_double_quotes():
    assert quoted('He looked up. "Who is there?" "Only me," said the boy.') == [
        '" Who is there ? "', '" Only me , "']


def test_dialogue_broken_by_said_she_is_two_quotations():
    assert quoted('"I think," said she, "that we should go."') == ['" I think , "', '" that we should go . "']
    assert quoted('“I think,” said she, “that we should go.”') == ["“ I think , ”", "“ that we should go . ”"]


def test_single_quotes_told_apart_from_apostrophes():
    text = "‘Don’t go, ’tis late,’ said Tom. ‘The boys’ hats are o’er there.’ It was o’clock."
    assert quoted(text) == ["‘ Do n’t go , ’ tis late , ’", "‘ The boys ’ hats are o’er there . ’"]
    straight = "'Don't go, 'tis late,' said Tom. 'The boys' hats are there.'"
    assert quoted(straight) == ["' Do n't go , ' tis late , '", "' The boys ' hats are there . '"]


def test_a_quotation_continued_over_paragraphs():
    text = '"The first part of the tale.\n\n"The second part, which ends it."\n\nShe stopped.'
    spans = find_quotations(text)
    tokens = tokenize(text).tokens
    assert [" ".join(tokens[q.start:q.end]) for q in spans] == [
        '" The first part of the tale .', '" The second part , which ends it . "']
    assert [q.close_mark for q in spans] == [None, '"']


def test_continuation_without_paragraphs_in_pretokenised_text():
    tokens = '" The first part . " The second part . " she said .'.split()
    # sentences as LitBank lines: the new opening mark starts a line
    sentences = [(0, 5), (5, 14)]
    found = [(q.start, q.end, q.close_mark) for q in find_quotations(tokens, sentences)]
    assert found == [(0, 5, None), (5, 11, '"')]


def test_nested_single_inside_double():
    text = '"He told me \'Good night,\' and left," said Jack.'
    assert quoted(text) == ['" He told me \' Good night , \' and left , "']
    assert quoted(text, depth=1) == ["' Good night , '"]


def test_scare_quotes_are_not_speech():
    assert quoted('He was a "true sea-dog" of the old kind. "Aye," he said.') == ['" Aye , "']


def test_span_scores_exact_and_token_overlap():
    scores = span_scores([([(0, 4), (6, 8)], [(0, 4), (6, 9)])])
    assert scores["exact_precision"] == scores["exact_recall"] == 0.5
    assert scores["token_recall"] == 1.0 and scores["token_precision"] == pytest.approx(6 / 7)


def test_litbank_quotations_are_token_spans_of_the_conll_tokens(litbank_dir):
    from coref.corpora.registry import load_corpus

    documents = load_litbank_quotations("dev", litbank_dir.parent)
    assert len(documents) == 10 and sum(len(d.quotations) for d in documents) == 130
    conll = {d.id: d for d in load_corpus("litbank", "dev", litbank_dir.parent).documents}
    for document in documents:
        assert conll[document.id].tokens == document.tokens
        for quotation in document.quotations:
            assert " ".join(document.tokens[quotation.start:quotation.end]) == quotation.text
    first = documents[0].quotations[0]
    assert first.speaker is not None and first.end > first.start


def test_dev_scores_stay_above_their_floor(litbank_dir):
    from benchmarks.quotations import evaluate

    scores = evaluate("dev", litbank_dir.parent)  # measured: exact P 83.1 R 90.8 F1 86.8, token F1 93.9
    assert scores["exact_precision"] >= 0.82 and scores["exact_recall"] >= 0.90
    assert scores["exact_f1"] >= 0.86 and scores["token_f1"] >= 0.93
