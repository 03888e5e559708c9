"""Coreference of raw text, end to end: tokens -> mentions -> clusters, as one call (its command, ``python -m
coref.resolve``, is :mod:`inference.commands.resolve`).

    >>> from coref.resolution.pipeline import resolve
    >>> document = resolve("Anna met her brother. She thanked him.")   # a coref.document.Document

Three steps, each a module of its own: :mod:`coref.io.text` tokenises the text and splits its sentences (the
corpora's Penn Treebank conventions, character offsets kept); the mention detector of
:mod:`coref.resolution.mentions` proposes mentions from the tokens alone; the mention ranker of
:mod:`coref.resolution.ranker`, trained on that detector's mentions of the same corpus (``python -m coref.resolver
train --detector``), links each mention to an earlier one or starts a new entity. A mention linked to nothing is a
singleton: written only by a model of a corpus that annotates singletons (LitBank), dropped otherwise (OntoNotes
style), so "not a mention" and "mentioned once" are the same decision. The models bundled in ``coref/pretrained``
(see :data:`BUNDLED`) need no data directory.

A whole book is one document: time and memory grow linearly with its length (the ranker scores a bounded list of
antecedent candidates, :mod:`coref.resolution.ranker`; the detector reads an overlong sentence in windows,
:mod:`coref.resolution.mentions`). A 120K-word text took about 21 s and 0.93 GB on 2 cores; on a terminal a progress
bar follows the ranking of a long text.

Three choices a call may make (:func:`resolve`, :meth:`CorefPipeline.resolve_documents`):

- **Given mentions** (``mentions=[(start_char, end_char), ...]``): the detector is skipped and the ranker clusters
  exactly these spans. A span must start at a token's first character and end after a token's last
  (``text[start:end]`` is whole tokens, no surrounding whitespace); one outside the text, empty or reversed,
  starting or ending inside a token or in whitespace, or given twice is a :class:`SpanError` naming it. Every
  given span comes back as a mention, unchanged.
- **Singletons** (``singletons=``): True keeps the one-mention entities, False drops them (and nothing else),
  None (the default) follows the ranker's corpus (:attr:`~coref.resolution.ranker.MentionRanker.keeps_singletons`)
  for detected mentions and keeps them for given ones: a span the user asked about is answered, if only by
  "an entity of its own".
- **Many texts** (a list): one call, batched through the detector; a list of Documents back, named ``text0``,
  ``text1``, ... in order, each what the text resolved alone would be. On a 2-core CPU the bundled pipeline
  resolved LitBank's test documents as running text at 9.9K tokens/s batched against 8.5K one per call (4.3
  against 3.7 documents/s), and 50-token texts at 337 against 300 texts/s
  (``python benchmarks/coref_end_to_end.py --throughput --repeats 5``; docs/coreference.md).
"""

from __future__ import annotations

import bisect
import itertools
import json
import json.scanner
import numbers
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import overload

from coref.corpora.preprocess import drop_singletons
from coref.document import Document, Mention
from coref.io.atomic import write_text_atomic
from coref.io.conll import format_conll, read_conll, read_utf8
from coref.io.errors import FileLineError
from coref.io.text import TokenizedText, tokenize
from coref.resolution.mentions import MentionDetector
from coref.resolution.ranker import (
    DEMONSTRATIVES,
    INDEFINITES,
    POSSESSIVES,
    PRONOUN,
    PROPER,
    MentionRanker,
    mention_types,
    unsure_singletons_dropped,
    with_predicted_mentions,
)

PRETRAINED = Path(__file__).parent / "pretrained"
BUNDLED = {"detector": PRETRAINED / "mentions.pt", "resolver": PRETRAINED / "resolver.pt"}

Span = tuple[int, int]  # half-open: of characters in a text, or of tokens in a document
TEXT = "--text"  # where a text given on the command line comes from (Input.source)
RESCUED_JSON = "resolved.json"  # where the clusters go when a CoNLL for stdout cannot be written and no JSON was asked


