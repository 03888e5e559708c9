"""Entity metrics of stories (coref.metrics.stories) on hand-made stories whose values are worked out by hand.

The main story has 20 tokens in 4 sentences, so with L = 10 sections each section is 2 tokens (s(t) = ⌊t / 2⌋):

    sentence 0 (tokens 0-5):   [Anna]1 opened [the old door]3 .    attributes {opened, old}
    sentence 1 (tokens 6-9):   [Tom]2 was old .                    attributes {old}   ("was" is AUX)
    sentence 2 (tokens 10-14): [She]1 opened [a box]4 .            attributes {opened}
    sentence 3 (tokens 15-19): [He]2 ran to [her]1 .               attributes {ran}
"""

from __future__ import annotations

import pytest

from coref.document import Document, Mention
from coref.metrics.stories import (
    attribute_consistency,
    coherence,
    corpus_metrics,
    prompt_matches,
    protagonists,
    section_of,
    story_metrics,
)

ANNA, TOM, DOOR, BOX = 1, 2, 3, 4
STORY = Document(
    "story",
    "Anna opened the old door . Tom was old . She opened a box . He ran to her .".split(),
    [(0, 6), (6, 10), (10, 15), (15, 20)],
    [Mention(0, 1, ANNA), Mention(10, 11, ANNA), Mention(18, 19, ANNA), Mention(6, 7, TOM), Mention(15, 16, TOM),
     Mention(2, 5, DOOR), Mention(12, 14, BOX)],
)
TAGS = ("PROPN VERB DET ADJ NOUN PUNCT PROPN AUX ADJ PUNCT PRON VERB DET NOUN PUNCT PRON VERB ADP PRON PUNCT"
        .split())

# Anna: sections 0 (token 0) .. 9 (token 18): 9; Tom: 3 (token 6) .. 7 (token 15): 4; the door: once, 0.
# The protagonists are Anna (3 mentions), Tom (2) and the door (1, before the box): C = (9 + 4 + 0) / 3.
STORY_C = 13 / 3
# Anna's sentences 0, 2, 3 have {opened, old, ran}; sentence 1, without her, has "old": V = 2/3.
# Tom's sentences 1, 3 have {old, ran}; "old" is also in sentence 0: V = 1/2.
# The door's {opened, old} and the box's {opened} all recur elsewhere: V = 0 for both.
STORY_V = 100 * (2 / 3 + 1 / 2 + 0 + 0) / 4  # 29.17
STORY_U = STORY_C / 10 * STORY_V  # 12.64

# A second story of 10 tokens (one token a section): [Tom] ran . It rained . [Tom] sat down .
SECOND = Document("second", "Tom ran . It rained . Tom sat down .".split(), [(0, 3), (3, 6), (6, 10)],
                  [Mention(0, 1, 7), Mention(6, 7, 7)])
SECOND_TAGS = "PROPN VERB PUNCT PRON VERB PUNCT PROPN VERB ADV PUNCT".split()
# C = 6 - 0; Tom's {ran, sat} never occur without him: V = 100; U = 6 / 10 * 100 = 60.


def test_sections_are_equal_token_slices_and_the_last_token_is_in_the_last_section():
    assert [section_of(t, 20) for t in (0, 1, 2, 9, 10, 18, 19)] == [0, 0, 1, 4, 5, 9, 9]
    assert [section_of(t, 7) for t in range(7)] == [0, 1, 2, 4, 5, 7, 8]  # fewer tokens than sections
    assert section_of(19, 20, sections=4) == 3


def test_protagonists_are_the_most_mentioned_entities_ties_by_first_mention():
    assert protagonists(STORY) == [ANNA, TOM, DOOR]
    assert protagonists(STORY, 5) == [ANNA, TOM, DOOR, BOX]


def test_coherence_is_the_mean_section_span_of_the_protagonists():
    assert coherence(STORY) == pytest.approx(STORY_C)
    assert coherence(STORY, count=1) == 9  # Anna alone
    assert coherence(STORY, count=4) == pytest.approx(13 / 4)  # and the box, mentioned once
    assert coherence(STORY, sections=2) == pytest.approx((1 + 1 + 0) / 3)  # halves: tokens 0-9 and 10-19


def test_attribute_consistency_counts_the_attributes_no_sentence_without_the_entity_has():
    shares = attribute_consistency(STORY, TAGS)
    assert shares == pytest.approx({ANNA: 2 / 3, TOM: 1 / 2, DOOR: 0.0, BOX: 0.0})


def test_attributes_are_lowercased_words_and_an_entity_in_every_sentence_is_fully_consistent():
    document = Document("d", "Anna Opened it . Anna opened it .".split(), [(0, 4), (4, 8)],
                        [Mention(0, 1, 1), Mention(4, 5, 1), Mention(2, 3, 2)])
    tags = "PROPN VERB PRON PUNCT PROPN VERB PRON PUNCT".split()
    # Anna is in both sentences (nothing outside): 1; "it" only in sentence 0, whose "opened" sentence 1 has: 0
    assert attribute_consistency(document, tags) == {1: 1.0, 2: 0.0}


