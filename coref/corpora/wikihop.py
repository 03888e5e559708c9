"""The 50-question WikiHop sample (QAngaroo v1.1, Welbl et al. 2018): a format fixture for Coref-GRU's setup.

WikiHop asks for the tail entity of a query ``"<relation> <head entity>"`` (``"country sms braunschweig"``),
chosen among ``candidates``, given ``supports``, several Wikipedia paragraphs. Coref-GRU (Dhingra et al. 2018, §4)
concatenates the supports into one document and adds coreference chains from an external resolver.

The shared data holds only the complete records at the start of the official files (see its SOURCE.md):
``DATA/wikihop_sample/wikihop_dev_first28.json`` (28, with the annotators' ``annotations``, e.g.
``[["follows", "multiple"], ...]``) and ``wikihop_train_first22.json`` (22, no annotations); not enough to train
or evaluate on. The records carry no mention or coreference fields (keys: id, query, answer, candidates, supports,
annotations): chains would come from our pipeline, as for LAMBADA.

The document is the supports in the given order (the paper shuffles them), joined by blank lines so that
:func:`coref.io.text.tokenize` ends a sentence at every support's end; :attr:`WikihopExample.support_spans` says
which tokens came from which support.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from coref.corpora.registry import CorpusError, DataDir, resolve_data_dir
from coref.io.conll import read_utf8
from coref.io.text import TokenizedText, tokenize

SAMPLE_FILES = ("wikihop_dev_first28.json", "wikihop_train_first22.json")
KEYS = ("id", "query", "answer", "candidates", "supports")
SUPPORT_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class WikihopExample:
    """One WikiHop question: query, candidates, answer, supports and the tokenised document made of them."""

    id: str
    query: str
    answer: str
    candidates: tuple[str, ...]
    supports: tuple[str, ...]
    annotations: tuple[tuple[str, ...], ...]
    document: TokenizedText
    support_spans: tuple[tuple[int, int], ...]

    @property
    def relation(self) -> str:
        """The query's relation (``country``): its first word."""
        return self.query.split(" ", 1)[0]

    @property
    def subject(self) -> str:
        """The query's head entity (``sms braunschweig``): all but its first word."""
        return self.query.split(" ", 1)[1] if " " in self.query else ""


def load_wikihop_sample(data_dir: DataDir = None) -> list[WikihopExample]:
    """The 28 dev then 22 train records of ``DATA/wikihop_sample/``, in file order."""
    folder = resolve_data_dir(data_dir) / "wikihop_sample"
    return [example for name in SAMPLE_FILES for example in read_wikihop(folder / name)]


def read_wikihop(path: Path) -> list[WikihopExample]:
    """The examples of a WikiHop JSON file (a list of records); a CorpusError names what is wrong where."""
    if not path.is_file():
        raise CorpusError(f"WikiHop file {path} does not exist: put the wikihop_sample files in {path.parent}")
    try:
        records = json.loads(read_utf8(path))
    except json.JSONDecodeError as error:
        raise CorpusError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from error
    if not isinstance(records, list):
        raise CorpusError(f"{path}: expected a JSON list of records")
    examples = []
    for number, record in enumerate(records):
        missing = [key for key in KEYS if not isinstance(record, dict) or key not in record]
        if missing:
            raise CorpusError(f"{path}: record {number} lacks {', '.join(missing)}")
        examples.append(_example(record))
    return examples


def _example(record: dict) -> WikihopExample:
    supports = tuple(record["supports"])
    document = tokenize(SUPPORT_SEPARATOR.join(supports))
    spans, start_char, first = [], 0, 0
    for support in supports:
        end_char = start_char + len(support)
        last = first
        while last < len(document.tokens) and document.offsets[last][1] <= end_char:
            last += 1
        spans.append((first, last))
        first, start_char = last, end_char + len(SUPPORT_SEPARATOR)
    return WikihopExample(
        id=record["id"], query=record["query"], answer=record["answer"], candidates=tuple(record["candidates"]),
        supports=supports, annotations=tuple(tuple(pair) for pair in record.get("annotations", ())),
        document=document, support_spans=tuple(spans),
    )
