"""The coreference pipeline's trained models as families of the one loop (:mod:`inference.training.loop`): the
mention detector, the part-of-speech tagger, the mention ranker and the GAP resolver. Their models stay in
:mod:`coref.resolution` (which reads them without training code); their training is here.

Each draws its batches (or documents) from one numpy generator seeded with the seed for the whole run (the
loop's ``"numpy-stream"`` order), as they did before the loops were one; none writes checkpoints while training:
the functions return the model, and the commands (:mod:`inference.commands.mentions`, ``pos``, ``resolver``)
write it. Their per-epoch records go to a ``log`` of one line each, as their commands have always printed them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from coref.document import Document
from coref.io.checkpoint import Checkpoint
from coref.metrics.gap import score_gap
from coref.resolution import gap_resolver, mentions, pos, ranker
from coref.resolution.mentions import MentionDetector, MentionDetectorConfig, choose_max_width, width_coverage
from coref.resolution.pos import PosTagger, PosTaggerConfig, tag_scores
from coref.resolution.ranker import HASH_BITS, MentionRanker, Syntax
from inference.training.loop import Run, Trainer

Log = Callable[[str], None]


class DetectorFamily:
    """The mention detector: binary cross-entropy of every candidate span (clipped), Adam; dev mention F1 at the
    best threshold selects."""

    order = "numpy-stream"
    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, model: MentionDetector, train: Sequence[Document], dev: Sequence[Document],
                 batch_tokens: int, learning_rate: float) -> None:
        self.name, self.dev, self.batch_tokens = "detector", dev, batch_tokens
        self.modules = {"model": model}
        self.data = model._sentences(train, with_gold=True)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
        self.threshold = 0.5

    def epoch_batches(self, source: np.random.Generator) -> list[np.ndarray]:
        return mentions.length_batches(self.data.lengths, self.batch_tokens, source)

    def step(self, batch: np.ndarray) -> tuple[dict[str, float], float]:
        model, data = self.modules["model"], self.data
        logits, mask = model._batch_logits(data, batch)
        labels = torch.zeros_like(logits)
        rows = [np.full(len(data.gold[index]), row) for row, index in enumerate(batch)]
        gold = np.concatenate([data.gold[index] for index in batch])
        labels[torch.from_numpy(np.concatenate(rows)), torch.from_numpy(gold[:, 0]), torch.from_numpy(gold[:, 1])] = 1.0
        loss = nn.functional.binary_cross_entropy_with_logits(logits[mask], labels[mask])
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        self.optimizer.step()
        return {"loss": loss.item() * int(mask.sum()), "spans": int(mask.sum())}, loss.item()

    def evaluate(self) -> dict[str, float]:
        self.threshold, f1 = mentions.tune_threshold(self.modules["model"], self.dev) if self.dev else (0.5, 0.0)
        return {"model": f1}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "loss": totals.get("loss", 0.0) / max(totals.get("spans", 0), 1),
                "dev_f1": scores["model"], "threshold": self.threshold}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return replace(self.modules["model"].checkpoint(), weights=weights, training=training)


def train_detector(
    train: Sequence[Document],
    dev: Sequence[Document],
    config: MentionDetectorConfig = MentionDetectorConfig(),
    epochs: int = 10,
    seed: int = 0,
    progress: bool = True,
    batch_tokens: int = 2000,
    learning_rate: float = 1e-3,
    log: Log | None = None,
) -> MentionDetector:
    """Train a detector on ``train``, keep the epoch with the best dev mention F1, and tune its threshold on dev.

    ``config.max_width`` 0 is chosen from ``train`` (``config.coverage``). The weights returned are rounded to
    float16 (what :meth:`MentionDetector.save` keeps) before the threshold is tuned, so a saved and reloaded model
    predicts exactly what this one does. ``model.info`` records the history (loss, dev F1, threshold by epoch),
    the width's coverage and the training seconds. ``log`` receives one line per epoch.
    """
    started = time.perf_counter()
    trainer = Trainer(Run(None, epochs, seed, {}, higher_is_better=True, device="cpu", progress=progress,
                          report=lambda record: log and log(
                              f"epoch {record['epoch']}: train loss {record['loss']:.4f}, dev mention F1 "
                              f"{100 * record['dev_f1']:.2f} (threshold {record['threshold']:.3f})")))
    if config.max_width < 1:
        config = replace(config, max_width=choose_max_width(train, config.coverage))
    model = MentionDetector(config, mentions.build_vocabulary(train, config))
    state = trainer.fit(DetectorFamily(model, train, dev, batch_tokens, learning_rate))
    model.load_state_dict(_half_rounded(trainer.best["model"]))
    threshold, f1 = mentions.tune_threshold(model, dev) if dev else (0.5, 0.0)
    model.config = replace(model.config, threshold=threshold)
    history = [{key: record[key] for key in ("epoch", "loss", "dev_f1", "threshold")} for record in state["history"]]
    model.info = {
        "epochs": epochs,
        "best_epoch": max(history, key=lambda entry: entry["dev_f1"])["epoch"] if history else 0,
        "dev_f1": f1,
        "seed": seed,
        "max_width_coverage": width_coverage(train, config.max_width),
        "training_documents": len(train),
        "training_seconds": time.perf_counter() - started,
        "history": history,
    }
    return model.eval()


class TaggerFamily:
    """The part-of-speech tagger: token cross-entropy (clipped), Adam; dev accuracy selects (without dev, the
    last epoch is kept)."""

    order = "numpy-stream"
    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, model: PosTagger, train: Sequence[Document], train_tags: Sequence[Sequence[str]],
                 dev: Sequence[Document], dev_tags: Sequence[Sequence[str]], batch_tokens: int,
                 learning_rate: float) -> None:
        self.name, self.dev, self.dev_tags, self.batch_tokens = "tagger", dev, dev_tags, batch_tokens
        self.modules = {"model": model}
        self.tokens = model._tokens(train)
        tag_id = {tag: index for index, tag in enumerate(model.tags)}
        self.gold = torch.tensor([tag_id[tag] for tags in train_tags for tag in tags], dtype=torch.int64)
        self.optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    def epoch_batches(self, source: np.random.Generator) -> list[np.ndarray]:
        return mentions.length_batches(self.tokens.lengths, self.batch_tokens, source)

    def step(self, batch: np.ndarray) -> tuple[dict[str, float], float]:
        model = self.modules["model"]
        logits, index, mask = model._batch_logits(self.tokens, batch)
        targets = self.gold[torch.from_numpy(index[mask])]
        loss = nn.functional.cross_entropy(logits[torch.from_numpy(mask)], targets, reduction="sum")
        self.optimizer.zero_grad()
        (loss / len(targets)).backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        self.optimizer.step()
        return {"loss": loss.item()}, loss.item() / len(targets)

    def evaluate(self) -> dict[str, float]:
        if not self.dev:
            return {}
        return {"model": tag_scores(self.dev_tags, self.modules["model"].tag(self.dev))["accuracy"]}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "loss": totals.get("loss", 0.0) / len(self.gold),
                "dev_accuracy": scores.get("model", 0.0)}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return replace(self.modules["model"].checkpoint(), weights=weights, training=training)


def train_tagger(
    train: Sequence[Document],
    train_tags: Sequence[Sequence[str]],
    dev: Sequence[Document] = (),
    dev_tags: Sequence[Sequence[str]] = (),
    config: PosTaggerConfig = PosTaggerConfig(),
    epochs: int = 20,
    seed: int = 0,
    progress: bool = True,
    batch_tokens: int = 1000,
    learning_rate: float = 2e-3,
    log: Log | None = None,
) -> PosTagger:
    """Train a tagger on ``train`` (``train_tags[k]``: one tag per token of ``train[k]``) and keep the epoch with
    the best accuracy on ``dev`` (the last epoch without dev).

    The weights returned are rounded to float16 (what :meth:`PosTagger.save` keeps), so a saved and reloaded
    model tags exactly as this one does. ``model.info`` records the history (loss and dev accuracy by epoch), the
    best epoch, its dev accuracy, the seed and the training seconds. ``log`` receives one line per epoch.
    """
    pos.check_tags(train, train_tags)
    pos.check_tags(dev, dev_tags)
    started = time.perf_counter()
    trainer = Trainer(Run(None, epochs, seed, {}, higher_is_better=True, device="cpu", progress=progress,
                          report=lambda record: log and log(
                              f"epoch {record['epoch']}: train loss {record['loss']:.4f}, dev accuracy "
                              f"{100 * record['dev_accuracy']:.2f}")))
    vocabulary = mentions.build_vocabulary(train, MentionDetectorConfig(vocabulary_size=config.vocabulary_size,
                                                                        min_count=config.min_count))
    model = PosTagger(config, vocabulary, sorted({tag for tags in train_tags for tag in tags}))
    family = TaggerFamily(model, train, train_tags, dev, dev_tags, batch_tokens, learning_rate)
    state = trainer.fit(family)
    model.load_state_dict(_half_rounded(trainer.best["model"]))
    history = state["history"]
    model.info = {
        "epochs": epochs,
        "best_epoch": max(history, key=lambda entry: entry["dev_accuracy"])["epoch"] if dev else epochs,
        "dev_accuracy": tag_scores(dev_tags, model.tag(dev))["accuracy"] if dev else None,
        "seed": seed,
        "training_documents": len(train),
        "training_tokens": len(family.gold),
        "training_seconds": time.perf_counter() - started,
        "history": history,
    }
    return model.eval()


class RankerFamily:
    """The mention ranker: cort's latent structured perceptron, one online update per anaphor (reference-notes
    §2.1), a document at a time; its "step" is the perceptron's update, its model the averaged weights. Nothing
    selects: every epoch runs, and ``on_epoch`` sees each epoch's averaged model."""

    order = "numpy-stream"
    optimizer = None
    schedule = None
    initial: dict[str, float] = {}
    modules: dict[str, nn.Module] = {}

    def __init__(self, documents: Sequence[Document], syntax: Sequence[Syntax | None], settings: dict[str, Any],
                 on_epoch: Callable[[int, MentionRanker], None] | None) -> None:
        self.name, self.documents, self.syntax, self.settings = "resolver", documents, syntax, settings
        self.learner = ranker._AveragedPerceptron(1 << HASH_BITS, settings["cost_scaling"])
        self.on_epoch, self.epoch = on_epoch, 0

    def epoch_batches(self, source: np.random.Generator) -> np.ndarray:
        return source.permutation(len(self.documents))

    def step(self, index: int) -> tuple[dict[str, float], float]:
        document = self.documents[index]
        entities = np.array([mention.entity for mention in document.mentions])
        features = ranker._read_features(document, self.syntax[index], self.settings["lowercase"])
        self.learner.learn_document(features, entities)
        return {}, 0.0

    def model(self, epochs: int) -> MentionRanker:
        """The averaged model after ``epochs`` epochs."""
        return MentionRanker(self.learner.averaged(), {**self.settings, "epochs": epochs})

    def evaluate(self) -> dict[str, float]:
        self.epoch += 1
        if self.on_epoch is not None:
            self.on_epoch(self.epoch, self.model(self.epoch))
        return {}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "seconds": seconds}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return replace(self.model(self.epoch).checkpoint(), training={**self.settings, **training})