def test_an_entity_whose_sentences_hold_no_attribute_has_no_consistency():
    document = Document("d", "Anna ! Anna ?".split(), [(0, 2), (2, 4)], [Mention(0, 1, 1), Mention(2, 3, 1)])
    tags = "PROPN PUNCT PROPN PUNCT".split()
    assert attribute_consistency(document, tags) == {1: None}
    metrics = story_metrics(document, tags)
    assert metrics["coherence"] == 5 and metrics["consistency"] is None and metrics["normalised_consistency"] is None


def test_story_metrics_of_the_main_story():
    metrics = story_metrics(STORY, TAGS)
    assert metrics == pytest.approx({
        "sections": 10, "entities": 4, "mentions": 7 / 4, "prompt_entities": None, "exact": None, "subset": None,
        "coherence": STORY_C, "consistency": STORY_V, "normalised_consistency": STORY_U,
    })
    assert metrics["consistency"] == pytest.approx(29.1667, abs=1e-4)
    assert metrics["normalised_consistency"] == pytest.approx(12.6389, abs=1e-4)


def test_exact_and_subset_match_of_prompt_entities():
    prompt = [("Anna",), ("The", "Old", "Door"), ("Tom", "Smith"), ("a", "red", "box"), ("the", "cat"), ("her",),
              ("opened",)]
    # exact: Anna, the old door (case ignored), her. Subset adds Tom Smith (the proper noun "Tom" of a mention)
    # and a red box (the noun "box" of "a box"). "the cat" shares only the article of "the old door"; "opened"
    # is in no mention.
    assert prompt_matches(STORY, TAGS, prompt) == (3, 5)
    metrics = story_metrics(STORY, TAGS, prompt)
    assert (metrics["prompt_entities"], metrics["exact"], metrics["subset"]) == (7, 3, 5)
    assert prompt_matches(STORY, TAGS, []) == (0, 0)
    with pytest.raises(ValueError, match="a prompt entity has no tokens"):
        prompt_matches(STORY, TAGS, [()])


def test_a_story_without_entities():
    document = Document("empty", "It rained all day .".split())
    metrics = story_metrics(document, "PRON VERB DET NOUN PUNCT".split(), [("Anna",)])
    assert metrics == {
        "sections": 10, "entities": 0, "mentions": None, "prompt_entities": 1, "exact": 0, "subset": 0,
        "coherence": None, "consistency": None, "normalised_consistency": None,
    }


def test_a_single_entity_mentioned_at_the_very_start_and_the_very_end():
    document = Document("one", "Anna came and went and came and saw Anna".split(),
                        mentions=[Mention(0, 1, 1), Mention(8, 9, 1)])
    tags = "PROPN VERB CCONJ VERB CCONJ VERB CCONJ VERB PROPN".split()
    metrics = story_metrics(document, tags)
    # 9 tokens: the last is in section ⌊10 * 8 / 9⌋ = 8; one sentence holds everything, nothing is outside it
    assert (metrics["entities"], metrics["mentions"], metrics["coherence"]) == (1, 2.0, 8)
    assert metrics["consistency"] == 100.0 and metrics["normalised_consistency"] == pytest.approx(80.0)


def test_a_mention_counted_once_however_often_it_is_annotated():
    document = Document("dup", "Anna sang .".split(), mentions=[Mention(0, 1, 1), Mention(0, 1, 1)])
    assert story_metrics(document, "PROPN VERB PUNCT".split())["mentions"] == 1.0


def test_corpus_metrics_average_what_each_story_defines():
    stories = [story_metrics(STORY, TAGS), story_metrics(SECOND, SECOND_TAGS),
               story_metrics(Document("empty", ["Rain", "."]), ["NOUN", "PUNCT"])]
    assert stories[1]["coherence"] == 6 and stories[1]["consistency"] == 100.0
    result = corpus_metrics(stories)
    assert result["stories"] == 3 and result["sections"] == 10
    assert result["entities"] == pytest.approx((4 + 1 + 0) / 3)
    assert result["mentions"] == pytest.approx((7 / 4 + 2) / 2)  # the empty story has no mentions per entity
    assert result["coherence"] == pytest.approx((STORY_C + 6) / 2)
    assert result["consistency"] == pytest.approx((STORY_V + 100) / 2)
    assert result["normalised_consistency"] == pytest.approx((STORY_U + 60) / 2)  # 36.32
    # Table 2's arithmetic: (C̄ / L) V̄ = (31/6) / 10 * 64.58 = 33.37, not the mean of per-story U
    assert result["normalised_consistency_of_means"] == pytest.approx((STORY_C + 6) / 2 / 10 * (STORY_V + 100) / 2)
    assert result["exact"] is None and result["defined"]["exact"] == 0
    assert result["defined"]["coherence"] == 2 and result["defined"]["entities"] == 3


def test_corpus_metrics_of_no_stories_and_of_mixed_sections():
    assert corpus_metrics([])["coherence"] is None
    with pytest.raises(ValueError, match="different numbers of sections"):
        corpus_metrics([story_metrics(STORY, TAGS), story_metrics(STORY, TAGS, sections=5)])


def test_bad_arguments_name_the_document():
    with pytest.raises(ValueError, match="document 'story': 20 tokens but 3 POS tags"):
        story_metrics(STORY, ["NOUN"] * 3)
    with pytest.raises(ValueError, match="at least 1"):
        story_metrics(STORY, TAGS, sections=0)
