"""LAMBADA (Paperno et al. 2016) as reading comprehension, as Coref-GRU uses it, with coreference chains.

Coref-GRU (Dhingra et al. 2018, §4) follows Chu et al. (2017): the passage's last sentence, without its last
word, is the **query**; everything before it is the **context**; the last word is the **answer**, to be picked
from the **candidates**, the context's word types. Only passages whose answer occurs in the context can be
answered so (about 83% of dev and of test: :attr:`LambadaExample.answer_in_context`).

Files: ``DATA/lambada/lambada_{development,test}_plain_text.txt`` (splits ``dev``, ``test``): one passage per
line, already lowercased and tokenised (Penn Treebank style: ``do n't``, `````` and ``''`` quotes), so tokens are
the whitespace-separated words as given, never re-tokenised. A blank line or a one-word passage is a
:class:`LambadaError` naming ``FILE:LINE``.

- **Sentences** end at a token made of ``.``, ``!``, ``?`` (``.``, ``?!``, ``...``) together with the closing
  quotes right after it (``''``, ``'``). The query starts after the last such end before the answer; it is
  empty when the answer begins its sentence (4 passages of dev, 4 of test). (The reference code splits at the
  last `` . `` only, so its query runs on across a ``?`` or ``!``.)
- **Candidates** are the context's word types in order of first occurrence, less punctuation (a token with no
  letter or digit: this covers the reference code's ``shortlist-stopwords.txt``), the Treebank bracket tokens
  ``-lrb- -rrb- -lsb- -rsb-`` and :data:`STOPWORDS`, a short list of articles, conjunctions, prepositions,
  auxiliaries and clitics. No answer is punctuation; 3 of the 10,022 dev and test answers are stopwords
  (``for`` twice, ``but`` once), 2 of them in the context but not among the candidates.
- **Splits.** LAMBADA's training set is a collection of novels, not here. :func:`lambada_splits` therefore cuts
  the development set into ``train`` and ``valid`` by a seeded permutation (:data:`SPLIT_SEED`, 10% valid: 4,382
  and 487 passages, each kept in file order), and keeps the 5,153 test passages as ``test``.

Coreference comes from our raw-text pipeline (:mod:`coref.resolution.pipeline`; the paper used Stanford CoreNLP):
:func:`lambada_clusters` resolves every passage's context and query (never the answer) and keeps the chains of
two or more mentions, as token spans over ``context + query``; a JSON cache makes it a one-time cost per split.
The bundled models were trained on cased text, and LAMBADA is lowercase: expect fewer, noisier chains than on
the corpora.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from coref.corpora.registry import CorpusError, DataDir, resolve_data_dir
from coref.document import Document
from coref.io.atomic import write_text_atomic
from coref.io.conll import read_utf8
from coref.io.errors import FileLineError
from coref.io.progress import progress

if TYPE_CHECKING:
    from coref.resolution.pipeline import CorefPipeline

SPLIT_FILES = {"dev": "lambada_development_plain_text.txt", "test": "lambada_test_plain_text.txt"}
SPLIT_ALIASES = {"development": "dev"}
SPLIT_SEED = 2018
VALID_FRACTION = 0.1
BRACKETS = frozenset({"-lrb-", "-rrb-", "-lsb-", "-rsb-"})
STOPWORDS = frozenset(
    "a an the and or but nor so of to in on at by for with from into onto upon about as than that if "
    "be is are was were been being am 's 're 'm 've 'd 'll n't not do does did have has had".split()
)
_SENTENCE_FINAL = re.compile(r"[.!?…]+")
_CLOSING_QUOTES = frozenset({"''", "'"})
_BATCH = 32  # passages resolved at a time

Span = tuple[int, int]


class LambadaError(FileLineError):
    """A LAMBADA file that breaks the format, located by file and line."""


@dataclass(frozen=True)
class LambadaExample:
    """One passage as a reading-comprehension question; ``line`` is its 1-based line in the file."""

    line: int
    context: tuple[str, ...]
    query: tuple[str, ...]
    answer: str

    @property
    def tokens(self) -> tuple[str, ...]:
        """Context then query: the tokens that :func:`lambada_clusters` resolves and its spans index."""
        return self.context + self.query

    @property
    def sentences(self) -> tuple[Span, ...]:
        """The sentence spans of :attr:`tokens` (the query is the last sentence)."""
        return sentence_spans(self.tokens)

    @property
    def candidates(self) -> tuple[str, ...]:
        """The context's word types, in order of first occurrence, less punctuation and stopwords."""
        return tuple(word for word in dict.fromkeys(self.context) if is_candidate(word))

    @property
    def answer_in_context(self) -> bool:
        return self.answer in self.context


