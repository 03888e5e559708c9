"""LitBank's quotation layer (Sims and Bamman 2020): each document's quotations as token spans.

Read from ``DATA/litbank/quotations/tsv/NAME.txt`` (one sentence a line, tokens separated by spaces) and
``NAME.ann`` (``QUOTE  ID  START_SENTENCE  START_TOKEN  END_SENTENCE  END_TOKEN  TEXT``, the end token inclusive;
``ATTRIB  ID  SPEAKER``), split by LitBank's ``DATA/litbank/splits.tsv`` as :mod:`coref.corpora.registry` reads
it. The document's tokens are the ``.txt`` file's sentences joined in order: the same tokens as the CoNLL file's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from coref.corpora.registry import CorpusError, DataDir, _corpus_root, _split_documents, canonical_split
from coref.io.conll import read_utf8


@dataclass(frozen=True)
class GoldQuotation:
    """One annotated quotation: tokens ``start`` to ``end`` (half-open, document offsets), its id and speaker."""

    id: str
    start: int
    end: int
    text: str
    speaker: str | None = None


@dataclass(frozen=True)
class QuotedDocument:
    """A LitBank document of the quotation layer: its tokens, sentences (half-open spans) and quotations."""

    id: str
    tokens: tuple[str, ...]
    sentences: tuple[tuple[int, int], ...]
    quotations: tuple[GoldQuotation, ...]


def read_quoted_document(txt: Path, ann: Path) -> QuotedDocument:
    """One document from its ``.txt`` and ``.ann`` files; an error names the row whose span does not fit."""
    lines = read_utf8(txt).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tokens: list[str] = []
    sentences: list[tuple[int, int]] = []
    for line in lines:
        words = line.split(" ") if line else []
        sentences.append((len(tokens), len(tokens) + len(words)))
        tokens.extend(words)
    speakers: dict[str, str] = {}
    rows = []
    for number, line in enumerate(read_utf8(ann).splitlines(), start=1):
        fields = line.split("\t")
        if fields[0] == "ATTRIB" and len(fields) >= 3:
            speakers[fields[1]] = fields[2]
        elif fields[0] == "QUOTE":
            if len(fields) < 7:
                raise CorpusError(f"{ann}:{number}: expected 7 tab-separated fields in a QUOTE row")
            rows.append((number, fields))
    quotations = []
    for number, (_, qid, s_sent, s_tok, e_sent, e_tok, text, *_) in rows:
        s_sent, s_tok, e_sent, e_tok = int(s_sent), int(s_tok), int(e_sent), int(e_tok)
        if not (s_sent < len(sentences) and e_sent < len(sentences)
                and s_tok < sentences[s_sent][1] - sentences[s_sent][0]
                and e_tok < sentences[e_sent][1] - sentences[e_sent][0]):
            raise CorpusError(f"{ann}:{number}: quotation {qid} lies outside {txt.name}")
        start, end = sentences[s_sent][0] + s_tok, sentences[e_sent][0] + e_tok + 1
        quotations.append(GoldQuotation(qid, start, end, text.strip(), speakers.get(qid)))
    quotations.sort(key=lambda q: (q.start, q.end))
    return QuotedDocument(txt.stem, tuple(tokens), tuple(sentences), tuple(quotations))


def load_litbank_quotations(split: str, data_dir: DataDir = None) -> list[QuotedDocument]:
    """The documents of a LitBank split with their annotated quotations, in the split table's order."""
    root, table = _corpus_root(data_dir, "litbank")
    folder = root / "quotations" / "tsv"
    documents = []
    for name in _split_documents(root, table, canonical_split("litbank", split)):
        txt, ann = folder / f"{name}.txt", folder / f"{name}.ann"
        if not (txt.is_file() and ann.is_file()):
            raise CorpusError(f"{txt} or {ann} is missing: LitBank's quotation layer is incomplete")
        documents.append(read_quoted_document(txt, ann))
    return documents
