"""Reading and writing coreference in the CoNLL-2012 family of formats, with file:line errors.

One reader covers three dialects:

- the CoNLL-2012 shared task's ``*_conll`` files: ``#begin document (NAME); part NNN`` ... ``#end document``,
  whitespace- or TAB-separated columns (word in column 4, coreference last), a blank line between sentences;
- LitBank: the same with 13 TAB-separated columns, ``_`` placeholders and an EMPTY coreference field (the line
  ends with a TAB) for "no mention";
- OntoGUM: 3 columns (index, word, coreference), ``# begin document`` with an empty name (the file's stem
  becomes the id), brackets written back to back (``(3(4)``, ``5)4)``), and no sentence breaks: pass the aligned
  CoNLL-U file as ``conllu=`` to take sentences from it.

Brackets mean what the official scorer (v8.01, reference-notes §3.3) makes of them: on each token the
one-token mentions ``(N)`` are read first, then the opens ``(N``, then the closes ``N)``, and a close pairs
with the latest open of the same entity (a stack per entity, so mentions of one entity nest). ``-``, ``_`` and
an empty field mean no mention. Every mention is kept as annotated: nested, repeated and crossing ones (spans
that overlap without one containing the other, which mentions of different entities can do; LitBank: "my
[host] and hostess"). What the R/E/L encoding cannot hold is the model's preprocessing to drop and count
(:mod:`coref.corpora.preprocess`), never the reader's, so evaluation sees what the official scorer sees.

Bad structure (a file with no document, ``#begin`` without ``#end``, a token line outside a document or with
too few columns, an empty document, a CoNLL-U file that does not align) always raises :class:`ConllError`.
Broken mentions (an unclosed open, a close without an open, an unreadable coreference field) and an empty word
that the CoNLL-U file fills in raise in strict mode; in lenient mode (the default) the mention is dropped
(or the word filled in) and a :class:`Problem` says where, so one annotation error does not stop a
whole-corpus run.

The writer emits what the official scorer reads: TAB-separated ``ID PART INDEX WORD COREFERENCE`` lines,
coreference last, a blank line after each sentence, and one ``(ID, PART)`` per document (the scorer keys
documents by name and silently scores only the last of duplicates, so the writer refuses them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from coref.document import Document, Mention
from coref.io.errors import FileLineError

_NO_MENTION = frozenset({"", "_", "-"})
# Where the word is, by the number of columns of a layout (at least 5 columns: column 4). Two columns
# (document name, coreference) are the official scorer's own test files: they have no word, so the name stands in.
WORD_COLUMN = {2: 0, 3: 1}

_BRACKET = r"\(\d+\)?|\d+\)"
_FIELD = re.compile(rf"(?:{_BRACKET})(?:\|?(?:{_BRACKET}))*")
_BRACKETS = re.compile(r"\((?P<open>\d+)(?P<single>\))?|(?P<close>\d+)\)")
_BEGIN = re.compile(r"#\s*begin document(?:\s+(?P<name>.*))?$")
_END = re.compile(r"#\s*end document\b")
_NAME_AND_PART = re.compile(r"\((?P<id>.*)\);\s*part\s+(?P<part>\d+)")
_CONLLU_SKIPPED_ID = re.compile(r"\d+-\d+|\d+\.\d+")  # multiword-token ranges and empty nodes


@dataclass(frozen=True)
class Problem:
    """A defect the lenient reader worked around: a malformed mention dropped (``dropped_mention``), or an
    empty word taken from the aligned CoNLL-U file."""

    path: str
    line: int
    document: str
    reason: str
    dropped_mention: bool = True

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class ConllError(FileLineError):
    """Input the reader cannot use, located by file and line."""


# ----------------------------------------------------------------------------------------------- reading


@dataclass
class _Token:
    line: int
    word: str
    coreference: str


@dataclass
class _RawDocument:
    """One ``#begin`` .. ``#end`` block as it stands in the file, before its brackets are paired."""

    id: str
    part: int
    part_text: str | None
    begin_line: int
    end_line: int = 0
    tokens: list[_Token] = field(default_factory=list)
    boundaries: list[int] = field(default_factory=lambda: [0])  # sentence starts from blank lines
    columns: int = 0  # the column count of the first token line, which fixes the layout

    def end_sentence(self) -> None:
        if len(self.tokens) > self.boundaries[-1]:
            self.boundaries.append(len(self.tokens))

    def blank_line_sentences(self) -> list[tuple[int, int]]:
        return list(zip(self.boundaries, self.boundaries[1:]))

    def add_token(self, line: int, text: str, path: str) -> None:
        """Add a token line: TAB-separated if it has a TAB (LitBank's last field may be empty), else whitespace."""
        columns = text.split("\t") if "\t" in text else text.split()
        self.columns = self.columns or len(columns)
        if self.columns not in WORD_COLUMN and self.columns < 5:
            raise ConllError(
                path,
                line,
                f"too few columns ({len(columns)}): expected 2 (name, coreference), 3 (index, word, coreference) "
                "or at least 5 (word in column 4, coreference last)",
            )
        if len(columns) < self.columns:
            raise ConllError(
                path, line, f"too few columns ({len(columns)}): the document's first token line has {self.columns}"
            )
        word = columns[WORD_COLUMN.get(self.columns, 3)]
        self.tokens.append(_Token(line, word, columns[-1]))