@dataclass
class CorefPipeline:
    """A mention detector and the mention ranker trained on its mentions."""

    detector: MentionDetector
    ranker: MentionRanker

    @classmethod
    def load(cls, detector: str | Path | None = None, resolver: str | Path | None = None) -> CorefPipeline:
        """The models in these files; the bundled ones where a path is not given."""
        return cls(MentionDetector.load(detector or BUNDLED["detector"]),
                   MentionRanker.load(resolver or BUNDLED["resolver"]))

    def resolve_documents(self, documents: Sequence[Document], mentions: Sequence[Sequence[Span]] | None = None,
                          singletons: bool | None = None) -> list[Document]:
        """``documents`` (their tokens and sentences; any mentions they hold are ignored) with their mentions in the
        ranker's entities: the mentions the detector finds (all documents in one call, batched), or the
        ``mentions`` given for each document (token spans, :func:`checked_token_spans`). ``singletons``: keep
        (True) or drop (False) the one-mention entities; None: the ranker's corpus convention for detected
        mentions, kept for given ones."""
        probabilities: list[dict[Span, float]] = [{} for _ in documents]  # given mentions: all sure
        if mentions is None:
            probabilities = self.detector.span_probabilities(documents, threshold=self.ranker.mention_threshold)
            spans = [sorted(found) for found in probabilities]
        else:
            if len(mentions) != len(documents):
                raise ValueError(f"{len(documents)} documents but {len(mentions)} lists of mentions")
            named = len(documents) > 1
            spans = [checked_token_spans(document, given, document.id if named else None)
                     for document, given in zip(documents, mentions)]
        keep = singletons if singletons is not None else mentions is not None or self.ranker.keeps_singletons
        return [unsure_singletons_dropped(
                    _singletons(self.ranker.predict(with_predicted_mentions(document.replace(mentions=()), found)),
                                found, keep), sure, self.ranker.singleton_threshold)
                for document, found, sure in zip(documents, spans, probabilities)]

    def resolve_texts(self, texts: Sequence[str | TokenizedText], mentions: Sequence[Sequence[Span]] | None = None,
                      singletons: bool | None = None, ids: Sequence[str] | None = None) -> list[Document]:
        """Raw texts (or ones already tokenised) resolved in one batch (:meth:`resolve_documents`), a Document
        each, named by ``ids`` (default ``text0``, ``text1``, ...); ``mentions``: each text's given mentions as
        character spans (:func:`token_spans`)."""
        ids = text_ids(len(texts)) if ids is None else list(ids)
        named = len(texts) > 1  # errors name the text they are about
        tokenizations = tokenize_texts(texts, ids)
        documents = [Document(id, tokenized.tokens, tokenized.sentences) for id, tokenized in zip(ids, tokenizations)]
        if mentions is not None:
            if len(mentions) != len(texts):
                raise ValueError(f"{len(texts)} texts but {len(mentions)} lists of mentions")
            mentions = [token_spans(tokenized, given, id if named else None)
                        for tokenized, given, id in zip(tokenizations, mentions, ids)]
        return self.resolve_documents(documents, mentions, singletons)

    def resolve(self, text: str | TokenizedText, id: str = "text", *, mentions: Sequence[Span] | None = None,
                singletons: bool | None = None) -> Document:
        """The coreference of a raw text (or of one already tokenised) as a :class:`Document` named ``id``;
        ``mentions`` and ``singletons`` as :meth:`resolve_texts` and :meth:`resolve_documents` take them."""
        return self.resolve_texts([text], None if mentions is None else [mentions], singletons, [id])[0]


@cache
def bundled_pipeline() -> CorefPipeline:
    """The bundled pipeline, loaded once per process."""
    return CorefPipeline.load()


@overload
def resolve(text: str | TokenizedText, pipeline: CorefPipeline | None = None, *,
            mentions: Sequence[Span] | None = None, singletons: bool | None = None) -> Document: ...
@overload
def resolve(text: Sequence[str | TokenizedText], pipeline: CorefPipeline | None = None, *,
            mentions: Sequence[Sequence[Span]] | None = None, singletons: bool | None = None) -> list[Document]: ...
