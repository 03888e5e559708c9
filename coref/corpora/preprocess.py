"""The paper's preprocessing of a coreference corpus, and the word vocabulary built from it.

Ji et al. (2017, §4 "Data preprocessing") prepare CoNLL-2012 for EntityNLM thus: lowercase every token; remove
every token made only of punctuation unless it lies inside an entity mention; replace numbers with ``<num>``;
keep the 10K most frequent training words and map the others to ``<unk>``; of embedded mentions keep only the
enclosing one; ignore singletons (OntoNotes does not annotate them). :func:`preprocess_document` does each of
these behind a switch of :class:`PreprocessConfig` (defaults = the paper) and counts every change in a
:class:`PreprocessReport`; :class:`Vocabulary` is the word list, built from preprocessed training documents.

Mentions are processed before tokens, in this order:

1. identical spans are merged (annotation repair, always on; see :func:`merge_shared_spans`);
2. mentions longer than ``max_mention_length`` are dropped, because the R/E/L encoding cannot express them;
   this comes BEFORE the outermost filter, so the mentions nested inside a dropped long one survive;
3. crossing mentions are dropped (annotation repair, always on; see :func:`drop_crossing`);
4. singleton entities are dropped, so that a corpus that annotates singletons (LitBank) looks like OntoNotes
   before nesting is resolved: ``[the wife of [John]]`` keeps ``[John]`` when the wife is never mentioned again;
5. of nested mentions only the outermost are kept;
6. singleton entities are dropped again: step 5 can leave an entity with a single mention, and the output
   must hold no singletons (CoNLL/OntoNotes style, "a single mention after the other steps").

Then tokens: lowercasing, ``<num>``, and dropping punctuation outside the mentions that survived, which shifts
mention and sentence spans and removes sentences left empty. With the default switches every output document
satisfies ``encoding_problems(document) == []``, so :func:`coref.document.encode_entities` accepts it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from functools import partial
from typing import Any

import networkx as nx

from coref.document import MAX_MENTION_LENGTH, Document, Mention, split_crossing
from coref.io.atomic import write_text_atomic

UNK = "<unk>"
NUM = "<num>"
BOS = "<s>"
EOS = "</s>"
SPECIALS = (UNK, NUM, BOS, EOS)  # ids 0..3 of every Vocabulary

# A number: optional sign; digit groups joined by single ``,`` ``.`` ``:`` or ``/`` (1,000  3.5  6:00  1/2);
# then optionally an ordinal or plural suffix (2nd, 19th, 1990s, 90's) or the full stop of a list item ("2.").
# Only decimal digits count, so spelled-out numbers ("one") and codes with letters ("A1", "y2") stay words.
NUMBER = re.compile(r"[+-]?\d+(?:[.,:/]\d+)*(?:st|nd|rd|th|s|'s|\.)?", re.IGNORECASE)


def is_number(token: str) -> bool:
    """Whether ``token`` is a number by the rule of :data:`NUMBER`."""
    return NUMBER.fullmatch(token) is not None


def is_punctuation(token: str) -> bool:
    """Whether every character of ``token`` is Unicode punctuation (categories P*) or a symbol (S*).

    That covers ``. , -- " ( ... $ % & *`` and currency or maths signs; a token with any letter, digit or
    mark (``'s``, ``n't``, ``&c``) is a word.
    """
    return all(unicodedata.category(character)[0] in "PS" for character in token)


class PreprocessError(ValueError):
    """A document that preprocessing cannot turn into a valid one (e.g. nothing is left of it)."""


@dataclass(frozen=True)
class PreprocessConfig:
    """Which preprocessing steps run; the defaults are the paper's.

    ``max_mention_length`` drops (and counts) mentions longer than that many tokens before the outermost filter
    runs, so the mentions nested in a dropped one survive it; ``None`` keeps mentions of any length (the
    documents then may not be R/E/L-encodable).
    """

    lowercase: bool = True
    drop_punctuation: bool = True
    replace_numbers: bool = True
    outermost_only: bool = True
    drop_singletons: bool = True
    max_mention_length: int | None = MAX_MENTION_LENGTH

    def __post_init__(self) -> None:
        if self.max_mention_length is not None and self.max_mention_length < 1:
            raise ValueError(f"max_mention_length must be at least 1 or None, got {self.max_mention_length}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PreprocessConfig:
        """The config saved by :meth:`to_dict`; unknown keys are an error, missing ones take their default."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"unknown preprocessing options {unknown}")
        return cls(**data)


