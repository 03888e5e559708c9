"""What every command of ``inference`` shares: seeds, devices, and preprocessed corpora."""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable

import numpy as np
import pyro
import torch

from coref.atomic import write_text_atomic
from coref.conll import ConllError
from coref.corpora import CorpusError, load_corpus
from coref.document import Document
from coref.preprocess import PreprocessConfig, Vocabulary, preprocess_documents
from inference.checkpoint import CheckpointError

# What bad input raises: the commands report these in one line (exit status 2), never as a traceback.
USER_ERRORS = (CorpusError, CheckpointError, ConllError, ValueError, OSError, FloatingPointError)


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
    """A corpus split after the paper's preprocessing (and the vocabulary, when given); reports on stderr."""
    loaded = load_corpus(corpus, split, data_dir)
    documents, report = preprocess_documents(loaded.documents, config, vocabulary)
    if not quiet:
        dropped = sum(problem.dropped_mention for problem in loaded.problems)
        print(f"{corpus}/{split}: {report.summary()}", file=sys.stderr)
        if loaded.problems:
            print(f"  ({len(loaded.problems)} reader problems, {dropped} malformed mentions dropped)", file=sys.stderr)
    return documents


def run_command(run: Callable[[argparse.Namespace], dict], format_result: Callable[[dict], str],
                args: argparse.Namespace) -> int:
    """Run a command: bad input gives one line on stderr and exit status 2, Ctrl-C one line and status 130
    (nothing is written then); the result is printed and, with ``--json OUT``, written to OUT."""
    try:
        result = run(args)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    print(format_result(result))
    if getattr(args, "json", None):
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0