def resolve(text, pipeline=None, *, mentions=None, singletons=None):
    """The coreference of ``text`` (tokenised here) as a :class:`Document`, or of each text of a list, in one
    batch, as a list of Documents (``text0``, ``text1``, ...), by ``pipeline`` (default: the bundled one).
    ``mentions``: the spans to cluster, ``[(start_char, end_char), ...]`` (a list of such lists for a list of texts),
    instead of the detector's; ``singletons``: keep or drop the one-mention entities (default: the module
    docstring's). Character offsets of the tokens: ``coref.io.text.tokenize(text).offsets``."""
    pipeline = pipeline or bundled_pipeline()
    if isinstance(text, (str, TokenizedText)):
        return pipeline.resolve(text, mentions=mentions, singletons=singletons)
    return pipeline.resolve_texts(list(text), mentions, singletons)


def text_ids(count: int) -> list[str]:
    """The names of ``count`` texts resolved together: ``text0``, ``text1``, ..."""
    return [f"text{number}" for number in range(count)]


def tokenize_texts(texts: Sequence[str | TokenizedText], ids: Sequence[str] | None = None) -> list[TokenizedText]:
    """Each text tokenised (unless it already is); of several, an empty one's error names it (``ids``, default
    :func:`text_ids`)."""
    names = (text_ids(len(texts)) if ids is None else ids) if len(texts) > 1 else [None] * len(texts)
    tokenizations = []
    for text, name in zip(texts, names):
        try:
            tokenizations.append(text if isinstance(text, TokenizedText) else tokenize(text))
        except ValueError as error:
            raise ValueError(f"{name}: {error}" if name else str(error)) from None
    return tokenizations


def _singletons(resolved: Document, spans: Sequence[Span], keep: bool) -> Document:
    """The ranker's clusters of ``spans`` (``resolved``) with their one-mention entities kept or dropped. The ranker
    drops them unless its corpus keeps them (:meth:`MentionRanker.predict`), so the spans missing from its output are
    exactly those: each comes back as an entity of its own."""
    if not keep:
        return resolved.replace(mentions=drop_singletons(resolved.mentions))
    clustered = {mention.span for mention in resolved.mentions}
    fresh = itertools.count(max((mention.entity for mention in resolved.mentions), default=0) + 1)
    missing = [Mention(start, end, next(fresh)) for start, end in spans if (start, end) not in clustered]
    return resolved.replace(mentions=[*resolved.mentions, *missing]) if missing else resolved


# ---- given mentions -------------------------------------------------------------------------------------------


class SpanError(ValueError):
    """A given mention that is not a usable span; ``index`` is its place in the list given."""

    def __init__(self, index: int, span: object, reason: str, of: str | None = None) -> None:
        self.index = index
        shown = f"({span[0]}, {span[1]})" if isinstance(span, tuple) and len(span) == 2 else repr(span)
        super().__init__(f"mention {shown}{f' of {of}' if of else ''} {reason}")


def _pair(index: int, span: object, of: str | None) -> Span:
    """``span`` as two integers (a tuple or a list of two), or a :class:`SpanError`."""
    if not (isinstance(span, (tuple, list)) and len(span) == 2
            and all(isinstance(value, numbers.Integral) and not isinstance(value, bool) for value in span)):
        raise SpanError(index, span, "is not a pair of integers (start, end)", of)
    return int(span[0]), int(span[1])


def _each_once(spans: Sequence[Span], given: Sequence[object], of: str | None) -> list[Span]:
    """``spans``, or a :class:`SpanError` for the first one given again."""
    seen: set[Span] = set()
    for index, span in enumerate(spans):
        if span in seen:
            raise SpanError(index, given[index], "is given twice", of)
        seen.add(span)
    return list(spans)


