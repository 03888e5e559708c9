"""Raw text to tokens, offsets and sentences in the corpora's Treebank style (coref.io.text)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coref.io.text import TokenizedText, document_from_text, tokenize


def words(text: str) -> list[str]:
    return list(tokenize(text).tokens)


def sentences(text: str) -> list[list[str]]:
    tokenized = tokenize(text)
    return [list(tokenized.tokens[start:end]) for start, end in tokenized.sentences]


def check_invariants(tokenized: TokenizedText) -> None:
    """Offsets reproduce the tokens, in order and without overlap; sentences tile the tokens."""
    assert len(tokenized.tokens) == len(tokenized.offsets)
    previous_end = 0
    for token, (start, end) in zip(tokenized.tokens, tokenized.offsets):
        assert tokenized.text[start:end] == token
        assert previous_end <= start < end
        assert not tokenized.text[previous_end:start].strip()  # only whitespace is skipped
        previous_end = end
    assert not tokenized.text[previous_end:].strip()
    position = 0
    for start, end in tokenized.sentences:
        assert start == position < end
        position = end
    assert position == len(tokenized.tokens)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("I don't know.", ["I", "do", "n't", "know", "."]),
        ("We can't, won't, isn't.", ["We", "ca", "n't", ",", "wo", "n't", ",", "is", "n't", "."]),
        ("It’s John’s, and they didn’t.", ["It", "’s", "John", "’s", ",", "and", "they", "did", "n’t", "."]),
        ("I'm sure they'll say we've, you're, he'd.",
         ["I", "'m", "sure", "they", "'ll", "say", "we", "'ve", ",", "you", "'re", ",", "he", "'d", "."]),
        ("JAMES'S dog and James' cat", ["JAMES", "'S", "dog", "and", "James", "'", "cat"]),
        ("O'Hara came at five o'clock.", ["O'Hara", "came", "at", "five", "o'clock", "."]),
        ("Mr. and Mrs. Smith met Dr. J. R. Jones.",
         ["Mr.", "and", "Mrs.", "Smith", "met", "Dr.", "J.", "R.", "Jones", "."]),
        ("The U.S. Army, e.g. its generals", ["The", "U.S.", "Army", ",", "e.g.", "its", "generals"]),
        ("He paid $1,000.50 at 3:30 for 1/2 of the 1960s.",
         ["He", "paid", "$", "1,000.50", "at", "3:30", "for", "1/2", "of", "the", "1960s", "."]),
        ('"Go," she said (quietly).', ['"', "Go", ",", '"', "she", "said", "(", "quietly", ")", "."]),
        ("“Yes” -- or so... ``Maybe''", ["“", "Yes", "”", "--", "or", "so", "...", "``", "Maybe", "''"]),
        ("a third-person form", ["a", "third", "-", "person", "form"]),
        ("the M*nchen team", ["the", "M*nchen", "team"]),
    ],
)
def test_tokens(text: str, expected: list[str]) -> None:
    tokenized = tokenize(text)
    assert list(tokenized.tokens) == expected
    check_invariants(tokenized)


def test_offsets_are_character_spans() -> None:
    tokenized = tokenize("  Don't\tstop!\n")
    assert tokenized.tokens == ("Do", "n't", "stop", "!")
    assert tokenized.offsets == ((2, 4), (4, 7), (8, 12), (12, 13))


def test_sentence_ends() -> None:
    text = 'He left. "Why?" she asked. Mr. Smith stayed! Then 5 more came... It was 5 p.m. Dinner followed.'
    assert sentences(text) == [
        ["He", "left", "."],
        ['"', "Why", "?", '"', "she", "asked", "."],
        ["Mr.", "Smith", "stayed", "!"],
        ["Then", "5", "more", "came", "..."],
        ["It", "was", "5", "p.m."],
        ["Dinner", "followed", "."],
    ]


def test_no_sentence_end_after_abbreviations_initials_or_before_lowercase() -> None:
    text = "Dr. Who met J. R. Tolkien in the U.S. Senate on Dec. 5. it was fine."
    assert len(tokenize(text).sentences) == 1


def test_closing_quote_stays_with_its_sentence() -> None:
    assert sentences('She said "Stop." Then he stopped.') == [
        ["She", "said", '"', "Stop", ".", '"'],
        ["Then", "he", "stopped", "."],
    ]


def test_blank_line_always_ends_a_sentence() -> None:
    text = "CHAPTER I\n\nthe beginning\n  \nof it. One more\nline."
    assert sentences(text) == [["CHAPTER", "I"], ["the", "beginning"], ["of", "it", "."], ["One", "more", "line", "."]]
    check_invariants(tokenize(text))


@pytest.mark.parametrize("text", ["", "   ", "\n\t\n"])
def test_empty_text_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="empty or whitespace-only"):
        tokenize(text)
    with pytest.raises(ValueError, match="empty or whitespace-only"):
        document_from_text(text)


def test_invariants_on_awkward_text() -> None:
    text = "Well...?! 'Tis (so) -- “no”... he’d say—yes; 3.5% of U.S.-made #tags & ***stars*** ‘quoted’ ½."
    check_invariants(tokenize(text))


@given(st.text(alphabet=st.sampled_from(list("aZ9 .,!?'’\"“”()-*$\n\t")) | st.characters(), min_size=1))
def test_invariants_on_any_text(text: str) -> None:
    if text.strip():
        check_invariants(tokenize(text))


def test_document_from_text() -> None:
    document, offsets = document_from_text("Mary saw John. He waved.", id="story")
    assert document.id == "story"
    assert document.tokens == ("Mary", "saw", "John", ".", "He", "waved", ".")
    assert document.sentences == ((0, 4), (4, 7))
    assert document.mentions == ()
    assert offsets == tokenize("Mary saw John. He waved.").offsets
