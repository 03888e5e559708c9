"""Prompted stories for D-MNEMELM (Papalampidi et al. 2022): prompts, per-token labels, splitting, corpora."""

from __future__ import annotations

from pathlib import Path

import pytest

from coref.corpora.registry import CorpusError
from coref.corpora.stories import (
    SEP,
    PromptedStory,
    PromptRules,
    load_stories,
    prompt_tokens,
    prompted_story,
    stories_from_document,
    story_stats,
)
from coref.document import Document, Mention

#            0    1    2      3   4    5    6   7    8      9    10  11    12    13  14  15   16   17 18
TEXT = "He met Mary Smith . She smiled at him . It rained . The old man waved . Mary left .".split()
SENTENCES = [(0, 5), (5, 10), (10, 13), (13, 18), (18, 21)]
MAN, MARY, RAIN = 7, 3, 9  # arbitrary source labels: the story renumbers by first mention


def story_document() -> Document:
    # [He]m met [Mary Smith]y . [She]y smiled at [him]m . [It]r rained . [The old man]m waved . [Mary]y left .
    mentions = [
        Mention(0, 1, MAN),
        Mention(2, 4, MARY),
        Mention(5, 6, MARY),
        Mention(8, 9, MAN),
        Mention(10, 11, RAIN),  # a singleton
        Mention(13, 16, MAN),
        Mention(18, 19, MARY),
    ]
    return Document("story", TEXT, SENTENCES, mentions)


def test_prompt_is_the_first_non_pronoun_mention_per_entity_ordered_by_first_mention():
    story = prompted_story(story_document(), "hand")
    # the man is mentioned first (by "He"), so he is entity 0, written as his first non-pronoun mention
    assert story.entities == (("The", "old", "man"), ("Mary", "Smith"))
    assert story.mentions == ((0, 1, 0), (2, 4, 1), (5, 6, 1), (8, 9, 0), (13, 16, 0), (18, 19, 1))
    assert (story.id, story.corpus, story.tokens, story.sentences) == ("story", "hand", tuple(TEXT), tuple(SENTENCES))


def test_pronoun_first_mentions_are_kept_when_asked_or_when_there_is_nothing_else():
    assert prompted_story(story_document(), "hand", PromptRules(skip_pronouns=False)).entities == (
        ("He",),
        ("Mary", "Smith"),
    )
    narrator = Document("i", "I came . I saw me .".split(), [(0, 3), (3, 7)], [Mention(0, 1, 1), Mention(3, 4, 1)])
    assert prompted_story(narrator, "hand").entities == (("I",),)


def test_singletons_are_left_out_unless_min_mentions_is_one():
    story = prompted_story(story_document(), "hand", PromptRules(min_mentions=1))
    assert story.entities == (("The", "old", "man"), ("Mary", "Smith"), ("It",))
    assert (10, 11, 2) in story.mentions


def test_long_surface_forms_are_cut():
    story = prompted_story(story_document(), "hand", PromptRules(max_surface_tokens=2))
    assert story.entities == (("The", "old"), ("Mary", "Smith"))


def test_entity_labels_cover_the_sentence_of_each_mention_with_several_labels_and_none():
    labels = prompted_story(story_document(), "hand").entity_labels
    both, man, mary, nobody = frozenset({0, 1}), frozenset({0}), frozenset({1}), frozenset()
    expected = [both] * 5 + [both] * 5 + [nobody] * 3 + [man] * 5 + [mary] * 3
    assert labels == tuple(expected)


def test_a_mention_across_sentences_labels_every_sentence_it_overlaps():
    document = Document("x", "a b . c d .".split(), [(0, 3), (3, 6)], [Mention(1, 4, 0), Mention(5, 6, 0)])
    assert prompted_story(document, "hand").entity_labels == (frozenset({0}),) * 6


def test_mention_mask_marks_the_tokens_of_prompt_entity_mentions_only():
    mask = prompted_story(story_document(), "hand").mention_mask
    assert [t for t, inside in enumerate(mask) if inside] == [0, 2, 3, 5, 8, 13, 14, 15, 18]  # not the singleton "It"


def test_nested_mentions_of_other_entities_are_kept():
    # [[his]1 dog]2 barked . [He]1 ran after [it]2 .
    tokens = "his dog barked . He ran after it .".split()
    mentions = [Mention(0, 1, 1), Mention(0, 2, 2), Mention(4, 5, 1), Mention(7, 8, 2)]
    story = prompted_story(Document("n", tokens, [(0, 4), (4, 9)], mentions), "hand")
    assert story.entities == (("his",), ("his", "dog"))  # "his" is entity 1's only kind of mention
    assert story.mentions == ((0, 1, 0), (0, 2, 1), (4, 5, 0), (7, 8, 1))


def test_prompt_tokens_enclose_each_entity_in_separators_and_name_its_owner():
    tokens, owners = prompt_tokens(prompted_story(story_document(), "hand"))
    assert tokens == [SEP, "The", "old", "man", SEP, "Mary", "Smith", SEP]
    assert owners == [-1, 0, 0, 0, -1, 1, 1, -1]
    empty = PromptedStory("e", "hand", ("a", "b"), ((0, 2),), (), ())
    assert prompt_tokens(empty, sep="|") == (["|"], [-1])


