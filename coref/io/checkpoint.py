"""One checkpoint format for every trained model of entitylm, and :func:`load`, which reads it and every older one.

A checkpoint is one file, written atomically with ``torch.save`` and read with ``weights_only=True`` (tensors and
plain containers only, so a file can carry no code):
``{"format": "entitylm-checkpoint", "version": 2, "kind", "config", "vocabulary", "data", "weights", "training"}``.

- ``kind``: what was trained, as ``--model`` names it (``entitynlm``, ``rnnlm``, ``dntm``, ``ngram``, a Coref-GRU
  reader such as ``ga_gru``, a story LM such as ``d_mneme``) or one of :data:`COREF_KINDS`; the families behind
  the names are in :mod:`generative.registry` (coref, the lowest layer, cannot import it, so it names its own);
- ``config``: the model's config as a dict (what builds the model);
- ``vocabulary``: the family's symbol tables as plain data (a word list, a tag set, a vocabulary's dict);
- ``data``: how the model's input is prepared (preprocessing, a reader's task, a story LM's story length);
- ``weights``: named state dicts (``model``; EntityNLM's proposals beside it; the ranker's sparse weights);
- ``training``: what the run was (``args``: its options; ``state``/``history``/``info``: its record) and, in a
  run's ``last.pt``, what resuming needs (``resume``: optimiser, schedule, RNG state, best weights).

Floating-point tensors may be stored in float16 (``save(half=True)``: bundled and coreference models) and come
back as float32. Files of the seven formats this one replaced are converted on reading (see :func:`load`), so a
checkpoint written by any earlier version of entitylm still loads.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from coref.io.atomic import atomic_path

FORMAT = "entitylm-checkpoint"
VERSION = 2  # version 1: the language models' format ({"format": 1, ...}), the first of the older ones
COREF_KINDS = ("mention_detector", "pos_tagger", "mention_ranker", "gap_resolver")


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint, or one that does not fit what it is used with."""


@dataclass
class Checkpoint:
    """A trained model with everything needed to use it again, or to go on training it (see the module doc)."""

    kind: str
    config: dict[str, Any]
    vocabulary: dict[str, Any]
    weights: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    version: int = VERSION

    def save(self, path: str | os.PathLike, half: bool = False) -> None:
        """Write atomically; ``half`` stores the floating-point weights as float16."""
        weights = map_tensors(self.weights, lambda t: t.detach().cpu().half() if half and t.is_floating_point()
                              else t.detach().cpu())
        payload = {"format": FORMAT, "version": VERSION, "kind": self.kind, "config": self.config,
                   "vocabulary": self.vocabulary, "data": self.data, "weights": weights, "training": self.training}
        with atomic_path(path) as temporary:
            torch.save(payload, temporary)


def load(path: str | os.PathLike, what: str = "entitylm checkpoint", kinds: Collection[str] | None = None,
         error: type[CheckpointError] = CheckpointError) -> Checkpoint:
    """The checkpoint in ``path``, of this format or of any older one (converted), float16 weights as float32.

    ``what`` names the expected model in the one-line ``error`` (a :class:`CheckpointError` or a family's
    subclass) raised for anything else: "PATH: no such mention detector file", "PATH: not a mention detector
    (...)"; ``kinds``, when given, are the kinds accepted.
    """
    path = Path(path)
    noun = what.removeprefix("entitylm ")
    article = "an" if what[0] in "aeiou" else "a"
    if not path.is_file():
        raise error(f"{path}: no such {noun} file")
    try:
        payload = _read_npz(path, f"{article} {what}") if _is_npz(path) else read_torch_file(path, f"{article} {what}")
    except CheckpointError as unreadable:
        raise error(str(unreadable)) from unreadable
    convert = _converter(payload)
    if convert is None:
        raise error(f"{path}: not {article} {what} (no entitylm format tag)")
    try:
        checkpoint = convert(payload)
    except (KeyError, TypeError, ValueError, AttributeError) as incomplete:
        raise error(f"{path}: not {article} {what} (incomplete: {incomplete!r})") from incomplete
    if kinds is not None and checkpoint.kind not in kinds:
        raise error(f"{path}: not {article} {what} (a {checkpoint.kind} checkpoint)")
    checkpoint.weights = map_tensors(checkpoint.weights, lambda t: t.float() if t.dtype == torch.float16 else t)
    return checkpoint


def read_torch_file(path: Path, what: str) -> Any:
    """What ``torch.save`` wrote to ``path`` (``weights_only``), or a one-line :class:`CheckpointError` naming the
    file: ``what`` (with its article) is what it is not. Random bytes or a truncated file make torch raise
    UnpicklingError, RuntimeError, EOFError or a zip error, often with several lines."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not its own, their messages long
        raise CheckpointError(f"{path}: not {what}: truncated, or not a file torch can read "
                              f"({type(error).__name__})") from error


def map_tensors(value: Any, function: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``value`` with ``function`` applied to every tensor in it (through dicts, lists and tuples)."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, dict):
        return {key: map_tensors(item, function) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(map_tensors(item, function) for item in value)
    return value


def module_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of a module's state (kept as the best weights while training goes on)."""
    return {name: tensor.detach().cpu().clone() for name, tensor in module.state_dict().items()}


