"""The bAbI QA tasks (Weston et al. 2015), English 1K set, as Coref-GRU reads them, with coreference chains.

Files live at ``DATA/babi/tasks_1-20_v1-2/en/qaN_<name>_{train,test}.txt`` (``size="1k"``; ``"10k"`` would be
``en-10k/``, which the shared data does not have). Each line is ``ID text``; IDs restart at 1 with every story; a
question line is ``ID question<TAB>answer<TAB>supporting fact IDs`` and also takes an ID. A file may interleave
several questions with one story: **every question is one example**, whose document is the story sentences
before it (the story so far; question lines are not part of it). A line that breaks the format is a
:class:`BabiError` naming ``FILE:LINE``.

Tokens follow the bAbI convention: lowercase, ``.`` ``?`` ``,`` split off; every story sentence ends with its
``.`` (checked). Answers are lowercased too (task 5 writes names capitalised), and the comma-separated answers of
tasks 8 and 19 (``apple,football``, ``s,e``) stay one string: one class label, as in the classification tasks.

Dev split. The paper (Table 1, "Max (based on dev set)"; Appendix B) does not say how its dev set was made. We
hold out the **last stories of the training file holding at least 10% of its questions** (:data:`DEV_FRACTION`):
whole stories, because the questions of a story share its sentences and would leak across a split by question.
For most tasks that is the last 100 of the 1,000 questions; tasks whose stories have more or fewer questions
get a few more (qa17: 104, qa18: 101, qa20: 101). The release's own ``en-valid/`` folder holds a different,
random 10% of stories; it is not used.

Coreference chains. The paper derives bAbI's chains from entity names and pronouns; the rules here are:

- a **name** is a word capitalised in the raw file that is one of :data:`BABI_NAMES` (the 21 names of the 40
  English files) or is capitalised in the middle of a sentence or question of the file read (so hand-made or new
  files bring their own names); all mentions of one name form one chain;
- names joined by ``and`` (``Mary and Daniel``) also form a **group** mention over the whole coordination; a
  group is an entity of its own, one per set of names (``Sandra and John`` later in the story is the same group
  as ``John and Sandra``), and its members keep their own name mentions (nested inside the group's);
- a sentence's **subject** is its first mention (the group if it starts with a coordination); a **pronoun**
  (he she they him her them, any case; ``then`` is no pronoun) joins the chain of the subject of the nearest
  earlier story sentence that has one, or starts a chain of its own if there is none. There is no number or
  gender check: bAbI's templates always agree (verified on the files: every ``he``/``she`` of qa11 follows a
  sentence whose subject is one name, every ``they`` of qa13 one whose subject is a pair). In the 40 files,
  pronouns occur only in qa11 (he, she) and qa13 (they); groups also in qa12. An example has at most 10
  chains (qa12), singletons included.

Example (qa11)::

    mary went back to the bathroom . after that she went to the bedroom .
    [[(0, 1), (9, 10)]]                                     # mary, she

Example (qa13)::

    mary and daniel went to the bathroom . then they journeyed to the hallway .
    [[(0, 3), (9, 10)], [(0, 1)], [(2, 3)]]                 # "mary and daniel", they | mary | daniel

That is rule ``names`` (the default). Rule ``nouns`` (``chains="nouns"``; :data:`CHAIN_RULES`) adds the paper's
exact token match (§4 on task 15: its "simplistic coreference module which matches tokens exactly" cannot join
"mice" to "mouse"): every other token the bundled tagger (:mod:`coref.resolution.pos`, run on the file's cased
sentences)
reads as a noun or proper noun is a one-token mention, and the mentions of one lowercased word form one chain
(``kitchen``, ``football``, ``swan``). A noun is never a sentence's subject, so pronouns resolve as under rule
``names``. On the 20 tasks this gives at most 13 chains per story on 17 of them (13 on tasks 2, 3, 5, 7 and 8:
names, rooms and objects), close to Appendix B's "maximum number of coreference clusters across all tasks was
C = 13"; task 14 has 14 (its time words), tasks 13 and 12 have 15 and 16 (their groups). Task 16's animals
(``swan``) become chains, the paper's route to basic induction.

Chains are token spans ``(start, end)``, half-open, over the document (the story sentences concatenated), one
list per entity in order of first mention (the group before its first member), mentions in order. Every entity
is kept, including those mentioned once: they give Coref-GRU no edge, and callers wanting only coreference
keep the chains of two or more mentions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from coref.corpora.registry import CorpusError, DataDir, resolve_data_dir
from coref.document import Document
from coref.io.conll import read_utf8
from coref.io.errors import FileLineError

TASKS = range(1, 21)
SIZE_FOLDERS = {"1k": "en", "10k": "en-10k"}
SPLITS = ("train", "dev", "test")
DEV_FRACTION = 0.1
RELEASE = Path("babi") / "tasks_1-20_v1-2"
# The names of the 40 files of en/: capitalised mid-sentence somewhere, or (Antoine, Emily, Gertrude, Jason,
# Jessica, Sumit, Winona, Yann) only ever first in their sentences, where capitals prove nothing.
BABI_NAMES = frozenset(
    "Antoine Bernhard Bill Brian Daniel Emily Fred Gertrude Greg Jason Jeff Jessica John Julie Julius Lily Mary "
    "Sandra Sumit Winona Yann".split()
)
PRONOUNS = frozenset({"he", "she", "they", "him", "her", "them"})
CHAIN_RULES = ("names", "nouns")  # the module docstring's two rules for coreference chains
NOUN_TAGS = frozenset({"NOUN", "PROPN"})
_TOKEN = re.compile(r"[^\s.?,]+|[.?,]")

Span = tuple[int, int]


class BabiError(FileLineError):
    """A bAbI file that breaks the format, located by file and line."""


@dataclass(frozen=True)
class BabiExample:
    """One bAbI question with the story before it and that story's coreference chains.

    ``story`` holds the story sentences before the question, tokenised; ``sentence_ids`` their IDs in the file,
    which ``supporting_facts`` refer to. ``story_id`` numbers the stories of the file from 0. ``clusters`` are
    the chains over :attr:`document` (see the module docstring).
    """

    task: int
    story_id: int
    story: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str
    supporting_facts: tuple[int, ...]
    sentence_ids: tuple[int, ...]
    clusters: list[list[Span]]

    @property
    def document(self) -> tuple[str, ...]:
        """The story sentences concatenated: the tokens the chains' spans index."""
        return tuple(token for sentence in self.story for token in sentence)

    @property
    def sentences(self) -> tuple[Span, ...]:
        """The token span of every story sentence in :attr:`document`."""
        return _sentence_spans(self.story)

    @property
    def supporting_sentences(self) -> tuple[int, ...]:
        """The supporting facts as indices into :attr:`story`."""
        return tuple(self.sentence_ids.index(fact) for fact in self.supporting_facts)

    @property
    def answer_in_document(self) -> bool:
        """Whether every word of the answer occurs in the document (an extractive question)."""
        return set(self.answer.split(",")) <= set(self.document)


