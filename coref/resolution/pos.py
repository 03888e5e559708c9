"""A part-of-speech tagger: the Universal POS tag (UPOS) of every token of a tokenised document.

:mod:`coref.metrics.stories` needs it for attribute consistency (Papalampidi et al. 2022, §2: an entity's
attributes are the verbs and adjectives of the sentences that mention it). No well-kept library's English tagger
installs from the package registries reachable here (spaCy's ``en_core_web_sm`` and NLTK's tagger data are
downloaded from GitHub, Stanza's models from Hugging Face; none of them is on PyPI), so this is a small tagger
of our own, trained on the UPOS column of OntoGUM's CoNLL-U files (GUM's train split; the epoch is chosen on dev)
and bundled as ``coref/resolution/pretrained/pos.pt`` (``train`` with the defaults: 20 epochs, about 3 minutes on one CPU
core). Token accuracy (``benchmarks/results/pos.json``): 96.45% on dev, 96.25% on test (VERB F1 95.0, ADJ F1
89.7), 89.49% on test2 (GENTLE's out-of-domain genres); 86.4% on the 11% of test words outside its vocabulary.

Model: a BiLSTM over each sentence with a softmax over the tags at every token. A token is read as the features
of :mod:`coref.resolution.mentions` (same helpers): its lowercased word's embedding (training words seen at least
``min_count`` times, the rest ``<unk>``), its shape (capitalised, all caps, digits, punctuation, other), and its
hashed suffixes of 1, 2 and 3 letters, which carry most of what a tagger knows about an unseen word (``-ly``,
``-ed``, ``-ous``). During training a word is read as ``<unk>`` with probability ``word_dropout``, so that the
unknown word's embedding is learnt on frequent contexts too. Cross-entropy, Adam, shuffled batches of sentences
of similar length; the weights of the epoch with the best dev accuracy are kept.

A model is one checkpoint (:mod:`coref.io.checkpoint`, kind ``pos_tagger``: the config, the vocabulary, the tag
set, float16 weights and what training reported), under 2 MB. Tagging is batched over all the sentences of all the
documents given, on the CPU, without gradients.

Command line::

    python -m coref.pos train [--data-dir DIR] --out coref/resolution/pretrained/pos.pt [--epochs N] [--seed S]
    python -m coref.pos evaluate [--model M] [--split dev test test2] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tqdm import tqdm

from coref.io.atomic import write_text_atomic
from coref.io.checkpoint import Checkpoint, CheckpointError, load
from coref.cli import Parser, integer, output_file, real, run_subcommand
from coref.cli import progress as progress_bar
from coref.corpora.registry import DataDir, canonical_split, load_corpus, resolve_data_dir
from coref.document import Document
from coref.resolution.mentions import (
    SHAPES,
    UNK,
    MentionDetectorConfig,
    _batches,
    build_vocabulary,
    suffix_bucket,
    word_shape,
)
from coref.resolution.ranker import read_conllu_syntax

KIND = "pos_tagger"  # its kind of checkpoint (coref.io.checkpoint)
BUNDLED = Path(__file__).parent / "pretrained" / "pos.pt"
SUFFIX_LENGTHS = (1, 2, 3)
CORPUS = "ontogum"  # the one corpus here with gold part-of-speech tags (its CoNLL-U files)


class PosModelError(CheckpointError):
    """A file that is not a saved :class:`PosTagger` (or one this code cannot read); the message names it."""


@dataclass(frozen=True)
class PosTaggerConfig:
    """Sizes and settings of a tagger."""

    vocabulary_size: int = 10_000  # at most this many word types, <pad> and <unk> included
    min_count: int = 2  # a training word seen fewer times is <unk>
    embedding_size: int = 64
    shape_size: int = 8
    suffix_buckets: int = 1000  # per suffix length
    suffix_size: int = 16  # per suffix length
    hidden_size: int = 128  # per LSTM direction
    layers: int = 1
    dropout: float = 0.3
    word_dropout: float = 0.1  # chance that a training word is read as <unk>


# ---- inputs -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Tokens:
    """The tokens of some documents, concatenated, as model inputs.

    ``features[t]`` is token t's word id, shape id and one suffix id per length in :data:`SUFFIX_LENGTHS`;
    sentence n is tokens ``starts[n] .. starts[n] + lengths[n] - 1``; ``sizes`` is each document's token count.
    """

    features: np.ndarray  # (T, 2 + len(SUFFIX_LENGTHS)) int64
    starts: np.ndarray
    lengths: np.ndarray
    sizes: np.ndarray


def _grid(tokens: _Tokens, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token positions ``(N, L)`` of the sentences ``batch`` padded to the longest, and the mask of real ones."""
    lengths = tokens.lengths[batch]
    offsets = np.arange(int(lengths.max()))
    mask = offsets[None, :] < lengths[:, None]
    return np.where(mask, tokens.starts[batch][:, None] + offsets[None, :], 0), mask