def is_candidate(word: str) -> bool:
    """Whether ``word`` may be an answer candidate: not punctuation, a bracket token or a stopword."""
    return any(character.isalnum() for character in word) and word not in BRACKETS and word not in STOPWORDS


def sentence_spans(tokens: Sequence[str]) -> tuple[Span, ...]:
    """Half-open sentence spans tiling ``tokens``: a sentence ends at a ``.``/``!``/``?`` token and the closing
    quotes written right after it."""
    spans, start = [], 0
    i = 0
    while i < len(tokens):
        if _SENTENCE_FINAL.fullmatch(tokens[i]):
            while i + 1 < len(tokens) and tokens[i + 1] in _CLOSING_QUOTES:
                i += 1
            spans.append((start, i + 1))
            start = i + 1
        i += 1
    if start < len(tokens):
        spans.append((start, len(tokens)))
    return tuple(spans)


# ---- loading ------------------------------------------------------------------------------------------------


def load_lambada(split: str, data_dir: DataDir = None) -> list[LambadaExample]:
    """The passages of ``dev`` (``development``) or ``test`` from ``DATA/lambada/``, as examples, in file order."""
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLIT_FILES:
        raise CorpusError(f"unknown LAMBADA split {split!r}: choose from {', '.join(SPLIT_FILES)}")
    path = resolve_data_dir(data_dir) / "lambada" / SPLIT_FILES[split]
    if not path.is_file():
        raise CorpusError(f"LAMBADA file {path} does not exist: put the LAMBADA plain-text files in {path.parent}")
    return parse_lambada(read_utf8(path), str(path))


def parse_lambada(text: str, path: str = "<string>") -> list[LambadaExample]:
    """The examples in the contents ``text`` of a LAMBADA plain-text file (``path`` names it in errors)."""
    examples = []
    for number, line in enumerate(text.splitlines(), start=1):
        words = line.split()
        if len(words) < 2:
            raise LambadaError(path, number, "a passage needs at least two words (the last is the answer)"
                               if words else "empty line: expected one passage per line")
        query_start = sentence_spans(words)[-1][0]  # the answer is a word: it lies in the last sentence
        examples.append(LambadaExample(number, tuple(words[:query_start]), tuple(words[query_start:-1]), words[-1]))
    return examples


def lambada_splits(data_dir: DataDir = None, seed: int = SPLIT_SEED) -> dict[str, list[LambadaExample]]:
    """``train`` and ``valid`` (90/10 of the development set by a permutation seeded with ``seed``, each in file
    order) and ``test``."""
    dev = load_lambada("dev", data_dir)
    order = list(range(len(dev)))
    random.Random(seed).shuffle(order)
    valid = set(order[: round(VALID_FRACTION * len(dev))])
    return {
        "train": [example for i, example in enumerate(dev) if i not in valid],
        "valid": [example for i, example in enumerate(dev) if i in valid],
        "test": load_lambada("test", data_dir),
    }


# ---- coreference --------------------------------------------------------------------------------------------


def lambada_clusters(
    examples: Sequence[LambadaExample],
    pipeline: CorefPipeline | None = None,
    cache: str | os.PathLike | None = None,
) -> list[list[list[Span]]]:
    """For every example, the chains of two or more mentions that ``pipeline`` (default: the bundled one) finds
    in its context and query, as token spans over :attr:`LambadaExample.tokens`.

    With ``cache``, the chains are read from that JSON file when it was written for the same passages, and
    computed and written there (atomically) otherwise. The cache does not know the models: delete it after
    changing them.
    """
    fingerprint = _fingerprint(examples)
    if cache is not None and Path(cache).is_file():
        stored = json.loads(read_utf8(Path(cache)))
        if stored.get("fingerprint") == fingerprint:
            return [[[tuple(span) for span in chain] for chain in chains] for chains in stored["clusters"]]
    if pipeline is None:
        from coref.resolution.pipeline import bundled_pipeline  # the models need torch; loading the data does not

        pipeline = bundled_pipeline()
    documents = [Document(f"lambada-{example.line}", example.tokens, example.sentences) for example in examples]
    found: list[list[list[Span]]] = []
    batches = range(0, len(documents), _BATCH)
    for start in progress(batches, desc="LAMBADA coreference", unit="batch"):
        for resolved in pipeline.resolve_documents(documents[start : start + _BATCH]):
            found.append([sorted(chain) for chain in resolved.clusters() if len(chain) >= 2])
    if cache is not None:
        write_text_atomic(cache, json.dumps({"fingerprint": fingerprint, "clusters": found}) + "\n")
    return found


def _fingerprint(examples: Sequence[LambadaExample]) -> str:
    """A hash of the resolved tokens of all examples, in order: what a cache must have been computed from."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update((" ".join(example.tokens) + "\n").encode("utf-8"))
    return digest.hexdigest()
