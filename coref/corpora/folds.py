"""Cross-fitting folds of a corpus split: a model trained without fold F of K predicts on fold F, so that a
model downstream of it (EntityNLM fine-tuned on the coreference pipeline's mentions) is trained on predictions as
wrong as those it meets on text the pipeline never saw, not on the pipeline's own training documents (where the
mention detector finds 16% spurious mentions on OntoGUM against 21% on dev).

A document's fold is fixed by its name alone (CRC-32 of ``id`` and ``part``), so every command that reads the
split, in any order, puts it in the same fold."""

from __future__ import annotations

import argparse
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from coref.document import Document


@dataclass(frozen=True)
class Fold:
    """Fold ``index`` of ``count`` (written ``index/count``)."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 2 or not 0 <= self.index < self.count:
            raise ValueError(f"a fold is F/K with K >= 2 and 0 <= F < K, got {self}")

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @classmethod
    def parse(cls, text: str) -> Fold:
        """An option type: ``F/K``."""
        try:
            index, count = (int(part) for part in text.split("/"))
            return cls(index, count)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected F/K with K >= 2 and 0 <= F < K, got {text!r}") from None

    def holds(self, document: Document) -> bool:
        """Whether ``document`` is in this fold."""
        return zlib.crc32(f"{document.id}\t{document.part}".encode()) % self.count == self.index

    def outside(self, documents: Sequence[Document]) -> list[Document]:
        """The ``documents`` not in this fold: those a model held out of it is trained on."""
        return [document for document in documents if not self.holds(document)]