# ---- the model ----------------------------------------------------------------------------------------------


class PosTagger(nn.Module):
    """Tags every token of a document with a UPOS tag; see the module docstring."""

    def __init__(self, config: PosTaggerConfig, vocabulary: Sequence[str], tags: Sequence[str]) -> None:
        super().__init__()
        self.config = config
        self.vocabulary = list(vocabulary)
        self.word_index = {word: index for index, word in enumerate(self.vocabulary)}
        self.tags = list(tags)
        self.info: dict[str, Any] = {}  # what training reported, saved with the model
        c = config
        self.words = nn.Embedding(len(self.vocabulary), c.embedding_size, padding_idx=0)
        self.shapes = nn.Embedding(SHAPES, c.shape_size, padding_idx=0)
        self.suffixes = nn.Embedding(len(SUFFIX_LENGTHS) * (c.suffix_buckets + 1), c.suffix_size)
        inputs = c.embedding_size + c.shape_size + len(SUFFIX_LENGTHS) * c.suffix_size
        self.lstm = nn.LSTM(inputs, c.hidden_size, num_layers=c.layers, batch_first=True, bidirectional=True,
                            dropout=c.dropout if c.layers > 1 else 0.0)
        self.dropout = nn.Dropout(c.dropout)
        self.output = nn.Linear(2 * c.hidden_size, len(self.tags))

    def _tokens(self, documents: Sequence[Document]) -> _Tokens:
        """The input features of every token of ``documents`` and where their sentences lie."""
        unknown, buckets = self.word_index[UNK], self.config.suffix_buckets
        rows, starts, lengths, offset = [], [], [], 0
        for document in documents:
            rows.extend(
                [self.word_index.get(token.lower(), unknown), word_shape(token),
                 *(k * (buckets + 1) + suffix_bucket(token[-n:], buckets) for k, n in enumerate(SUFFIX_LENGTHS))]
                for token in document.tokens
            )
            starts.extend(offset + start for start, _ in document.sentences)
            lengths.extend(end - start for start, end in document.sentences)
            offset += len(document.tokens)
        width = 2 + len(SUFFIX_LENGTHS)
        return _Tokens(np.array(rows, dtype=np.int64).reshape(-1, width), np.array(starts, dtype=np.int64),
                       np.array(lengths, dtype=np.int64),
                       np.array([len(document.tokens) for document in documents], dtype=np.int64))

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Tag logits ``(N, L, tags)`` of padded sentences: ``features`` ``(N, L, 2 + suffixes)``, true ``lengths``
        ``(N,)``. Positions past a sentence's length hold meaningless values."""
        N, L, _ = features.shape
        words = features[..., 0]
        if self.training and self.config.word_dropout > 0:
            dropped = torch.rand(words.shape) < self.config.word_dropout
            words = words.masked_fill(dropped & (words > 0), self.word_index[UNK])
        x = torch.cat([self.words(words), self.shapes(features[..., 1]),
                       self.suffixes(features[..., 2:]).reshape(N, L, -1)], dim=-1)
        packed = pack_padded_sequence(self.dropout(x), lengths, batch_first=True, enforce_sorted=False)
        states, _ = self.lstm(packed)
        return self.output(self.dropout(pad_packed_sequence(states, batch_first=True, total_length=L)[0]))

    def _batch_logits(self, tokens: _Tokens, batch: np.ndarray) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """The logits of one batch of sentences, their tokens' positions and the mask of real ones."""
        index, mask = _grid(tokens, batch)
        features = torch.from_numpy(tokens.features[index])
        return self(features, torch.from_numpy(tokens.lengths[batch])), index, mask

    @torch.no_grad()
    def _predict_ids(self, tokens: _Tokens, batch_tokens: int) -> np.ndarray:
        """The tag id of every token (in eval mode)."""
        was_training = self.training
        self.eval()
        predicted = np.zeros(len(tokens.features), dtype=np.int64)
        for batch in _batches(tokens.lengths, batch_tokens, None):
            logits, index, mask = self._batch_logits(tokens, batch)
            predicted[index[mask]] = logits.argmax(dim=-1).numpy()[mask]
        self.train(was_training)
        return predicted

    def tag(self, documents: Sequence[Document], batch_tokens: int = 4000) -> list[list[str]]:
        """The UPOS tag of every token of each document, sentence by sentence (only ``tokens`` and ``sentences``
        are read); ``batch_tokens`` bounds a batch's padded tokens (memory)."""
        tokens = self._tokens(documents)
        names = np.array(self.tags, dtype=object)[self._predict_ids(tokens, batch_tokens)]
        bounds = np.concatenate([[0], np.cumsum(tokens.sizes)])
        return [names[begin:end].tolist() for begin, end in zip(bounds[:-1], bounds[1:])]

    # -- files --

    def checkpoint(self) -> Checkpoint:
        """The tagger as a :class:`~coref.io.checkpoint.Checkpoint` (its training info as the training record)."""
        return Checkpoint(KIND, asdict(self.config), {"words": list(self.vocabulary), "tags": list(self.tags)},
                          {"model": self.state_dict()}, self.info)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, path: str | os.PathLike) -> PosTagger:
        """The tagger a checkpoint holds, in eval mode; a :class:`PosModelError` naming ``path`` if incomplete."""
        try:
            model = cls(PosTaggerConfig(**checkpoint.config), checkpoint.vocabulary["words"],
                        checkpoint.vocabulary["tags"])
            model.load_state_dict(checkpoint.weights["model"])
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as error:
            reason = str(error).splitlines()[0] if str(error) else ""
            raise PosModelError(f"{path}: not a complete part-of-speech tagger ({type(error).__name__}: {reason})"
                                ) from error
        model.info = dict(checkpoint.training)
        return model.eval()

    def save(self, path: str | os.PathLike) -> None:
        """Write the tagger atomically, its weights in float16 (:meth:`Checkpoint.save`)."""
        self.checkpoint().save(path, half=True)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> PosTagger:
        """The tagger :meth:`save` (or an earlier version) wrote to ``path`` (default: the bundled one), weights
        back in float32; anything else is a :class:`PosModelError` naming the file."""
        path = Path(BUNDLED if path is None else path)
        return cls.from_checkpoint(load(path, "part-of-speech tagger", {KIND}, PosModelError), path)


