"""Every command fails on bad input in one clear line (docs: "Reliability"; the contract is
:mod:`inference.commands.cli`'s).

``ROWS`` is a table of (command, arguments, what the error must say): ``python -m MODULE``, a console script of
pyproject.toml from the environment's ``bin/``, or a benchmark script. Each row must exit with status 2, write
exactly ONE line to stderr (a progress bar, a warning or argparse's usage line would be a second), no traceback, and
that line must say what the row says: the file at fault (``FILE:LINE:`` where there is a line) or the option. The
command writes only under its own empty folder, where no file may be left. A new command joins the table by adding
rows.

The first row of each command runs the way a user runs it, as a subprocess (:data:`SUBPROCESS`): that keeps the
entry point itself honest, and shows what only a fresh process shows (a warning on import). The other rows, which
would each spend about 2 s importing torch, run in this process through the ``main(argv)`` their entry point calls
(:func:`entry_point`; the dispatcher's for a console script, which reads ``sys.argv`` as the script does), as a
fresh process would see it (:func:`as_a_fresh_process`): the same environment, working directory and
``sys.argv``, a fresh interpreter's warning filters with each warning printed to stderr, stderr captured at the
file-descriptor level, and the exit status of ``sys.exit(main(argv))`` (a traceback and status 1 for an uncaught
error). Ctrl-C (SIGINT to a command in a long step) and ``--help`` are checked below the table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import pickle
import random
import shlex
import signal
import subprocess
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from coref.corpora.preprocess import PreprocessConfig
from coref.resolution.pipeline import BUNDLED
from coref.resolution.ranker import HASH_BITS, MentionRanker
from inference.commands.cli import HelpFormatter
from inference.training.checkpoint import Checkpoint, pretrained

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the environment's console scripts
TIMEOUT = 120  # seconds for one row; each fails within seconds


@dataclass(frozen=True)
class Row:
    """A command (``coref.metrics.score``: ``python -m``; ``entitylm-score``: console script; ``benchmarks/x.py``:
    script), its arguments with ``{placeholders}`` for the inputs, and what its one line of stderr must contain."""

    command: str
    args: str
    says: str

    @property
    def id(self) -> str:
        return f"{self.command} {self.args}"

    def arguments(self, inputs: dict[str, str]) -> list[str]:
        return [argument.format(**inputs) for argument in shlex.split(self.args)]

    def argv(self, inputs: dict[str, str]) -> list[str]:
        if self.command.startswith("entitylm-"):
            program = [str(BIN / self.command)]
        elif self.command.endswith(".py"):
            program = [sys.executable, str(ROOT / self.command)]
        else:
            program = [sys.executable, "-m", self.command]
        return program + self.arguments(inputs)


def row(command: str, args: str, says: str):
    """A row of the table as a pytest parameter."""
    return pytest.param(Row(command, args, says), id=Row(command, args, says).id)


CUT = "{data_cut}/litbank/conll/doc_train.conll:3:"  # a file cut mid-line: line 3 has too few columns
UNFINISHED = "{data_unfinished}/litbank/conll/doc_train.conll:1:"  # '#begin document' and no '#end'
TEXT = "'Anna met Tom. She gave him a book.'"

# Each command with the bad inputs it reads; a torch command costs ~1.6 s of CPU, so each row tests a path of its
# own (every command's files, numbers and output; its console script on one of them).
ROWS = [
    # ---- corpora: names, data directories and the files in them -----------------------------------------------
    row("coref.corpora", "stats --corpus nope", "unknown corpus 'nope'"),
    row("coref.corpora", "stats --corpus sample --split test2", "unknown split 'test2'"),
    row("coref.corpora", "stats --corpus litbank --data-dir {missing}", "{missing}"),
    row("coref.corpora", "stats --corpus litbank --data-dir {data_binary}", "{data_binary}/litbank/splits.tsv:1:"),
    row("coref.corpora", "stats --corpus litbank --data-dir {data_empty}",
        "{data_empty}/litbank/conll/doc_train.conll:1:"),
    row("coref.corpora", "stats --corpus litbank --data-dir {data_unfinished}", UNFINISHED),
    row("coref.corpora", "stats --corpus sample --json {unwritable}", "{unwritable}"),
    row("coref.corpora", "download nope --to {out}", "invalid choice: 'nope'"),
    row("coref.corpora", "download litbank --to {unwritable}", "{unwritable}"),
    row("coref.corpora", "download litbank --to {out} --mirror file:///nonexistent",
        "cannot fetch file:///nonexistent"),
    row("entitylm-corpora", "stats --corpus litbank --data-dir {data_cut}", CUT),
    row("coref.anonymise", "stats --corpus nope", "unknown corpus 'nope'"),
    row("coref.anonymise", "stats --corpus sample --json {unwritable}", "{unwritable}"),
    row("entitylm-anonymise", "stats --corpus litbank --data-dir {data_cut}", CUT),
    # ---- the dispatcher, `entitylm COMMAND`: its own errors, and a command's as the command gives them ----------
    row("entitylm", "", "the following arguments are required: COMMAND"),
    row("entitylm", "scor", "invalid choice: 'scor'"),
    row("entitylm", "score {sample} {missing}", "{missing}"),
    # ---- the scorer -----------------------------------------------------------------------------------------
    row("coref.score", "{empty} {sample}", "{empty}:1:"),
    row("coref.score", "{binary} {sample}", "{binary}:1:"),
    row("coref.score", "{latin1} {sample}", "{latin1}:3:"),
    row("coref.score", "{sample} {unfinished}", "{unfinished}:1:"),
    row("coref.score", "{sample} {cut}", "{cut}:3:"),
    row("coref.score", "{sample} {missing}", "{missing}"),
    row("coref.score", "{sample} {sample} --json {unwritable}", "{unwritable}"),
    row("coref.score", "{sample}", "the following arguments are required: response"),
    row("entitylm-score", "{binary} {sample}", "{binary}:1:"),
    # ---- the base resolver ----------------------------------------------------------------------------------
    row("coref.resolver", "train --corpus nope --out {out}/m.npz", "unknown corpus 'nope'"),
    row("coref.resolver", "train --corpus sample --epochs 0 --out {out}/m.npz",
        "argument --epochs: must be at least 1"),
    row("coref.resolver", "train --corpus sample --out {unwritable}", "{unwritable}"),
    row("coref.resolver", "predict --model {binary} --corpus sample --split test --out {out}/p.conll",
        "{binary}: not a resolver model"),
    row("coref.resolver", "predict --model {truncated_resolver} --corpus sample --split test --out {out}/p.conll",
        "{truncated_resolver}: not a resolver model"),
    row("coref.resolver", "predict --model {missing} --corpus sample --split test --out {out}/p.conll",
        "{missing}: no such resolver model file"),
    row("coref.resolver", "predict --model {resolver} --corpus sample --split nope --out {out}/p.conll",
        "unknown split 'nope'"),
    row("coref.resolver", "predict --model {resolver} --corpus sample --split test --out {out}/p.conll "
        "--json {unwritable}", "{unwritable}"),
    row("entitylm-resolver", "train --corpus litbank --data-dir {data_cut} --out {out}/m.npz", CUT),
    # ---- the mention detector -------------------------------------------------------------------------------
    row("coref.mentions", "train --corpus nope --out {out}/m.pt", "unknown corpus 'nope'"),
    row("coref.mentions", "train --corpus sample --epochs 0 --out {out}/m.pt", "argument --epochs: must be at least 1"),
    row("coref.mentions", "train --corpus sample --dropout 1.5 --out {out}/m.pt",
        "argument --dropout: must be in [0, 1)"),
    row("coref.mentions", "train --corpus sample --out {unwritable}", "{unwritable}"),
    row("coref.mentions", "train --corpus sample --held-out-fold 2/2 --out {out}/m.pt",
        "argument --held-out-fold: expected F/K with K >= 2 and 0 <= F < K, got '2/2'"),
    row("coref.mentions", "train --corpus litbank --data-dir {data_cut} --out {out}/m.pt", CUT),
    row("coref.mentions", "train --corpus litbank --data-dir {missing} --out {out}/m.pt", "{missing}"),
    row("coref.mentions", "evaluate --model {missing} --corpus sample --split test",
        "{missing}: no such mention detector file"),
    row("coref.mentions", "evaluate --model {binary} --corpus sample --split test", "{binary}: not a mention detector"),
    row("coref.mentions", "evaluate --model {bundled} --corpus sample --split test",
        "{bundled}: not a mention detector"),
    row("coref.mentions", "evaluate --model {resolver} --corpus sample --split test",
        "{resolver}: not a mention detector"),
    row("coref.mentions", "evaluate --model {missing} --corpus nope --split test", "unknown corpus 'nope'"),
    row("coref.mentions", "evaluate --model {missing} --corpus sample --split nope", "unknown split 'nope'"),
    row("coref.mentions", "evaluate --model {missing} --corpus sample --split test --batch-tokens 0",
        "argument --batch-tokens: must be at least 1"),
    row("coref.mentions", "evaluate --model {missing} --corpus sample --split test --json {unwritable}",
        "{unwritable}"),
    row("coref.resolver", "train --corpus sample --detector {missing} --out {out}/m.npz",
        "{missing}: no such mention detector file"),
    row("coref.resolver", "predict --model {resolver} --detector {resolver} --corpus sample --split test "
        "--out {out}/p.conll", "{resolver}: not a mention detector"),
    row("coref.resolver", "train --corpus sample --held-out-fold 0/1 --out {out}/m.pt",
        "argument --held-out-fold: expected F/K with K >= 2 and 0 <= F < K, got '0/1'"),
    row("coref.resolver", "train --corpus sample --detector {detector} --held-out-fold 0/2 --out {out}/m.pt",
        "{detector} was trained with no fold held out, not 0/2"),
    row("coref.resolver", "train --corpus sample --detector {detector} --lowercase --out {out}/m.npz",
        "{detector} was trained without --lowercase"),
    row("coref.resolver", "train --corpus sample --mention-threshold 0.2 --out {out}/m.pt",
        "--mention-threshold needs a --detector"),
    row("coref.resolver", "train --corpus sample --detector {detector} --singleton-threshold 1 --out {out}/m.pt",
        "argument --singleton-threshold: must be in (0, 1)"),
    # ---- coreference of raw text and GAP ------------------------------------------------------------------
    row("coref.resolve", "--text ''", "cannot tokenize an empty or whitespace-only text"),
    row("coref.resolve", "--file {missing}", "{missing}"),
    row("coref.resolve", "--file {binary}", "{binary}"),
    row("coref.resolve", "--file {empty}", "{empty}:1:"),
    row("coref.resolve", "--conll {cut}", "{cut}:3:"),
    row("coref.resolve", f"--text {TEXT} --detector {{bundled}}", "{bundled}: not a mention detector"),
    row("coref.resolve", f"--text {TEXT} --resolver {{binary}}", "{binary}: not a resolver model"),
    row("coref.resolve", f"--text {TEXT} --json {{unwritable}}", "{unwritable}"),
    row("coref.resolve", f"--text {TEXT} --out {{unwritable}}", "{unwritable}"),
    row("coref.resolve", "--json {out}/x.json", "one of the arguments --text --file --conll is required"),
    row("entitylm-resolve", f"--text {TEXT} --file {{missing}}", "not allowed with argument --text"),
    row("coref.resolve", f"--text {TEXT} --replace --out -", "argument --replace: not allowed with --out -"),
    row("coref.resolve", "--file {quality_out}", "{quality_out}: a folder without .txt files"),
    row("coref.resolve", f"--text {TEXT} --mentions {{mentions_inside}}",
        "{mentions_inside}:2: mention [9, 11] ends inside the token 'Tom'"),
    row("coref.resolve", f"--text {TEXT} --mentions {{mentions_outside}}",
        "{mentions_outside}:1: mention [30, 50] lies outside the text"),
    row("coref.resolve", f"--text {TEXT} --mentions {{mentions_empty}}", "mention [4, 4] is empty or reversed"),
    row("coref.resolve", f"--text {TEXT} --mentions {{sample}}", "{sample}:1: given mentions: text takes JSON"),
    row("coref.resolve", f"--text {TEXT} --mentions {{missing}}", "{missing}"),
    # ---- the part-of-speech tagger --------------------------------------------------------------------------
    row("coref.pos", "train --epochs 0 --out {out}/p.pt", "argument --epochs: must be at least 1"),
    row("coref.pos", "train --word-dropout 1.5 --out {out}/p.pt", "argument --word-dropout: must be in [0, 1)"),
    row("coref.pos", "train --out {unwritable}", "{unwritable}"),
    row("coref.pos", "train --data-dir {missing} --out {out}/p.pt", "{missing}"),
    row("coref.pos", "train --data-dir {data_cut} --out {out}/p.pt", "{data_cut}/ontogum/splits.tsv"),
    row("coref.pos", "evaluate --model {missing}", "{missing}: no such part-of-speech tagger file"),
    row("coref.pos", "evaluate --model {binary}", "{binary}: not a part-of-speech tagger"),
    row("coref.pos", "evaluate --model {detector}", "{detector}: not a part-of-speech tagger"),
    row("coref.pos", "evaluate --split nope", "unknown split 'nope'"),
    row("coref.pos", "evaluate --json {unwritable}", "{unwritable}"),
    row("entitylm-pos", "evaluate --model {truncated}", "{truncated}: not a part-of-speech tagger"),
    row("benchmarks/lowercase_pipeline.py", "--detector {missing}", "{missing}: no such mention detector file"),
    row("benchmarks/lowercase_pipeline.py", "--results {unwritable}", "{unwritable}"),
    row("benchmarks/long_documents.py", "--document-cache 1 --out {out}",
        "argument --document-cache: must be in [0, 1), got 1"),
    row("benchmarks/long_documents.py", "--corpus sample --lengths 50 --checkpoint {missing} --out {out}", "{missing}"),
    row("benchmarks/cache_baseline.py", "--lambdas 0.1 1", "argument --lambdas: must be in [0, 1), got 1"),
    row("benchmarks/cache_baseline.py", "--data-dir {missing}", "{missing}"),
    row("benchmarks/cache_baseline.py", "--data-dir {data_cut} --out {out}", "{data_cut}/litbank/conll/doc_dev.conll"),
    row("benchmarks/cache_baseline.py", "--out {unwritable}", "{unwritable}"),
    row("benchmarks/coref_end_to_end.py", "--throughput --repeats 0", "argument --repeats: must be at least 1"),
    row("benchmarks/coref_end_to_end.py", "--throughput --data-dir {data_cut} --results {out}",
        "{data_cut}/litbank/conll/doc_test.conll:3:"),
    row("coref.gap", "--split nope --data-dir {out}", "unknown GAP split 'nope'"),
    row("coref.gap", "--split test --data-dir {missing}", "{missing}"),
    row("coref.gap", "--split test --limit 0", "argument --limit: must be at least 1"),
    row("coref.gap", "--split test --classifier {missing}", "{missing}: no such GAP resolver file"),
    row("coref.gap", "--split test --classifier {binary}", "{binary}"),
    row("coref.gap", "--split test --pipeline-only --train {out}/g.pt", "--pipeline-only scores the pipeline alone"),
    row("coref.gap", "--split test --train {out}/g.pt --epochs 0", "argument --epochs: must be at least 1"),
    row("entitylm-gap", "--split test --data-dir {data_binary}", "gap-test.tsv"),
    row("inference.rerank", "--resolver {resolver} --detector {binary} --corpus sample",
        "{binary}: not a mention detector"),
    # ---- training -------------------------------------------------------------------------------------------
    row("inference.train", "--model rnnlm --corpus litbank --data-dir {data_cut} --out {out}", CUT),
    row("inference.train", "--model rnnlm --out {out} --dropout 1.5", "argument --dropout: must be in [0, 1)"),
    row("inference.train", "--model rnnlm --out {out} --precision fp16", "argument --precision: invalid choice"),
    row("inference.train", "--model rnnlm --out {unwritable}", "{unwritable}"),
    row("inference.train", "--model rnnlm --out {run_random} --resume",
        "{run_random}/last.pt: not an entitylm checkpoint"),
    row("inference.train", "--model rnnlm --out {run_earlier}", "{run_earlier}: holds an earlier run"),
    row("inference.train", "--model rnnlm --out {out} --init {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.train", "--model rnnlm --out {out} --extra-text gigaword", "--extra-text gigaword: unknown text"),
    row("inference.train", "--model rnnlm --out {out} --extra-text lambada-dev --data-dir {data_empty}",
        "{data_empty}/lambada/lambada_development_plain_text.txt does not exist"),  # before the corpus's report
    row("entitylm-train", "--model rnnlm --corpus nope --out {out}", "unknown corpus 'nope'"),
    row("inference.train", "--model ga_cgru --task babi:0 --out {out}", "expected babi:N with N in 1..20"),
    row("inference.train", "--model ga_cgru --task babi:3 --data-dir {missing} --out {out}", "{missing}"),
    row("inference.train", "--model ga_cgru --task babi:3 --chains verbs --out {out}",
        "argument --chains: invalid choice: 'verbs'"),
    row("inference.train", "--model bi_cgru --task babi:3 --hidden-size 1 --out {out}",
        "argument --hidden-size: must be at least 2"),
    row("inference.train", "--model ga_gru --task babi:3 --out {run_random} --resume",
        "{run_random}/last.pt: not an entitylm reader checkpoint"),
    row("inference.train", "--model ga_cgru --task lambada --halve-every 0 --out {out}",
        "argument --halve-every: must be at least 1"),
    row("inference.train", "--model ga_cgru --corpus lambada --data-dir {missing} --out {out}", "{missing}"),
    row("inference.train", "--model ga_cgru --task babi:1 --out {out} --json {unwritable}/x.json", "{unwritable}"),
    row("inference.train", "--model d_mneme --corpus sample+nope --out {out}", "unknown story corpus 'nope'"),
    row("inference.train", "--model d_mneme --corpus litbank --data-dir {data_cut} --out {out}", CUT),
    row("inference.train", "--model d_mneme --corpus litbank --data-dir {missing} --out {out}", "{missing}"),
    row("inference.train", "--model d_mneme --corpus sample --out {unwritable}", "{unwritable}"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --json {unwritable}/x.json", "{unwritable}"),
    row("inference.train", "--model s_mneme --corpus sample --out {run_random} --resume",
        "{run_random}/last.pt: not an entitylm story LM checkpoint"),
    row("inference.train", "--model d_mneme --corpus sample --out {run_earlier}",
        "{run_earlier}: holds an earlier run"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --base {binary}",
        "{binary}: not an entitylm story LM checkpoint"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --base {missing}",
        "{missing}: no such story LM checkpoint file"),
    row("inference.train", "--model vanilla --corpus sample --out {out} --kl-weight 1",
        "kl_weight supervises the memory attention"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --segment 100",
        "segment length 100 is not a multiple of the chunk 64"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --d-model 30",
        "d_model 30 is not a multiple of heads"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --max-tokens 0",
        "argument --max-tokens: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --vocab-size 0",
        "argument --vocab-size: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --layers 0",
        "argument --layers: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --cache -1",
        "argument --cache: must be at least 0"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --dropout 1",
        "argument --dropout: must be in [0, 1)"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --kl-weight -1",
        "argument --kl-weight: must be at least 0"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --lr 0",
        "argument --lr: must be greater than 0"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --warmup -1",
        "argument --warmup: must be at least 0"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --clip-norm 0",
        "argument --clip-norm: must be greater than 0"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --batch-tokens 0",
        "argument --batch-tokens: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --eval-batch-tokens 0",
        "argument --eval-batch-tokens: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --epochs 0",
        "argument --epochs: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --patience 0",
        "argument --patience: must be at least 1"),
    row("inference.train", "--model d_mneme --corpus sample --out {out} --seed x",
        "argument --seed: invalid int value"),
    row("entitylm-train", "--model d_mneme_no_mi --corpus nope --out {out}", "unknown story corpus 'nope'"),
    row("inference.mneme_eval", "--checkpoints {missing}", "{missing}: no such story LM checkpoint file"),
    row("inference.mneme_eval", "--checkpoints {binary}", "{binary}: not an entitylm story LM checkpoint"),
    row("inference.mneme_eval", "--checkpoints {bundled}", "{bundled}: not an entitylm story LM checkpoint"),
    row("inference.mneme_eval", "--checkpoints {missing} --corpus sample+nope", "unknown story corpus 'nope'"),
    row("inference.mneme_eval", "--checkpoints {missing} --out {binary}", "{binary}: not a JSON results file"),
    row("inference.mneme_eval", "--checkpoints {missing} --out {unwritable}", "{unwritable}"),
    row("inference.mneme_eval", "--checkpoints {missing} --plots {unwritable}", "{unwritable}"),
    row("inference.mneme_eval", "--checkpoints {missing} --cache-sizes 500 -1",
        "argument --cache-sizes: must be at least 0"),
    row("inference.mneme_eval", "--checkpoints {missing} --sections 0", "argument --sections: must be at least 1"),
    row("inference.mneme_eval", "--checkpoints {missing} --max-tokens 0", "argument --max-tokens: must be at least 1"),
    row("inference.mneme_eval", "--checkpoints {missing} --batch-tokens 0",
        "argument --batch-tokens: must be at least 1"),
    row("inference.mneme_eval", "--corpus sample", "the following arguments are required: --checkpoints"),
    row("inference.mneme_eval", "--checkpoints {missing} --skip-lm", "--skip-lm leaves nothing to do without"),
    row("inference.mneme_eval", "--checkpoints {missing} --samples -1", "argument --samples: must be at least 0"),
    row("inference.mneme_eval", "--checkpoints {missing} --prompts 0", "argument --prompts: must be at least 1"),
    row("inference.mneme_eval", "--checkpoints {missing} --top-p 1.5", "argument --top-p: must be in (0, 1]"),
    row("inference.mneme_eval", "--checkpoints {missing} --temperature 0", "argument --temperature"),
    row("inference.mneme_eval", "--checkpoints {missing} --generation-batch 0",
        "argument --generation-batch: must be at least 1"),
    row("inference.mneme_eval", "--checkpoints {missing} --samples 1 --pos-model {binary}",
        "{binary}: not a part-of-speech tagger"),
    row("inference.mneme_eval", "--checkpoints {missing} --samples 1 --detector {missing}", "{missing}"),
    row("entitylm-mneme-eval", "--checkpoints {truncated}", "{truncated}: not an entitylm story LM checkpoint"),
    row("inference.generate", "--checkpoint {missing} --entities Anna", "{missing}: no such story LM checkpoint file"),
    row("inference.generate", "--checkpoint {binary} --entities Anna", "{binary}: not an entitylm story LM checkpoint"),
    row("inference.generate", "--checkpoint {missing}", "one of the arguments --entities --story-id is required"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --story-id x",
        "not allowed with argument --entities"),
    row("inference.generate", "--checkpoint {missing} --entities ' '", "argument --entities: an entity needs"),
    row("inference.generate", "--checkpoint {missing} --story-id x", "--story-id: name the story's --corpus"),
    row("inference.generate", "--checkpoint {missing} --story-id x --corpus nope", "unknown story corpus 'nope'"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --top-p 0", "argument --top-p: must be greater"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --top-p 1.5",
        "argument --top-p: must be in (0, 1]"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --temperature 0",
        "argument --temperature: must be greater than 0"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --max-tokens 0",
        "argument --max-tokens: must be at least 1"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --samples 0",
        "argument --samples: must be at least 1"),
    row("inference.generate", "--checkpoint {missing} --entities Anna --json {unwritable}", "{unwritable}"),
    row("entitylm-generate", "--checkpoint {truncated} --entities Anna",
        "{truncated}: not an entitylm story LM checkpoint"),
    row("benchmarks/coref_gru.py", "--tasks 21 --collect-only", "argument --tasks: invalid choice"),
    row("benchmarks/coref_gru.py", "--tasks --lambada-seeds x", "argument --lambada-seeds: invalid int value"),
    row("benchmarks/coref_gru.py", "--jobs 0", "argument --jobs: must be at least 1"),
    row("inference.grid", "--model rnnlm --out {out} --sizes 0", "argument --sizes: must be at least 1"),
    row("inference.grid", "--model rnnlm --corpus nope --out {out} --sizes 8 --dropouts 0.2 --optimizers adam",
        "unknown corpus 'nope'"),
    row("inference.grid", "--model rnnlm --out {out} --plot-only", "{out}: holds no run of this grid"),
    row("entitylm-grid", "--model rnnlm --out {out} --sizes 8 --dropouts 0.2 --optimizers adam -- --epochs 0",
        "argument --epochs: must be at least 1"),
    row("inference.refine", "--checkpoint {binary} --out {out}/r.pt", "{binary}: not an entitylm checkpoint"),
    row("inference.refine", "--checkpoint {bundled} --out {unwritable}", "{unwritable}"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --particles 1", "argument --particles"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake eta", "argument --wake"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake theta --extra-text gigaword",
        "--extra-text gigaword: unknown text"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake theta --extra-text lambada-dev "
        "--data-dir {data_empty}", "{data_empty}/lambada/lambada_development_plain_text.txt does not exist"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --extra-text lambada-dev",
        "--extra-text is text without annotation"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --supervised-weight -1",
        "argument --supervised-weight"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-mentions silver",
        "argument --coref-mentions"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-objective exact",
        "argument --coref-objective"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake theta --coref-objective local",
        "--coref-mentions and --coref-objective are for --wake coref"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --hint-detector {bundled}",
        "--hint-detector and --hint-resolver are for --coref-mentions pipeline"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-mentions pipeline "
        "--hint-detector {truncated}", "{truncated}"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --cross-fit-detectors {detector} "
        "{detector} --cross-fit-resolvers {resolver} {resolver}",
        "--cross-fit-detectors and --cross-fit-resolvers are for --coref-mentions pipeline"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-mentions pipeline "
        "--cross-fit-detectors {detector} {detector} --cross-fit-resolvers {resolver}",
        "--cross-fit-detectors and --cross-fit-resolvers name the same number of models, at least 2"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-mentions pipeline "
        "--cross-fit-detectors {detector} {detector} --cross-fit-resolvers {resolver} {resolver}",
        "the cross-fit models must hold out the folds 0/2, 1/2, one pair each; they hold out no fold"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --coref-mentions pipeline "
        "--pipeline-margin 1", "--pipeline-margin is for --coref-mentions pipeline --coref-objective local"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --entity-words -1", "argument --entity-words"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --entity-words 8",
        "--entity-words gives the model a part to train: it is for --wake theta, both or coref"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --copy-weighting attention",
        "--copy-weighting is for --entity-words"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --wake coref --entity-words 8 "
        "--copy-weighting heads", "argument --copy-weighting"),
    row("inference.refine", "--checkpoint {bundled} --out {out}/r.pt --pipeline-margin -1",
        "argument --pipeline-margin"),
    row("inference.refine", "--checkpoint {bundled} --out {refine_state}/r.pt",
        "{refine_state}/r.pt.state: not an entitylm refinement state"),
    row("entitylm-refine", "--checkpoint {truncated} --out {out}/r.pt", "{truncated}: not an entitylm checkpoint"),
    # ---- the main job and its diagnostics -------------------------------------------------------------------
    row("inference.marginal_ppl", "--checkpoint {truncated}", "{truncated}: not an entitylm checkpoint"),
    row("inference.marginal_ppl", "--baseline {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.marginal_ppl", "--corpus litbank --data-dir {data_binary} --baseline none",
        "{data_binary}/litbank/splits.tsv:1:"),
    row("inference.marginal_ppl", "--particles 0", "argument --particles: must be at least 1"),
    row("inference.marginal_ppl", "--preset best", "argument --preset: invalid choice: 'best'"),
    row("inference.marginal_ppl", "--batch-tokens 0", "argument --batch-tokens: must be at least 1"),
    row("inference.marginal_ppl", "--threads 0", "argument --threads: must be at least 1"),
    row("inference.marginal_ppl", "--document-cache 1", "argument --document-cache: must be in [0, 1), got 1"),
    row("inference.marginal_ppl", "--particles 100,x", "argument --particles"),
    row("inference.marginal_ppl", "--seeds 0", "argument --seeds: must be at least 1"),
    row("inference.marginal_ppl", "--hint-weight 1", "argument --hint-weight"),
    row("inference.marginal_ppl", "--hint-temperature 0", "argument --hint-temperature"),
    row("inference.marginal_ppl", "--lookahead 1", "argument --lookahead"),
    row("inference.posterior", "--evaluate --lookahead -0.5", "argument --lookahead"),
    row("inference.marginal_ppl", "--resample word", "argument --resample"),
    row("inference.marginal_ppl", "--hint-weight 0.5 --hint-detector {truncated}", "{truncated}"),
    row("inference.marginal_ppl", "--json {unwritable}", "{unwritable}"),
    row("inference.marginal_ppl", "--text ''", "--text: the text has no words"),
    row("inference.marginal_ppl", "--file {missing}", "{missing}"),
    row("inference.marginal_ppl", "--file {binary}", "{binary}:1: not UTF-8 text"),
    row("inference.marginal_ppl", "--file {empty}", "{empty}: the text has no words"),
    row("inference.marginal_ppl", f"--text {TEXT} --corpus litbank", "argument --text: not allowed with --corpus"),
    row("inference.marginal_ppl", f"--file {{missing}} --text {TEXT}", "not allowed with argument --file"),
    row("entitylm-marginal-ppl", "--checkpoint {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.diagnostics", "--checkpoint {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.diagnostics", "--baseline {truncated}", "{truncated}: not an entitylm checkpoint"),
    row("inference.diagnostics", "--json {unwritable}", "{unwritable}"),
    row("entitylm-diagnostics", "--documents 0", "argument --documents: must be at least 1"),
    row("inference.pretrain_context", "--corpus sample --steps 0 --out {out}/c.pt", "argument --steps"),
    row("inference.pretrain_context", "--corpus sample --out {unwritable}", "{unwritable}"),
    row("entitylm-pretrain-context", "--corpus nope --out {out}/c.pt", "unknown corpus 'nope'"),
    row("inference.perplexity", "--checkpoint {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.perplexity", "--checkpoint {bundled}", "no exact per-word probabilities"),
    row("inference.perplexity", "--checkpoint {truncated} --json {unwritable}", "{unwritable}"),
    row("entitylm-perplexity", "--checkpoint {truncated}", "{truncated}: not an entitylm checkpoint"),
    row("inference.entity_cloze", "--checkpoint {bundled}", "{bundled}: the entity cloze needs a model of the "
        "anonymised data"),
    row("inference.entity_cloze", "--checkpoint {binary}", "{binary}: not an entitylm checkpoint"),
    row("entitylm-entity-cloze", "--checkpoint {truncated} --batch-tokens 0", "argument --batch-tokens"),
    # ---- posterior structures -------------------------------------------------------------------------------
    row("inference.posterior", "--conll {binary} --out {out}", "{binary}:1:"),
    row("inference.posterior", "--conll {unfinished} --out {out}", "{unfinished}:1:"),
    row("inference.posterior", "--file {binary} --out {out}", "{binary}"),
    row("inference.posterior", "--file {missing} --out {out}", "{missing}"),
    row("inference.posterior", f"--text {TEXT} --checkpoint {{truncated}} --out {{out}}",
        "{truncated}: not an entitylm checkpoint"),
    row("inference.posterior", f"--text {TEXT} --out {{unwritable}}", "{unwritable}"),
    row("inference.posterior", f"--text {TEXT} --particles 0 --out {{out}}", "--particles"),
    row("inference.posterior", f"--text {TEXT} --top-antecedents 0 --out {{out}}", "--top-antecedents"),
    row("inference.posterior", f"--text {TEXT} --sweeps 0 --out {{out}}", "--sweeps"),
    row("inference.posterior", f"--text {TEXT} --given-mentions pipeline --reliability {{out}}/r.png",
        "--reliability is for --evaluate"),
    row("inference.posterior", f"--text {TEXT} --given-mentions pipeline --local-search 2 --out {{out}}",
        "--local-search is for --evaluate"),
    row("inference.posterior", f"--text {TEXT} --preset best --out {{out}}", "argument --preset: invalid choice"),
    row("inference.posterior", f"--text {TEXT} --given-mentions gold --out {{out}}",
        "argument --given-mentions: invalid choice: 'gold'"),
    row("inference.posterior", f"--text {TEXT} --given-mentions none --link-piece 500 --out {{out}}",
        "--link-piece is for --given-mentions"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --link-piece 500", "--link-piece is for"),
    row("inference.posterior", f"--text {TEXT} --given-mentions pipeline --link-piece 0 --out {{out}}",
        "argument --link-piece"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --method both", "scores one method"),
    row("inference.posterior", "--evaluate --given-mentions none --reliability {out}/r.png",
        "--reliability needs --given-mentions"),
    row("inference.posterior", "--evaluate --given-mentions none --link-temperature 2",
        "--link-temperature needs --given-mentions"),
    row("inference.posterior", "--evaluate --given-mentions none --local-search 2",
        "--local-search needs --given-mentions"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --local-search -1", "argument --local-search"),
    row("inference.posterior", "--evaluate --given-mentions none --ranker-weight 1",
        "--ranker-weight needs --given-mentions"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --ranker-weight -1", "argument --ranker-weight"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --link-temperature 0", "--link-temperature"),
    row("inference.posterior", f"--text {TEXT} --new-entity-bias many --out {{out}}", "--new-entity-bias"),
    row("inference.posterior", f"--text {TEXT} --new-entity-bias inf --out {{out}}", "must be a finite number"),
    row("inference.posterior", "--evaluate --given-mentions pipeline --hint-resolver {binary}", "{binary}"),
    row("entitylm-posterior", "--conll {empty} --out {out}", "{empty}:1:"),
    # ---- reranking and entity prediction --------------------------------------------------------------------
    row("inference.rerank", "--resolver {binary} --corpus sample", "{binary}: not a resolver model"),
    row("inference.rerank", "--resolver {resolver} --corpus sample --checkpoint {truncated}",
        "{truncated}: not an entitylm checkpoint"),
    row("inference.rerank", "--resolver {resolver} --corpus sample --k 0", "argument --k: must be at least 1"),
    row("inference.rerank", "--resolver {resolver} --corpus sample --json {unwritable}", "{unwritable}"),
    row("inference.rerank", "--resolver {resolver} --corpus sample --cache {rerank_cache}",
        "{rerank_cache}/{cache_name}: not a score cache"),
    row("entitylm-rerank", "--resolver {missing} --corpus sample", "{missing}: no such resolver model file"),
    row("inference.entity_prediction", "--checkpoint {binary}", "{binary}: not an entitylm checkpoint"),
    row("inference.entity_prediction", "--checkpoint {bundled} --corpus sample",
        "{bundled}: trained without singletons"),
    row("inference.entity_prediction", "--checkpoint {singletons} --data-dir {missing}", "{missing}"),
    row("inference.entity_prediction", "--checkpoint {singletons} --max-slots 0", "argument --max-slots"),
    row("inference.entity_prediction", "--checkpoint {singletons} --json {unwritable}", "{unwritable}"),
    row("entitylm-entity-prediction", "--checkpoint {truncated}", "{truncated}: not an entitylm checkpoint"),
    # ---- the benchmark scripts the docs show ----------------------------------------------------------------
    row("benchmarks/quality.py", "--data-dir {missing} --entitynlm {binary} --rnnlm {binary} --ngram {binary} "
        "--corpora litbank --out {out}", "{binary}: not an entitylm checkpoint"),
    row("benchmarks/quality.py", "--data-dir D --entitynlm E --rnnlm R --ngram N --corpora litbank "
        "--out {quality_out}", "{quality_out}/quality_litbank.json: a result with other settings"),
    row("benchmarks/samplers.py", "--seeds 1 --out {out}", "argument --seeds: must be at least 2"),
    row("benchmarks/gpu_check.py", "--devices cuda --out {out}", "--device cuda: no CUDA device is available"),
    row("benchmarks/gpu_check.py", "--epochs 1 --out {out}", "argument --epochs: must be at least 2"),
    row("benchmarks/gpu_check.py", "--particles 1000 0 --out {out}", "argument --particles: must be at least 1"),
    row("benchmarks/samplers.py", "--variants smc smc --out {out}", "--variants: name at least two"),
    row("benchmarks/samplers.py", "--lookahead 1 --out {out}", "argument --lookahead"),
    row("benchmarks/samplers.py", "--checkpoint {truncated} --corpus sample --out {out}",
        "{truncated}: not an entitylm checkpoint"),
    row("benchmarks/speed.py", "--data-dir {data_unfinished} --out {out}",
        "{data_unfinished}/litbank/conll/doc_test.conll:1:"),
    row("benchmarks/speed.py", "--data-dir D --out {unwritable}", "{unwritable}"),
    row("benchmarks/proposal_choice.py", "--data-dir {missing} --entitynlm {binary} --out {out}",
        "{binary}: not an entitylm checkpoint"),
    row("benchmarks/proposal_choice.py", "--data-dir D --entitynlm E --temperatures 0 --out {out}",
        "argument --temperatures"),
    row("benchmarks/dntm.py", "--jobs 0 --out {out}", "argument --jobs: must be at least 1"),
    row("benchmarks/dntm.py", "--corpus nope --seeds 0 --variants baseline --out {out} --results {out}",
        "unknown corpus 'nope'"),
]


# ---- the inputs ---------------------------------------------------------------------------------------------


def litbank_folder(root: Path, content: bytes, split_table: bytes | None = None) -> str:
    """A data directory whose LitBank has one document per split, each file holding ``content``."""
    folder = root / "litbank"
    (folder / "conll").mkdir(parents=True)
    names = {"train": "doc_train", "dev": "doc_dev", "test": "doc_test"}
    table = "document\tsplit\n" + "".join(f"{name}\t{split}\n" for split, name in names.items())
    (folder / "splits.tsv").write_bytes(split_table if split_table is not None else table.encode())
    for name in names.values():
        (folder / "conll" / f"{name}.conll").write_bytes(content)
    return str(root)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    """The bad (and a few good) inputs the rows name, by placeholder."""
    root = tmp_path_factory.mktemp("inputs")
    noise = random.Random(0).randbytes(4096)
    bundled = pretrained("entitynlm.pt")
    checkpoint_bytes = bundled.read_bytes()
    document = "#begin document (d); part 000\nd\t0\t0\tAnn\t(1)\n"
    files = {
        "empty": b"",
        "binary": noise,
        "latin1": f"{document}d\t0\t1\tCaf\u00e9\t-\n#end document\n".encode("latin-1"),
        "unfinished": document.encode(),
        "cut": f"{document}d\t0".encode(),
        "truncated": checkpoint_bytes[: len(checkpoint_bytes) // 2],
        "run_random/last.pt": noise,
        "run_earlier/model.pt": noise,
        "refine_state/r.pt.state": noise,
        "a_file": b"a regular file, where an output wants a folder\n",
        "mentions_inside": b"[[0, 4],\n [9, 11]]\n",  # given mentions of TEXT
        "mentions_outside": b"[[0, 4], [30, 50]]\n",
        "mentions_empty": b'{"mentions": [[4, 4]]}\n',
    }
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    paths = {name.split("/")[0]: str(root / name.split("/")[0]) for name in files}  # "run_random": its folder

    resolver = root / "resolver.npz"
    MentionRanker(np.zeros(1 << HASH_BITS, dtype=np.float32)).save(resolver)
    (root / "truncated_resolver.npz").write_bytes(resolver.read_bytes()[: resolver.stat().st_size // 2])
    singletons = Checkpoint.load(bundled)
    dataclasses.replace(singletons, preprocess=PreprocessConfig(drop_singletons=False)).save(
        root / "singletons.pt", half=True)
    cache_name = f"entitynlm_scores_sample_{hashlib.sha256(checkpoint_bytes).hexdigest()[:12]}.json"
    (root / "rerank_cache").mkdir()
    (root / "rerank_cache" / cache_name).write_bytes(noise)
    (root / "quality_out").mkdir()
    (root / "quality_out" / "quality_litbank.json").write_text(json.dumps(
        {"checkpoint": "another.pt", "corpus": "litbank", "split": "test", "sampler": "both", "particles": 100}))
    return paths | {
        "missing": str(root / "absent"),
        "unwritable": str(root / "a_file" / "out"),
        "bundled": str(bundled),
        "detector": str(BUNDLED["detector"]),
        "resolver": str(resolver),
        "truncated_resolver": str(root / "truncated_resolver.npz"),
        "singletons": str(root / "singletons.pt"),
        "rerank_cache": str(root / "rerank_cache"),
        "cache_name": cache_name,
        "quality_out": str(root / "quality_out"),
        "sample": str(ROOT / "coref" / "corpora" / "data" / "sample_test.conll"),
        "data_binary": litbank_folder(root / "data_binary", b"", split_table=noise),
        "data_empty": litbank_folder(root / "data_empty", b""),
        "data_unfinished": litbank_folder(root / "data_unfinished", files["unfinished"]),
        "data_cut": litbank_folder(root / "data_cut", files["cut"]),
    }


# ---- running the rows ---------------------------------------------------------------------------------------


def entry_point(row: Row) -> tuple[Callable[[list[str]], object], str] | None:
    """What runs ``row`` in this process: the function its entry point calls, with the ``sys.argv[0]`` the entry
    point sees (a console script's name is how the dispatcher knows its command); None where there is no ``main``
    to call (the row then runs as a subprocess)."""
    if row.command.startswith("entitylm-"):  # a console script: the dispatcher, reading sys.argv as the script does
        from entitylm.__main__ import main as dispatch

        return (lambda arguments: dispatch()), str(BIN / row.command)  # dispatch() reads sys.argv
    if row.command.endswith(".py"):  # a benchmark script: its module's main
        module = importlib.import_module(row.command.removesuffix(".py").replace("/", "."))
        origin = str(ROOT / row.command)
    else:  # `python -m MODULE`: the main of the command that MODULE runs (read from its source), or its own
        from entitylm.__main__ import command_module

        spec = importlib.util.find_spec(row.command)
        entry = f"{row.command}.__main__" if spec.submodule_search_locations else row.command
        origin = importlib.util.find_spec(entry).origin
        try:
            module = importlib.import_module(command_module(row.command))
        except ValueError:  # `python -m entitylm`: the dispatcher's main is in the entry point itself
            module = importlib.import_module(entry)
    main = getattr(module, "main", None)
    if main is None or "argv" not in inspect.signature(main).parameters:
        return None
    return main, origin


@dataclass(frozen=True)
class Outcome:
    out: str  # what ``{out}`` stood for
    returncode: int
    stderr: str
    left: list[str]  # files left in the row's own folder


def environment() -> dict[str, str]:
    """The test's environment without a data directory (rows name theirs), one torch thread, unbuffered output."""
    env = {key: value for key, value in os.environ.items() if key != "ENTITYLM_DATA"}
    return env | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@functools.cache
def fresh_warning_filters() -> list:
    """The warning filters of a fresh interpreter in :func:`environment` (pytest's own are not a user's)."""
    code = "import pickle, sys, warnings; sys.stdout.buffer.write(pickle.dumps(warnings.filters))"
    return pickle.loads(subprocess.run([sys.executable, "-c", code], env=environment(), capture_output=True,
                                       check=True).stdout)


def files_left(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file())


def run_subprocess(argv: list[str], folder: Path) -> tuple[int, str]:
    """``argv`` as a user runs it: the exit status and stderr."""
    completed = subprocess.run(argv, cwd=folder, env=environment(), capture_output=True, text=True,
                               errors="replace", timeout=TIMEOUT)
    return completed.returncode, completed.stderr


def exit_status(main: Callable[[list[str]], object], arguments: list[str]) -> int:
    """The status ``sys.exit(main(arguments))`` gives a fresh interpreter; what it would print (a traceback, a
    ``sys.exit`` message) goes to ``sys.stderr`` as the interpreter prints it."""
    try:
        code = main(arguments)
    except SystemExit as leaving:
        code = leaving.code
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 - an uncaught error: the interpreter's traceback and status 1
        traceback.print_exc()
        return 1
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def as_a_fresh_process(folder: Path, argv0: str, arguments: list[str]):
    """The process-wide state a command sees as it would in its own process, and put back afterwards: the
    environment (:func:`environment`), the working directory, ``sys.argv``, no log handlers of pytest's, and a
    fresh interpreter's warning filters. Warnings are recorded (pytest would otherwise swallow them) and the
    caller prints them where the interpreter would, on stderr. Random states and torch's threads are restored."""
    saved_env, saved_cwd, saved_argv, saved_path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
    saved_random, saved_numpy, saved_torch = random.getstate(), np.random.get_state(), torch.get_rng_state()
    saved_threads, root = torch.get_num_threads(), logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    os.environ.clear()
    os.environ.update(environment())
    os.chdir(folder)
    sys.argv = [argv0, *arguments]
    root.handlers, root.level = [], logging.WARNING
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.resetwarnings()  # and the registries of warnings already shown once no longer hold
            warnings.filters.extend(fresh_warning_filters())
            yield caught
    finally:
        root.handlers, root.level = saved_handlers, saved_level
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        random.setstate(saved_random)
        np.random.set_state(saved_numpy)
        torch.set_rng_state(saved_torch)
        torch.set_num_threads(saved_threads)


def run_in_process(main: Callable[[list[str]], object], argv0: str, arguments: list[str], folder: Path,
                   capfd: pytest.CaptureFixture) -> tuple[int, str]:
    """``main(arguments)`` in this process, as its entry point would run it in a process of its own: the exit
    status and what reached stderr, at the file-descriptor level (a library writing to fd 2 counts too), with
    any warning printed as the interpreter prints it."""
    capfd.readouterr()
    with as_a_fresh_process(folder, argv0, arguments) as caught:
        status = exit_status(main, arguments)
    for warning in caught:
        sys.stderr.write(warnings.formatwarning(warning.message, warning.category, warning.filename,
                                                warning.lineno, warning.line))
    return status, capfd.readouterr().err


def run_row(row: Row, inputs: dict[str, str], folder: Path, capfd: pytest.CaptureFixture) -> Outcome:
    """Run one row in its own empty folder (``{out}`` is a path in it that does not exist yet): in this process
    through its entry point's ``main``, or as a subprocess for the row :data:`SUBPROCESS` names."""
    folder.mkdir(parents=True)
    out = str(folder / "out")
    argv = row.argv(inputs | {"out": out})
    if not Path(argv[0]).exists():
        return Outcome(out, -1, f"{argv[0]} is not installed: `pip install -e .` installs the console scripts", [])
    runner = None if row.id in SUBPROCESS else entry_point(row)
    if runner is None:
        returncode, stderr = run_subprocess(argv, folder)
    else:
        returncode, stderr = run_in_process(*runner, row.arguments(inputs | {"out": out}), folder, capfd)
    return Outcome(out, returncode, stderr, files_left(folder))


# The first row of each command runs as a user runs it, in a process of its own: the entry point itself (the
# `python -m` module, the console script, the script) and what only a fresh process shows (an import's warning).
SUBPROCESS = frozenset({next(param.values[0].id for param in ROWS if param.values[0].command == command)
                        for command in dict.fromkeys(param.values[0].command for param in ROWS)})


def check_row(row: Row, inputs: dict[str, str], tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    outcome = run_row(row, inputs, tmp_path / "row", capfd)
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.returncode == 2, outcome.stderr
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome.stderr
    assert row.says.format(**inputs, out=outcome.out) in lines[0]
    assert outcome.left == [], f"files left behind: {outcome.left}"


@pytest.mark.parametrize("row", [param for param in ROWS if param.values[0].id not in SUBPROCESS])
def test_bad_input_fails_in_one_line_naming_the_file(row: Row, inputs, tmp_path, capfd):
    check_row(row, inputs, tmp_path, capfd)


class TestEveryEntryPoint:
    """The rows run as subprocesses (:data:`SUBPROCESS`, about 2 s each): a class, so that xdist's loadscope runs
    them as a scope of their own, beside this module's other tests."""

    @pytest.mark.parametrize("row", [param for param in ROWS if param.values[0].id in SUBPROCESS])
    def test_bad_input_fails_in_one_line_naming_the_file(self, row: Row, inputs, tmp_path, capfd):
        check_row(row, inputs, tmp_path, capfd)


# ---- Ctrl-C ---------------------------------------------------------------------------------------------------

INTERRUPTIBLE = [  # (command, arguments, a line of stderr or stdout that shows it is in its long step)
    ("inference.train", "--model rnnlm --embedding-size 16 --hidden-size 16 --batch-tokens 300 --epochs 100000 "
     "--patience 100000 --device cpu --out {out}", '{"epoch": 1'),
    ("inference.marginal_ppl", "--particles 4000 --baseline none --device cpu --json {out}/result.json",
     "sample/test: preprocessing"),
    ("coref.resolver", "train --corpus sample --epochs 100000 --out {out}/model.npz", "epoch 1: dev"),
]


@pytest.mark.parametrize(("command", "args", "busy"), INTERRUPTIBLE, ids=[c[0] for c in INTERRUPTIBLE])
def test_ctrl_c_is_one_line_and_status_130(command, args, busy, tmp_path):
    out = tmp_path / "out"
    argv = Row(command, args, "").argv({"out": str(out)})
    # SIGINT restored in the child: a suite run as a shell's background job inherits it ignored, and Python then
    # never raises KeyboardInterrupt (as a user's terminal would never send it to a background job)
    with subprocess.Popen(argv, cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as process:
        try:
            seen = []
            for line in process.stdout:  # until the command is in its long step
                seen.append(line)
                if busy in line:
                    break
            else:
                pytest.fail(f"{command} ended before its long step:\n{''.join(seen)}")
            time.sleep(0.5)
            process.send_signal(signal.SIGINT)
            output = "".join(seen) + process.communicate(timeout=TIMEOUT)[0]
        finally:
            if process.poll() is None:
                process.kill()
    # The shell's $? is 130 either way: exit(130) from run_main, or death by SIGINT (-2 here), which CPython
    # chooses when the interpreter saw a KeyboardInterrupt it counts as unhandled (a rare race, seen once in CI).
    assert process.returncode in (130, -signal.SIGINT), output
    assert output.splitlines()[-1] == "interrupted" and "Traceback" not in output, output
    assert not list(tmp_path.rglob("*.part")), "a half-written file was left"


# ---- --help -------------------------------------------------------------------------------------------------

PARSERS = [  # (module, the function that builds its parser)
    ("inference.commands.corpora", "build_parser"), ("inference.commands.resolver", "build_parser"),
    ("inference.commands.train", "build_parser"), ("inference.commands.grid", "build_parser"),
    ("inference.commands.refine", "build_parser"), ("inference.commands.marginal_ppl", "build_parser"),
    ("inference.commands.diagnostics", "build_parser"), ("inference.commands.rerank", "build_parser"),
    ("inference.commands.entity_prediction", "build_parser"), ("benchmarks.quality", "build_parser"),
    ("benchmarks.samplers", "build_parser"), ("benchmarks.speed", "build_parser"),
    ("benchmarks.proposal_choice", "build_parser"), ("benchmarks.dntm", "build_parser"),
    ("inference.commands.score", "build_parser"), ("inference.commands.anonymise", "build_parser"),
    ("inference.commands.perplexity", "build_parser"), ("inference.commands.entity_cloze", "build_parser"),
    ("inference.commands.pretrain_context", "build_parser"), ("inference.commands.posterior", "build_parser"),
    ("inference.commands.mentions", "build_parser"), ("inference.commands.resolve", "build_parser"),
    ("inference.commands.gap", "build_parser"), ("benchmarks.coref_end_to_end", "build_parser"),
    ("benchmarks.tokenizer_agreement", "build_parser"), ("inference.commands.reading", "build_parser"),
    ("benchmarks.coref_gru", "build_parser"), ("benchmarks.lowercase_pipeline", "build_parser"),
    ("inference.commands.pos", "build_parser"), ("inference.commands.story_lm", "build_parser"),
    ("inference.commands.mneme_eval", "build_parser"), ("inference.commands.generate", "build_parser"),
    ("benchmarks.cache_baseline", "build_parser"),
]


def parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """A parser and its sub-commands' parsers."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += parsers(sub)
    return found


@pytest.mark.parametrize(("module", "factory"), PARSERS)
def test_help_shows_the_whole_description_and_every_option_with_its_default(module, factory):
    imported = importlib.import_module(module)
    top = getattr(imported, factory)()
    assert top.description.startswith(imported.__doc__), "the description starts with the module's whole docstring"
    for parser in parsers(top):
        assert issubclass(parser.formatter_class, HelpFormatter), parser.prog
        assert parser.description, f"{parser.prog}: no description"
        for action in parser._actions:
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                assert action.help, f"{parser.prog} {'/'.join(action.option_strings) or action.dest}: no help text"


def test_progress_bars_are_made_by_coref_io_progress():
    """Bars say what they count (``progress`` has no default unit, so never tqdm's "it") and are drawn on a
    terminal only; a direct ``tqdm(...)`` call would bypass both."""
    direct = [str(path.relative_to(ROOT)) for folder in ("coref", "inference", "benchmarks", "entitylm")
              for path in sorted((ROOT / folder).rglob("*.py")) if "tqdm(" in path.read_text()]
    assert direct == ["coref/io/progress.py"]