@dataclass(frozen=True)
class PreprocessReport:
    """How many things preprocessing removed or changed; reports of several documents add up with ``+``."""

    documents: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    mentions_before: int = 0
    mentions_after: int = 0
    tokens_lowercased: int = 0
    numbers_replaced: int = 0
    punctuation_dropped: int = 0
    empty_sentences_dropped: int = 0
    duplicate_mentions_dropped: int = 0  # further mentions of an already-seen span
    entities_merged: int = 0  # entities folded into another because they shared a span
    long_mentions_dropped: int = 0
    crossing_mentions_dropped: int = 0
    nested_mentions_dropped: int = 0
    singletons_dropped: int = 0  # entities (= mentions) left with a single mention
    unknown_tokens: int = 0  # tokens mapped to <unk> by a vocabulary

    def __add__(self, other: PreprocessReport) -> PreprocessReport:
        return PreprocessReport(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        """A few readable lines: sizes before and after, then every non-zero change."""
        head = (
            f"{self.documents:,} documents: {self.tokens_before:,} -> {self.tokens_after:,} tokens, "
            f"{self.mentions_before:,} -> {self.mentions_after:,} mentions"
        )
        sizes = {"documents", "tokens_before", "tokens_after", "mentions_before", "mentions_after"}
        changes = [
            f"  {f.name.replace('_', ' ')}: {getattr(self, f.name):,}"
            for f in fields(self)
            if f.name not in sizes and getattr(self, f.name)
        ]
        return "\n".join([head, *changes])


# ---- mentions ---------------------------------------------------------------------------------------------


def merge_shared_spans(mentions: Sequence[Mention]) -> tuple[list[Mention], int, int]:
    """One mention per span; entities that share a span become one entity.

    Returns the mentions, how many duplicate mentions were dropped and how many entities were merged away.
    A span denotes one referent, so two chains through the same span are chains of the same entity: keeping
    one copy in one chain would silently cut the annotator's link, and keeping both cannot be encoded (nor
    scored: the CoNLL scorer counts such a key mention twice). Merging is also what KGLM's converter does.
    The merged entity takes the smallest of the labels.
    """
    entities_of_span: dict[tuple[int, int], list[int]] = {}
    for mention in mentions:
        entities_of_span.setdefault(mention.span, []).append(mention.entity)
    links = nx.Graph()
    links.add_nodes_from(mention.entity for mention in mentions)
    for entities in entities_of_span.values():
        nx.add_path(links, entities)
    label = {entity: min(group) for group in nx.connected_components(links) for entity in group}
    merged = [Mention(start, end, label[entities[0]]) for (start, end), entities in entities_of_span.items()]
    entities_merged = links.number_of_nodes() - nx.number_connected_components(links)
    return sorted(merged), len(mentions) - len(merged), entities_merged


def drop_long(mentions: Sequence[Mention], max_length: int) -> list[Mention]:
    """The mentions of at most ``max_length`` tokens."""
    return [mention for mention in mentions if len(mention) <= max_length]


def _text_order(mentions: Sequence[Mention]) -> list[Mention]:
    """By start, and enclosing mentions before the mentions they enclose."""
    return sorted(mentions, key=lambda mention: (mention.start, -mention.end))


def drop_crossing(mentions: Sequence[Mention]) -> list[Mention]:
    """The mentions left after dropping, in text order, every mention that crosses one already kept.

    The reader keeps crossing mentions as annotated (the official scorer scores them); the R/E/L encoding cannot
    hold them, so they are dropped here and counted. Spans must be distinct (:func:`merge_shared_spans`). The kept
    mentions nest properly, which :func:`outermost` relies on.
    """
    return split_crossing(mentions)[0]


def outermost(mentions: Sequence[Mention]) -> list[Mention]:
    """The mentions inside no other mention (of distinct, properly nesting spans: see :func:`drop_crossing`)."""
    kept, reach = [], 0  # reach: the furthest end of the mentions seen so far
    for mention in _text_order(mentions):
        if mention.end > reach:
            kept.append(mention)
            reach = mention.end
    return sorted(kept)


def drop_singletons(mentions: Sequence[Mention]) -> list[Mention]:
    """The mentions of entities mentioned more than once."""
    sizes = Counter(mention.entity for mention in mentions)
    return [mention for mention in mentions if sizes[mention.entity] > 1]


def _filter_mentions(mentions: Sequence[Mention], config: PreprocessConfig) -> tuple[list[Mention], Counter[str]]:
    """Steps 1-6 of the module docstring, with how many mentions (or entities) each step removed."""
    kept, duplicates, merged = merge_shared_spans(mentions)
    counts = Counter(duplicate_mentions_dropped=duplicates, entities_merged=merged)
    steps: list[tuple[str, Callable[[list[Mention]], list[Mention]]]] = []
    if config.max_mention_length is not None:
        steps.append(("long_mentions_dropped", partial(drop_long, max_length=config.max_mention_length)))
    steps.append(("crossing_mentions_dropped", drop_crossing))
    if config.drop_singletons:
        steps.append(("singletons_dropped", drop_singletons))
    if config.outermost_only:
        steps.append(("nested_mentions_dropped", outermost))
        if config.drop_singletons:
            steps.append(("singletons_dropped", drop_singletons))
    for name, step in steps:
        result = step(kept)
        counts[name] += len(kept) - len(result)
        kept = result
    return kept, counts


def entitynlm_mentions(document: Document, config: PreprocessConfig = PreprocessConfig()) -> Document:
    """``document`` with its tokens unchanged and the mentions that preprocessing keeps (steps 1-6 of the module
    docstring: by default no singletons, outermost only).

    Scoring this against a response filtered the same way gives the figures of the preprocessed corpus, whose
    mentions are these shifted over the dropped punctuation: scores depend on mention spans only through
    their identity, so the shift changes none.
    """
    return document.replace(mentions=_filter_mentions(document.mentions, config)[0])


# ---- tokens -----------------------------------------------------------------------------------------------


def _normalise(token: str, config: PreprocessConfig) -> str:
    if config.replace_numbers and is_number(token):
        return NUM
    return token.lower() if config.lowercase else token


def _drop_mask(tokens: Sequence[str], mentions: Sequence[Mention], config: PreprocessConfig) -> list[bool]:
    """Which of the (normalised) ``tokens`` preprocessing drops: punctuation outside the surviving ``mentions``."""
    inside = [False] * len(tokens)
    for mention in mentions:
        inside[mention.start : mention.end] = [True] * len(mention)
    return [config.drop_punctuation and not covered and is_punctuation(token) for token, covered in zip(tokens, inside)]


def kept_tokens(document: Document, config: PreprocessConfig = PreprocessConfig()) -> list[int]:
    """The indices of the tokens of ``document`` that :func:`preprocess_document` keeps, in order.

    Token ``k`` of the preprocessed document is token ``kept_tokens(document, config)[k]`` of ``document``: the
    alignment that carries per-token annotation of the raw text (e.g. a CoNLL-U parse) over to it.
    """
    mentions, _ = _filter_mentions(document.mentions, config)
    drop = _drop_mask([_normalise(token, config) for token in document.tokens], mentions, config)
    return [index for index, dropped in enumerate(drop) if not dropped]


def _drop_tokens(document: Document, drop: Sequence[bool]) -> tuple[Document, int]:
    """``document`` without the tokens marked in ``drop``, spans shifted; also how many sentences emptied.

    No dropped token may lie inside a mention (mentions would shrink silently); the caller guarantees it.
    """
    position = [0, *itertools.accumulate(not dropped for dropped in drop)]  # new index of every old boundary
    tokens = [token for token, dropped in zip(document.tokens, drop) if not dropped]
    if not tokens:
        raise PreprocessError(
            f"document {document.id!r} part {document.part} is empty after preprocessing: "
            f"all its {len(document.tokens)} tokens were dropped as punctuation outside mentions"
        )
    shifted = [(position[start], position[end]) for start, end in document.sentences]
    sentences = [(start, end) for start, end in shifted if end > start]
    mentions = [Mention(position[m.start], position[m.end], m.entity) for m in document.mentions]
    return document.replace(tokens=tokens, sentences=sentences, mentions=mentions), len(shifted) - len(sentences)


def preprocess_document(
    document: Document, config: PreprocessConfig = PreprocessConfig(), vocabulary: Vocabulary | None = None
) -> tuple[Document, PreprocessReport]:
    """The preprocessed document and what changed; with ``vocabulary``, unknown words become ``<unk>``.

    Raises :class:`PreprocessError`, naming the document, if no token is left.
    """
    mentions, counts = _filter_mentions(document.mentions, config)
    tokens = [_normalise(token, config) for token in document.tokens]
    drop = _drop_mask(tokens, mentions, config)
    result, empty_sentences = _drop_tokens(document.replace(tokens=tokens, mentions=mentions), drop)
    unknown = 0
    if vocabulary is not None:
        result, unknown = apply_vocabulary(result, vocabulary)
    report = PreprocessReport(
        documents=1,
        tokens_before=len(document.tokens),
        tokens_after=len(result.tokens),
        mentions_before=len(document.mentions),
        mentions_after=len(result.mentions),
        tokens_lowercased=sum(token != token.lower() for token in document.tokens) if config.lowercase else 0,
        numbers_replaced=sum(is_number(token) for token in document.tokens) if config.replace_numbers else 0,
        punctuation_dropped=sum(drop),
        empty_sentences_dropped=empty_sentences,
        unknown_tokens=unknown,
        **counts,
    )
    return result, report


def preprocess_documents(
    documents: Iterable[Document], config: PreprocessConfig = PreprocessConfig(), vocabulary: Vocabulary | None = None
) -> tuple[list[Document], PreprocessReport]:
    """:func:`preprocess_document` on each document, with the summed report."""
    results, total = [], PreprocessReport()
    for document in documents:
        result, report = preprocess_document(document, config, vocabulary)
        results.append(result)
        total += report
    return results, total


# ---- vocabulary -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Words and their training counts; the position of a word is its id.

    The specials come first with fixed ids: ``<unk>`` 0, ``<num>`` 1, ``<s>`` 2, ``</s>`` 3. The sentence
    boundaries are here because the models add them around every sentence (as the paper's code does), so one
    vocabulary serves every model. Then the words by decreasing count, ties by the word, so building twice
    from the same documents gives the same ids. ``counts`` feed the class-factored softmax, which bins words
    by frequency: ``<unk>`` counts the training tokens it replaces, ``<s>`` and ``</s>`` the sentences.
    """

    words: tuple[str, ...]
    counts: tuple[int, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.words))
        object.__setattr__(self, "counts", tuple(int(count) for count in self.counts))
        if self.words[: len(SPECIALS)] != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {self.words[: len(SPECIALS)]}")
        if len(self.counts) != len(self.words):
            raise ValueError(f"{len(self.words)} words but {len(self.counts)} counts")
        repeated = [word for word, times in Counter(self.words).items() if times > 1]
        if repeated:
            raise ValueError(f"words listed more than once: {repeated[:10]}")
        object.__setattr__(self, "_ids", {word: i for i, word in enumerate(self.words)})

    @classmethod
    def build(cls, documents: Iterable[Document], max_size: int = 10_000) -> Vocabulary:
        """The ``max_size`` entries (specials included) that cover the most tokens of ``documents``."""
        if max_size < len(SPECIALS):
            raise ValueError(f"max_size must leave room for the {len(SPECIALS)} specials, got {max_size}")
        counts: Counter[str] = Counter()
        sentences = 0
        for document in documents:
            counts.update(document.tokens)
            sentences += len(document.sentences)
        special_counts = {special: counts.pop(special, 0) for special in SPECIALS}
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        kept, cut = ranked[: max_size - len(SPECIALS)], ranked[max_size - len(SPECIALS) :]
        special_counts[UNK] += sum(count for _, count in cut)
        special_counts[BOS] = special_counts[EOS] = sentences
        words = [*SPECIALS, *(word for word, _ in kept)]
        return cls(tuple(words), tuple([*special_counts.values(), *(count for _, count in kept)]))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self._ids

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)}, fingerprint={self.fingerprint[:12]!r})"

    @property
    def unk_id(self) -> int:
        return self._ids[UNK]

    def index(self, word: str) -> int:
        """The id of ``word``; the id of ``<unk>`` for a word not in the vocabulary."""
        return self._ids.get(word, self.unk_id)

    def word(self, index: int) -> str:
        return self.words[index]

    def encode(self, tokens: Iterable[str]) -> list[int]:
        return [self.index(token) for token in tokens]

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the word list (ids included, counts not): equal exactly when ids mean the same words."""
        return hashlib.sha256("\n".join(self.words).encode("utf-8")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {"words": list(self.words), "counts": list(self.counts), "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Vocabulary:
        """The vocabulary :meth:`to_dict` wrote; a fingerprint that does not match the words is an error."""
        vocabulary = cls(tuple(data["words"]), tuple(data["counts"]))
        if "fingerprint" in data and data["fingerprint"] != vocabulary.fingerprint:
            raise ValueError("vocabulary fingerprint does not match its words (edited or corrupted)")
        return vocabulary

    def save(self, path: str | os.PathLike) -> None:
        """Write JSON to ``path`` atomically: a reader never sees a half-written file."""
        write_text_atomic(path, json.dumps(self.to_dict(), ensure_ascii=False))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        try:
            with open(path, encoding="utf-8") as file:
                return cls.from_dict(json.load(file))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}: not a vocabulary file: {error}") from error


def apply_vocabulary(document: Document, vocabulary: Vocabulary) -> tuple[Document, int]:
    """``document`` with every word outside ``vocabulary`` replaced by ``<unk>``, and how many were."""
    tokens = [token if token in vocabulary else UNK for token in document.tokens]
    unknown = sum(token not in vocabulary for token in document.tokens)
    return document.replace(tokens=tokens), unknown