# ---- training and scoring -----------------------------------------------------------------------------------


def _check_tags(documents: Sequence[Document], tags: Sequence[Sequence[str]]) -> None:
    if len(documents) != len(tags):
        raise ValueError(f"{len(documents)} documents but tags for {len(tags)}")
    for document, document_tags in zip(documents, tags):
        if len(document_tags) != len(document.tokens):
            raise ValueError(f"document {document.id!r}: {len(document.tokens)} tokens but {len(document_tags)} tags")


def tag_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, Any]:
    """Token accuracy, and precision, recall and F1 of each gold or predicted tag, over all documents' tokens."""
    gold_flat = np.array([tag for document in gold for tag in document], dtype=object)
    predicted_flat = np.array([tag for document in predicted for tag in document], dtype=object)
    if gold_flat.shape != predicted_flat.shape:
        raise ValueError(f"{len(gold_flat)} gold tags but {len(predicted_flat)} predicted")
    correct = gold_flat == predicted_flat
    per_tag = {}
    for tag in sorted(set(gold_flat) | set(predicted_flat)):
        hits = int(np.sum(correct & (gold_flat == tag)))
        precision = hits / max(int(np.sum(predicted_flat == tag)), 1)
        recall = hits / max(int(np.sum(gold_flat == tag)), 1)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        per_tag[tag] = {"precision": precision, "recall": recall, "f1": f1, "gold": int(np.sum(gold_flat == tag))}
    return {"accuracy": float(correct.mean()) if len(correct) else 0.0, "tokens": len(correct), "per_tag": per_tag}


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
    log: Callable[[str], None] | None = None,
) -> PosTagger:
    """Train a tagger on ``train`` (``train_tags[k]``: one tag per token of ``train[k]``) and keep the epoch with
    the best accuracy on ``dev`` (the last epoch without dev).

    The weights returned are rounded to float16 (what :meth:`PosTagger.save` keeps), so a saved and reloaded
    model tags exactly as this one does. ``model.info`` records the history (loss and dev accuracy by epoch), the
    best epoch, its dev accuracy, the seed and the training seconds. ``log`` receives one line per epoch.
    """
    _check_tags(train, train_tags)
    _check_tags(dev, dev_tags)
    started = time.perf_counter()
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    vocabulary = build_vocabulary(train, MentionDetectorConfig(vocabulary_size=config.vocabulary_size,
                                                               min_count=config.min_count))
    model = PosTagger(config, vocabulary, sorted({tag for tags in train_tags for tag in tags}))
    tokens = model._tokens(train)
    tag_id = {tag: index for index, tag in enumerate(model.tags)}
    gold = torch.tensor([tag_id[tag] for tags in train_tags for tag in tags], dtype=torch.int64)
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    history: list[dict[str, float]] = []
    best_accuracy, best_weights = -1.0, copy.deepcopy(model.state_dict())
    for epoch in range(1, epochs + 1):
        model.train()
        total = 0.0
        batches = _batches(tokens.lengths, batch_tokens, rng)
        for batch in progress_bar(batches, desc=f"epoch {epoch}", unit="batch", enabled=progress, leave=False):
            logits, index, mask = model._batch_logits(tokens, batch)
            targets = gold[torch.from_numpy(index[mask])]
            loss = nn.functional.cross_entropy(logits[torch.from_numpy(mask)], targets, reduction="sum")
            optimiser.zero_grad()
            (loss / len(targets)).backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimiser.step()
            total += loss.item()
        accuracy = tag_scores(dev_tags, model.tag(dev))["accuracy"] if dev else 0.0
        history.append({"epoch": epoch, "loss": total / len(gold), "dev_accuracy": accuracy})
        if log is not None:
            log(f"epoch {epoch}: train loss {total / len(gold):.4f}, dev accuracy {100 * accuracy:.2f}")
        if not dev or accuracy > best_accuracy:
            best_accuracy, best_weights = accuracy, copy.deepcopy(model.state_dict())
    model.load_state_dict({name: tensor.half().float() for name, tensor in best_weights.items()})
    model.info = {
        "epochs": epochs,
        "best_epoch": max(history, key=lambda entry: entry["dev_accuracy"])["epoch"] if dev else epochs,
        "dev_accuracy": tag_scores(dev_tags, model.tag(dev))["accuracy"] if dev else None,
        "seed": seed,
        "training_documents": len(train),
        "training_tokens": len(gold),
        "training_seconds": time.perf_counter() - started,
        "history": history,
    }
    return model.eval()


