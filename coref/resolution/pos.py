"""A part-of-speech tagger: the Universal POS tag (UPOS) of every token of a tokenised document.

:mod:`coref.metrics.stories` needs it for attribute consistency (Papalampidi et al. 2022, §2: an entity's
attributes are the verbs and adjectives of the sentences that mention it). No well-kept library's English tagger
installs from the package registries reachable here (spaCy's ``en_core_web_sm`` and NLTK's tagger data are
downloaded from GitHub, Stanza's models from Hugging Face; none of them is on PyPI), so this is a small tagger
of our own, trained on the UPOS column of OntoGUM's CoNLL-U files (GUM's train split; the epoch is chosen on dev)
and bundled as ``coref/resolution/pretrained/pos.pt`` (``train`` with the defaults: 20 epochs, about 3 minutes on
one CPU core). Token accuracy (``benchmarks/results/pos.json``): 96.45% on dev, 96.25% on test (VERB F1 95.0, ADJ F1
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

Trained by :func:`inference.training.resolution.train_tagger`; the command is :mod:`inference.commands.pos`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from coref.corpora.registry import DataDir, load_corpus, resolve_data_dir
from coref.document import Document
from coref.io.checkpoint import Checkpoint, CheckpointError, load
from coref.resolution.mentions import SHAPES, UNK, length_batches, suffix_bucket, word_shape
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
        for batch in length_batches(tokens.lengths, batch_tokens, None):
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


# ---- scoring --------------------------------------------------------------------------------------


def check_tags(documents: Sequence[Document], tags: Sequence[Sequence[str]]) -> None:
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
