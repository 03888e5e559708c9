"""Pretraining the Dynamic Neural Text Model's context encoder on sentence completion (Kobayashi et al. 2017,
§5.1): the text (sentences of the corpus and of ``--extra-text``), the encoder's checkpoint and
:func:`load_context_encoder`, which puts one into a DNTM, and :func:`pretrain_context_encoder`, which trains one
from a :class:`ContextEncoderTraining` through the one loop (:mod:`inference.training.loop`). The command, whose
help says how the paper's method is followed, is :mod:`inference.commands.pretrain_context`.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from coref.corpora.anonymise import (
    ANONYMISED_PREPROCESS,
    MAX_CHAINS,
    anonymised_corpus,
    anonymised_vocabulary,
    first_entity_id,
)
from coref.corpora.preprocess import EOS, SPECIALS, Vocabulary, preprocess_documents
from coref.document import Document
from coref.io import checkpoint as stored
from coref.io.checkpoint import CheckpointError
from generative.dntm import ContextEncoder, DynamicNeuralTextModel, sample_negatives
from inference.checks import integer, output_file, real
from inference.data import LAMBADA_TEXTS, extra_text_names, text_documents
from inference.training.loop import Run, Trainer
from inference.training.options import check_run

KIND = "context_encoder"  # its kind of checkpoint (coref.io.checkpoint)
NEGATIVE_POWER = 0.75


# ---- text -------------------------------------------------------------------------------------------------------


def encode_sentences(documents: Sequence[Document], vocabulary: Vocabulary,
                     max_tokens: int) -> tuple[list[list[int]], dict[str, int]]:
    """Every sentence of at most ``max_tokens`` words as the context encoder reads it, its word ids then ``</s>``,
    and counts of what was kept and dropped."""
    end = vocabulary.index(EOS)
    rows, dropped, unknown = [], 0, 0
    for document in documents:
        for start, stop in document.sentences:
            words = document.tokens[start:stop]
            if len(words) > max_tokens:
                dropped += 1
                continue
            ids = vocabulary.encode(words)
            unknown += sum(word not in vocabulary for word in words)
            rows.append([*ids, end])
    words = sum(len(row) - 1 for row in rows)
    return rows, {"documents": len(documents), "sentences": len(rows), "sentences_dropped": dropped,
                  "words": words, "unknown_words": unknown}


def pad(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences as (N, L) ids padded with 0, and their (N,) lengths."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    tokens = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens, lengths


def batch_indices(count: int, size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless batches of ``size`` sentence indices (all of them when fewer), a new shuffle after every pass."""
    size, order, position = min(size, count), torch.randperm(count, generator=generator), 0
    while True:
        if position + size > count:
            order, position = torch.randperm(count, generator=generator), 0
        yield order[position : position + size]
        position += size


@torch.no_grad()
def held_out_loss(encoder: ContextEncoder, tokens: torch.Tensor, lengths: torch.Tensor, negatives: torch.Tensor,
                  chunk: int = 512) -> float:
    """The completion loss per target token of the held-out sentences (fixed ``negatives``)."""
    encoder.eval()
    total = 0.0
    for start in range(0, len(lengths), chunk):
        part = lengths[start : start + chunk]
        width = int(part.max())
        loss = encoder.completion_loss(tokens[start : start + chunk, :width], part.to(tokens.device),
                                       negatives[start : start + chunk, :width])
        total += float(loss) * int(part.sum())
    encoder.train()
    return total / int(lengths.sum())


# ---- the checkpoint ----------------------------------------------------------------------------------------------


def read_context_encoder(path: str | Path) -> dict[str, Any]:
    """A context encoder's checkpoint (of any format version) as a dict: ``size``, ``vocabulary`` (a
    :class:`Vocabulary`), ``state_dict``, ``options`` and the training record (``text``, ``history``, ``best``,
    ``steps``); a one-line :class:`CheckpointError` naming the file for anything else."""
    checkpoint = stored.load(path, "entitylm context encoder", {KIND})
    try:
        payload = {**checkpoint.training, "options": checkpoint.training["args"],
                   "size": int(checkpoint.config["size"]), "vocabulary": Vocabulary.from_dict(checkpoint.vocabulary),
                   "state_dict": checkpoint.weights["model"]}
        encoder = ContextEncoder(len(payload["vocabulary"]), payload["size"])
        encoder.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path}: not a usable context encoder ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''})") from error
    return payload