def token_spans(tokenized: TokenizedText, spans: Sequence[Sequence[int]], of: str | None = None) -> list[Span]:
    """The token spans of the character spans ``spans`` of ``tokenized.text`` (given mentions, in their order).
    Each must start at a token's first character and end after a token's last; one outside the text, empty or
    reversed, starting or ending inside a token or in whitespace, or given twice is a :class:`SpanError` that
    names it (and the text ``of``, where given)."""
    starts = {start: number for number, (start, _) in enumerate(tokenized.offsets)}
    ends = {end: number + 1 for number, (_, end) in enumerate(tokenized.offsets)}
    found = []
    for index, span in enumerate(spans):
        start, end = _bounded_pair(index, span, of, len(tokenized.text), "the text", "characters")
        if start not in starts:
            raise SpanError(index, span, f"starts {_inside(tokenized, start)}, not at a token's start", of)
        if end not in ends:
            raise SpanError(index, span, f"ends {_inside(tokenized, end - 1)}, not at a token's end", of)
        found.append((starts[start], ends[end]))
    return _each_once(found, spans, of)


def _inside(tokenized: TokenizedText, char: int) -> str:
    """Where character ``char`` of the text is, when it is not a token's first or last: in whitespace (the
    tokeniser reads every other character), or inside which token."""
    if tokenized.text[char].isspace():
        return "in whitespace"
    number = bisect.bisect_right(tokenized.offsets, (char, len(tokenized.text))) - 1
    start, end = tokenized.offsets[number]
    return f"inside the token {tokenized.tokens[number]!r} (characters {start}:{end})"


def checked_token_spans(document: Document, spans: Sequence[Sequence[int]], of: str | None = None) -> list[Span]:
    """Given mentions of ``document`` as token spans, checked: inside its tokens, not empty, each once; a
    :class:`SpanError` naming the first bad one otherwise."""
    found = [_bounded_pair(index, span, of, len(document.tokens), "the document", "tokens")
             for index, span in enumerate(spans)]
    return _each_once(found, spans, of)


def _bounded_pair(index: int, span: Sequence[int], of: str | None, size: int, what: str, units: str) -> Span:
    """Given span ``index`` as a pair ``(start, end)``, neither empty nor reversed nor beyond ``size`` (``what``
    holds ``size`` ``units``); a :class:`SpanError` otherwise."""
    start, end = _pair(index, span, of)
    if end <= start:
        raise SpanError(index, span, "is empty or reversed", of)
    if start < 0 or end > size:
        raise SpanError(index, span, f"lies outside {what} ({size} {units})", of)
    return start, end


# ---- the command's inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """A document to resolve, its tokenisation (None for a CoNLL document, which comes tokenised) and where it came
    from (the file as given; :data:`TEXT` for a text)."""

    document: Document
    tokenized: TokenizedText | None
    source: str


def text_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files ``paths`` name, each a file or a folder that stands for its ``*.txt`` files (sorted by name); a
    folder without one is an error naming it."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(child for child in path.glob("*.txt") if child.is_file())
            if not inside:
                raise ValueError(f"{path}: a folder without .txt files")
            found.extend(inside)
        else:
            found.append(path)
    return found


def read_inputs(text: str | None = None, files: Sequence[str | Path] | None = None,
                conll: str | Path | None = None) -> list[Input]:
    """The documents to resolve: one of ``text``, UTF-8 text ``files`` (:func:`text_files`: each document named
    after its file; an empty one, or two files of one name, is an error naming the file), or the documents of a
    ``conll`` file (their tokens and sentences; read strictly, their mentions ignored)."""
    if conll is not None:
        return [Input(document, None, str(conll)) for document in read_conll(conll, strict=True)[0]]
    if text is not None:
        tokenized = tokenize(text)
        return [Input(Document("text", tokenized.tokens, tokenized.sentences), tokenized, TEXT)]
    inputs = []
    for path in text_files(files or ()):
        content = read_utf8(path)
        if not content.strip():
            raise ValueError(f"{path}:1: cannot tokenize an empty or whitespace-only text")
        tokenized = tokenize(content)
        inputs.append(Input(Document(path.stem, tokenized.tokens, tokenized.sentences), tokenized, str(path)))
    names = Counter(found.document.id for found in inputs)
    for found in inputs:
        if names[found.document.id] > 1:
            raise ValueError(f"{found.source}: another input file is also named {found.document.id!r} (a document is "
                             "named after its file)")
    return inputs


def read_mentions(path: str | Path, inputs: Sequence[Input]) -> list[list[Span]]:
    """The given mentions of each input, as token spans, from the file ``path``:

    - for text (``--text``, ``--file``): JSON character spans, a list of ``[start_char, end_char]`` pairs (or
      ``{"mentions": [...]}``) for one input; for any number, an object with the list of each input file keyed by
      its name (``story.txt``) or its path as given;
    - for the documents of a CoNLL file: a CoNLL file holding the same documents with the same tokens (the input
      file itself will do), whose mention spans are the given ones (a span bracketed twice is one mention).

    Bad content is an error naming the file (``FILE:LINE:`` for JSON), and for a bad span which one, of which
    input, and why (:func:`token_spans`)."""
    content = read_utf8(path)
    is_json = content.lstrip()[:1] in ("[", "{")
    if inputs and (inputs[0].tokenized is None) == is_json:
        needed = ("CoNLL input takes a CoNLL file's mentions (token spans), not JSON" if is_json else
                  "text takes JSON character spans ([[start_char, end_char], ...]), not CoNLL")
        raise FileLineError(str(path), 1, f"given mentions: {needed}")
    return _json_mentions(content, str(path), inputs) if is_json else _conll_mentions(path, inputs)


def _conll_mentions(path: str | Path, inputs: Sequence[Input]) -> list[list[Span]]:
    """The distinct mention spans of each input's document in the CoNLL file ``path``."""
    documents = {document.key: document for document in read_conll(path, strict=True)[0]}
    spans = []
    for found in inputs:
        name = f"document ({found.document.id}) part {found.document.part}"
        given = documents.get(found.document.key)
        if given is None:
            raise ValueError(f"{path}: no {name}, which {found.source} holds")
        if given.tokens != found.document.tokens:
            raise ValueError(f"{path}: {name} has other tokens than in {found.source}")
        spans.append(sorted({mention.span for mention in given.mentions}))
    return spans