def ontogum_tagged(split: str, data_dir: DataDir = None) -> tuple[list[Document], list[tuple[str, ...]]]:
    """OntoGUM's documents of ``split`` and the gold UPOS tags of their tokens, from ``conllu/NAME.conllu``."""
    documents = list(load_corpus(CORPUS, split, data_dir).documents)
    folder = resolve_data_dir(data_dir) / CORPUS / "conllu"
    tags = []
    for document in documents:
        path = folder / f"{document.id}.conllu"
        syntax = read_conllu_syntax(path)
        if syntax.form != document.tokens:
            raise ValueError(f"{path}: its {len(syntax)} words do not match the {len(document.tokens)} of "
                             f"document {document.id!r}")
        tags.append(syntax.upos)
    return documents, tags


# ---- command line -------------------------------------------------------------------------------------------


def _train_command(args: argparse.Namespace) -> int:
    """Train a tagger on OntoGUM's train split (gold UPOS tags of its CoNLL-U files), choosing the epoch on dev,
    and write it (one torch file) atomically."""
    train, train_tags = ontogum_tagged("train", args.data_dir)
    dev, dev_tags = ontogum_tagged("dev", args.data_dir)
    print(f"{CORPUS}: {len(train)} training documents ({sum(map(len, train_tags))} tokens), {len(dev)} dev "
          f"documents ({sum(map(len, dev_tags))} tokens)", flush=True)
    config = PosTaggerConfig(vocabulary_size=args.vocabulary_size, hidden_size=args.hidden_size, layers=args.layers,
                             dropout=args.dropout, word_dropout=args.word_dropout)
    model = train_tagger(train, train_tags, dev, dev_tags, config, epochs=args.epochs, seed=args.seed,
                         batch_tokens=args.batch_tokens, log=lambda line: tqdm.write(line, file=sys.stdout))
    model.save(args.out)
    info = model.info
    print(f"trained in {info['training_seconds']:.1f} s; best epoch {info['best_epoch']}, dev accuracy "
          f"{100 * info['dev_accuracy']:.2f}; model saved to {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB)")
    return 0