def load_context_encoder(model: DynamicNeuralTextModel, path: str | Path, vocabulary: Vocabulary) -> str:
    """Put a pretrained context encoder into ``model`` as the paper does (§5.1, footnote 7), and say what was done.

    Its weights replace the model's context encoder, whose ``<unkK>`` rows get ``<unk>``'s embedding, and the
    encoder is frozen; the LM's input embeddings (when ``embedding_size`` equals the encoder's size) and output
    embeddings (when ``hidden_size`` does) start from the pretrained embeddings, entity tokens from ``<unk>``'s.
    The baseline (placement "none") has no encoder: only its embeddings are initialised. A checkpoint of another
    vocabulary (word by word) or size than ``model`` is a one-line :class:`CheckpointError`.
    """
    payload = read_context_encoder(path)
    saved, size, config = payload["vocabulary"], payload["size"], model.config
    if saved.words != vocabulary.words:
        where = next((i for i, (a, b) in enumerate(zip(saved.words, vocabulary.words)) if a != b),
                     min(len(saved), len(vocabulary)))
        raise CheckpointError(
            f"{path}: pretrained on another vocabulary ({len(saved)} words) than this run's ({len(vocabulary)}; "
            f"they first differ at id {where}): pretrain with the same --corpus and --vocab-size")
    if size != config.context_size:
        raise CheckpointError(f"{path}: a context encoder of size {size}, but --context-size is {config.context_size}")
    unk, first = vocabulary.unk_id, first_entity_id(vocabulary)
    device = model.output.weight.device
    embeddings = payload["state_dict"]["embedding.weight"].float().to(device)
    done = []
    if model.context_encoder is not None:
        state = dict(payload["state_dict"])
        state["embedding.weight"] = embeddings.clone()
        state["embedding.weight"][first : first + config.max_entities] = embeddings[unk]
        model.context_encoder.load_state_dict(state)
        model.freeze_context_encoder()
        done.append("context encoder loaded and frozen")
    layers = [layer for layer, units in (("input", config.embedding_size), ("output", config.hidden_size))
              if units == size]
    model.initialise_word_embeddings(embeddings, unk, layers)
    done.append(f"{' and '.join(layers)} embeddings initialised" if layers else
                f"LM embeddings not initialised (--embedding-size and --hidden-size differ from its size {size})")
    best = payload.get("best") or {}
    trained = f"step {best['step']}, held-out loss {best['held_out_loss']:.4f}" if "step" in best else "untrained"
    return f"{path} ({trained}): {'; '.join(done)}"


# ---- a run -------------------------------------------------------------------------------------------------------


@dataclass
class ContextEncoderTraining:
    """The options of a pretraining run: those of ``python -m inference.pretrain_context`` (its ``--help`` says
    what each means), checked on creation as the command line checks them."""

    corpus: str
    out: str | Path
    data_dir: str | None = None
    extra_text: str | None = None
    vocab_size: int = 10_000
    context_size: int = 128
    steps: int = 50_000
    batch_sentences: int = 128
    negatives: int = 5
    max_sentence_tokens: int = 32
    lr: float = 1e-3
    held_out: float = 0.02
    eval_every: int = 500
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        check_run(self, CHECKS)


CHECKS = {"out": output_file, "vocab_size": integer(len(SPECIALS) + MAX_CHAINS + 1), "context_size": integer(1),
          "steps": integer(1), "batch_sentences": integer(1), "negatives": integer(1),
          "max_sentence_tokens": integer(1), "lr": real(0, include_low=False),
          "held_out": real(0, 0.5, include_low=False), "eval_every": integer(1)}