class _Complaints:
    """Where mention-level problems go: raised at once in strict mode, collected in lenient mode."""

    def __init__(self, path: str, strict: bool) -> None:
        self.path = path
        self.strict = strict
        self.problems: list[Problem] = []

    def __call__(self, line: int, document: str, reason: str, dropped_mention: bool = True) -> None:
        if self.strict:
            raise ConllError(self.path, line, reason)
        self.problems.append(Problem(self.path, line, document, reason, dropped_mention))


def read_utf8(path: str | Path) -> str:
    """A text file's contents; a file that is not UTF-8 is a :class:`ConllError` at the line of the first bad
    byte."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ConllError(str(path), line, f"not UTF-8 text (byte 0x{data[error.start]:02x})") from None


def read_conll(
    path: str | Path, *, strict: bool = False, conllu: str | Path | None = None
) -> tuple[list[Document], list[Problem]]:
    """Every document of a CoNLL-2012-family file, and the problems worked around (none in strict mode).

    ``conllu`` names an aligned CoNLL-U file (same tokens, same order) whose sentences replace the file's own
    blank-line sentence breaks; OntoGUM needs it, since its CoNLL files have no sentence breaks.
    """
    return parse_conll(read_utf8(path), str(path), strict=strict, conllu=conllu)


def parse_conll(
    text_or_lines: str | Iterable[str],
    source: str = "<string>",
    *,
    strict: bool = False,
    conllu: str | Path | None = None,
) -> tuple[list[Document], list[Problem]]:
    """Like :func:`read_conll`, from the file's text (or its lines); ``source`` names it in messages."""
    lines = _lines_of(text_or_lines) if isinstance(text_or_lines, str) else text_or_lines
    raw_documents = _split_documents((line.rstrip("\r\n") for line in lines), source)
    complain = _Complaints(source, strict)
    if conllu is None:
        sentences = [raw.blank_line_sentences() for raw in raw_documents]
    else:
        sentences = _conllu_sentences_per_document(raw_documents, source, str(conllu), complain)
    documents = [
        Document(
            raw.id,
            [token.word for token in raw.tokens],
            spans,
            _pair_brackets(raw, complain),
            raw.part,
            raw.part_text,
        )
        for raw, spans in zip(raw_documents, sentences)
    ]
    return documents, complain.problems