def _evaluate_command(args: argparse.Namespace) -> int:
    """Tag OntoGUM splits with a trained tagger and print its token accuracy against their gold UPOS tags."""
    splits = [canonical_split(CORPUS, split) for split in args.split]
    model = PosTagger.load(args.model)
    results = {}
    for split in splits:
        documents, gold = ontogum_tagged(split, args.data_dir)
        started = time.perf_counter()
        predicted = model.tag(documents, batch_tokens=args.batch_tokens)
        seconds = time.perf_counter() - started
        results[split] = {**tag_scores(gold, predicted), "documents": len(documents), "tagging_seconds": seconds}
        scores = results[split]
        print(f"{CORPUS}/{split}: accuracy {100 * scores['accuracy']:.2f} over {scores['tokens']} tokens "
              f"(VERB F1 {100 * scores['per_tag']['VERB']['f1']:.2f}, ADJ F1 {100 * scores['per_tag']['ADJ']['f1']:.2f}"
              f"; {scores['tokens'] / seconds:.0f} tokens/s)")
    if args.json:
        info = {key: value for key, value in model.info.items() if key != "history"}
        result = {"model": str(args.model), "model_bytes": Path(args.model).stat().st_size, "corpus": CORPUS,
                  "config": asdict(model.config), "splits": results, "training": info}
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def _parser() -> Parser:
    parser = Parser(prog="python -m coref.pos", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    data_help = "folder holding the corpora (default: $ENTITYLM_DATA)"
    defaults = PosTaggerConfig()

    train = commands.add_parser("train", help="train on OntoGUM's train split, choosing the epoch on dev",
                                description=inspect.getdoc(_train_command))
    train.add_argument("--data-dir", help=data_help)
    train.add_argument("--out", required=True, type=output_file, help="model file to write (.pt)")
    train.add_argument("--epochs", type=integer(1), default=20, help="passes over the training sentences")
    train.add_argument("--seed", type=int, default=23, help="seed of the initial weights, dropout and shuffling")
    train.add_argument("--batch-tokens", type=integer(1), default=1000, help="padded tokens per batch of sentences")
    train.add_argument("--vocabulary-size", type=integer(2), default=defaults.vocabulary_size,
                       help="most word types kept (training words seen at least twice), <pad> and <unk> included")
    train.add_argument("--hidden-size", type=integer(1), default=defaults.hidden_size,
                       help="BiLSTM state size per direction")
    train.add_argument("--layers", type=integer(1), default=defaults.layers, help="BiLSTM layers")
    train.add_argument("--dropout", type=real(0, 1), default=defaults.dropout, help="dropout rate")
    train.add_argument("--word-dropout", type=real(0, 1), default=defaults.word_dropout,
                       help="chance that a training word is read as <unk>")
    train.set_defaults(run=_train_command)

    evaluate = commands.add_parser("evaluate", help="score a tagger on OntoGUM splits",
                                   description=inspect.getdoc(_evaluate_command))
    evaluate.add_argument("--model", default=str(BUNDLED), help="a model written by train")
    evaluate.add_argument("--split", nargs="+", default=["dev", "test", "test2"],
                          help="the splits to score")
    evaluate.add_argument("--data-dir", help=data_help)
    evaluate.add_argument("--batch-tokens", type=integer(1), default=4000, help="padded tokens per batch")
    evaluate.add_argument("--json", type=output_file, help="also write the scores as JSON here")
    evaluate.set_defaults(run=_evaluate_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