# ---- the older formats, each converted on reading ---------------------------------------------------------------

RESUME_KEYS = ("optimizer", "schedule", "rng", "best")  # what older last.pt files kept among the weights


def _split_resume(weights: dict[str, Any], training: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Older formats kept the optimiser's state among the weights; this one keeps it in ``training["resume"]``."""
    resume = {key: weights[key] for key in RESUME_KEYS if key in weights}
    weights = {key: value for key, value in weights.items() if key not in RESUME_KEYS}
    return weights, {**training, "resume": resume} if resume else training


def _current(payload: dict[str, Any]) -> Checkpoint:
    return Checkpoint(payload["kind"], payload["config"], payload["vocabulary"], payload["weights"],
                      payload["training"], payload["data"], payload["version"])


def _language_model(payload: dict[str, Any]) -> Checkpoint:
    """Version 1 (``inference/checkpoint.py``): entitynlm, rnnlm, dntm and ngram."""
    weights, training = _split_resume(payload["weights"], payload["training"])
    return Checkpoint(payload["kind"], payload["config"], payload["vocabulary"], weights, training,
                      {"preprocess": payload["preprocess"]}, 1)


def _converter(payload: Any) -> Callable[[dict[str, Any]], Checkpoint] | None:
    """How to read ``payload`` (what the file held): this format's reader or an older format's converter
    (:data:`CONVERTERS`, by format tag and version, or by tag alone where every version reads alike)."""
    if not isinstance(payload, dict):
        return None
    tag, version = payload.get("format"), payload.get("version")
    if not isinstance(tag, (int, str)):
        return None
    version = version if isinstance(version, int) else None  # a numpy archive's arrays are no version
    return CONVERTERS.get((tag, version)) or CONVERTERS.get((tag, None))


def _coref_gru_reader(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-reader-1`` (``inference/reading.py``): a Coref-GRU reader."""
    weights, training = _split_resume(payload["weights"], payload["training"])
    return Checkpoint(payload["model"], payload["config"], {"words": payload["words"], "classes": payload["classes"]},
                      weights, training, {"task": payload["task"], "chains": payload.get("chains", "names")}, 1)


def _story_lm(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-story-lm-1`` (``inference/story_lm.py``): a MNEMELM story LM."""
    weights, training = _split_resume(payload["weights"], payload["training"])
    return Checkpoint(payload["model"], payload["config"], {"words": payload["words"]}, weights, training,
                      {"max_tokens": payload["max_tokens"]}, 1)


def _context_encoder(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-context-encoder/1`` (``inference/pretrain_context.py``): the DNTM's pretrained context encoder."""
    training = {"args": payload["options"], **{key: payload[key] for key in ("text", "history", "best", "steps")}}
    return Checkpoint("context_encoder", {"size": int(payload["size"])}, payload["vocabulary"],
                      {"model": payload["state_dict"]}, training, {}, 1)


def _mention_detector(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-mention-detector`` version 1 (``coref/mentions.py``)."""
    return Checkpoint("mention_detector", payload["config"], {"words": payload["vocabulary"]},
                      {"model": payload["weights"]}, dict(payload["info"]), {}, 1)


def _pos_tagger(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-pos-tagger`` version 1 (``coref/pos.py``)."""
    return Checkpoint("pos_tagger", payload["config"], {"words": payload["vocabulary"], "tags": payload["tags"]},
                      {"model": payload["weights"]}, dict(payload["info"]), {}, 1)


def _mention_ranker(payload: dict[str, Any]) -> Checkpoint:
    """``entitylm-mention-ranker`` (``coref/resolver.py``, a compressed ``.npz``): the averaged perceptron's
    nonzero weights, kept sparse (as tensors) in the current format."""
    weights = {"indices": torch.from_numpy(payload["indices"].astype(np.int64)),
               "values": torch.from_numpy(payload["values"])}
    config = {"feature_version": int(payload["feature_version"]), "hash_bits": int(payload["hash_bits"])}
    return Checkpoint("mention_ranker", config, {}, weights, json.loads(str(payload["settings"])), {}, 1)


CONVERTERS: dict[tuple[int | str, int | None], Callable[[dict[str, Any]], Checkpoint]] = {
    (FORMAT, VERSION): _current,
    (1, None): _language_model,
    ("entitylm-reader-1", None): _coref_gru_reader,
    ("entitylm-story-lm-1", None): _story_lm,
    ("entitylm-context-encoder/1", None): _context_encoder,
    ("entitylm-mention-ranker", None): _mention_ranker,
    ("entitylm-mention-detector", 1): _mention_detector,
    ("entitylm-pos-tagger", 1): _pos_tagger,
}


def _is_npz(path: Path) -> bool:
    """Whether ``path`` is a numpy archive (a zip of ``.npy`` arrays; torch's files are zips of other members)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith(".npy") for name in archive.namelist())


def _read_npz(path: Path, what: str) -> dict[str, Any]:
    """The arrays of a numpy archive, its format tag as a string."""
    try:
        with np.load(path, allow_pickle=False) as loaded:
            arrays = {name: loaded[name] for name in loaded.files}
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"{path}: not {what} (an unreadable .npz archive: {error})") from error
    return {**arrays, "format": str(arrays.get("format", ""))}