class _Array(list):
    """A JSON array and the line of its file it starts on."""

    line = 1


def _located_json(content: str, path: str) -> object:
    """``content`` parsed as JSON, each array an :class:`_Array` that knows its line; bad JSON is a FileLineError."""
    newlines = [match.start() for match in re.finditer("\n", content)]
    decoder = json.JSONDecoder()
    parse_array = decoder.parse_array

    def located(state: tuple[str, int], scan_once) -> tuple[_Array, int]:
        values, end = parse_array(state, scan_once)
        array = _Array(values)
        array.line = bisect.bisect_left(newlines, state[1]) + 1
        return array, end

    decoder.parse_array = located
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # the Python scanner calls parse_array
    try:
        return decoder.decode(content)
    except json.JSONDecodeError as error:
        raise FileLineError(path, error.lineno, f"not JSON ({error.msg})") from None


def _json_mentions(content: str, path: str, inputs: Sequence[Input]) -> list[list[Span]]:
    """Each input's given mentions from a JSON mentions file (:func:`read_mentions`)."""
    data = _located_json(content, path)
    lists = _lists_by_input(data, path, inputs)
    named = len(inputs) > 1
    spans = []
    for found, given in zip(inputs, lists):
        name = Path(found.source).name
        line = getattr(given, "line", 1)
        if not isinstance(given, list):
            raise FileLineError(path, line, f"the mentions of {name} are not a list of [start_char, end_char] pairs")
        try:
            spans.append(token_spans(found.tokenized, given, name if named else None))
        except SpanError as error:
            raise FileLineError(path, getattr(given[error.index], "line", line), str(error)) from None
    return spans


