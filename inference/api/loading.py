"""Loading any checkpoint of the project's models (:func:`load`) and training one in this process (:func:`train`)."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

from coref.io import checkpoint as stored
from generative.registry import family_of
from inference.api.arguments import kept_random_state
from inference.api.dntm import DynamicTextModel
from inference.api.language_model import LanguageModel
from inference.api.mneme import StoryLanguageModel
from inference.api.reader import Reader
from inference.runtime import resolve_device
from inference.training.checkpoint import Checkpoint, pretrained
from inference.training.coref_gru import READERS, ReaderTraining, load_reader, train_reader
from inference.training.mneme import MODELS as STORY_MODELS
from inference.training.mneme import StoryLMTraining, load_story_lm, train_story_lm
from inference.training.train import LanguageModelTraining, train_language_model

BUNDLED = {"entitynlm": "entitynlm.pt", "rnnlm": "rnnlm.pt"}  # load() names -> inference/pretrained files
TRAINABLE = (*BUNDLED, "dntm", *READERS, *STORY_MODELS)  # what train() trains and load() then reads
Model = LanguageModel | StoryLanguageModel | Reader


def load(name_or_path: str | os.PathLike = "entitynlm", device: str = "cpu") -> Model:
    """A trained model to use in a notebook: ``"entitynlm"`` or ``"rnnlm"`` (the checkpoints bundled in
    ``inference/pretrained``), or the path of a checkpoint of ``python -m inference.train``: an EntityNLM or RNNLM
    one (a :class:`LanguageModel`), a Dynamic Neural Text Model's (a :class:`DynamicTextModel`), a Coref-GRU
    reader's (ga_cgru, bi_gru, ...: a :class:`Reader`) or a MNEMELM story LM's (vanilla, s_mneme, d_mneme, ...: a
    :class:`StoryLanguageModel`), told apart by their kinds (:func:`generative.registry.family_of`). ``device``:
    ``"cpu"``, ``"cuda"`` or ``"auto"`` (CUDA when there is a GPU)."""
    name = str(name_or_path)
    if name in BUNDLED:
        path = pretrained(BUNDLED[name])
    else:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{name!r}: neither a bundled model ({', '.join(map(repr, BUNDLED))}) nor a "
                             "checkpoint file")
    family = family_of(stored.load(path).kind)
    with kept_random_state():  # building a module draws initial weights, which the checkpoint's then replace
        if family == "story_lm":
            return StoryLanguageModel(path, *load_story_lm(path, resolve_device(device)))
        if family == "reader":
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
    """Train ``model`` on ``corpus`` into the folder ``out`` with the trainer of its family (the one loop of
    :mod:`inference.training.loop`, in this process) and load the result, ``out/model.pt``. ``model``:
    ``entitynlm``, ``rnnlm`` or ``dntm`` (the options of :class:`~inference.training.train.LanguageModelTraining`,
    ``python -m inference.train --help``), a Coref-GRU reader (:data:`inference.training.coref_gru.READERS`,
    :class:`~inference.training.coref_gru.ReaderTraining`, ``python -m inference.reading --help``; its corpus is the
    task, ``babi:N``, ``lambada`` or ``wikihop``, also given as ``task=``) or a story LM (:data:`STORY_MODELS`,
    :class:`~inference.training.mneme.StoryLMTraining`, ``python -m inference.story_lm --help``). Each option is
    the command's, named as its field: ``d_model=16`` is ``--d-model 16``, ``resume=True`` ``--resume``. The
    trainer's seed (``seed=``, default 0) decides the run; the caller's random state is kept. Its per-epoch records
    are printed (as JSON lines on stderr) with ``verbose``; the loaded model's ``history`` keeps them. A bad
    option or input raises the trainer's own exception (a ValueError for a bad value or an unknown option, with
    the command line's message). The trainer's ``device`` (default auto) is also the one the model is loaded on
    (default cpu)."""
    if model not in TRAINABLE:
        raise ValueError(f"train: this API trains and loads {', '.join(TRAINABLE)}, not {model!r} (python -m "
                         "entitylm train trains the others)")
    if "task" in options:
        if corpus is not None:
            raise ValueError("train: give the corpus or the task, not both")
        corpus = str(options.pop("task"))
    if corpus is None or out is None:
        raise ValueError("train: a corpus (for a reader, its task) and an output folder (out=) are needed")
    family = family_of(model)
    options_class, run = TRAINERS[family]
    known = {field.name for field in fields(options_class) if field.init}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"train: {model} has no option {', '.join(unknown)} (its options: {', '.join(sorted(known))})")
    where = {"task" if family == "reader" else "corpus": corpus, "out": str(out), "data_dir": data_dir}
    report = None if verbose else (lambda record: None)
    with kept_random_state():
        run(options_class(model=model, **where, **options), report=report)
    return load(Path(out) / "model.pt", str(options.get("device", "cpu")))


TRAINERS = {  # family -> (its options, its training function)
    "language_model": (LanguageModelTraining, train_language_model),
    "reader": (ReaderTraining, train_reader),
    "story_lm": (StoryLMTraining, train_story_lm),
}