def test_max_entities_keeps_the_most_mentioned_then_orders_them_by_first_mention():
    # a (1 mention) b (3) c (2) d (4): the top 2 are d and b, listed by first mention as b, d
    tokens = "a b c d b c d b d d .".split()
    labels = {"a": 1, "b": 2, "c": 3, "d": 4}
    document = Document("cap", tokens, None, [Mention(t, t + 1, labels[w]) for t, w in enumerate(tokens) if w != "."])
    story = prompted_story(document, "hand", PromptRules(max_entities=2, min_mentions=1))
    assert story.entities == (("b",), ("d",))
    assert story.mentions == ((1, 2, 0), (3, 4, 1), (4, 5, 0), (6, 7, 1), (7, 8, 0), (8, 9, 1), (9, 10, 1))
    assert prompted_story(document, "hand", PromptRules(max_entities=1, min_mentions=1)).entities == (("d",),)
    # a tie goes to the earlier first mention
    tie = Document("tie", "x y x y .".split(), None, [Mention(t, t + 1, t % 2) for t in range(4)])
    assert prompted_story(tie, "hand", PromptRules(max_entities=1)).entities == (("x",),)


def test_splitting_cuts_at_sentence_boundaries_with_a_prompt_per_piece():
    stories = stories_from_document(story_document(), "hand", max_tokens=11)
    assert [story.id for story in stories] == ["story#0", "story#1"]
    first, second = stories
    assert first.tokens == tuple(TEXT[:10]) and first.sentences == ((0, 5), (5, 10))
    assert second.tokens == tuple(TEXT[10:]) and second.sentences == ((0, 3), (3, 8), (8, 11))
    assert first.entities == (("He",), ("Mary", "Smith"))  # no name for the man within this piece
    # in the second piece the man and Mary are mentioned once each: no entity has two mentions there
    assert second.entities == ()
    assert stories_from_document(story_document(), "hand", max_tokens=11, rules=PromptRules(min_mentions=1))[
        1
    ].entities == (
        ("It",),
        ("The", "old", "man"),
        ("Mary",),
    )
    assert stories_from_document(story_document(), "hand") == [prompted_story(story_document(), "hand")]


def test_invalid_stories_are_refused():
    with pytest.raises(ValueError, match="do not tile"):
        PromptedStory("bad", "hand", ("a", "b"), ((0, 1),), (), ())
    with pytest.raises(ValueError, match="out of range"):
        PromptedStory("bad", "hand", ("a", "b"), ((0, 2),), (("a",),), ((0, 1, 1),))


def test_unknown_corpus_or_split_is_a_one_line_error_naming_the_choices():
    with pytest.raises(CorpusError, match="unknown story corpus 'wikiplots': choose from sample, litbank"):
        load_stories("wikiplots", "train")
    with pytest.raises(CorpusError, match="unknown split 'valid' of corpus 'lambada': choose from train, dev, test"):
        load_stories("lambada", "valid")
    with pytest.raises(CorpusError, match="unknown split 'test2' of corpus 'litbank': choose from train, dev, test"):
        load_stories("litbank", "test2")


@pytest.mark.parametrize("split", ["train", "dev", "test"])
def test_sample_loads_without_a_data_dir(split, monkeypatch):
    monkeypatch.delenv("ENTITYLM_DATA", raising=False)
    stories = load_stories("sample", split)
    assert stories and all(story.corpus == "sample" and story.entities for story in stories)
    for story in stories:
        tokens, owners = prompt_tokens(story)
        assert len(tokens) == len(owners) and owners.count(-1) == len(story.entities) + 1
        assert len(story.entity_labels) == len(story.mention_mask) == len(story.tokens)


# ---- real corpora -----------------------------------------------------------------------------------------

# train documents per corpus
REAL = {"litbank": 80, "ontogum": 177, "inscript": 637}


@pytest.mark.parametrize("corpus", sorted(REAL))
def test_real_corpus_train_split_loads_with_sensible_counts(corpus, data_dir: Path):
    if not (data_dir / corpus).is_dir():
        pytest.skip(f"corpus {corpus!r} unavailable: {data_dir / corpus} does not exist")
    whole = load_stories(corpus, "train", data_dir)
    pieces = load_stories(corpus, "train", data_dir, max_tokens=1000)
    for name, stories in (("whole", whole), ("max_tokens=1000", pieces)):
        stats = story_stats(stories)
        print(corpus, "train", name, {key: round(value, 3) for key, value in stats.items()})
        assert 2 <= stats["mean_entities"] <= 20
        assert 0.5 < stats["labelled_share"] < 1 and 0.1 < stats["mention_share"] < 0.3
    assert len(whole) == REAL[corpus]
    assert len(pieces) >= len(whole) and sum(len(s.tokens) for s in pieces) == sum(len(s.tokens) for s in whole)
    if corpus != "inscript":  # stories of 200-650 tokens are never cut
        assert len(pieces) > len(whole)


def test_lambada_stories_are_whole_passages_without_a_prompt(data_dir: Path):
    if not (data_dir / "lambada").is_dir():
        pytest.skip(f"LAMBADA unavailable: {data_dir / 'lambada'} does not exist")
    train, dev = load_stories("lambada", "train", data_dir), load_stories("lambada", "dev", data_dir)
    assert (len(train), len(dev)) == (4382, 487)
    assert not {story.id for story in train} & {story.id for story in dev}
    assert all(not story.entities and not story.mentions for story in train)
    assert train[0].id.startswith("lambada-dev-") and train[0].sentences[-1][1] == len(train[0].tokens)