def _lines_of(text: str) -> list[str]:
    """The lines of a text, split at line feeds only (``str.splitlines`` would also split at U+2028 and others)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def _split_documents(lines: Iterable[str], path: str) -> list[_RawDocument]:
    """The ``#begin`` .. ``#end`` blocks of a file; raises on any structural defect."""
    documents: list[_RawDocument] = []
    current: _RawDocument | None = None
    number = 0
    for number, line in enumerate(lines, start=1):
        if begin := _BEGIN.match(line):
            if current is not None:
                reason = f"'#begin document' without '#end document' (next '#begin' at line {number})"
                raise ConllError(path, current.begin_line, reason)
            current = _RawDocument(*_document_name(begin["name"] or "", path), begin_line=number)
        elif _END.match(line):
            if current is None:
                raise ConllError(path, number, "'#end document' without '#begin document'")
            if not current.tokens:
                raise ConllError(path, current.begin_line, f"document {current.id!r} is empty (no token lines)")
            current.end_line = number
            current.end_sentence()
            documents.append(current)
            current = None
        elif not line.strip():
            if current is not None:
                current.end_sentence()
        elif current is None:
            raise ConllError(path, number, f"text outside a document (no '#begin document' before it): {line[:40]!r}")
        else:
            current.add_token(number, line, path)
    if current is not None:
        reason = f"'#begin document' without '#end document' (file ends at line {number})"
        raise ConllError(path, current.begin_line, reason)
    if not documents:
        raise ConllError(path, max(number, 1), "no documents ('#begin document' ... '#end document'): empty file?")
    return documents


def _document_name(name: str, path: str) -> tuple[str, int, str | None]:
    """(id, part, the part as written) from the text after ``#begin document``: ``(ID); part NNN``, a bare
    name, or nothing (no part written: None)."""
    name = name.strip()
    if match := _NAME_AND_PART.fullmatch(name):
        return match["id"], int(match["part"]), match["part"]
    return name or Path(path).stem, 0, None


def _pair_brackets(raw: _RawDocument, complain: _Complaints) -> list[Mention]:
    """The mentions of a document, pairing brackets as the official scorer does (see the module docstring)."""
    mentions = []
    opened: dict[int, list[tuple[int, int]]] = {}  # entity -> stack of (token, line) of its unclosed opens
    for position, token in enumerate(raw.tokens):
        brackets = _brackets(token.coreference)
        if brackets is None:
            complain(
                token.line,
                raw.id,
                f"cannot parse coreference field {token.coreference!r}: expected '-', '_', or brackets "
                "'(N', 'N)', '(N)', optionally separated by '|'",
            )
            continue
        singles, opens, closes = brackets
        mentions.extend(Mention(position, position + 1, entity) for entity in singles)
        for entity in opens:
            opened.setdefault(entity, []).append((position, token.line))
        for entity in closes:
            if opened.get(entity):
                start, _ = opened[entity].pop()
                mentions.append(Mention(start, position + 1, entity))
            else:
                complain(token.line, raw.id, f"'{entity})' closes a mention of entity {entity} that was never opened")
    unclosed = sorted((line, entity) for entity, stack in opened.items() for _, line in stack)
    for line, entity in unclosed:
        reason = f"'({entity}' opens a mention of entity {entity} that is never closed"
        complain(line, raw.id, f"{reason} (document ends at line {raw.end_line})")
    return mentions


def _brackets(coreference: str) -> tuple[list[int], list[int], list[int]] | None:
    """The entities of the one-token mentions, opens and closes in a coreference field; None if unreadable."""
    if coreference in _NO_MENTION:
        return [], [], []
    if not _FIELD.fullmatch(coreference):
        return None
    singles, opens, closes = [], [], []
    for bracket in _BRACKETS.finditer(coreference):
        if bracket["close"] is not None:
            closes.append(int(bracket["close"]))
        elif bracket["single"]:
            singles.append(int(bracket["open"]))
        else:
            opens.append(int(bracket["open"]))
    return singles, opens, closes


