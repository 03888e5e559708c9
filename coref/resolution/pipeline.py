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
:mod:`coref.resolution.mentions`). A 120K-word text took about 15 s and 0.85 GB on 2 cores; on a terminal a progress
bar follows the ranking of a long text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from coref.document import Document
from coref.io.conll import read_conll, read_utf8
from coref.io.text import TokenizedText, tokenize
from coref.resolution.mentions import MentionDetector
from coref.resolution.ranker import MentionRanker, with_predicted_mentions

PRETRAINED = Path(__file__).parent / "pretrained"
BUNDLED = {"detector": PRETRAINED / "mentions.pt", "resolver": PRETRAINED / "resolver.pt"}


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

    def resolve_documents(self, documents: Sequence[Document]) -> list[Document]:
        """``documents`` (their tokens and sentences; any mentions they hold are ignored) with the detected
        mentions and the ranker's entities."""
        spans = self.detector.predict(documents)
        return [self.ranker.predict(with_predicted_mentions(document.replace(mentions=()), found))
                for document, found in zip(documents, spans)]

    def resolve(self, text: str | TokenizedText, id: str = "text") -> Document:
        """The coreference of a raw text (or of one already tokenised) as a :class:`Document`."""
        tokenized = tokenize(text) if isinstance(text, str) else text
        return self.resolve_documents([Document(id, tokenized.tokens, tokenized.sentences)])[0]


@cache
def bundled_pipeline() -> CorefPipeline:
    """The bundled pipeline, loaded once per process."""
    return CorefPipeline.load()


def resolve(text: str, pipeline: CorefPipeline | None = None) -> Document:
    """The coreference of ``text`` (tokenised here) as a :class:`Document`, by ``pipeline`` (default: the
    bundled one). Character offsets of the tokens: ``coref.io.text.tokenize(text).offsets``."""
    return (pipeline or bundled_pipeline()).resolve(text)


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


def read_inputs(text: str | None = None, file: str | Path | None = None,
                conll: str | Path | None = None) -> list[tuple[Document, TokenizedText | None]]:
    """The documents to resolve, each with its tokenisation (None for a CoNLL document, which comes tokenised):
    one of ``text``, a UTF-8 text ``file`` (the document is named after it; an empty one is an error naming it),
    or the documents of a ``conll`` file (their tokens and sentences; read strictly, their mentions ignored)."""
    if conll is not None:
        return [(document, None) for document in read_conll(conll, strict=True)[0]]
    if text is None:
        text = read_utf8(file)
        if not text.strip():
            raise ValueError(f"{file}:1: cannot tokenize an empty or whitespace-only text")
    tokenized = tokenize(text)
    name = "text" if file is None else Path(file).stem
    return [(Document(name, tokenized.tokens, tokenized.sentences), tokenized)]


def clusters_json(documents: Sequence[Document], tokenizations: Sequence[TokenizedText | None]) -> dict:
    """Each document's id, part and :func:`clusters` (character offsets where its tokenisation is given)."""
    return {"documents": [{"id": document.id, "part": document.part, "clusters": clusters(document, found)}
                          for document, found in zip(documents, tokenizations)]}
