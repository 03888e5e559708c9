"""What every command of ``inference`` shares: seeds, devices, preprocessed corpora, and how a command runs (the
one-line errors, Ctrl-C and option checks of :mod:`coref.cli`)."""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Collection, Sequence

import numpy as np
import pyro
import torch

from coref import cli
from coref.corpora.anonymise import ANONYMISED_PREPROCESS, anonymised_corpus, anonymised_vocabulary, dropped_lines
from coref.io.atomic import write_text_atomic
from coref.corpora.registry import dropped_report, load_corpus
from coref.document import Document
from coref.corpora.preprocess import PreprocessConfig, Vocabulary, apply_vocabulary, preprocess_documents

# What bad input raises: the commands report these in one line (exit status 2), never as a traceback. Every
# input error of entitylm is a ValueError (CorpusError, ConllError, CheckpointError, ...); non-finite
# importance weights raise FloatingPointError.
USER_ERRORS = (*cli.USER_ERRORS, FloatingPointError)


def set_seed(seed: int) -> None:
    """Seed python, numpy, torch and pyro, so a run is reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    pyro.set_rng_seed(seed)  # torch too


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when there is a GPU; ``cuda`` without one is an error, not a silent CPU run."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (this torch build or machine has none)")
    if name == "cpu":
        torch.set_flush_denormal(True)  # STACK.md: denormals made backward passes 6-12x slower on CPU
    pyro.enable_validation(False)  # validation checks every site's support with a host sync
    return torch.device(name)


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
    """The training split's vocabulary of ``max_size`` words; the anonymised data's always holds every ``<unkK>``."""
    if data == "anonymised":
        return anonymised_vocabulary(train_documents, max_size)
    return Vocabulary.build(train_documents, max_size=max_size)


def changed_options(before: dict, now: dict, free: Collection[str]) -> list[str]:
    """The options on which a run being resumed (``now``, as ``vars(args)``) differs from the run that wrote
    ``before``, each as ``--name OLD (now NEW)``: all but the ``free`` ones, which may change on resuming, and
    those ``before`` does not record."""
    return [f"--{key.replace('_', '-')} {before[key]} (now {now[key]})" for key in sorted(now)
            if key not in free and key in before and before[key] != now[key]]


def run_command(run: Callable[[argparse.Namespace], dict], format_result: Callable[[dict], str],
                args: argparse.Namespace) -> int:
    """Run a command: the result is printed and, with ``--json OUT``, written to OUT; bad input gives one line on
    stderr and exit status 2, Ctrl-C one line and status 130 (:func:`coref.cli.run_main`)."""

    def body() -> int:
        result = run(args)
        print(format_result(result))
        if getattr(args, "json", None):
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        return 0

    return cli.run_main(body, USER_ERRORS)