def train_ranker(
    documents: Sequence[Document],
    syntax: Sequence[Syntax | None] | None = None,
    *,
    epochs: int = 5,
    seed: int = 23,
    cost_scaling: float = 100.0,
    lowercase: bool = False,
    progress: bool = True,
    on_epoch: Callable[[int, MentionRanker], None] | None = None,
) -> MentionRanker:
    """Train a ranker on documents with gold clusters (reference-notes §2.1); ``on_epoch(epoch, averaged model)``.
    With ``lowercase`` the model reads every document lowercased, now and whenever it is used.

    Updates are online, one per anaphor (not batched per document), as in cort. Documents are shuffled each
    epoch by a generator seeded with ``seed``; features are recomputed per document and epoch rather than
    cached, which keeps memory small (LitBank's cache would take ~0.8 GB) at the price of a few seconds.
    """
    syntax = ranker.per_document(documents, syntax)
    settings = {"epochs": epochs, "seed": seed, "cost_scaling": cost_scaling, "lowercase": lowercase}
    trainer = Trainer(Run(None, epochs, seed, {}, device="cpu", progress=progress, report=lambda record: None))
    family = RankerFamily(documents, syntax, settings, on_epoch)
    trainer.fit(family)
    return MentionRanker(family.learner.averaged(), settings)


