"""A corpus split as a model reads it: the paper's preprocessing (or the Anonymized Language Modelling data's), the
training split's vocabulary, and a report on stderr of what was dropped. Training, evaluation and the notebook API
read their documents through these. Also the extra text a model may train on beside its corpus (``--extra-text``:
another corpus's training split, or LAMBADA's passages, plain text without annotation)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from coref.corpora.anonymise import ANONYMISED_PREPROCESS, anonymised_corpus, anonymised_vocabulary, dropped_lines
from coref.corpora.preprocess import PreprocessConfig, Vocabulary, apply_vocabulary, preprocess_documents
from coref.corpora.registry import SPLITS, CorpusError, corpus_names, dropped_report, load_corpus, resolve_data_dir
from coref.document import Document
from coref.io.conll import read_utf8

LAMBADA_TEXTS = ("lambada", "lambada-dev")
LAMBADA_DEV = Path("lambada") / "lambada_development_plain_text.txt"
LAMBADA_TRAIN = Path("lambada") / "train-novels"
SENTENCE_ENDS = frozenset({".", "!", "?", "...", "…"})
CLOSING_QUOTES = frozenset({"''", "”", "'", ")"})  # not '"', which may open the next sentence
LAMBADA_QUOTES = {"``": '"', "''": '"'}  # PTB quotes as OntoGUM writes them


def prepared_documents(
    corpus: str,
    split: str,
    data_dir: str | None,
    config: PreprocessConfig,
    vocabulary: Vocabulary | None = None,
    quiet: bool = False,
) -> list[Document]:
    """A corpus split after the paper's preprocessing (and the vocabulary, when given). Unless ``quiet``, what
    the reader and preprocessing dropped is reported on stderr (:func:`coref.corpora.registry.dropped_report`)."""
    loaded = load_corpus(corpus, split, data_dir)
    documents, report = preprocess_documents(loaded.documents, config, vocabulary)
    if not quiet:
        print(dropped_report(loaded, report), file=sys.stderr)
    return documents


def language_model_preprocess(data: str, keep_singletons: bool = False) -> PreprocessConfig:
    """The preprocessing of a data kind (:data:`generative.registry.DATA_KINDS`): EntityNLM's (the paper's,
    singletons kept on request) or the Anonymized Language Modelling data's."""
    return ANONYMISED_PREPROCESS if data == "anonymised" else PreprocessConfig(drop_singletons=not keep_singletons)


def language_model_documents(data: str, corpus: str, split: str, data_dir: str | None, config: PreprocessConfig,
                             vocabulary: Vocabulary | None = None, quiet: bool = False) -> list[Document]:
    """A corpus split as a model of data kind ``data`` reads it (words outside ``vocabulary``, when given, become
    ``<unk>``); what was dropped is reported on stderr unless ``quiet``. ``config`` is the entity data's
    preprocessing; the anonymised data always uses :data:`coref.corpora.anonymise.ANONYMISED_PREPROCESS`."""
    if data == "entity":
        return prepared_documents(corpus, split, data_dir, config, vocabulary, quiet)
    loaded = anonymised_corpus(corpus, split, data_dir)
    if not quiet:
        print(dropped_lines(loaded), file=sys.stderr)
    documents = loaded.documents
    return [apply_vocabulary(document, vocabulary)[0] for document in documents] if vocabulary else documents


def language_model_vocabulary(data: str, train_documents: Sequence[Document], max_size: int) -> Vocabulary:
    """The training split's vocabulary of ``max_size`` words; the anonymised data always holds every ``<unkK>``."""
    if data == "anonymised":
        return anonymised_vocabulary(train_documents, max_size)
    return Vocabulary.build(train_documents, max_size=max_size)


# ---- extra text ---------------------------------------------------------------------------------------------


