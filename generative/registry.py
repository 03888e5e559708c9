"""Every neural language model of entitylm behind one small interface, and the registry the commands use.

A language model here is a torch module built from a config dataclass and the training vocabulary's word counts
(:meth:`ModelKind.build`), with two methods over a :class:`~generative.layers.batch.DocumentBatch`:

- ``log_likelihood(batch) -> (B,)``: what training maximises, per document (EntityNLM: the joint of the words
  and their gold annotation, paper eq. 9; the others: log p(words));
- ``token_log_probs(batch) -> (B, T)``: its terms per target token, 0 at padding. For an ``exact`` model they are
  log p(x_t | x_<t), so perplexity and per-token-group tables need no sampling; EntityNLM's are the gold joint's
  terms, and its perplexity over words alone is estimated by ``python -m inference.marginal_ppl``.

``python -m inference.train --model NAME`` trains any of them and ``python -m inference.perplexity`` evaluates the
exact ones, with the same batching, checkpoints, seeds and ``--device``. The Kneser-Ney n-gram is no torch module;
it is fitted by counting (``inference.training.train --model ngram``) and evaluated through the same per-token interface
(:meth:`generative.baselines.ngram.KneserNeyLM.log_prob`). A new language model joins by adding one
:class:`ModelKind` here.

:data:`TRAINABLE` names every model that ``python -m inference.train`` and the other training commands train
(each through the one loop of :mod:`inference.training.loop`), with its family, config class, constructor and
the data it reads; a checkpoint's ``kind`` (:mod:`coref.io.checkpoint`) is one of these names, and
:func:`family_of` tells which family's loader reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from coref.resolution.mentions import MentionDetector, MentionDetectorConfig
from coref.resolution.pos import PosTagger, PosTaggerConfig
from coref.resolution.ranker import MentionRanker
from generative.baselines.ngram import KneserNeyConfig, KneserNeyLM
from generative.baselines.rnnlm import RNNLM, RNNLMConfig
from generative.coref_gru import BiReader, GatedAttentionReader, ReaderConfig
from generative.dntm import ContextEncoder, DNTMConfig, DynamicNeuralTextModel
from generative.entitynlm.model import EntityNLM, EntityNLMConfig
from generative.layers.batch import DocumentBatch
from generative.mneme import PRESETS, MnemeConfig, MnemeLM

# What a model reads: "entity" is EntityNLM's preprocessing of annotated text (coref.corpora.preprocess, the paper's);
# "anonymised" is Kobayashi et al.'s Anonymized Language Modelling data (coref.corpora.anonymise), each coreference
# chain's mentions replaced by one token <unkK>.
DATA_KINDS = ("entity", "anonymised")


class LanguageModel(Protocol):
    """What the shared commands need of a model."""

    config: Any

    def log_likelihood(self, batch: DocumentBatch) -> torch.Tensor: ...

    def token_log_probs(self, batch: DocumentBatch) -> torch.Tensor: ...


@dataclass(frozen=True)
class ModelKind:
    """A registered model: its config class, how to build it, the data it reads, and whether its per-token
    log-probabilities are exact conditionals."""

    name: str
    config_class: type
    make: Callable[[Any, Sequence[int]], nn.Module]
    data: str
    exact: bool

    def config(self, values: dict[str, Any]) -> Any:
        """The config from a checkpoint's dict (unknown keys are an error)."""
        return self.config_class(**values)

    def build(self, config: Any, counts: Sequence[int]) -> nn.Module:
        """A fresh model; ``counts`` are the vocabulary's word counts (the class-factored softmax uses them)."""
        return self.make(config, counts)


LANGUAGE_MODELS: dict[str, ModelKind] = {
    kind.name: kind
    for kind in (
        ModelKind("entitynlm", EntityNLMConfig, EntityNLM, data="entity", exact=False),
        ModelKind("rnnlm", RNNLMConfig, RNNLM, data="entity", exact=True),
        ModelKind("dntm", DNTMConfig, lambda config, counts: DynamicNeuralTextModel(config), data="anonymised",
                  exact=True),
    )
}


def model_kind(name: str) -> ModelKind:
    """The registered model called ``name``; a ValueError listing the known ones otherwise."""
    if name not in LANGUAGE_MODELS:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(LANGUAGE_MODELS)}")
    return LANGUAGE_MODELS[name]


# ---- every trainable family -------------------------------------------------------------------------------------

# The data a family reads, beyond DATA_KINDS: a reading task's questions (bAbI, LAMBADA, WikiHop), prompted
# stories, the sentences of a corpus's text, and annotated documents (with gold mentions, tags or clusters).
TRAINING_DATA = (*DATA_KINDS, "reading", "stories", "sentences", "annotated")


@dataclass(frozen=True)
class Trainable:
    """A model that is trained: its name (a checkpoint's kind, ``--model``'s value), its family (the training
    code of :mod:`inference.training` that trains it), its config class, its constructor and the data it reads."""

    name: str
    family: str
    config_class: type
    make: Callable[..., Any]
    data: str


TRAINABLE: dict[str, Trainable] = {
    trainable.name: trainable
    for trainable in (
        *(Trainable(kind.name, "language_model", kind.config_class, kind.make, kind.data)
          for kind in LANGUAGE_MODELS.values()),
        Trainable("ngram", "language_model", KneserNeyConfig, KneserNeyLM.fit, "entity"),
        Trainable("context_encoder", "context_encoder", dict, ContextEncoder, "sentences"),
        *(Trainable(name, "reader", ReaderConfig, reader, "reading")
          for name, reader in (("ga_gru", GatedAttentionReader), ("ga_cgru", GatedAttentionReader),
                               ("ga_gru_onehot", GatedAttentionReader), ("bi_gru", BiReader),
                               ("bi_cgru", BiReader))),
        *(Trainable(name, "story_lm", MnemeConfig, MnemeLM, "stories") for name in PRESETS),
        Trainable("mention_detector", "mention_detector", MentionDetectorConfig, MentionDetector, "annotated"),
        Trainable("pos_tagger", "pos_tagger", PosTaggerConfig, PosTagger, "annotated"),
        Trainable("mention_ranker", "mention_ranker", dict, MentionRanker, "annotated"),
    )
}


def family_of(kind: str) -> str:
    """The family of a trainable model (a checkpoint's kind); a ValueError listing the known ones otherwise."""
    if kind not in TRAINABLE:
        raise ValueError(f"unknown model {kind!r}; known: {', '.join(TRAINABLE)}")
    return TRAINABLE[kind].family


def models_of(family: str) -> tuple[str, ...]:
    """The names of a family's models, in the registry's order."""
    return tuple(name for name, trainable in TRAINABLE.items() if trainable.family == family)