# ------------------------------------------------------------------------------------- aligned CoNLL-U


@dataclass(frozen=True)
class ConlluWord:
    """A syntactic word of a CoNLL-U file: its line, its sentence (0, 1, ... in file order) and its TAB-separated
    columns as written (ID, FORM, LEMMA, UPOS, XPOS, FEATS, HEAD, DEPREL, ...)."""

    line: int
    sentence: int
    columns: tuple[str, ...]

    @property
    def form(self) -> str:
        return self.columns[1]


def read_conllu_words(path: str) -> list[ConlluWord]:
    """The syntactic words of a CoNLL-U file (integer IDs: no multiword ranges, no empty nodes), the tokens a
    CoNLL file read with it is aligned to; a line that is not a token line raises :class:`ConllError`."""
    tokens, sentence, in_sentence = [], 0, False
    for number, line in enumerate(_lines_of(read_utf8(path)), start=1):
        line = line.rstrip("\r")
        if not line.strip():
            sentence += in_sentence
            in_sentence = False
            continue
        if line.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) < 2 or not (columns[0].isdigit() or _CONLLU_SKIPPED_ID.fullmatch(columns[0])):
            raise ConllError(path, number, f"not a CoNLL-U token line (ID TAB FORM ...): {line[:40]!r}")
        if columns[0].isdigit():
            tokens.append(ConlluWord(number, sentence, tuple(columns)))
            in_sentence = True
    return tokens


def _conllu_sentences_per_document(
    raw_documents: Sequence[_RawDocument], path: str, conllu: str, complain: _Complaints
) -> list[list[tuple[int, int]]]:
    """Sentence spans of each document, from the CoNLL-U file aligned with the whole CoNLL file token by token.

    Word forms must agree; an empty CoNLL word (OntoGUM writes the token ``|`` that way) takes the CoNLL-U form,
    which is a problem to report. A sentence may not run across a document boundary.
    """
    aligned = read_conllu_words(conllu)
    sentences, offset = [], 0
    for raw in raw_documents:
        counterparts = aligned[offset : offset + len(raw.tokens)]
        for token, counterpart in zip(raw.tokens, counterparts):
            _check_same_word(raw, token, counterpart, path, conllu, complain)
        if len(counterparts) < len(raw.tokens):
            missing = raw.tokens[len(counterparts)]
            raise ConllError(path, missing.line, f"word {missing.word!r} has no counterpart: {conllu} ends earlier")
        if offset and aligned[offset - 1].sentence == counterparts[0].sentence:
            reason = f"document {raw.id!r} starts inside the sentence at {conllu}:{counterparts[0].line}"
            raise ConllError(path, raw.begin_line, reason)
        sentences.append(_sentence_spans(counterparts))
        offset += len(counterparts)
    if offset < len(aligned):
        extra = aligned[offset]
        raise ConllError(conllu, extra.line, f"word {extra.form!r} has no counterpart: {path} ends earlier")
    return sentences


def _check_same_word(
    raw: _RawDocument,
    token: _Token,
    counterpart: ConlluWord,
    path: str,
    conllu: str,
    complain: _Complaints,
) -> None:
    if token.word == counterpart.form:
        return
    if token.word:
        raise ConllError(
            path, token.line, f"word {token.word!r} differs from {counterpart.form!r} at {conllu}:{counterpart.line}"
        )
    reason = f"empty word; taking {counterpart.form!r} from {conllu}:{counterpart.line}"
    complain(token.line, raw.id, reason, dropped_mention=False)
    token.word = counterpart.form


def _sentence_spans(tokens: Sequence[ConlluWord]) -> list[tuple[int, int]]:
    """Half-open spans of the runs of tokens from one CoNLL-U sentence."""
    starts = [i for i, token in enumerate(tokens) if i == 0 or token.sentence != tokens[i - 1].sentence]
    return list(zip(starts, starts[1:] + [len(tokens)]))


