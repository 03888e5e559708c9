"""bAbI (coref/corpora/babi.py): parsing, one example per question, the dev split, the name/pronoun chains,
FILE:LINE errors,
and the real 1K English tasks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from coref.corpora.babi import (
    BABI_NAMES,
    PRONOUNS,
    TASKS,
    BabiError,
    BabiExample,
    babi_answer_classes,
    babi_file,
    babi_vocabulary,
    load_babi,
    parse_babi,
)
from coref.corpora.registry import CorpusError

TASK11 = """\
1 Mary went back to the bathroom.
2 After that she went to the bedroom.
3 Where is Mary? \tbedroom\t1 2
4 Daniel went to the garden.
5 Afterwards he journeyed to the office.
6 Where is Daniel? \toffice\t4 5
1 John moved to the hallway.
2 Then he went to the kitchen.
3 Where is John? \tkitchen\t1 2
"""
TASK13 = """\
1 Mary and Daniel went to the bathroom.
2 Then they journeyed to the hallway.
3 Where is Daniel? \thallway\t1 2
4 Sandra went to the kitchen.
5 Daniel and Mary moved to the office.
6 Afterwards they went back to the garden.
7 Where is Mary? \tgarden\t5 6
"""


def write_task(data_dir: Path, name: str, text: str) -> Path:
    path = data_dir / "babi" / "tasks_1-20_v1-2" / "en" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def spans_text(example: BabiExample) -> list[list[str]]:
    return [[" ".join(example.document[start:end]) for start, end in chain] for chain in example.clusters]


# ---- parsing ------------------------------------------------------------------------------------------------


def test_one_example_per_question_with_the_story_so_far() -> None:
    first, second, third = parse_babi(TASK11, 11)
    assert first == BabiExample(
        task=11, story_id=0,
        story=(("mary", "went", "back", "to", "the", "bathroom", "."),
               ("after", "that", "she", "went", "to", "the", "bedroom", ".")),
        question=("where", "is", "mary", "?"), answer="bedroom", supporting_facts=(1, 2), sentence_ids=(1, 2),
        clusters=[[(0, 1), (9, 10)]],
    )
    assert second.story[:2] == first.story and len(second.story) == 4
    assert second.sentence_ids == (1, 2, 4, 5) and second.supporting_sentences == (2, 3)
    assert second.sentences == ((0, 7), (7, 15), (15, 21), (21, 28))
    assert (third.story_id, third.sentence_ids, third.document[:3]) == (1, (1, 2), ("john", "moved", "to"))
    assert all(example.answer_in_document for example in (first, second, third))


def test_answers_are_lowercased_class_labels_and_questions_may_lack_the_space() -> None:
    lists = parse_babi("1 Mary got the apple there.\n2 What is Mary carrying?\tapple,football\t1\n", 8)[0]
    assert (lists.question, lists.answer, lists.answer_in_document) == (
        ("what", "is", "mary", "carrying", "?"), "apple,football", False)
    who = parse_babi("1 Fred gave the milk to Bill.\n2 Who gave the milk? \tFred\t1\n", 5)[0]
    assert who.answer == "fred" and who.answer_in_document


def test_load_babi_files_and_dev_split(tmp_path: Path) -> None:
    """The dev split is the last stories holding at least 10% of the questions: here, of 4, the last story."""
    write_task(tmp_path, "qa11_basic-coreference_train.txt", TASK11 + TASK11.split("\n", 6)[6])
    write_task(tmp_path, "qa11_basic-coreference_test.txt", TASK11)
    train, dev, test = (load_babi(11, split, tmp_path) for split in ("train", "dev", "test"))
    assert [example.story_id for example in train] == [0, 0, 1] and [example.story_id for example in dev] == [2]
    assert test == parse_babi(TASK11, 11)
    with pytest.raises(CorpusError, match="unknown bAbI split 'valid'"):
        load_babi(11, "valid", tmp_path)
    with pytest.raises(CorpusError, match="unknown bAbI task 21"):
        load_babi(21, "train", tmp_path)
    with pytest.raises(CorpusError, match=re.escape("bAbI task 11 train: no file matching") + ".*en-10k"):
        load_babi(11, "train", tmp_path, size="10k")


def test_vocabulary_and_answer_classes() -> None:
    examples = parse_babi(TASK11, 11)
    assert babi_answer_classes(examples) == ["bedroom", "kitchen", "office"]
    vocabulary = babi_vocabulary(examples)
    assert vocabulary == sorted(vocabulary) and {"mary", "she", "?", ".", "where"} <= set(vocabulary)
    assert "Mary" not in vocabulary


# ---- coreference chains -------------------------------------------------------------------------------------


def test_task11_pronoun_joins_the_previous_subject() -> None:
    _, second, third = parse_babi(TASK11, 11)
    assert second.clusters == [[(0, 1), (9, 10)], [(15, 16), (22, 23)]]
    assert spans_text(second) == [["mary", "she"], ["daniel", "he"]]
    assert spans_text(third) == [["john", "he"]]  # "Then" is no pronoun


def test_task13_they_is_a_group_entity_of_its_own() -> None:
    first, second = parse_babi(TASK13, 13)
    assert first.clusters == [[(0, 3), (9, 10)], [(0, 1)], [(2, 3)]]
    # "Daniel and Mary" is the same group as "Mary and Daniel"; the members keep their own (nested) mentions
    assert spans_text(second) == [
        ["mary and daniel", "they", "daniel and mary", "they"], ["mary", "mary"], ["daniel", "daniel"], ["sandra"],
    ]
    assert second.clusters[0] == [(0, 3), (9, 10), (21, 24), (30, 31)]


def test_pronoun_without_antecedent_and_names_from_the_file() -> None:
    """A pronoun with no earlier subject is its own entity; a name unknown to BABI_NAMES counts once it is seen
    capitalised mid-sentence anywhere in the file (and then also at the start of a sentence)."""
    text = "1 She went home.\n2 Zed went to the garden.\n3 Then he left.\n4 Where is Zed?\tgarden\t2\n"
    example = parse_babi(text, 11)[0]
    assert spans_text(example) == [["she"], ["zed", "he"]]


TASK16 = """\
1 Julius is a swan.
2 Brian is a frog.
3 Julius is white.
4 Greg is a swan.
5 What color is Greg?\twhite\t4 1 3
"""


def test_noun_rule_chains_every_noun_by_its_word() -> None:
    """Rule ``nouns`` (the paper's exact token match): names and pronouns as before, plus one chain per noun the
    tagger finds, over its exact word; task 16's two swans are one chain, the paper's route to basic induction."""
    (example,) = parse_babi(TASK16, 16, chains="nouns")
    assert spans_text(example) == [["julius", "julius"], ["swan", "swan"], ["brian"], ["frog"], ["greg"]]
    assert example.clusters[1] == [(3, 4), (17, 18)]
    assert spans_text(parse_babi(TASK16, 16)[0]) == [["julius", "julius"], ["brian"], ["greg"]]  # names only


def test_noun_rule_keeps_pronouns_on_the_subject_name() -> None:
    """A noun is never a sentence's subject: task 11's pronouns still join the name before them, and task 13's
    groups stay; the locations join as chains of their own."""
    _, second, third = parse_babi(TASK11, 11, chains="nouns")
    assert spans_text(second) == [["mary", "she"], ["bathroom"], ["bedroom"], ["daniel", "he"], ["garden"],
                                  ["office"]]
    assert spans_text(third) == [["john", "he"], ["hallway"], ["kitchen"]]
    first, _ = parse_babi(TASK13, 13, chains="nouns")
    assert spans_text(first) == [["mary and daniel", "they"], ["mary"], ["daniel"], ["bathroom"], ["hallway"]]


def test_unknown_chain_rule() -> None:
    with pytest.raises(ValueError, match="unknown bAbI chain rule 'verbs': choose from names, nouns"):
        parse_babi(TASK16, 16, chains="verbs")


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("1 Mary went home.\nx Mary left.\n", 2, "expected 'ID text'"),
        ("2 Mary went home.\n", 1, "line ID 2, expected 1"),
        ("1 Mary went home.\n3 Mary left.\n", 2, "line ID 3, expected 2 (or 1 to start a story)"),
        ("1 Mary went home.\n2 Where is Mary? home 1\n", 2, "a story sentence must end with '.'"),
        ("1 Mary went home.\n2 Where is Mary?\thome\n", 2, "2 TAB-separated fields, expected 3"),
        ("1 Mary went home.\n2 Where is Mary\thome\t1\n", 2, "does not end with '?'"),
        ("1 Mary went home.\n2 What is Mary carrying?\tapple,\t1\n", 2, "empty answer"),
        ("1 Where is Mary?\thome\t1\n", 1, "a question before any story sentence"),
        ("1 Mary went home.\n2 Where is Mary?\thome\t1\n3 Where is Mary?\thome\t2\n", 3,
         "supporting fact '2' is not the ID of an earlier story sentence (1)"),
    ],
)
def test_malformed_lines_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write_task(tmp_path, "qa1_single-supporting-fact_test.txt", text)
    with pytest.raises(BabiError, match=re.escape(message)) as error:
        load_babi(1, "test", tmp_path)
    assert str(error.value).startswith(f"{path}:{line}: ")


# ---- the real tasks -----------------------------------------------------------------------------------------

# Dev = the last stories holding >= 100 of the 1,000 training questions; more where stories hold several.
DEV_SIZES = {17: 104, 18: 101, 20: 101}


@pytest.fixture(scope="module")
def babi_tasks(data_dir: Path) -> dict[int, dict[str, list[BabiExample]]]:
    if not (data_dir / "babi").is_dir():
        pytest.skip(f"bAbI unavailable: {data_dir / 'babi'} does not exist")
    return {task: {split: load_babi(task, split, data_dir) for split in ("train", "dev", "test")} for task in TASKS}


def test_all_tasks_have_1000_training_and_1000_test_questions(babi_tasks: dict) -> None:
    for task, splits in babi_tasks.items():
        dev = DEV_SIZES.get(task, 100)
        assert [len(splits[split]) for split in ("train", "dev", "test")] == [1000 - dev, dev, 1000], task
        assert max(e.story_id for e in splits["train"]) < min(e.story_id for e in splits["dev"]), task


def test_test_answers_are_training_classes_except_one_list_of_task8(babi_tasks: dict) -> None:
    for task, splits in babi_tasks.items():
        unseen = set(babi_answer_classes(splits["test"])) - set(babi_answer_classes(splits["train"] + splits["dev"]))
        assert unseen == ({"football,apple,milk"} if task == 8 else set()), task


def test_names_of_the_real_files(data_dir: Path, babi_tasks: dict) -> None:
    """Every word capitalised mid-sentence in the 40 files is a known name."""
    capitalised = set()
    for task in TASKS:
        for split in ("train", "test"):
            for line in babi_file(task, split, data_dir).read_text(encoding="utf-8").splitlines():
                words = re.findall(r"[A-Za-z]+", line.split("\t")[0])
                capitalised.update(word for word in words[1:] if word[0].isupper())
    assert capitalised < BABI_NAMES


def test_real_task11_chains(babi_tasks: dict) -> None:
    """The first qa11 story, and: every he/she joins the one-name subject of the sentence before it."""
    first = babi_tasks[11]["train"][0]
    assert " ".join(first.document) == "mary went back to the bathroom . after that she went to the bedroom ."
    assert first.clusters == [[(0, 1), (9, 10)]]
    for example in babi_tasks[11]["train"] + babi_tasks[11]["test"]:
        sentence_of = [i for i, (start, end) in enumerate(example.sentences) for _ in range(start, end)]
        for chain in example.clusters:
            for start, _ in chain:
                if example.document[start] in PRONOUNS:
                    before = [s for s in chain if sentence_of[s[0]] == sentence_of[start] - 1]
                    assert len(before) == 1 and before[0][1] - before[0][0] == 1, (example, start)
                    assert chain[0][1] - chain[0][0] == 1  # a name's chain


def test_real_task13_chains(babi_tasks: dict) -> None:
    """The first qa13 story, and: every "they" joins the "X and Y" group that begins the sentence before it."""
    first = babi_tasks[13]["train"][0]
    assert " ".join(first.document) == "mary and daniel went to the bathroom . then they journeyed to the hallway ."
    assert spans_text(first) == [["mary and daniel", "they"], ["mary"], ["daniel"]]
    for example in babi_tasks[13]["train"] + babi_tasks[13]["test"]:
        starts = [start for start, _ in example.sentences]
        for chain in example.clusters:
            for start, _ in chain:
                if example.document[start] == "they":
                    sentence = max(i for i, s in enumerate(starts) if s <= start)
                    group = (starts[sentence - 1], starts[sentence - 1] + 3)
                    assert group in chain and example.document[group[0] + 1] == "and", (example, start)