def split_sentences(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Half-open sentence spans of a tokenised passage: a sentence ends after ``.``, ``!``, ``?`` (and the closing
    quotes right after it) and at the passage's end."""
    spans, start, position = [], 0, 0
    while position < len(tokens):
        position += 1
        if tokens[position - 1] in SENTENCE_ENDS:
            while position < len(tokens) and tokens[position] in CLOSING_QUOTES:
                position += 1
            spans.append((start, position))
            start = position
    if start < len(tokens):
        spans.append((start, len(tokens)))
    return spans


def read_passages(path: Path, name: str) -> list[Document]:
    """A plain text file of whitespace-tokenised passages, one per line (LAMBADA's format), as documents with
    sentences; blank lines are skipped. Not UTF-8 or a control character is ``FILE:LINE: reason``."""
    documents = []
    for number, line in enumerate(read_utf8(path).split("\n"), start=1):
        bad = next((c for c in line if ord(c) < 32 and c not in "\t\r"), None)
        if bad is not None:
            raise CorpusError(f"{path}:{number}: control character U+{ord(bad):04X}: not plain text")
        tokens = line.split()
        if tokens:
            sentences = split_sentences(tokens)  # on the PTB quotes, which say whether they open or close
            tokens = [LAMBADA_QUOTES.get(token, token) for token in tokens]
            documents.append(Document(f"{name}:{path.name}:{number}", tokens, sentences))
    return documents


def lambada_files(name: str, data_dir: str | None) -> list[Path]:
    """The files of LAMBADA's training novels (``lambada``) or development passages (``lambada-dev``), never its
    test ones; a missing one is a :class:`CorpusError` naming where it was looked for."""
    root = resolve_data_dir(data_dir)
    if name == "lambada-dev":
        if not (root / LAMBADA_DEV).is_file():
            raise CorpusError(f"--extra-text lambada-dev: {root / LAMBADA_DEV} does not exist")
        return [root / LAMBADA_DEV]
    files = sorted((root / LAMBADA_TRAIN).rglob("*.txt")) if (root / LAMBADA_TRAIN).is_dir() else []
    if not files:
        raise CorpusError(
            f"--extra-text lambada: no training novels in {root / LAMBADA_TRAIN} (*.txt, from the official LAMBADA "
            "release); the development and test passages are evaluation data: pass lambada-dev to use the "
            "development passages anyway")
    return files


def lambada_documents(name: str, data_dir: str | None) -> list[Document]:
    """The passages of :func:`lambada_files`, as documents."""
    return [document for path in lambada_files(name, data_dir) for document in read_passages(path, name)]


def extra_text_names(text: str | None, corpus: str) -> list[str]:
    """The names of ``--extra-text``: corpora of :mod:`coref.corpora.registry` (their training split) or LAMBADA's
    texts; each once, and none already in ``--corpus``."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    for name in names:
        if name not in SPLITS and name not in LAMBADA_TEXTS:
            raise ValueError(f"--extra-text {name}: unknown text: choose from {', '.join([*SPLITS, *LAMBADA_TEXTS])}")
        if name in corpus_names(corpus):
            raise ValueError(f"--extra-text {name}: its training split is already the --corpus text")
    if len(set(names)) < len(names):
        raise ValueError(f"--extra-text {text}: a text is named twice")
    return names


def check_extra_text(text: str | None, corpus: str, data_dir: str | None) -> list[str]:
    """:func:`extra_text_names`, with LAMBADA's files found: a text that is not there fails in one line before a
    command reads (and reports on) its corpus."""
    names = extra_text_names(text, corpus)
    for name in names:
        if name in LAMBADA_TEXTS:
            lambada_files(name, data_dir)
    return names


def text_documents(name: str, data_dir: str | None, config: PreprocessConfig = ANONYMISED_PREPROCESS,
                   vocabulary: Vocabulary | None = None) -> list[Document]:
    """The documents of one extra text (:func:`extra_text_names`) after ``config``'s preprocessing (by default
    the anonymised data's, not anonymised) and ``vocabulary`` (when given); a corpus's annotation is kept."""
    if name in LAMBADA_TEXTS:
        documents = lambada_documents(name, data_dir)
    else:
        documents = list(load_corpus(name, "train", data_dir).documents)
    return preprocess_documents(documents, config, vocabulary)[0]


def extra_text_documents(text: str | None, corpus: str, data_dir: str | None, config: PreprocessConfig,
                         vocabulary: Vocabulary | None = None) -> dict[str, list[Document]]:
    """The documents of each text ``text`` names beside ``corpus`` (:func:`extra_text_names`), preprocessed by
    ``config`` and ``vocabulary`` and read as text alone (a corpus's annotation dropped): what a model trains on
    without annotation."""
    return {name: [document.replace(mentions=[]) for document in text_documents(name, data_dir, config, vocabulary)]
            for name in extra_text_names(text, corpus)}
