"""Documents with coreference annotation, and EntityNLM's per-token R/E/L encoding of them.

A :class:`Document` is what every part of entitylm exchanges: tokens, sentence boundaries, and mentions as
half-open token spans, each labelled with the entity (cluster) it belongs to. It holds exactly what the
source annotated, nested and duplicate mentions included, so that reading and writing a corpus is lossless.

EntityNLM (Ji et al. 2017, §2 and Fig. 2) sees a document as one latent triple per token:

- ``R_t`` in {0, 1}: whether token t is part of an entity mention;
- ``E_t``: the entity of that mention, 1..K numbered by first mention (0 outside mentions);
- ``L_t``: the remaining length of the mention INCLUDING token t (1 outside mentions), at most 25.

That encoding can only express non-overlapping mentions of bounded length; :func:`encode_entities` refuses
anything else with a list of the offending mentions, and :func:`decode_entities` is its exact inverse, so
``decode_entities(encode_entities(doc))`` has the same clusters as ``doc`` whenever the encoding exists.
Bringing a real document into that shape (outermost mentions, no singletons, ...) is the job of
:mod:`coref.corpora.preprocess`, which reports everything it changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MAX_MENTION_LENGTH = 25  # paper Fig. 2 / reference code M


@dataclass(frozen=True, order=True)
class Mention:
    """A mention: tokens ``start .. end-1`` of a document, referring to ``entity``.

    ``entity`` is an arbitrary integer label, consistent within one document (CoNLL files number their
    chains freely; the R/E/L encoding renumbers them by first mention).
    """

    start: int
    end: int
    entity: int

    @property
    def span(self) -> tuple[int, int]:
        return (self.start, self.end)

    def __len__(self) -> int:
        return self.end - self.start

    def contains(self, other: Mention) -> bool:
        """True if ``other`` lies inside this mention (equal spans included)."""
        return self.start <= other.start and other.end <= self.end

    def crosses(self, other: Mention) -> bool:
        """True if the spans overlap without one containing the other."""
        overlap = self.start < other.end and other.start < self.end
        return overlap and not self.contains(other) and not other.contains(self)


class DocumentError(ValueError):
    """A document that violates the invariants of :class:`Document`."""


@dataclass(frozen=True, init=False)
class Document:
    """A tokenised document with sentence boundaries and coreference mentions.

    ``sentences`` are half-open token spans that tile ``tokens`` in order. ``mentions`` are kept sorted by
    (start, end, entity), so two documents with the same annotation compare equal. ``(id, part)`` names the
    document as CoNLL-2012 does (``#begin document (ID); part PART``); scorers match documents by it.
    ``part_text`` is the part as a file's header wrote it (``0``, ``000``), kept so that a document is written
    back under the very header the official scorer matches it by (it compares the header's text); None for a
    document not read from a file, written ``part NNN``. It takes no part in comparisons.
    """

    id: str
    tokens: tuple[str, ...]
    sentences: tuple[tuple[int, int], ...]
    mentions: tuple[Mention, ...]
    part: int
    part_text: str | None = field(default=None, compare=False)

    def __init__(
        self,
        id: str,
        tokens: Sequence[str],
        sentences: Iterable[tuple[int, int]] | None = None,
        mentions: Iterable[Mention] = (),
        part: int = 0,
        part_text: str | None = None,
    ) -> None:
        tokens = tuple(tokens)
        sentences = ((0, len(tokens)),) if sentences is None else tuple((int(s), int(e)) for s, e in sentences)
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "sentences", sentences)
        object.__setattr__(self, "mentions", tuple(sorted(mentions)))
        object.__setattr__(self, "part", int(part))
        object.__setattr__(self, "part_text", part_text)
        self._validate()

    def _validate(self) -> None:
        if not self.tokens:
            raise DocumentError(f"document {self.id!r} is empty (no tokens)")
        position = 0
        for start, end in self.sentences:
            if start != position or end <= start:
                raise DocumentError(
                    f"document {self.id!r}: sentence spans must tile the tokens in order, got {self.sentences}"
                )
            position = end
        if self.part_text is not None and not (self.part_text.isdigit() and int(self.part_text) == self.part):
            raise DocumentError(f"document {self.id!r}: part_text {self.part_text!r} does not write part {self.part}")
        if position != len(self.tokens):
            raise DocumentError(
                f"document {self.id!r}: sentences cover {position} of {len(self.tokens)} tokens"
            )
        for mention in self.mentions:
            if not 0 <= mention.start < mention.end <= len(self.tokens):
                raise DocumentError(
                    f"document {self.id!r}: mention {mention} outside the {len(self.tokens)} tokens"
                )

    @property
    def key(self) -> tuple[str, int]:
        """The name scorers match documents by."""
        return (self.id, self.part)

    def sentence_of(self) -> list[int]:
        """The sentence index of every token."""
        index = []
        for number, (start, end) in enumerate(self.sentences):
            index.extend([number] * (end - start))
        return index

    def entities(self) -> list[int]:
        """Entity labels in order of first mention."""
        return list(dict.fromkeys(mention.entity for mention in self.mentions))

    def clusters(self) -> list[list[tuple[int, int]]]:
        """Mention spans grouped by entity, entities in order of first mention, spans in text order."""
        groups: dict[int, list[tuple[int, int]]] = {}
        for mention in self.mentions:
            groups.setdefault(mention.entity, []).append(mention.span)
        return list(groups.values())

    def partition(self) -> frozenset[frozenset[tuple[int, int]]]:
        """The clusters as a set of sets: equal for two annotations that differ only in entity labels."""
        return frozenset(frozenset(cluster) for cluster in self.clusters())

    def mention_text(self, mention: Mention) -> str:
        return " ".join(self.tokens[mention.start : mention.end])

    def replace(self, **changes) -> Document:
        """A copy with some fields replaced (and re-validated); a new ``part`` drops the old ``part_text``."""
        fields = {
            "id": self.id,
            "tokens": self.tokens,
            "sentences": self.sentences,
            "mentions": self.mentions,
            "part": self.part,
            "part_text": None if "part" in changes else self.part_text,
        }
        fields.update(changes)
        return Document(**fields)


def sentence_cuts(document: Document, max_tokens: int) -> list[tuple[int, int]]:
    """The (begin, end) token ranges of :func:`sentence_chunks`: the document cut between sentences into pieces
    of at most ``max_tokens`` tokens where possible, at sentence starts that no mention spans."""
    spanned = {b for m in document.mentions for b in range(m.start + 1, m.end)}
    pieces: list[tuple[int, int]] = []
    start = 0
    for sentence_start, sentence_end in document.sentences[1:]:
        if sentence_end - start > max_tokens and sentence_start not in spanned:
            pieces.append((start, sentence_start))
            start = sentence_start
    pieces.append((start, len(document.tokens)))
    return pieces


def excerpt(document: Document, begin: int, end: int, name: str) -> Document:
    """Tokens ``begin:end`` of ``document`` (both at sentence starts, or the end, that no mention spans) as a
    Document with id ``name``: its sentences and the mentions that start there, spans shifted."""
    return Document(
        name,
        document.tokens[begin:end],
        [(s - begin, e - begin) for s, e in document.sentences if begin <= s < end],
        [Mention(m.start - begin, m.end - begin, m.entity) for m in document.mentions if begin <= m.start < end],
        document.part,
    )


def sentence_chunks(document: Document, max_tokens: int) -> list[Document]:
    """The document cut between sentences into pieces of at most ``max_tokens`` tokens where possible.

    Cuts fall only at sentence starts that no mention spans; a piece grows past ``max_tokens`` when it must (a
    long sentence, a mention across sentences). Piece k is a Document with id ``ID#k`` holding its own mentions
    (spans shifted), so an entity first mentioned in an earlier piece is new in this one: training on pieces
    truncates the context, which is why it is an option (``inference.training.train --train-chunk``), not the default.
    """
    pieces = sentence_cuts(document, max_tokens)
    if len(pieces) == 1:
        return [document]
    return [excerpt(document, begin, end, f"{document.id}#{k}") for k, (begin, end) in enumerate(pieces)]


@dataclass(frozen=True)
class EntityAnnotation:
    """EntityNLM's latent variables of one document, one entry per token (paper §2, Fig. 2)."""

    R: tuple[int, ...]  # 1 inside an entity mention
    E: tuple[int, ...]  # entity 1..K by first mention, 0 outside mentions
    L: tuple[int, ...]  # remaining mention length including this token, 1 outside mentions

    def __post_init__(self) -> None:
        if not len(self.R) == len(self.E) == len(self.L):
            raise ValueError(f"R, E, L lengths differ: {len(self.R)}, {len(self.E)}, {len(self.L)}")

    @property
    def num_entities(self) -> int:
        return max(self.E, default=0)


class EncodingError(ValueError):
    """A document the R/E/L encoding cannot express; ``problems`` names each offending mention."""

    def __init__(self, document_id: str, problems: list[str]) -> None:
        self.document_id = document_id
        self.problems = problems
        shown = "; ".join(problems[:5]) + (f"; ... ({len(problems)} in all)" if len(problems) > 5 else "")
        super().__init__(f"document {document_id!r} cannot be R/E/L-encoded: {shown}")


def encoding_problems(document: Document, max_length: int = MAX_MENTION_LENGTH) -> list[str]:
    """Why ``document`` has no R/E/L encoding: overlapping (nested, crossing, duplicate) or too-long mentions."""
    problems = []
    previous: Mention | None = None
    for mention in document.mentions:
        if len(mention) > max_length:
            problems.append(f"mention {mention.span} is {len(mention)} tokens long (max {max_length})")
        if previous is not None and mention.start < previous.end:
            kind = (
                "crosses"
                if previous.crosses(mention)
                else "duplicates"
                if previous.span == mention.span
                else "nests with"
            )
            problems.append(f"mention {mention.span} {kind} mention {previous.span}")
        if previous is None or mention.end > previous.end:
            previous = mention
    return problems


def bracketed(document: Document) -> str:
    """The text with each mention in brackets tagged by its entity, e.g. ``[John]1 saw [his [dog]2]3``."""
    opens: dict[int, list[Mention]] = {}
    closes: dict[int, list[Mention]] = {}
    for mention in document.mentions:
        opens.setdefault(mention.start, []).append(mention)
        closes.setdefault(mention.end - 1, []).append(mention)
    words = []
    for position, token in enumerate(document.tokens):
        starting = sorted(opens.get(position, []), key=lambda m: -m.end)  # outer mentions open first
        ending = sorted(closes.get(position, []), key=lambda m: -m.start)  # inner mentions close first
        words.append("[" * len(starting) + token + "".join(f"]{m.entity}" for m in ending))
    return " ".join(words)


def split_crossing(mentions: Iterable[Mention]) -> tuple[list[Mention], list[tuple[Mention, Mention]]]:
    """The mentions that cross no earlier-kept one, and each dropped mention with the kept mention it crosses.

    Crossing spans (overlapping, neither inside the other) are what neither CoNLL brackets of one entity nor
    the R/E/L encoding can hold. Scanning in text order (by start, enclosing mentions first) keeps a stack of
    properly nested kept mentions; a mention crosses one on the stack exactly when it outlasts the innermost
    one it starts inside.
    """
    kept: list[Mention] = []
    dropped: list[tuple[Mention, Mention]] = []
    enclosing: list[Mention] = []  # kept mentions around the current position, innermost last
    for mention in sorted(mentions, key=lambda m: (m.start, -m.end, m.entity)):
        while enclosing and enclosing[-1].end <= mention.start:
            enclosing.pop()
        if enclosing and enclosing[-1].end < mention.end:
            dropped.append((mention, enclosing[-1]))
            continue
        kept.append(mention)
        enclosing.append(mention)
    return sorted(kept), dropped


def crossing_pairs(mentions: Sequence[Mention]) -> list[tuple[int, int]]:
    """Every pair ``(i, k)``, ``i < k``, of indices into ``mentions`` whose mentions cross (:meth:`Mention.crosses`).

    A sweep in text order compares each mention only with the earlier ones still open at its start, so the cost
    grows with the mentions times how many overlap a token (a handful), not with the mentions squared.
    """
    pairs: list[tuple[int, int]] = []
    open_: list[int] = []  # indices of the mentions seen whose end lies beyond the current start
    for k in sorted(range(len(mentions)), key=lambda index: (mentions[index].start, -mentions[index].end)):
        mention = mentions[k]
        open_ = [i for i in open_ if mentions[i].end > mention.start]
        pairs.extend((min(i, k), max(i, k)) for i in open_ if mentions[i].crosses(mention))
        open_.append(k)
    return pairs


def best_non_crossing(mentions: Sequence[Mention], scores: Sequence[float]) -> list[Mention]:
    """The mentions left, in text order, when each is visited best-scored first and dropped if it crosses one
    already kept: of two crossing mentions the better scored stays; nested ones all stay.

    This is :func:`split_crossing` for scored mentions (a detector's spans), where it is the score, not the
    place in the text, that says which of two crossing mentions to believe. Ties go to the earlier in text order.
    """
    if len(scores) != len(mentions):
        raise ValueError(f"{len(mentions)} mentions but {len(scores)} scores")
    crossed: dict[int, list[int]] = {}
    for i, k in crossing_pairs(mentions):
        crossed.setdefault(i, []).append(k)
        crossed.setdefault(k, []).append(i)
    kept: set[int] = set()
    for index in sorted(range(len(mentions)), key=lambda index: (-scores[index], mentions[index])):
        if not any(other in kept for other in crossed.get(index, ())):
            kept.add(index)
    return sorted(mentions[index] for index in kept)


def encode_entities(document: Document, max_length: int = MAX_MENTION_LENGTH) -> EntityAnnotation:
    """The per-token (R, E, L) of a document with non-overlapping mentions of at most ``max_length`` tokens."""
    problems = encoding_problems(document, max_length)
    if problems:
        raise EncodingError(document.id, problems)
    size = len(document.tokens)
    R, E, L = [0] * size, [0] * size, [1] * size
    number = {label: k for k, label in enumerate(document.entities(), start=1)}
    for mention in document.mentions:
        for t in range(mention.start, mention.end):
            R[t], E[t], L[t] = 1, number[mention.entity], mention.end - t
    return EntityAnnotation(tuple(R), tuple(E), tuple(L))


def decode_entities(
    id: str,
    tokens: Sequence[str],
    annotation: EntityAnnotation,
    sentences: Iterable[tuple[int, int]] | None = None,
    part: int = 0,
) -> Document:
    """The document whose mentions the per-token (R, E, L) describe; raises ValueError if they are inconsistent.

    A mention starts wherever R_t = 1 after a token with L = 1 (or at t = 0) and lasts L_t tokens, over which
    R stays 1, E stays fixed and L counts down to 1. Entities must be numbered 1..K by first mention.
    """
    R, E, L = annotation.R, annotation.E, annotation.L
    if len(R) != len(tokens):
        raise ValueError(f"document {id!r}: {len(tokens)} tokens but an annotation of {len(R)}")
    mentions, t, next_entity = [], 0, 1
    while t < len(R):
        if R[t] == 0:
            if E[t] != 0 or L[t] != 1:
                raise ValueError(f"document {id!r}, token {t}: R=0 needs E=0 and L=1, got E={E[t]}, L={L[t]}")
            t += 1
            continue
        length, entity = L[t], E[t]
        if not 1 <= entity <= next_entity:
            raise ValueError(
                f"document {id!r}, token {t}: entity {entity} is neither a known entity nor the next new one"
                f" ({next_entity})"
            )
        expected = [(1, entity, length - i) for i in range(length)]
        if list(zip(R[t : t + length], E[t : t + length], L[t : t + length])) != expected:
            raise ValueError(f"document {id!r}, token {t}: mention of length {length} is not continued consistently")
        mentions.append(Mention(t, t + length, entity))
        next_entity = max(next_entity, entity + 1)
        t += length
    return Document(id, tokens, sentences, mentions, part)