# ----------------------------------------------------------------------------------------------- writing


def write_conll(documents: Iterable[Document], path_or_textfile: str | Path | TextIO) -> None:
    """Write documents in the CoNLL-2012 format the official scorer reads (see :func:`format_conll`)."""
    text = format_conll(documents)
    if isinstance(path_or_textfile, (str, Path)):
        Path(path_or_textfile).write_text(text, encoding="utf-8")
    else:
        path_or_textfile.write(text)


def format_conll(documents: Iterable[Document]) -> str:
    """Documents as CoNLL-2012 text: ``#begin document (ID); part NNN`` (the part as the document's own file
    wrote it, :attr:`~coref.document.Document.part_text`, where it was read from one: the official scorer
    matches documents by that text), then one TAB-separated line per token, ``ID PART INDEX WORD COREFERENCE``
    (INDEX counts within the sentence), a blank line after each sentence, ``#end document``. Raises ValueError
    for two documents with one (id, part), or one it cannot express.
    """
    documents = list(documents)
    seen: set[tuple[str, int]] = set()
    for document in documents:
        if document.key in seen:
            raise ValueError(
                f"two documents named {document.id!r} part {document.part}: the official scorer would silently "
                "score only the last one"
            )
        seen.add(document.key)
    return "".join(_format_document(document) for document in documents)


def _format_document(document: Document) -> str:
    _check_writable(document)
    coreference = _coreference_fields(document)
    part = document.part_text if document.part_text is not None else f"{document.part:03d}"
    lines = [f"#begin document ({document.id}); part {part}"]
    for start, end in document.sentences:
        for position in range(start, end):
            columns = (document.id, str(document.part), str(position - start), document.tokens[position])
            lines.append("\t".join(columns + (coreference[position],)))
        lines.append("")
    lines.append("#end document")
    return "\n".join(lines) + "\n"


def _coreference_fields(document: Document) -> list[str]:
    """Each token's brackets: opens outer first, then one-token mentions, then closes inner first; ``-`` if none."""
    brackets: list[list[tuple[tuple[int, int, int], str]]] = [[] for _ in document.tokens]
    for mention in document.mentions:
        entity = mention.entity
        if len(mention) == 1:
            brackets[mention.start].append(((1, 0, entity), f"({entity})"))
        else:
            brackets[mention.start].append(((0, -mention.end, entity), f"({entity}"))
            brackets[mention.end - 1].append(((2, -mention.start, entity), f"{entity})"))
    return ["|".join(text for _, text in sorted(token)) or "-" for token in brackets]


def _check_writable(document: Document) -> None:
    """Refuse what the format cannot carry: separators in names or words, negative labels, a chain crossing itself."""
    name = f"document {document.id!r} part {document.part}"
    for position, text in [(None, document.id), *enumerate(document.tokens)]:
        if any(separator in text for separator in "\t\n\r"):
            where = "its id" if position is None else f"token {position}"
            raise ValueError(f"{name}: {where} ({text!r}) contains a TAB or line break")
    if document.part < 0 or any(mention.entity < 0 for mention in document.mentions):
        raise ValueError(f"{name}: parts and entity labels must be non-negative integers to be written")
    by_entity: dict[int, list[Mention]] = {}
    for mention in document.mentions:
        by_entity.setdefault(mention.entity, []).append(mention)
    for mentions in by_entity.values():
        for i, first in enumerate(mentions):
            for k in range(i + 1, len(mentions)):  # no slice copy: an entity of a book has thousands of mentions
                second = mentions[k]
                if second.start >= first.end:
                    break
                if first.crosses(second):
                    raise ValueError(
                        f"{name}: mentions {first.span} and {second.span} of entity {first.entity} cross; brackets "
                        "of one entity pair up like parentheses, so the format cannot express that"
                    )