def _lists_by_input(data: object, path: str, inputs: Sequence[Input]) -> list[object]:
    """The mentions of each input in a JSON mentions file's ``data``: the list itself (or ``data["mentions"]``)
    for one input, its entry by file name otherwise."""
    if len(inputs) == 1 and isinstance(data, list):
        return [data]
    if len(inputs) == 1 and isinstance(data, dict) and set(data) == {"mentions"}:
        return [data["mentions"]]
    if inputs and inputs[0].source == TEXT:
        raise FileLineError(path, 1, 'expected a list of [start_char, end_char] pairs (or {"mentions": [...]}) for '
                            f"{TEXT}")
    if not isinstance(data, dict):
        raise FileLineError(path, 1, f"expected an object keyed by the {len(inputs)} input files' names"
                            if isinstance(data, list) else "expected a list of [start_char, end_char] pairs, or an "
                            "object keyed by the input files' names")
    lists, used = [], set()
    for found in inputs:
        keys = [key for key in dict.fromkeys([found.source, Path(found.source).name]) if key in data]
        if len(keys) != 1:
            raise FileLineError(path, 1, f"no mentions for {found.source}: expected the key {Path(found.source).name!r}"
                                if not keys else f"mentions for {found.source} under two keys, {keys}")
        lists.append(data[keys[0]])
        used.add(keys[0])
    unknown = sorted(set(data) - used)
    if unknown:
        raise FileLineError(path, 1, f"mentions for {unknown[0]!r}, which is not an input file")
    return lists


def clusters(document: Document, tokenized: TokenizedText | None = None) -> list[list[dict[str, object]]]:
    """The entities of ``document``, each the list of its mentions in text order: their words and token span,
    and, given the text's tokenisation, their character span in the text."""
    by_entity: dict[int, list[dict[str, object]]] = {}
    for mention in sorted(document.mentions):
        entry: dict[str, object] = {"text": " ".join(document.tokens[mention.start:mention.end]),
                                    "start_token": mention.start, "end_token": mention.end}
        if tokenized is not None:
            start, end = tokenized.offsets[mention.start][0], tokenized.offsets[mention.end - 1][1]
            entry.update(text=tokenized.text[start:end], start_char=start, end_char=end)
        by_entity.setdefault(mention.entity, []).append(entry)
    return sorted(by_entity.values(), key=lambda mentions: (mentions[0]["start_token"], mentions[0]["end_token"]))


def format_clusters(document: Document, tokenized: TokenizedText | None = None) -> str:
    """One line per entity with two or more mentions, then how many singletons there are."""
    found = clusters(document, tokenized)
    lines = [f"entity {number}: " + " | ".join(str(mention["text"]) for mention in mentions)
             for number, mentions in enumerate((c for c in found if len(c) > 1), start=1)]
    singletons = sum(len(c) == 1 for c in found)
    lines.append(f"{document.id}: {len(document.tokens)} tokens, {len(document.mentions)} mentions, "
                 f"{len(found) - singletons} entities mentioned more than once, {singletons} singletons")
    return "\n".join(lines)


def clusters_json(documents: Sequence[Document], tokenizations: Sequence[TokenizedText | None]) -> dict:
    """Each document's id, part and :func:`clusters` (character offsets where its tokenisation is given)."""
    return {"documents": [{"id": document.id, "part": document.part, "clusters": clusters(document, found)}
                          for document, found in zip(documents, tokenizations)]}


def representatives(document: Document) -> dict[int, Mention]:
    """Each entity's representative mention: its first proper-name mention, else its longest (then first)
    mention that is not a pronoun; an entity of pronouns only has none. Mention types are the ranker's
    (:func:`~coref.resolution.ranker.mention_types`)."""
    chosen: dict[int, tuple[tuple[int, int, int], Mention]] = {}
    for mention, kind in sorted(zip(document.mentions, mention_types(document))):
        if kind == PRONOUN:
            continue
        rank = (0, 0, 0) if kind == PROPER else (1, -(mention.end - mention.start), 0)
        if mention.entity not in chosen or rank < chosen[mention.entity][0]:
            chosen[mention.entity] = (rank, mention)
    return {entity: mention for entity, (_, mention) in chosen.items()}


LOWERED_FIRST_WORDS = frozenset({"the", "a", "an"} | set(DEMONSTRATIVES) | INDEFINITES | POSSESSIVES)


