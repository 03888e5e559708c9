"""Checkpoints: a trained model with everything needed to use it again (vocabulary, preprocessing, options).

One file per trained model, written atomically with ``torch.save`` and read with ``weights_only=True``:
``{"format", "kind", "config", "vocabulary", "preprocess", "weights", "training"}``. ``kind`` is a model of
:data:`generative.registry.LANGUAGE_MODELS` (``entitynlm``: weights of the model and its proposals; ``rnnlm``,
``dntm``: the model's) or ``ngram`` (the n-gram's counts).
Bundled checkpoints store float weights in float16 to stay small; loading restores float32.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import torch
from torch import nn

from coref.io.atomic import atomic_path
from coref.corpora.preprocess import PreprocessConfig, Vocabulary
from generative.entitynlm.model import EntityNLM, EntityNLMConfig, EntityProposal
from generative.baselines.ngram import KneserNeyLM
from generative.registry import LANGUAGE_MODELS, model_kind

FORMAT = 1
KINDS = (*LANGUAGE_MODELS, "ngram")
PRETRAINED = files("inference") / "pretrained"


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint, or one that does not fit what it is used with."""


@dataclass
class Checkpoint:
    kind: str
    config: dict[str, Any]
    vocabulary: Vocabulary
    preprocess: PreprocessConfig
    weights: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)

    def save(self, path: str | os.PathLike, half: bool = False) -> None:
        """Write atomically; ``half`` stores float tensors as float16 (bundled checkpoints)."""
        weights = _map_tensors(self.weights, lambda t: t.half() if half and t.is_floating_point() else t.cpu())
        payload = {
            "format": FORMAT,
            "kind": self.kind,
            "config": self.config,
            "vocabulary": self.vocabulary.to_dict(),
            "preprocess": self.preprocess.to_dict(),
            "weights": weights,
            "training": self.training,
        }
        with atomic_path(path) as temporary:
            torch.save(payload, temporary)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Checkpoint:
        """Read a checkpoint; a clear :class:`CheckpointError` (naming the file) for anything else."""
        path = Path(path)
        payload = read_torch_file(path, "checkpoint")
        if not isinstance(payload, dict) or payload.get("format") != FORMAT or payload.get("kind") not in KINDS:
            raise CheckpointError(f"{path}: not an entitylm checkpoint of format {FORMAT}")
        try:
            return cls(
                kind=payload["kind"],
                config=payload["config"],
                vocabulary=Vocabulary.from_dict(payload["vocabulary"]),
                preprocess=PreprocessConfig.from_dict(payload["preprocess"]),
                weights=_map_tensors(payload["weights"], lambda t: t.float() if t.is_floating_point() else t),
                training=payload["training"],
            )
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise CheckpointError(f"{path}: not an entitylm checkpoint (incomplete: {error!r})") from error

    def require_vocabulary(self, vocabulary: Vocabulary, what: str) -> None:
        """Refuse to combine this checkpoint with ``what`` if they index words differently."""
        if vocabulary.fingerprint != self.vocabulary.fingerprint:
            raise CheckpointError(
                f"{what} uses another vocabulary (fingerprint {vocabulary.fingerprint[:12]}, "
                f"{len(vocabulary)} words) than the {self.kind} checkpoint ({self.vocabulary.fingerprint[:12]}, "
                f"{len(self.vocabulary)} words): their word ids do not mean the same words"
            )


def read_torch_file(path: Path, what: str) -> Any:
    """What ``torch.save`` wrote to ``path`` (tensors and plain containers only: ``weights_only``), or a one-line
    :class:`CheckpointError` naming the file: a missing file, random bytes or a truncated file (torch raises
    UnpicklingError, RuntimeError, EOFError or a zip error for those, often with several lines)."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such {what} file")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not its own, their messages long
        raise CheckpointError(f"{path}: not an entitylm {what}: truncated, or not a file torch can read "
                              f"({type(error).__name__})") from error


def format_tag(path: str | os.PathLike) -> object:
    """The ``format`` entry of a file ``torch.save`` wrote as a dict, None for anything else: a cheap look (the
    tensors are memory-mapped, not read) that tells the kinds of checkpoint apart before loading one."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # not a file torch reads with mmap (missing, random bytes, legacy format): no tag
        return None
    return payload.get("format") if isinstance(payload, dict) else None


def _map_tensors(value: Any, function) -> Any:
    if isinstance(value, torch.Tensor):
        return function(value)
    if isinstance(value, dict):
        return {key: _map_tensors(item, function) for key, item in value.items()}
    return value


# ---- from checkpoints to models and back ------------------------------------------------------------------------


PROPOSAL_WEIGHTS = {"forward": "proposal", "bidirectional": "bidirectional_proposal"}  # context -> weights key


def entitynlm_modules(checkpoint: Checkpoint, device: torch.device | str = "cpu", proposal: str | None = None
                      ) -> tuple[EntityNLM, EntityProposal]:
    """The model and a proposal of an EntityNLM checkpoint: ``proposal`` "forward" (the paper's) or
    "bidirectional", by default the one the checkpoint names (chosen on dev)."""
    config = EntityNLMConfig(**checkpoint.config)
    context = proposal or config.proposal
    key = PROPOSAL_WEIGHTS.get(context)
    if key not in checkpoint.weights:
        raise CheckpointError(f"this checkpoint has no {context} proposal (it has "
                              f"{sorted(c for c, k in PROPOSAL_WEIGHTS.items() if k in checkpoint.weights)})")
    model = EntityNLM(config, list(checkpoint.vocabulary.counts))
    guide = EntityProposal(config, context=context)
    model.load_state_dict(checkpoint.weights["model"])
    guide.load_state_dict(checkpoint.weights[key])
    return model.to(device).eval(), guide.to(device).eval()


def language_model(checkpoint: Checkpoint, device: torch.device | str = "cpu") -> nn.Module:
    """The model of a checkpoint of any registered kind (for EntityNLM without its proposals), in eval mode."""
    if checkpoint.kind not in LANGUAGE_MODELS:
        raise CheckpointError(f"a {checkpoint.kind} checkpoint holds no neural language model")
    kind = model_kind(checkpoint.kind)
    model = kind.build(kind.config(checkpoint.config), list(checkpoint.vocabulary.counts))
    model.load_state_dict(checkpoint.weights["model"])
    return model.to(device).eval()


def ngram_model(checkpoint: Checkpoint) -> KneserNeyLM:
    return KneserNeyLM.from_state_dict(checkpoint.weights["ngram"])


def module_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    """A detached CPU copy of a module's state (kept as the best weights while training goes on)."""
    return {name: tensor.detach().cpu().clone() for name, tensor in module.state_dict().items()}


def pretrained(name: str) -> Path:
    """The path of a checkpoint bundled with the package (``entitynlm.pt`` or ``rnnlm.pt``)."""
    path = Path(str(PRETRAINED / name))
    if not path.is_file():
        raise CheckpointError(f"no bundled checkpoint {name!r} in {PRETRAINED}")
    return path


def entitynlm_checkpoint(path: str | os.PathLike | None = None) -> tuple[Path, Checkpoint]:
    """An EntityNLM checkpoint and where it was read from: ``path``, or the bundled one when it is None."""
    path = Path(path) if path else pretrained("entitynlm.pt")
    checkpoint = Checkpoint.load(path)
    if checkpoint.kind != "entitynlm":
        raise CheckpointError(f"{path}: an entitynlm checkpoint is needed, this one is {checkpoint.kind}")
    return path, checkpoint
