"""Loading any checkpoint of the project's models (:func:`load`) and training one in this process (:func:`train`)."""

from __future__ import annotations

import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from coref.cli import INTERRUPTED
from coref.io import checkpoint as stored
from inference.training import train as train_command
from inference.api.arguments import _Capture, _flags, kept_random_state
from inference.api.dntm import DynamicTextModel
from inference.api.language_model import LanguageModel
from inference.api.reader import Reader
from inference.api.mneme import StoryLanguageModel
from inference.training.checkpoint import Checkpoint, pretrained
from inference.runtime import resolve_device
from inference.training.coref_gru import READERS, load_reader
from inference.training.mneme import MODELS as STORY_MODELS
from inference.training.mneme import load_story_lm

BUNDLED = {"entitynlm": "entitynlm.pt", "rnnlm": "rnnlm.pt"}  # load() names -> inference/pretrained files
TRAINABLE = (*BUNDLED, "dntm", *READERS, *STORY_MODELS)  # what train() trains and load() then reads
Model = LanguageModel | StoryLanguageModel | Reader


def load(name_or_path: str | os.PathLike = "entitynlm", device: str = "cpu") -> Model:
    """A trained model to use in a notebook: ``"entitynlm"`` or ``"rnnlm"`` (the checkpoints bundled in
    ``inference/pretrained``), or the path of a checkpoint of ``python -m inference.train``: an EntityNLM or RNNLM
    one (a :class:`LanguageModel`), a Dynamic Neural Text Model's (a :class:`DynamicTextModel`), a Coref-GRU
    reader's (ga_cgru, bi_gru, ...: a :class:`Reader`) or a MNEMELM story LM's (vanilla, s_mneme, d_mneme, ...: a
    :class:`StoryLanguageModel`), told apart by their format tags and kinds. ``device``: ``"cpu"``, ``"cuda"`` or
    ``"auto"`` (CUDA when there is a GPU)."""
    name = str(name_or_path)
    if name in BUNDLED:
        path = pretrained(BUNDLED[name])
    else:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{name!r}: neither a bundled model ({', '.join(map(repr, BUNDLED))}) nor a "
                             "checkpoint file")
    kind = stored.load(path).kind
    with kept_random_state():  # building a module draws initial weights, which the checkpoint's then replace
        if kind in STORY_MODELS:
            return StoryLanguageModel(path, *load_story_lm(path, resolve_device(device)))
        if kind in READERS:
            device_ = resolve_device(device)
            return Reader(path, *load_reader(path, device_), device_)
        checkpoint = Checkpoint.load(path)
        if checkpoint.kind == "dntm":
            return DynamicTextModel(path, checkpoint, resolve_device(device))
        if checkpoint.kind not in BUNDLED:
            raise ValueError(f"{path}: a {checkpoint.kind} checkpoint; this API reads entitynlm, rnnlm, dntm, reader "
                             "and story LM ones (python -m inference.perplexity scores the others)")
        return LanguageModel(path, checkpoint, resolve_device(device))


def train(model: str, corpus: str | None = None, out: str | os.PathLike | None = None, data_dir: str | None = None,
          *, verbose: bool = False, **options: object) -> Model:
    """Train ``model`` on ``corpus`` into the folder ``out`` with ``python -m inference.train`` (its
    :func:`~inference.training.train.main`, in this process) and load the result, ``out/model.pt``. ``model``:
    ``entitynlm``, ``rnnlm`` or ``dntm`` (options of ``python -m inference.train --help``), a Coref-GRU reader
    (:data:`inference.training.coref_gru.READERS`, options of ``python -m inference.reading --help``; its corpus is the task,
    ``babi:N``, ``lambada`` or ``wikihop``, also given as ``task=``) or a story LM (:data:`STORY_MODELS`, options
    of ``python -m inference.story_lm --help``). Each option is the command's flag: ``d_model=16`` is
    ``--d-model 16``, ``True`` a bare flag (``resume=True``), a list several values (``proposals=["forward"]``);
    False and None leave it out. The trainer's seed (``seed=``, default 0) decides the run; the caller's random
    state is kept. Its per-epoch lines and summary are shown with ``verbose``; the loaded model's ``history``
    keeps the per-epoch record. A bad option or input raises ValueError with the trainer's message. The
    trainer's ``device`` (default auto) is also the one the model is loaded on (default cpu)."""
    if model not in TRAINABLE:
        raise ValueError(f"train: this API trains and loads {', '.join(TRAINABLE)}, not {model!r} (python -m "
                         "inference.training.train trains the others)")
    if "task" in options:
        if corpus is not None:
            raise ValueError("train: give the corpus or the task, not both")
        corpus = str(options.pop("task"))
    if corpus is None or out is None:
        raise ValueError("train: a corpus (for a reader, its task) and an output folder (out=) are needed")
    argv = ["--model", model, "--corpus", corpus, "--out", str(out), *_flags({"data_dir": data_dir, **options})]
    captured = {name: _Capture(getattr(sys, name) if verbose else None) for name in ("stdout", "stderr")}
    try:
        with kept_random_state(), redirect_stdout(captured["stdout"]), redirect_stderr(captured["stderr"]):
            status = train_command.main(argv)
    except SystemExit as stop:  # argparse's way out of a bad option, with its one-line message on stderr
        status = stop.code
    if status == INTERRUPTED:
        raise KeyboardInterrupt
    if status != 0:
        lines = [line for line in captured["stderr"].getvalue().splitlines() if line.strip()]
        reason = lines[-1].split("error: ", 1)[-1] if lines else f"exit status {status}"
        raise ValueError(f"inference.training.train: {reason}")
    return load(Path(out) / "model.pt", str(options.get("device", "cpu")))
