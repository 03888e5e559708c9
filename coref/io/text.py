"""Raw text to tokens with character offsets and sentences, in the corpora's (Penn Treebank / OntoNotes) style.

The first step of coreference on raw text: :func:`tokenize` cuts a string into the tokens the models were
trained on, remembering where each token lies (``text[start:end] == token``, always), so that predictions can
be mapped back onto the text (GAP gives its names and pronouns as character offsets: :mod:`coref.corpora.gap`).

The conventions follow the CoNLL files of LitBank and OntoGUM:

- punctuation is split off, quotes and brackets are tokens of their own, ``...``, ``--`` and the Treebank
  quotes (two backquotes, two apostrophes: GAP writes them) stay whole;
- ``n't`` and the clitics ``'s 'm 'd 'll 're 've`` are split off (``do n't``, ``ca n't``, ``John 's``), with
  straight or curly apostrophes as written; apostrophes inside names stay (``O'Hara``, ``o'clock``);
- abbreviations keep their period: titles (``Mr.``, ``Dr.``), dotted ones (``U.S.``, ``e.g.``, ``a.m.``) and
  initials (``J.``); numbers keep their inner ``,``, ``.``, ``:`` and ``/`` (``1,000.5``, ``3:30``, ``1/2``);
- hyphens between words are split off (``third - person``) as OntoNotes and OntoGUM do (LitBank keeps them);
- a ``*`` between letters stays inside the word: GAP writes every non-ASCII letter as ``*`` (``M*nchen``).

A sentence ends at ``.``, ``!``, ``?``, ``...`` or an abbreviation that often ends one (``etc.``, ``Inc.``,
``p.m.``), together with the closing quotes and brackets written right after it, when whitespace and then an
uppercase letter, a digit or an opening quote follow; never after a title, an initial or a capitalised dotted
abbreviation (``U.S. Senator`` is commoner than ``in the U.S. The``). A blank line always ends a sentence.

``benchmarks/tokenizer_agreement.py`` measures how often this reproduces the corpora's gold tokens and
sentences from detokenised text (99.3% of LitBank's tokens and 99.6% of OntoGUM's; sentence-boundary F1 98.4
and 99.5).

:func:`plain_document` is the other reading of a text, the one EntityNLM's commands and notebook API use (the
bundled language models' figures on raw text were measured with it): words, with their inner apostrophes,
periods and hyphens, and single punctuation marks as tokens; sentences end at ``.``, ``!`` and ``?``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coref.document import Document

# Abbreviations written before a name or a number, which therefore never end a sentence.
_TITLES = (
    "Mr Mrs Ms Messrs Mme Mlle Dr Prof Rev Fr St Mt Gen Col Maj Capt Lt Sgt Cpl Adm Gov Sen Rep Pres Hon "
    "Jan Feb Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec Fig Op vs v cf viz Ph.D"
).split()
# Abbreviations that keep their period but may end a sentence.
_ABBREVIATIONS = "etc al Jr Sr Esq Inc Ltd Co Corp Bros approx dept est".split()
_TOKEN = re.compile(
    rf"""
      \b(?:{"|".join(re.escape(a) for a in _TITLES + _ABBREVIATIONS)})\.(?!\w)  # Mr. etc.
    | \bNos?\.(?=\s*\d)                                  # No. 5
    | (?:[A-Za-z]\.){{2,}}(?!\w)                           # U.S. e.g. a.m.
    | [A-Z]\.(?!\w)                                        # an initial: J. R. R. Tolkien
    | \w+?(?=n['’]t\b) | n['’]t\b                          # do|n't, ca|n't, wo|n't
    | (?<=\w)['’](?i:s|m|d|ll|re|ve)\b | ['’]em\b           # John|'s, I|'m, 'em
    | \d+(?:[.,:/]\d+)*\w*                                  # 1,000.5  3:30  1/2  1960s  19th
    | \w+(?:\*+\w+|['’](?!(?i:s|m|d|ll|re|ve|t)\b)\w+)*  # words: M*nchen, O'Hara, o'clock
    | \.\.\.+ | -{{2,}} | `` | ''                          # ... -- and Treebank quotes
    | [^\w\s]                                               # any other symbol, one at a time
    """,
    re.VERBOSE,
)
_SENTENCE_FINAL = {".", "!", "?", "…"}
_CLOSING = {'"', "'", "''", "”", "’", ")", "]", "}", "»"}
_OPENING_QUOTES = {'"', "'", "``", "“", "‘", "«"}
# The abbreviations after which a sentence may end (never after titles, initials, U.S. or D.C.).
_MAY_END = {abbreviation + "." for abbreviation in _ABBREVIATIONS} | {"a.m.", "p.m."}
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")
# plain_document's tokens: words (inner ' ’ . - kept) and single punctuation marks; its sentence ends
PLAIN_TOKEN = re.compile(r"\w+(?:['’.-]\w+)*|[^\w\s]")
PLAIN_SENTENCE_END = {".", "!", "?"}


@dataclass(frozen=True)
class TokenizedText:
    """A text, its tokens, where each token lies in it, and its sentences.

    ``offsets[i]`` is the half-open character span of ``tokens[i]`` (``text[start:end] == tokens[i]``);
    ``sentences`` are half-open token spans that tile the tokens in order, as in :class:`Document`.
    """

    text: str
    tokens: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]
    sentences: tuple[tuple[int, int], ...]


def tokenize(text: str) -> TokenizedText:
    """Tokens, their character offsets and the sentences of ``text``; ValueError if it has no token."""
    if not text.strip():
        raise ValueError("cannot tokenize an empty or whitespace-only text")
    matches = list(_TOKEN.finditer(text))
    tokens = tuple(match.group() for match in matches)
    offsets = tuple(match.span() for match in matches)
    starts = [0] + [i for i in range(1, len(tokens)) if _starts_sentence(text, tokens, offsets, i)]
    sentences = tuple(zip(starts, starts[1:] + [len(tokens)]))
    return TokenizedText(text, tokens, offsets, sentences)


def _starts_sentence(text: str, tokens: tuple[str, ...], offsets: tuple[tuple[int, int], ...], i: int) -> bool:
    """Whether token ``i`` (not the first) begins a new sentence, by the rules in the module docstring."""
    gap = text[offsets[i - 1][1] : offsets[i][0]]
    if _BLANK_LINE.search(gap):
        return True
    if not gap or not (tokens[i][0].isupper() or tokens[i][0].isdigit() or tokens[i][0] in _OPENING_QUOTES):
        return False
    end = i - 1  # step back over closing quotes and brackets written right after the sentence's end
    while end > 0 and tokens[end] in _CLOSING and offsets[end][0] == offsets[end - 1][1]:
        end -= 1
    last = tokens[end]
    if last in _SENTENCE_FINAL or last.startswith(".."):
        return True
    return last in _MAY_END


def document_from_text(text: str, id: str = "text") -> tuple[Document, tuple[tuple[int, int], ...]]:
    """The tokenised ``text`` as a Document without mentions (for a mention detector), and the tokens' offsets."""
    tokenized = tokenize(text)
    return Document(id, tokenized.tokens, tokenized.sentences), tokenized.offsets


def plain_document(text: str, id: str = "text", token: re.Pattern = PLAIN_TOKEN, what: str = "--text") -> Document:
    """A plain text as a Document: words and punctuation marks as tokens (``token``'s matches), sentences ending
    at . ! or ? (``what`` names the text in the error for one without words)"""
    tokens = token.findall(text)
    if not tokens:
        raise ValueError(f"{what}: the text has no words")
    ends = [i + 1 for i, token in enumerate(tokens) if token in PLAIN_SENTENCE_END]
    if not ends or ends[-1] != len(tokens):
        ends.append(len(tokens))
    return Document(id, tokens, zip([0, *ends[:-1]], ends))
