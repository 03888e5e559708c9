"""The arguments the API's calls share, checked and put in the library's terms: texts as Documents, and a seed
(the random state kept around every call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from coref.document import Document
from coref.io.text import plain_document
from inference.runtime import random_state, restore_random_state, set_seed

Texts = str | Document | Sequence[str | Document]


@contextmanager
def kept_random_state() -> Iterator[None]:
    """Give python's, numpy's, torch's and pyro's random states back as they were before the block."""
    state = random_state()
    try:
        yield
    finally:
        restore_random_state(state)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed python, numpy, torch and pyro (as the commands' ``--seed``) for the block, then give the caller's
    random state back: a result depends on its seed only, and sampling here never shifts the notebook's RNGs."""
    with kept_random_state():
        set_seed(seed)
        yield


def as_documents(text: Texts, tokenizer: Callable[[str, str], Document] = plain_document) -> list[Document]:
    """Texts as Documents: a string tokenised as ``inference.algorithms.posterior --text`` does (words and punctuation
    marks; sentences end at . ! ?), named ``text`` (``text 0``, ``text 1``, ... in a list); a Document as it is.
    ``tokenizer(text, name)``: another way to read a string (the DNTM's keeps ``<unkK>`` whole)."""
    many = not isinstance(text, (str, Document))
    if many and not isinstance(text, Sequence):
        raise ValueError(f"a text is a str or a coref.document.Document (or a list of them), not {type(text).__name__}")
    items = list(text) if many else [text]
    if not items:
        raise ValueError("no texts given")
    documents = []
    for number, item in enumerate(items):
        if isinstance(item, Document):
            documents.append(item)
        elif isinstance(item, str):
            if not item.strip():
                raise ValueError(f"text {number if many else ''}".rstrip() + " is empty")
            documents.append(tokenizer(item, f"text {number}" if many else "text"))
        else:
            raise ValueError(f"a text is a str or a coref.document.Document, not {type(item).__name__}")
    keys = [document.key for document in documents]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated:
        raise ValueError(f"two documents are named {repeated[0]!r} part {repeated[1]}: results are matched by name")
    return documents
