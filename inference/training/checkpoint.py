"""Language-model checkpoints: the models of :data:`generative.registry.LANGUAGE_MODELS` and the n-gram.

They are files of the one format of :mod:`coref.io.checkpoint`; :class:`Checkpoint` is their typed view, the
vocabulary a :class:`~coref.corpora.preprocess.Vocabulary` and the preprocessing a
:class:`~coref.corpora.preprocess.PreprocessConfig` (kept in the file's ``data``). ``kind`` is a model of
:data:`generative.registry.LANGUAGE_MODELS` (``entitynlm``: weights of the model and its proposals; ``rnnlm``,
``dntm``: the model's) or ``ngram`` (the n-gram's counts). Bundled checkpoints store float weights in float16 to
stay small; loading restores float32. Below are the helpers that build models from a checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import torch
from torch import nn

from coref.corpora.preprocess import PreprocessConfig, Vocabulary
from coref.io import checkpoint as stored
from coref.io.checkpoint import CheckpointError, module_weights
from generative.baselines.ngram import KneserNeyLM
from generative.entitynlm.copying import EntityWordCopy
from generative.entitynlm.model import EntityNLM, EntityNLMConfig, EntityProposal
from generative.registry import LANGUAGE_MODELS, model_kind
from inference.algorithms.config import ProposalConfig

__all__ = ["Checkpoint", "CheckpointError", "module_weights", "entitynlm_modules", "language_model", "ngram_model",
           "pretrained", "entitynlm_checkpoint", "PROPOSAL_WEIGHTS", "read_torch_file"]
KINDS = (*LANGUAGE_MODELS, "ngram")
PRETRAINED = files("inference") / "pretrained"


@dataclass
class Checkpoint:
    kind: str
    config: dict[str, Any]
    vocabulary: Vocabulary
    preprocess: PreprocessConfig
    weights: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)

    def stored(self) -> stored.Checkpoint:
        """This checkpoint in the one format of :mod:`coref.io.checkpoint`."""
        return stored.Checkpoint(self.kind, self.config, self.vocabulary.to_dict(), self.weights, self.training,
                                 {"preprocess": self.preprocess.to_dict()})

    def save(self, path: str | os.PathLike, half: bool = False) -> None:
        """Write atomically; ``half`` stores float tensors as float16 (bundled checkpoints)."""
        self.stored().save(path, half)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Checkpoint:
        """Read a language model's checkpoint (of any format version); a one-line :class:`CheckpointError`
        naming the file for anything else."""
        checkpoint = stored.load(path, "entitylm checkpoint", KINDS)
        try:
            return cls(checkpoint.kind, checkpoint.config, Vocabulary.from_dict(checkpoint.vocabulary),
                       PreprocessConfig.from_dict(checkpoint.data["preprocess"]), checkpoint.weights,
                       checkpoint.training)
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
    """What ``torch.save`` wrote to ``path`` (``weights_only``), or a one-line :class:`CheckpointError` naming the
    file ("no such WHAT file", "not an entitylm WHAT"): for files of their own, such as a refinement's state."""
    if not path.is_file():
        raise CheckpointError(f"{path}: no such {what} file")
    return stored.read_torch_file(path, f"an entitylm {what}")


# ---- from checkpoints to models and back ------------------------------------------------------------------------


PROPOSAL_WEIGHTS = {"forward": "proposal", "bidirectional": "bidirectional_proposal"}  # context -> weights key


def entitynlm_modules(checkpoint: Checkpoint, device: torch.device | str = "cpu", proposal: str | None = None,
                      run: ProposalConfig | None = None) -> tuple[EntityNLM, EntityProposal]:
    """The model and a proposal of an EntityNLM checkpoint: ``proposal`` "forward" (the paper's) or
    "bidirectional", by default the one the checkpoint names (chosen on dev). ``run``: a sampling run's settings
    the modules are built with (the model's document cache and new-entity bias, the proposal's temperature; its
    ``context``, where set, names the proposal); None: as trained."""
    config = EntityNLMConfig(**checkpoint.config)
    context = proposal or (run.context if run is not None else None) or config.proposal
    if run is not None:
        config = dataclasses.replace(config, document_cache=run.document_cache, new_entity_bias=run.new_entity_bias)
    key = PROPOSAL_WEIGHTS.get(context)
    if key not in checkpoint.weights:
        raise CheckpointError(f"this checkpoint has no {context} proposal (it has "
                              f"{sorted(c for c, k in PROPOSAL_WEIGHTS.items() if k in checkpoint.weights)})")
    model = EntityNLM(config, list(checkpoint.vocabulary.counts))
    guide = EntityProposal(config, temperature=1.0 if run is None else run.temperature, context=context)
    model.load_state_dict(checkpoint.weights["model"])
    guide.load_state_dict(checkpoint.weights[key])
    return model.to(device).eval(), guide.to(device).eval()


def with_entity_words(checkpoint: Checkpoint, words: int, weighting: str | None = None,
                      source: str | os.PathLike = "this checkpoint") -> Checkpoint:
    """The EntityNLM ``checkpoint`` with a model whose entities remember their last ``words`` mention words, which
    a mention's word may copy with the copy's ``weighting`` (:mod:`generative.entitynlm.copying`, ours; None: the
    checkpoint's, else uniform), the copy as initialised: where a fine-tuning of a model trained without it starts.
    The checkpoint itself when it already has that memory; a memory it has cannot be changed (the error names
    ``source``, the checkpoint's file)."""
    config = EntityNLMConfig(**checkpoint.config)
    weighting = weighting or config.copy_weighting
    if (config.entity_words, config.copy_weighting) == (words, weighting):
        return checkpoint
    if config.entity_words:
        raise CheckpointError(f"{source}: its entities remember {config.entity_words} words each, weighted "
                              f"{config.copy_weighting}; a memory cannot be changed to {words} words weighted "
                              f"{weighting}")
    copy = EntityWordCopy(config.hidden_size, config.embedding_size, weighting)
    initial = {f"word_copy.{name}": value for name, value in copy.state_dict().items()}
    return dataclasses.replace(checkpoint,
                               config={**checkpoint.config, "entity_words": words, "copy_weighting": weighting},
                               weights={**checkpoint.weights, "model": {**checkpoint.weights["model"], **initial}})


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