def _half_rounded(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float weights rounded to float16 and back (what the coreference models' files keep)."""
    return {name: tensor.half().float() if tensor.is_floating_point() else tensor for name, tensor in weights.items()}


class GapFamily:
    """The GAP resolver's ensemble: one full batch of GAP's development set per epoch (the members' summed
    cross-entropy over the three answers, Adam with weight decay); the validation set's overall F1 is recorded
    after every epoch, and the last epoch is kept (the number of epochs is the choice made on validation)."""

    order = "numpy-stream"
    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, model: gap_resolver.GapResolver, train: Sequence[gap_resolver.GapReading],
                 validation: Sequence[gap_resolver.GapReading], learning_rate: float, weight_decay: float) -> None:
        self.name, self.model = "gap", model
        self.modules: dict[str, nn.Module] = {}  # nothing selects: the last epoch is kept
        self.features = gap_resolver.feature_tensors(train)
        self.validation = [reading.example for reading in validation]  # and its features, read once
        self.validation_features = gap_resolver.feature_tensors(validation) if validation else None
        self.answers = gap_resolver.gold_answers([reading.example for reading in train])
        self.optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate, weight_decay=weight_decay)

    def epoch_batches(self, source: np.random.Generator) -> list[None]:
        return [None]

    def step(self, batch: None) -> tuple[dict[str, float], float]:
        self.model.train()
        logits = self.model(*self.features)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), self.answers.repeat(len(self.model.members)))
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}, loss.item()

    def evaluate(self) -> dict[str, float]:
        if not self.validation:
            return {}
        scores = score_gap(self.validation, self.model.decisions(self.validation_features))
        return {"validation_f1": scores["overall"]["f1"]}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "loss": totals["loss"], **scores}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return self.model.checkpoint()