# ---- loading ------------------------------------------------------------------------------------------------


def babi_file(task: int, split: str, data_dir: DataDir = None, size: str = "1k") -> Path:
    """The file of ``task`` (1..20) holding ``split`` (``train``, or ``test``), or a CorpusError saying why not."""
    if task not in TASKS:
        raise CorpusError(f"unknown bAbI task {task!r}: tasks are numbered 1 to 20")
    if size not in SIZE_FOLDERS:
        raise CorpusError(f"unknown bAbI size {size!r}: choose from {', '.join(SIZE_FOLDERS)}")
    folder = resolve_data_dir(data_dir) / RELEASE / SIZE_FOLDERS[size]
    found = sorted(folder.glob(f"qa{task}_*_{split}.txt"))
    if len(found) != 1:
        what = "no file" if not found else f"{len(found)} files"
        raise CorpusError(
            f"bAbI task {task} {split}: {what} matching {folder}/qa{task}_*_{split}.txt; put the unpacked "
            f"tasks_1-20_v1-2 release under {folder.parent.parent}"
        )
    return found[0]


def load_babi(task: int, split: str, data_dir: DataDir = None, size: str = "1k",
              chains: str = "names") -> list[BabiExample]:
    """The examples of one split (``train``, ``dev``, ``test``) of a bAbI task, one per question, in file order.

    ``dev`` is the last 10% of the training file's questions, by whole stories (module docstring), and ``train``
    the rest. ``data_dir`` defaults to ``$ENTITYLM_DATA``. ``chains`` is one of :data:`CHAIN_RULES`.
    """
    if split not in SPLITS:
        raise CorpusError(f"unknown bAbI split {split!r}: choose from {', '.join(SPLITS)}")
    path = babi_file(task, "test" if split == "test" else "train", data_dir, size)
    examples = parse_babi(read_utf8(path), task, str(path), chains)
    if split == "test":
        return examples
    dev_stories = dev_story_ids(examples)
    return [example for example in examples if (example.story_id in dev_stories) == (split == "dev")]


