"""GAP: loading with FILE:LINE errors, decisions from resolved documents, the official metric (coref.corpora.gap)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from coref.corpora.gap import (
    COLUMNS,
    GapError,
    GapExample,
    evaluate_gap,
    gap_decisions,
    gap_scores,
    load_gap,
    pronoun_gender,
)
from coref.corpora.registry import CorpusError
from coref.document import Document, Mention
from coref.io.text import TokenizedText, tokenize

TEXT = "Mary met Anna before she left."
ROW = ["ex-1", TEXT, "she", "21", "Mary", "0", "FALSE", "Anna", "9", "TRUE", "http://en.wikipedia.org/wiki/X"]


def write_gap(data_dir: Path, rows: list[list[str]], name: str = "gap-development.tsv") -> Path:
    path = data_dir / "gap" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join("\t".join(row) for row in [list(COLUMNS), *rows]) + "\n", encoding="utf-8")
    return path


def example(text: str, pronoun: str, a: str, b: str, a_coref: bool = False, b_coref: bool = False) -> GapExample:
    """An example whose strings are found at their first occurrence (the pronoun as a whole word)."""
    pronoun_offset = re.search(rf"\b{pronoun}\b", text).start()
    return GapExample("x", text, pronoun, pronoun_offset, a, text.index(a), a_coref, b, text.index(b), b_coref, "")


# ---- loading ------------------------------------------------------------------------------------------------


def test_load_small_file(tmp_path: Path) -> None:
    second = ["ex-2", "He said Bob saw Tom.", "He", "0", "Bob", "8", "true", "Tom", "16", "False", ""]
    write_gap(tmp_path, [ROW, second])
    first, loaded = load_gap("dev", tmp_path)
    assert first == GapExample("ex-1", TEXT, "she", 21, "Mary", 0, False, "Anna", 9, True, ROW[-1])
    assert (loaded.pronoun, loaded.a_coref, loaded.b_coref, loaded.gender) == ("He", True, False, "masculine")
    assert load_gap("development", tmp_path) == [first, loaded]


@pytest.mark.parametrize(
    "column, value, message",
    [
        (None, None, "10 TAB-separated columns, expected 11"),
        (3, "22", "Pronoun 'she' is not at offset 22 of the text"),
        (5, "x", "A-offset 'x' is not a character offset"),
        (8, "90", "B 'Anna' is not at offset 90 of the text"),
        (6, "yes", "A-coref 'yes' is neither TRUE nor FALSE"),
        (2, "it", "pronoun 'it' is not one of"),
        (0, "ex-1", "ID 'ex-1' repeats an earlier row's"),
    ],
)
def test_bad_row_names_file_and_line(tmp_path: Path, column: int | None, value: str | None, message: str) -> None:
    bad = list(ROW[:-1]) if column is None else [value if i == column else field for i, field in enumerate(ROW)]
    bad[0] = bad[0] if column == 0 else "ex-2"
    path = write_gap(tmp_path, [ROW, bad], "gap-test.tsv")
    with pytest.raises(GapError, match=message) as error:
        load_gap("test", tmp_path)
    assert str(error.value).startswith(f"{path}:3: ")


def test_bad_header(tmp_path: Path) -> None:
    path = tmp_path / "gap" / "gap-validation.tsv"
    path.parent.mkdir()
    path.write_text("\t".join(ROW) + "\n", encoding="utf-8")
    with pytest.raises(GapError, match=re.escape(f"{path}:1: expected the header row")):
        load_gap("validation", tmp_path)


def test_missing_file_and_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="gap-test.tsv does not exist"):
        load_gap("test", tmp_path)
    with pytest.raises(CorpusError, match="unknown GAP split 'train': choose from dev, test, validation"):
        load_gap("train", tmp_path)


def test_pronoun_gender() -> None:
    genders = [pronoun_gender(p) for p in ("She", "her", "hers", "HE", "his", "him")]
    assert genders == ["feminine"] * 3 + ["masculine"] * 3
    with pytest.raises(ValueError, match="'they' is not a GAP pronoun"):
        pronoun_gender("they")


# ---- decisions ----------------------------------------------------------------------------------------------


def resolved(tokenized: TokenizedText, *mentions: tuple[int, int, int]) -> Document:
    return Document("x", tokenized.tokens, tokenized.sentences, [Mention(*m) for m in mentions])


def test_decisions_follow_the_pronouns_entity() -> None:
    gap = example(TEXT, "she", "Mary", "Anna")
    tokenized = tokenize(TEXT)  # Mary met Anna before she left .
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 1, 1), (2, 3, 2), (4, 5, 2))) == (False, True)
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 1, 1), (2, 3, 2), (4, 5, 1))) == (True, False)
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 1, 1), (2, 3, 1), (4, 5, 1))) == (True, True)


def test_no_pronoun_mention_means_no_coreference() -> None:
    gap = example(TEXT, "she", "Mary", "Anna")
    tokenized = tokenize(TEXT)
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 1, 1), (2, 3, 1))) == (False, False)


def test_pronoun_takes_the_smallest_mention_containing_it() -> None:
    gap = example(TEXT, "she", "Mary", "Anna")
    tokenized = tokenize(TEXT)
    document = resolved(tokenized, (0, 1, 1), (2, 3, 2), (3, 6, 1), (4, 5, 2))
    assert gap_decisions(gap, tokenized, document) == (False, True)


def test_name_prefers_mentions_within_it_then_the_smallest_containing_one() -> None:
    text = "Mary Smith's sister Anna said she would come."
    gap = example(text, "she", "Mary Smith", "Anna")
    tokenized = tokenize(text)  # Mary Smith 's sister Anna said she would come .
    assert tokenized.tokens[:7] == ("Mary", "Smith", "'s", "sister", "Anna", "said", "she")
    # within A: "Mary" (entity 1) and "Smith" (entity 3); the pronoun is entity 3
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 1, 1), (1, 2, 3), (6, 7, 3))) == (True, False)
    # no mention within A: the smallest containing one, "Mary Smith 's" (entity 7), not "... sister" (entity 3)
    document = resolved(tokenized, (0, 3, 7), (0, 4, 3), (6, 7, 3))
    assert gap_decisions(gap, tokenized, document) == (False, False)
    # no mention within B either: "Anna" is inside "sister Anna" (entity 3)
    document = resolved(tokenized, (0, 4, 3), (3, 5, 3), (6, 7, 3))
    assert gap_decisions(gap, tokenized, document) == (True, True)


def test_the_pronouns_own_mention_does_not_stand_for_a_name() -> None:
    text = "John and his wife met Bob."
    gap = example(text, "his", "John", "Bob")
    tokenized = tokenize(text)
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 4, 1), (5, 6, 1))) == (False, True)


def test_name_cut_inside_a_token_still_finds_its_mention() -> None:
    text = "Mrs. Hazen said she left."  # GAP writes such a name as "Mrs", without its period
    gap = example(text, "she", "Mrs", "Hazen")
    tokenized = tokenize(text)
    assert gap_decisions(gap, tokenized, resolved(tokenized, (0, 2, 1), (3, 4, 1))) == (True, True)


def test_decisions_need_the_same_tokens() -> None:
    gap = example(TEXT, "she", "Mary", "Anna")
    with pytest.raises(ValueError, match="tokens are not the tokenised text's"):
        gap_decisions(gap, tokenize(TEXT), Document("x", ["Mary"], mentions=[Mention(0, 1, 1)]))


# ---- scores -------------------------------------------------------------------------------------------------


def scored_examples() -> list[GapExample]:
    examples = [
        example("He met A and B.", "He", "A", "B", a_coref=True),
        example("A met B at his home.", "his", "A", "B", b_coref=True),
        example("She met A and B.", "She", "A", "B", a_coref=True),
        example("A met B and her.", "her", "A", "B"),
    ]
    return [replace(e, id=f"x-{i}") for i, e in enumerate(examples)]  # the scorer knows an example by its ID


def test_scores_by_hand() -> None:
    decisions = [(True, False), (True, False), (True, True), (False, False)]
    scores = gap_scores(scored_examples(), decisions)
    # masculine: tp 1 (A of 1), tn 1 (B of 1), fp 1 (A of 2), fn 1 (B of 2): P = R = F1 = 1/2 (in percent)
    assert scores["masculine"] == {"tp": 1, "fp": 1, "fn": 1, "tn": 1, "precision": 50.0, "recall": 50.0, "f1": 50.0}
    # feminine: tp 1, fp 1, tn 2: P = 1/2, R = 1, F1 = 2/3
    assert (scores["feminine"]["tp"], scores["feminine"]["fp"], scores["feminine"]["fn"], scores["feminine"]["tn"]) == (
        1, 1, 0, 2)
    assert scores["feminine"]["f1"] == pytest.approx(200 / 3)
    # overall: tp 2, fp 2, fn 1, tn 3: P = 1/2, R = 2/3, F1 = 4/7
    assert scores["overall"]["precision"] == pytest.approx(100 / 2)
    assert scores["overall"]["recall"] == pytest.approx(200 / 3)
    assert scores["overall"]["f1"] == pytest.approx(400 / 7)
    assert scores["bias"] == pytest.approx((2 / 3) / (1 / 2))


def test_bias_is_none_when_an_f1_is_zero() -> None:
    scores = gap_scores(scored_examples(), [(False, False), (False, False), (True, False), (False, False)])
    assert scores["masculine"]["f1"] == 0.0 and scores["feminine"]["f1"] == 100.0
    assert scores["bias"] is None


def test_scores_need_one_decision_per_example() -> None:
    with pytest.raises(ValueError, match="4 GAP examples but 1 decisions"):
        gap_scores(scored_examples(), [(True, True)])


def test_evaluate_with_a_resolver() -> None:
    """A toy resolver: every capitalised token and pronoun is a mention; a pronoun joins the name before it."""

    def resolve(text: str) -> tuple[Document, TokenizedText]:
        tokenized = tokenize(text)
        mentions, entity = [], 0
        for i, token in enumerate(tokenized.tokens):
            if token.lower() in ("he", "his", "she", "her"):
                mentions.append(Mention(i, i + 1, entity))
            elif token[0].isupper():
                entity = i
                mentions.append(Mention(i, i + 1, entity))
        return resolved(tokenized, *(m.span + (m.entity,) for m in mentions)), tokenized

    examples = scored_examples()
    result = evaluate_gap(examples, resolve)
    decisions = []
    for e in examples:
        document, tokenized = resolve(e.text)
        decisions.append(gap_decisions(e, tokenized, document))
    assert decisions == [(False, False), (False, True), (False, False), (False, True)]
    assert result == {**gap_scores(examples, decisions), "examples": 4, "pronoun_without_mention": 0}


# ---- the real data ------------------------------------------------------------------------------------------


def test_real_test_split(data_dir: Path) -> None:
    if not (data_dir / "gap" / "gap-test.tsv").is_file():
        pytest.skip(f"GAP unavailable: {data_dir / 'gap' / 'gap-test.tsv'} does not exist")
    examples = load_gap("test", data_dir)
    assert len(examples) == 2000
    assert len({e.id for e in examples}) == 2000
    assert sum(not e.a_coref and not e.b_coref for e in examples) == 227  # as SOURCE.md counts
    assert not any(e.a_coref and e.b_coref for e in examples)
    for e in examples[:200]:  # the pronoun always falls on exactly one token
        tokenized = tokenize(e.text)
        inside = [token for token, (s, t) in zip(tokenized.tokens, tokenized.offsets)
                  if s < e.pronoun_offset + len(e.pronoun) and e.pronoun_offset < t]
        assert inside == [e.pronoun]