def train_gap_resolver(
    train: Sequence[gap_resolver.GapReading],
    validation: Sequence[gap_resolver.GapReading] = (),
    config: gap_resolver.GapResolverConfig = gap_resolver.GapResolverConfig(),
    epochs: int = 200,
    seed: int = 0,
    learning_rate: float = 1e-2,
    weight_decay: float = 1e-3,
    log: Log | None = None,
) -> gap_resolver.GapResolver:
    """Train a GAP resolver on ``train`` (GAP's development set, read by
    :func:`coref.resolution.gap_resolver.read_examples`), reporting ``validation``'s overall F1 every 20 epochs
    to ``log``; ``model.info`` keeps the options, the final figures and the training seconds."""
    started = time.perf_counter()

    def report(record: dict[str, Any]) -> None:
        if log and (record["epoch"] % 20 == 0 or record["epoch"] == epochs):
            log(f"epoch {record['epoch']}: train loss {record['loss']:.4f}"
                + (f", validation F1 {record['validation_f1']:.1f}" if "validation_f1" in record else ""))

    trainer = Trainer(Run(None, epochs, seed, {}, device="cpu", progress=False, report=report))
    model = gap_resolver.GapResolver(config)
    family = GapFamily(model, train, validation, learning_rate, weight_decay)
    state = trainer.fit(family)
    model.info = {"epochs": epochs, "seed": seed, "learning_rate": learning_rate, "weight_decay": weight_decay,
                  "training_examples": len(train), "training_seconds": time.perf_counter() - started,
                  "validation_f1": state["history"][-1].get("validation_f1") if state["history"] else None}
    return model.eval()
