"""A corpus split as a model reads it: the paper's preprocessing (or the Anonymized Language Modelling data's), the
training split's vocabulary, and a report on stderr of what was dropped. Training, evaluation and the notebook API
read their documents through these."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from coref.corpora.anonymise import ANONYMISED_PREPROCESS, anonymised_corpus, anonymised_vocabulary, dropped_lines
from coref.corpora.preprocess import PreprocessConfig, Vocabulary, apply_vocabulary, preprocess_documents
from coref.corpora.registry import dropped_report, load_corpus
from coref.document import Document


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