class ContextEncoderFamily:
    """The context encoder as a family of :mod:`inference.training.loop`, trained in steps: an "epoch" of the loop
    is the ``--eval-every`` steps between two scores of the held-out sentences (the last one shorter). Batches
    of sentences come endlessly from the run's torch stream (:func:`batch_indices`), a new shuffle after every
    pass; the negatives from a generator of their own (``seed + 2``); Adam; the held-out completion loss with
    fixed negatives selects (the untrained encoder's loss is the one to beat)."""

    order = "torch-stream"
    schedule = None

    def __init__(self, options: ContextEncoderTraining, encoder: ContextEncoder, vocabulary: Vocabulary,
                 rows: list[list[int]], text: dict[str, Any], trainer: Trainer) -> None:
        self.name, self.options, self.vocabulary, self.text = "context encoder", options, vocabulary, text
        self.device = trainer.device
        self.modules = {"model": encoder}
        self.optimizer = torch.optim.Adam(encoder.parameters(), lr=options.lr)
        shuffle = trainer.stream(self.order)
        order = torch.randperm(len(rows), generator=shuffle).tolist()
        self.held = min(max(1, round(options.held_out * len(rows))), len(rows) - 1)
        held_tokens, self.held_lengths = pad([rows[i] for i in order[:self.held]])
        train_tokens, self.train_lengths = pad([rows[i] for i in order[self.held:]])
        self.counts = torch.bincount(train_tokens[torch.arange(train_tokens.shape[1]) < self.train_lengths[:, None]],
                                     minlength=len(vocabulary))
        held_negatives = sample_negatives(self.counts, (*held_tokens.shape, options.negatives), NEGATIVE_POWER,
                                          torch.Generator().manual_seed(options.seed + 1))
        self.held_tokens, self.held_negatives = held_tokens.to(self.device), held_negatives.to(self.device)
        self.train_tokens = train_tokens.to(self.device)
        self.initial = {"model": self.held_out_loss()}
        self.history: list[dict[str, Any]] = [{"step": 0, "held_out_loss": self.initial["model"]}]
        self.batches = batch_indices(len(self.train_lengths), options.batch_sentences, shuffle)
        self.draws = torch.Generator().manual_seed(options.seed + 2)
        self.steps = self.sentences = 0
        self.seconds = 0.0

    def held_out_loss(self) -> float:
        return held_out_loss(self.modules["model"], self.held_tokens, self.held_lengths, self.held_negatives)

    def epoch_batches(self, source: torch.Generator) -> Iterator[torch.Tensor]:
        """The next ``--eval-every`` batches (fewer before the last step): :attr:`batches` draws from ``source``."""
        for _ in range(min(self.options.eval_every, self.options.steps - self.steps)):
            yield next(self.batches)

    def step(self, index: torch.Tensor) -> tuple[dict[str, Any], None]:
        lengths = self.train_lengths[index]
        tokens = self.train_tokens[index.to(self.device), : int(lengths.max())]
        negatives = sample_negatives(self.counts, (*tokens.shape, self.options.negatives), NEGATIVE_POWER,
                                     self.draws).to(self.device)
        loss = self.modules["model"].completion_loss(tokens, lengths.to(self.device), negatives)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        self.sentences += len(index)
        return {"loss": loss.detach(), "steps": 1}, None

    def evaluate(self) -> dict[str, float]:
        score = self.held_out_loss()
        if not math.isfinite(score):
            raise FloatingPointError(f"the held-out loss is {score} at step {self.steps}: lower --lr")
        return {"model": score}

    def record(self, epoch: int, seconds: float, totals: dict[str, Any], scores: dict[str, float]
               ) -> dict[str, Any]:
        self.seconds += seconds
        record = {"step": self.steps, "train_loss": float(totals["loss"]) / totals["steps"],
                  "held_out_loss": scores["model"], "sentences_per_second": self.sentences / self.seconds}
        self.history.append(record)
        return record

    def best(self) -> dict[str, Any]:
        """The step and held-out loss of the weights kept (the first of the lowest)."""
        best = min(self.history, key=lambda record: record["held_out_loss"])
        return {"step": best["step"], "held_out_loss": best["held_out_loss"]}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> stored.Checkpoint:
        record = {"args": training["args"], "text": self.text, "history": self.history, "best": self.best(),
                  "steps": self.steps}
        return stored.Checkpoint(KIND, {"size": self.options.context_size}, self.vocabulary.to_dict(), weights, record)


def pretrain_context_encoder(options: ContextEncoderTraining) -> dict[str, Any]:
    """Pretrain a context encoder as ``options`` say, writing its best weights to ``options.out`` at every
    evaluation; the summary (text, sentences, initial, best and final held-out loss, speed)."""
    periods = math.ceil(options.steps / options.eval_every)
    trainer = Trainer(Run(Path(options.out), periods, options.seed, asdict(options), device=options.device,
                          single_file=True))
    extra = extra_text_names(options.extra_text, options.corpus)
    train = anonymised_corpus(options.corpus, "train", options.data_dir)
    vocabulary = anonymised_vocabulary(train.documents, options.vocab_size)
    sources = {f"{options.corpus}/train": preprocess_documents(train.corpus.documents, ANONYMISED_PREPROCESS)[0]}
    for name in extra:
        sources[name if name in LAMBADA_TEXTS else f"{name}/train"] = text_documents(name, options.data_dir)
    rows: list[list[int]] = []
    text = {}
    for source, documents in sources.items():
        encoded, text[source] = encode_sentences(documents, vocabulary, options.max_sentence_tokens)
        rows += encoded
    if len(rows) < 2:
        raise ValueError(f"--corpus {options.corpus}: {len(rows)} sentence(s) of at most {options.max_sentence_tokens} "
                         "tokens: too little text to train and hold out")
    for source, stats in text.items():
        print(f"{source}: {stats['sentences']:,} sentences ({stats['sentences_dropped']:,} of more than "
              f"{options.max_sentence_tokens} tokens dropped), {stats['words']:,} words, "
              f"{stats['unknown_words'] / max(stats['words'], 1):.1%} <unk>", file=sys.stderr)
    encoder = ContextEncoder(len(vocabulary), options.context_size).to(trainer.device)
    family = ContextEncoderFamily(options, encoder, vocabulary, rows, text, trainer)
    trainer.fit(family)
    return {"out": options.out, "vocabulary": len(vocabulary), "size": options.context_size, "text": text,
            "sentences": {"train": len(family.train_lengths), "held_out": family.held}, "steps": options.steps,
            "initial_held_out_loss": family.initial["model"], "best": family.best(), "final": family.history[-1],
            "sentences_per_second": family.sentences / family.seconds}
