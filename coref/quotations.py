"""Quotations in a text: which tokens are quoted speech, found by deterministic rules over the quotation marks.

:func:`find_quotations` reads raw text (cut by :func:`coref.io.text.tokenize`, whose token offsets the spans
index) or a pre-tokenised document (a :class:`~coref.document.Document`, or tokens with their sentences, as
LitBank's files give them: one sentence a line, tokens separated by spaces). It returns :class:`Quotation`
spans in token offsets, opening and closing marks included, as LitBank annotates them. The rules:

1. **Marks.** A token made only of quotation marks is a mark: ``“ ”`` and ``‘ ’`` (curly) say whether they open
   or close; ``"`` and ``'`` (straight) do not, nor do the Treebank quotes (two backquotes open, ``''`` closes).
2. **Direction of a straight mark.** In raw text the spacing decides: a space before and none after opens, none
   before and a space after closes. In pre-tokenised text, or where spacing says nothing, the neighbours do: a
   mark first in its sentence, or after ``, : ;`` or an opening bracket with a word after it, leans to opening;
   a mark last in its sentence, or after ``. , ! ? ; -- ...`` with punctuation or a lowercase word after it
   (``," said she``), leans to closing; otherwise it alternates with the marks before it.
3. **Apostrophes.** A single mark is an apostrophe, not a quote, when it is inside a word (no space on either
   side), before an elided word (``'tis``, ``'twas``, ``'em``), after an elided one (``o'``, ``th'``), after a
   word ending in ``s`` with a word after it (``the boys' hats``), or when it leans to closing while no single
   quotation is open.
4. **Which marks quote.** The document's primary marks are double quotes unless it opens more single
   quotations than double ones (British style: ``‘...’``). The other kind inside a primary quotation is a nested
   quotation (``depth`` 1); outside one it is ignored.
5. **Pairing.** An opening mark opens a quotation; a closing one, or an undirected one while a quotation is
   open, closes it. An opening mark while a quotation is open ends the open one just before it: this is how a
   speech continued over paragraphs is written (each paragraph opens again, only the last closes), and each
   paragraph's part is a quotation of its own, as in LitBank. Where paragraphs are known (blank lines in raw
   text) a quotation still open at a paragraph's end ends there. Dialogue broken by narration (``"Go," said
   she, "now."``) is two quotations. A quotation never closed runs to the end of the document.

6. **Scare quotes.** A closed quotation of at most 8 tokens with a word (not a speech verb) before it and no
   punctuation ending it (a title, a word used as such: ``the "true sea-dog" of the inn``) is not speech, and
   is dropped, as LitBank does not annotate it.

Quotations without marks (dashes as in Joyce, letters set off by layout) are not found.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coref.document import Document

DOUBLE_OPEN = {"“", "``", "«"}
DOUBLE_CLOSE = {"”", "''", "»"}
SINGLE_OPEN = {"‘", "`"}
SINGLE_CLOSE = {"’"}
STRAIGHT = {'"': "double", "'": "single"}
_MARK_TOKEN = re.compile(r"(?:``|''|[\"'“”‘’`«»])+")
_ONE_MARK = re.compile(r"``|''|[\"'“”‘’`«»]")
_ELIDED_AFTER = {"tis", "twas", "twere", "twill", "twould", "em", "un", "ee", "t", "s", "cause", "neath",
                 "gainst", "twixt", "tween", "ud", "ave", "ere", "ow"}
_ELIDED_BEFORE = {"o", "th", "wi", "an", "tho", "ol", "fo", "ma", "nothin", "somethin", "goin", "comin"}
_SPEECH_VERBS = set("""said says say cried asked replied answered whispered exclaimed continued added returned observed
remarked thought repeated shouted called murmured muttered began went interrupted resumed rejoined""".split())
_AFTER_SPEECH = _SPEECH_VERBS | {"he", "she", "i", "they", "we", "you", "it"}
_SENTENCE_END = {".", "!", "?", "...", "…", "--", "—", "----"}
_CLOSE_BEFORE = {".", ",", "!", "?", ";", ":", "--", "—", "...", "…", "----", "-", "_"}
_OPEN_AFTER = {",", ":", ";", "(", "[", "--", "—"}


@dataclass(frozen=True)
class Quotation:
    """A quotation: tokens ``start`` to ``end`` (half-open, in the document's token offsets), marks included.

    ``open_mark`` and ``close_mark`` are the marks as written (``close_mark`` is None for a part continued in the
    next paragraph or never closed); ``depth`` is 0 for a quotation in narration, 1 for one nested in another.
    """

    start: int
    end: int
    open_mark: str
    close_mark: str | None
    depth: int = 0


@dataclass(frozen=True)
class _Mark:
    token: int
    char: str
    kind: str  # "double" or "single"
    lean: str | None  # "open", "close" or None


def _is_word(token: str | None) -> bool:
    return token is not None and any(c.isalnum() for c in token)


def _lean(tokens, i, sentence_start, sentence_end, space_before, space_after) -> str | None:
    """Which way an undirected mark at token ``i`` leans, from its spacing or its neighbours."""
    if space_before is not None:
        if space_before[i] and not space_after[i]:
            return "open"
        if space_after[i] and not space_before[i]:
            return "close"
    previous = None if sentence_start[i] else tokens[i - 1]
    following = None if sentence_end[i] else tokens[i + 1]
    if following is None or _MARK_TOKEN.fullmatch(following or ""):
        return "close" if previous is not None else None
    if previous is None:
        return "open" if _is_word(following) or following in {"_", "--", "...", "("} else None
    if previous in _CLOSE_BEFORE and following.lower() in _AFTER_SPEECH:
        return "close"
    if previous in _SENTENCE_END and (not _is_word(following) or following[0].islower()):
        return "close"
    if previous in {":", "(", "["} and _is_word(following):
        return "open"
    return None


def _apostrophe(tokens, i, lean, space_before, space_after, sentence_start, sentence_end) -> bool:
    if space_before is not None and not space_before[i] and not space_after[i]:
        return True
    previous = None if sentence_start[i] else tokens[i - 1]
    following = None if sentence_end[i] else tokens[i + 1]
    if following is not None and following.lower() in _ELIDED_AFTER:
        return True
    if previous is not None and previous.lower() in _ELIDED_BEFORE and _is_word(following):
        return True
    return bool(previous and previous[-1] in "sS" and _is_word(previous) and _is_word(following)
                and lean != "open" and following.lower() not in _SPEECH_VERBS)


def _scare_quote(tokens: Sequence[str], quotation: Quotation, sentences) -> bool:
    """A short quoted phrase inside a sentence (a title, a word used as such): a word before it, no punctuation
    ending it, at most 8 tokens."""
    if quotation.close_mark is None or quotation.end - quotation.start > 10:
        return False
    first_of_sentence = any(start == quotation.start for start, _ in sentences)
    previous = None if first_of_sentence or quotation.start == 0 else tokens[quotation.start - 1]
    last = tokens[quotation.end - 2]
    return (_is_word(previous) and previous.lower() not in _SPEECH_VERBS and _is_word(last)
            and last[-1] not in ".,!?;:")


def _marks(tokens, sentences, space_before, space_after) -> list[_Mark]:
    n = len(tokens)
    sentence_start = [False] * n
    sentence_end = [False] * n
    for start, end in sentences:
        if end > start:
            sentence_start[start] = True
            sentence_end[end - 1] = True
    marks = []
    for i, token in enumerate(tokens):
        if not _MARK_TOKEN.fullmatch(token):
            continue
        for char in _ONE_MARK.findall(token):
            if char in DOUBLE_OPEN or char in DOUBLE_CLOSE:
                marks.append(_Mark(i, char, "double", "open" if char in DOUBLE_OPEN else "close"))
            elif char in SINGLE_OPEN or char in SINGLE_CLOSE:
                lean = "open" if char in SINGLE_OPEN else "close"
                if not _apostrophe(tokens, i, lean, space_before, space_after, sentence_start, sentence_end):
                    marks.append(_Mark(i, char, "single", lean))
            else:
                kind = STRAIGHT[char]
                lean = _lean(tokens, i, sentence_start, sentence_end, space_before, space_after)
                if kind == "single" and _apostrophe(tokens, i, lean, space_before, space_after,
                                                    sentence_start, sentence_end):
                    continue
                marks.append(_Mark(i, char, kind, lean))
    return marks


def _pair(marks: Sequence[_Mark], limit: int, paragraph_ends: Sequence[int], depth: int,
          lenient_close: bool) -> list[Quotation]:
    """Pair one kind of marks into quotations within tokens before ``limit``."""
    found: list[Quotation] = []
    opened: _Mark | None = None
    ends = iter(sorted(paragraph_ends))
    next_end = next(ends, None)

    def close_at_paragraphs(token: int) -> None:
        nonlocal opened, next_end
        while next_end is not None and next_end <= token:
            if opened is not None and opened.token < next_end:
                found.append(Quotation(opened.token, next_end, opened.char, None, depth))
                opened = None
            next_end = next(ends, None)

    for mark in marks:
        close_at_paragraphs(mark.token)
        if opened is None:
            if mark.lean == "close" and not lenient_close:
                continue  # a closing mark with nothing open: an apostrophe or a lost opening
            opened = mark
        elif mark.lean == "open":
            if mark.token > opened.token:
                found.append(Quotation(opened.token, mark.token, opened.char, None, depth))
            opened = mark
        else:
            found.append(Quotation(opened.token, mark.token + 1, opened.char, mark.char, depth))
            opened = None
    close_at_paragraphs(limit)
    if opened is not None:
        found.append(Quotation(opened.token, limit, opened.char, None, depth))
    return found


def find_in_tokens(tokens: Sequence[str], sentences: Sequence[tuple[int, int]] | None = None, *,
                   paragraphs: Sequence[tuple[int, int]] | None = None,
                   space_before: Sequence[bool] | None = None,
                   space_after: Sequence[bool] | None = None,
                   nested: bool = True) -> list[Quotation]:
    """The quotations of pre-tokenised text (see the module's rules), sorted by start, outer before nested.

    ``sentences`` and ``paragraphs`` are half-open token spans (one sentence, one paragraph when None);
    ``space_before``/``space_after`` say whether whitespace surrounds each token (unknown when None).
    """
    tokens = list(tokens)
    sentences = list(sentences) if sentences is not None else [(0, len(tokens))]
    marks = _marks(tokens, sentences, space_before, space_after)
    doubles = [m for m in marks if m.kind == "double"]
    singles = [m for m in marks if m.kind == "single"]
    opens = {kind: sum(m.lean == "open" for m in group) for kind, group in (("double", doubles), ("single", singles))}
    primary, secondary = (singles, doubles) if opens["single"] > opens["double"] else (doubles, singles)
    paragraph_ends = [end for _, end in paragraphs or []][:-1] if paragraphs else []
    found = [q for q in _pair(primary, len(tokens), paragraph_ends, 0, lenient_close=False)
             if not _scare_quote(tokens, q, sentences)]
    if nested:
        for outer in list(found):
            inside = [m for m in secondary if outer.start < m.token < outer.end - (outer.close_mark is not None)]
            found.extend(_pair(inside, outer.end - (outer.close_mark is not None), [], 1, lenient_close=False))
    return sorted(found, key=lambda q: (q.start, q.depth, -q.end))


def _paragraphs(text: str, offsets: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Paragraphs as token spans: a blank line separates them (each line is one when the text has no blank line)."""
    breaker = re.compile(r"\n[^\S\n]*\n") if re.search(r"\n[^\S\n]*\n", text) else re.compile(r"\n")
    starts = [0] + [i for i in range(1, len(offsets)) if breaker.search(text, offsets[i - 1][1], offsets[i][0])]
    return list(zip(starts, [*starts[1:], len(offsets)]))


def find_quotations(source: str | Document | Sequence[str], sentences: Sequence[tuple[int, int]] | None = None,
                    *, nested: bool = True) -> list[Quotation]:
    """The quotations of raw text (spans index ``coref.io.text.tokenize(text).tokens``), of a Document, or of
    tokens with their ``sentences``; see the module's docstring for the rules."""
    if isinstance(source, str):
        from coref.io.text import tokenize

        tokenized = tokenize(source)
        offsets = tokenized.offsets
        n = len(offsets)
        space_before = [i == 0 or offsets[i][0] > offsets[i - 1][1] for i in range(n)]
        space_after = [i == n - 1 or offsets[i + 1][0] > offsets[i][1] for i in range(n)]
        return find_in_tokens(tokenized.tokens, tokenized.sentences, paragraphs=_paragraphs(source, offsets),
                              space_before=space_before, space_after=space_after, nested=nested)
    if isinstance(source, Document):
        return find_in_tokens(source.tokens, source.sentences, nested=nested)
    return find_in_tokens(source, sentences, nested=nested)


def span_scores(pairs: Sequence[tuple[Sequence[tuple[int, int]], Sequence[tuple[int, int]]]]) -> dict[str, float]:
    """Precision, recall and F1 of exactly matching spans and of quoted tokens, pooled over documents.

    ``pairs``: for each document, (gold spans, predicted spans), half-open token spans.
    """
    counts = {"exact": [0, 0, 0], "token": [0, 0, 0]}  # matched, gold, predicted
    for gold, predicted in pairs:
        gold_set, predicted_set = set(map(tuple, gold)), set(map(tuple, predicted))
        exact = counts["exact"]
        exact[0] += len(gold_set & predicted_set)
        exact[1] += len(gold_set)
        exact[2] += len(predicted_set)
        gold_tokens = {i for start, end in gold_set for i in range(start, end)}
        predicted_tokens = {i for start, end in predicted_set for i in range(start, end)}
        token = counts["token"]
        token[0] += len(gold_tokens & predicted_tokens)
        token[1] += len(gold_tokens)
        token[2] += len(predicted_tokens)
    scores: dict[str, float] = {}
    for name, (matched, gold_count, predicted_count) in counts.items():
        precision = matched / predicted_count if predicted_count else 0.0
        recall = matched / gold_count if gold_count else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        scores |= {f"{name}_precision": precision, f"{name}_recall": recall, f"{name}_f1": f1,
                   f"{name}_gold": gold_count, f"{name}_predicted": predicted_count, f"{name}_matched": matched}
    return scores