def replaced_text(document: Document, tokenized: TokenizedText | None = None) -> str:
    """The text with each mention replaced by its entity's representative (:func:`representatives`), as written
    there: outermost mentions only (one inside another is replaced with it), a pronoun-only entity's mentions kept,
    a possessive pronoun ("his", "their") given "'s". A representative moved to a sentence start gets a capital,
    one that began a sentence with a determiner ("The old man") loses it elsewhere. Given the text's tokenisation
    (what ``coref.io.text.tokenize`` made the document from), the rest of the text is kept as written; without
    one, the document's tokens are joined by spaces, a sentence a line."""
    if tokenized is not None and len(tokenized.tokens) != len(document.tokens):
        raise ValueError(f"document {document.id!r}: its tokenisation has {len(tokenized.tokens)} tokens, "
                         f"the document {len(document.tokens)}")
    tokens = document.tokens

    def written(start: int, end: int) -> str:  # tokens [start, end) as the text wrote them
        if tokenized is None:
            return " ".join(tokens[start:end])
        return tokenized.text[tokenized.offsets[start][0]:tokenized.offsets[end - 1][1]]

    representative = representatives(document)
    starts = {start for start, _ in document.sentences}
    replacements: dict[int, tuple[int, str]] = {}  # first token -> (end token, replacement)
    covered = 0
    for mention in sorted(document.mentions, key=lambda m: (m.start, -m.end)):
        if mention.start < covered:  # inside (or crossing) a mention already replaced
            continue
        covered = mention.end
        chosen = representative.get(mention.entity)
        if chosen is None or (chosen.start, chosen.end) == (mention.start, mention.end):
            continue
        name = written(chosen.start, chosen.end)
        first = tokens[chosen.start].lower()
        if mention.start in starts:
            name = name[:1].upper() + name[1:]
        elif chosen.start in starts and first in LOWERED_FIRST_WORDS:
            name = name[:1].lower() + name[1:]
        if mention.end - mention.start == 1 and tokens[mention.start].lower() in POSSESSIVES - {"her"}:
            name += "'s"
        replacements[mention.start] = (mention.end, name)
    if tokenized is None:
        lines = []
        for start, end in document.sentences:
            words, t = [], start
            while t < end:
                if t in replacements:
                    t, name = replacements[t]
                    words.append(name)
                else:
                    words.append(tokens[t])
                    t += 1
            lines.append(" ".join(words))
        return "\n".join(lines)
    pieces, at = [], 0
    for start in sorted(replacements):
        end, name = replacements[start]
        pieces += [tokenized.text[at:tokenized.offsets[start][0]], name]
        at = tokenized.offsets[end - 1][1]
    return "".join(pieces) + tokenized.text[at:]


# ---- the command's outputs ------------------------------------------------------------------------------------


def write_outputs(documents: Sequence[Document], tokenizations: Sequence[TokenizedText | None],
                  conll: str | Path | None = None, clusters_file: str | Path | None = None) -> None:
    """Write the documents' clusters as JSON to ``clusters_file`` (:func:`clusters_json`), then as CoNLL to
    ``conll`` (``-``: stdout), each atomically; either may be None.

    The JSON comes first because it can hold any clusters, and a CoNLL file cannot hold some (two crossing mentions
    of one entity, a TAB in a name): when the CoNLL cannot be written, the clusters are still on disk, in
    ``clusters_file`` or, where none was asked for, in the CoNLL file's name with ``.json`` added
    (:data:`RESCUED_JSON` for stdout), and the ValueError says in one line why and which file holds them.
    """
    if clusters_file is not None:
        _write_json(documents, tokenizations, clusters_file)
    if conll is None:
        return
    try:
        text = format_conll(documents)
        if conll == "-":
            print(text, end="")
        else:
            write_text_atomic(conll, text)
    except (ValueError, OSError) as error:
        where = "stdout" if conll == "-" else str(conll)
        if clusters_file is None:
            clusters_file = RESCUED_JSON if conll == "-" else f"{conll}.json"
            _write_json(documents, tokenizations, clusters_file)
        raise ValueError(f"{where}: the CoNLL was not written ({error}); the clusters are in {clusters_file}"
                         ) from error


def _write_json(documents: Sequence[Document], tokenizations: Sequence[TokenizedText | None],
                path: str | Path) -> None:
    write_text_atomic(path, json.dumps(clusters_json(documents, tokenizations), indent=2, ensure_ascii=False) + "\n")