def dev_story_ids(examples: list[BabiExample]) -> set[int]:
    """The last stories of a training file that together hold at least :data:`DEV_FRACTION` of its questions."""
    wanted = math.ceil(DEV_FRACTION * len(examples))
    stories: set[int] = set()
    for count, example in enumerate(reversed(examples), start=1):
        stories.add(example.story_id)
        if count >= wanted:
            break
    return stories


@dataclass(frozen=True)
class _Line:
    number: int
    id: int
    text: str


def parse_babi(text: str, task: int, path: str = "<string>", chains: str = "names") -> list[BabiExample]:
    """The examples in the contents ``text`` of a bAbI file of ``task`` (``path`` names it in errors), with the
    chains of rule ``chains`` (:data:`CHAIN_RULES`)."""
    if chains not in CHAIN_RULES:
        raise ValueError(f"unknown bAbI chain rule {chains!r}: choose from {', '.join(CHAIN_RULES)}")
    stories: list[list[_Line]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = re.fullmatch(r"(\d+) (\S.*)", line)
        if not match:
            raise BabiError(path, number, f"expected 'ID text' (a number, a space, the text), got {line!r}")
        id = int(match[1])
        if id == 1:
            stories.append([])
        elif not stories or id != stories[-1][-1].id + 1:
            expected = "1" if not stories else f"{stories[-1][-1].id + 1} (or 1 to start a story)"
            raise BabiError(path, number, f"line ID {id}, expected {expected}")
        stories[-1].append(_Line(number, id, match[2]))
    names = BABI_NAMES | _mid_sentence_capitals(line.text.split("\t")[0] for story in stories for line in story)
    nouns = _noun_positions(stories) if chains == "nouns" else {}
    examples: list[BabiExample] = []
    for story_id, story in enumerate(stories):
        examples.extend(_story_examples(story, story_id, task, names, nouns, path))
    return examples


def _noun_positions(stories: list[list[_Line]]) -> dict[int, frozenset[int]]:
    """For every story sentence (by its line number), the positions of its tokens the bundled tagger
    (:mod:`coref.resolution.pos`) reads as nouns or proper nouns, all sentences tagged in one batch."""
    from coref.resolution.pos import PosTagger  # torch loads only for the noun rule

    lines = [line for story in stories for line in story if "\t" not in line.text]
    sentences = [tuple(_TOKEN.findall(line.text)) for line in lines]
    if not sentences:
        return {}
    tokens = [token for sentence in sentences for token in sentence]
    spans = _sentence_spans(sentences)
    tags = PosTagger.load().tag([Document("babi", tokens, spans)])[0]
    return {line.number: frozenset(i for i, tag in enumerate(tags[begin:end]) if tag in NOUN_TAGS)
            for line, (begin, end) in zip(lines, spans)}


def _sentence_spans(sentences: Iterable[tuple[str, ...]]) -> tuple[Span, ...]:
    """The token span of every sentence in the sentences concatenated."""
    spans, start = [], 0
    for sentence in sentences:
        spans.append((start, start + len(sentence)))
        start += len(sentence)
    return tuple(spans)


def _mid_sentence_capitals(texts: Iterable[str]) -> set[str]:
    """The words written capitalised somewhere other than first in their sentence or question."""
    return {word for text in texts for word in _TOKEN.findall(text)[1:] if word[0].isupper()}


def _story_examples(
    story: list[_Line], story_id: int, task: int, names: frozenset[str], nouns: dict[int, frozenset[int]], path: str
) -> list[BabiExample]:
    """One example per question line of one story, each with the sentences and chains before it."""
    examples: list[BabiExample] = []
    sentences: list[tuple[str, ...]] = []
    ids: list[int] = []
    chains = _StoryChains(names)
    for line in story:
        fields = line.text.split("\t")
        if len(fields) == 1:
            if not line.text.rstrip().endswith("."):
                raise BabiError(path, line.number, "a story sentence must end with '.' (a question needs "
                                "TAB-separated answer and supporting fact IDs)")
            raw = tuple(_TOKEN.findall(line.text))
            chains.add(raw, offset=sum(map(len, sentences)), nouns=nouns.get(line.number, frozenset()))
            sentences.append(tuple(token.lower() for token in raw))
            ids.append(line.id)
            continue
        if len(fields) != 3:
            raise BabiError(path, line.number, f"{len(fields)} TAB-separated fields, expected 3 "
                            "(question, answer, supporting fact IDs)")
        question, answer, facts = (field.strip() for field in fields)
        if not question.endswith("?"):
            raise BabiError(path, line.number, f"the question {question!r} does not end with '?'")
        if not answer or any(not part for part in answer.split(",")):
            raise BabiError(path, line.number, f"empty answer (or an empty part of it) in {answer!r}")
        if not sentences:
            raise BabiError(path, line.number, "a question before any story sentence")
        supporting = []
        for fact in facts.split():
            if not fact.isdecimal() or int(fact) not in ids:
                raise BabiError(path, line.number, f"supporting fact {fact!r} is not the ID of an earlier story "
                                f"sentence ({', '.join(map(str, ids))})")
            supporting.append(int(fact))
        examples.append(BabiExample(
            task=task, story_id=story_id, story=tuple(sentences),
            question=tuple(token.lower() for token in _TOKEN.findall(question)),
            answer=answer.lower(), supporting_facts=tuple(supporting), sentence_ids=tuple(ids),
            clusters=chains.clusters(),
        ))
    return examples


# ---- coreference chains -------------------------------------------------------------------------------------


class _StoryChains:
    """The name, group, pronoun and (rule ``nouns``) noun mentions of a story, sentence by sentence, keyed by
    entity.

    An entity key is a name (``"Mary"``), a group (a frozenset of names), for a pronoun with no antecedent the
    pronoun's own span, or a noun's lowercased word (``("noun", "kitchen")``).
    """

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names
        self.mentions: list[tuple[Span, object]] = []
        self.subject: object | None = None

    def add(self, raw: tuple[str, ...], offset: int, nouns: frozenset[int] = frozenset()) -> None:
        """Read the mentions of the next sentence, whose raw tokens start at token ``offset`` of the document;
        ``nouns`` are the positions of its other nouns (rule ``nouns``), which are never a sentence's subject."""
        subject = None
        i = 0
        while i < len(raw):
            found: list[tuple[Span, object]] = []
            if raw[i] in self.names:
                members, end = [raw[i]], i + 1
                while end + 1 < len(raw) and raw[end] == "and" and raw[end + 1] in self.names:
                    members.append(raw[end + 1])
                    end += 2
                if len(members) > 1:
                    found.append(((offset + i, offset + end), frozenset(members)))
                found.extend(((offset + j, offset + j + 1), raw[j]) for j in range(i, end, 2))
                i = end
            else:
                span = (offset + i, offset + i + 1)
                if raw[i].lower() in PRONOUNS:
                    found.append((span, self.subject if self.subject is not None else span))
                elif i in nouns:
                    self.mentions.append((span, ("noun", raw[i].lower())))
                i += 1
            if found and subject is None:
                subject = found[0][1]
            self.mentions.extend(found)
        if subject is not None:
            self.subject = subject

    def clusters(self) -> list[list[Span]]:
        """The chains so far: one per entity, in order of first mention, spans in order."""
        by_entity: dict[object, list[Span]] = {}
        for span, entity in self.mentions:
            by_entity.setdefault(entity, []).append(span)
        return [sorted(spans) for spans in by_entity.values()]


# ---- vocabulary and answers ---------------------------------------------------------------------------------


def babi_vocabulary(examples: Iterable[BabiExample]) -> list[str]:
    """The sorted word types of the examples' documents and questions (answers are classes: see below)."""
    words: set[str] = set()
    for example in examples:
        words.update(example.question)
        for sentence in example.story:
            words.update(sentence)
    return sorted(words)


def babi_answer_classes(examples: Iterable[BabiExample]) -> list[str]:
    """The sorted answer strings of the examples: the classes of a task (``apple,football`` is one class)."""
    return sorted({example.answer for example in examples})
