"""Document invariants and the R/E/L encoding (paper §2, Fig. 2), including round-trip property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coref.document import (
    MAX_MENTION_LENGTH,
    Document,
    DocumentError,
    EncodingError,
    EntityAnnotation,
    Mention,
    bracketed,
    decode_entities,
    encode_entities,
    encoding_problems,
    sentence_chunks,
    split_crossing,
)

FIGURE_1 = "John wanted to go to the coffee shop . He was told that it sold the best beans .".split()


def figure_1() -> Document:
    # [John]1 wanted to go to [the coffee shop]2 . [He]1 was told that [it]2 sold [the best beans]3 .
    mentions = [Mention(0, 1, 40), Mention(5, 8, 17), Mention(9, 10, 40), Mention(13, 14, 17), Mention(15, 18, 3)]
    return Document("fig1", FIGURE_1, [(0, 9), (9, 19)], mentions)


def test_figure_1_encoding_by_hand():
    annotation = encode_entities(figure_1())
    assert annotation.R == (1, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0)
    assert annotation.E == (1, 0, 0, 0, 0, 2, 2, 2, 0, 1, 0, 0, 0, 2, 0, 3, 3, 3, 0)
    assert annotation.L == (1, 1, 1, 1, 1, 3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 2, 1, 1)
    assert annotation.num_entities == 3


def test_decode_inverts_encode_with_entities_renumbered():
    document = figure_1()
    decoded = decode_entities("fig1", document.tokens, encode_entities(document), document.sentences)
    assert decoded.partition() == document.partition()
    assert [m.entity for m in decoded.mentions] == [1, 2, 1, 2, 3]
    assert decoded.sentences == document.sentences


def test_adjacent_mentions_of_one_entity_stay_two_mentions():
    document = Document("d", "a b c d".split(), mentions=[Mention(0, 2, 5), Mention(2, 3, 5)])
    annotation = encode_entities(document)
    assert annotation.L == (2, 1, 1, 1)
    assert decode_entities("d", document.tokens, annotation).partition() == document.partition()


@pytest.mark.parametrize(
    ("mentions", "expected"),
    [
        ([Mention(0, 3, 1), Mention(1, 2, 2)], "nests with"),
        ([Mention(0, 2, 1), Mention(1, 3, 2)], "crosses"),
        ([Mention(0, 2, 1), Mention(0, 2, 2)], "duplicates"),
    ],
)
def test_overlapping_mentions_are_refused_with_reasons(mentions, expected):
    document = Document("d", "a b c d".split(), mentions=mentions)
    with pytest.raises(EncodingError, match=expected) as error:
        encode_entities(document)
    assert error.value.document_id == "d" and len(error.value.problems) == 1


def test_split_crossing_keeps_nesting_and_drops_the_later_crossing_mention():
    outer, inner, crossing, later = Mention(0, 5, 1), Mention(1, 3, 2), Mention(2, 7, 3), Mention(5, 6, 4)
    kept, dropped = split_crossing([later, crossing, inner, outer])
    assert kept == [outer, inner, later]
    assert dropped == [(crossing, inner)]  # reported against the innermost mention it starts inside


def test_long_mentions_are_reported_not_cut():
    tokens = ["w"] * 30
    document = Document("d", tokens, mentions=[Mention(2, 2 + MAX_MENTION_LENGTH + 1, 1)])
    assert encoding_problems(document) == ["mention (2, 28) is 26 tokens long (max 25)"]
    with pytest.raises(EncodingError, match="26 tokens long"):
        encode_entities(document)
    assert encode_entities(document, max_length=26).L[2] == 26


@pytest.mark.parametrize(
    ("R", "E", "L", "message"),
    [
        ((0, 1), (0, 0), (1, 1), "entity 0 is neither"),  # R=1 needs an entity
        ((1, 0), (1, 0), (2, 1), "is not continued"),  # L says 2 tokens, R stops after one
        ((1, 1), (2, 2), (1, 1), "entity 2 is neither"),  # the first entity must be 1
        ((0, 0), (0, 1), (1, 1), "R=0 needs E=0"),
        ((1, 1), (1, 1), (3, 2), "is not continued"),  # runs past the end
    ],
)
def test_inconsistent_annotations_are_refused(R, E, L, message):
    with pytest.raises(ValueError, match=message):
        decode_entities("d", ["a", "b"], EntityAnnotation(R, E, L))


def test_document_invariants():
    with pytest.raises(DocumentError, match="empty"):
        Document("empty", [])
    with pytest.raises(DocumentError, match="tile"):
        Document("d", "a b c".split(), [(0, 1), (2, 3)])
    with pytest.raises(DocumentError, match="cover 2 of 3"):
        Document("d", "a b c".split(), [(0, 2)])
    with pytest.raises(DocumentError, match="outside"):
        Document("d", "a b".split(), mentions=[Mention(1, 3, 1)])
    with pytest.raises(ValueError, match="lengths differ"):
        EntityAnnotation((0,), (0, 0), (1,))


def test_document_helpers():
    document = figure_1()
    assert document.key == ("fig1", 0)
    assert document.entities() == [40, 17, 3]
    assert document.clusters() == [[(0, 1), (9, 10)], [(5, 8), (13, 14)], [(15, 18)]]
    assert document.sentence_of()[8:10] == [0, 1]
    assert document.mention_text(document.mentions[1]) == "the coffee shop"
    assert document.replace(part=2).key == ("fig1", 2)


@st.composite
def encodable_documents(draw) -> Document:
    """Random documents with non-overlapping mentions of at most 25 tokens and random entity labels."""
    size = draw(st.integers(1, 60))
    mentions, t = [], 0
    while t < size:
        if draw(st.booleans()):
            length = draw(st.integers(1, min(MAX_MENTION_LENGTH, size - t)))
            mentions.append(Mention(t, t + length, draw(st.integers(-3, 6))))
            t += length
        else:
            t += draw(st.integers(1, 4))
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=5))) if size > 1 else []
    bounds = [0, *cuts, size]
    return Document("doc", [f"w{i}" for i in range(size)], list(zip(bounds, bounds[1:])), mentions)


@given(encodable_documents())
def test_round_trip_property(document: Document):
    annotation = encode_entities(document)
    decoded = decode_entities(document.id, document.tokens, annotation, document.sentences)
    assert decoded.partition() == document.partition()
    assert encode_entities(decoded) == annotation  # and back: the encoding is canonical
    assert all(1 <= length <= MAX_MENTION_LENGTH for length in annotation.L)
    seen = 0
    for R, E in zip(annotation.R, annotation.E):  # entities numbered by first mention
        assert E <= seen + 1 and (R == 1) == (E > 0)
        seen = max(seen, E)


def test_sentence_chunks_cut_between_sentences_and_never_inside_a_mention():
    tokens = [f"w{i}" for i in range(10)]
    sentences = [(0, 3), (3, 5), (5, 8), (8, 10)]
    mentions = [Mention(0, 1, 7), Mention(4, 6, 8), Mention(9, 10, 7)]  # (4, 6) spans the start of sentence 3
    pieces = sentence_chunks(Document("d", tokens, sentences, mentions), max_tokens=4)
    assert [piece.tokens for piece in pieces] == [tuple(tokens[0:3]), tuple(tokens[3:8]), tuple(tokens[8:10])]
    assert [piece.id for piece in pieces] == ["d#0", "d#1", "d#2"]
    assert pieces[1].sentences == ((0, 2), (2, 5)) and pieces[1].mentions == (Mention(1, 3, 8),)
    assert pieces[2].mentions == (Mention(1, 2, 7),)  # entity 7 is new in its piece: the context is truncated
    assert sentence_chunks(figure_1(), max_tokens=100) == [figure_1()]


def test_bracketed_shows_nested_mentions_with_their_entities():
    mentions = [Mention(0, 1, 1), Mention(2, 3, 1), Mention(2, 4, 2)]
    document = Document("d", "John saw his dog .".split(), mentions=mentions)
    assert bracketed(document) == "[John]1 saw [[his]1 dog]2 ."


def test_part_text_is_kept_by_replace_checked_and_not_compared():
    document = Document("d", ["a", "b"], part=0, part_text="000")
    assert document.replace(mentions=[Mention(0, 1, 1)]).part_text == "000"
    assert document.replace(part=2).part_text is None  # a new part drops the old text
    assert document == Document("d", ["a", "b"], part=0)
    with pytest.raises(DocumentError, match="part_text '1' does not write part 0"):
        Document("d", ["a"], part=0, part_text="1")
