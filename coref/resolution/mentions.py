"""A mention detector: which token spans of raw text are mentions, from the tokens alone.

The first step of coreference on raw text (tokens -> mentions -> clusters). Only the words are read (no parse,
no part-of-speech tags: raw text has none), so the detector runs on any tokenised :class:`~coref.document.Document`.

Model (a small span scorer in the style of Lee et al. 2017, without their antecedent part):

- each token is its lowercased word's embedding (vocabulary: training words seen at least ``min_count`` times,
  the rest ``<unk>``), plus small embeddings of its shape (capitalised, all caps, digits, punctuation, other)
  and of its hashed 3-letter suffix (``zlib.crc32``, stable across processes);
- a BiLSTM reads each sentence (sentences are padded into batches and packed; a sentence longer than
  :data:`MAX_SENTENCE_TOKENS`, 512, is read as windows of that many tokens, which bounds memory on text
  without sentence punctuation);
- with ``lowercase`` (``train --lowercase``) every token is lowercased before any of this, in training and in
  prediction alike: a detector for lowercase text (LAMBADA), whose shapes only tell words, digits and
  punctuation apart, and which reads cased text as its lowercased copy;
- every span ``(i, j)`` inside one sentence with ``j - i < max_width`` is scored by a one-hidden-layer MLP over
  ``[h_i, h_j, mean(h_i..h_j), width embedding]``. The MLP's first layer is linear, so it splits into one
  projection per part: the start and end parts are projections of the token states, and the mean's part is a
  difference of cumulative sums of projected states, which gives the whole ``(sentences, L, W)`` grid of spans
  without a Python loop over spans or tokens.

The mentions are the spans whose probability reaches a threshold, less the crossing ones: of two spans that
overlap without one lying inside the other, the less probable is dropped (:func:`without_crossing`; nested spans
all stay), so every output of the detector can be written as CoNLL brackets whatever the entities turn out to be.

Training is binary cross-entropy over all candidate spans (gold: the document's annotated mention spans, a span
annotated twice counting once), Adam, shuffled batches of sentences of similar length. Dev mention F1 is measured
after each epoch at the best threshold, and the best epoch's weights are kept; its threshold (the probability
above which a span is a mention) is stored in the model. ``max_width`` is chosen from the training data as the
smallest width that covers ``coverage`` (99%) of the training mentions.

A model is one checkpoint (:mod:`coref.io.checkpoint`, kind ``mention_detector``: the config, the vocabulary,
float16 weights and what training reported), a few MB. Mentions are scored as exact spans (:func:`mention_scores`).

Trained by :func:`inference.training.resolution.train_detector`; the command is :mod:`inference.commands.mentions`.
"""

from __future__ import annotations

import math
import os
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from coref.document import Document, Mention, best_non_crossing
from coref.io.checkpoint import Checkpoint, CheckpointError, load

KIND = "mention_detector"  # its kind of checkpoint (coref.io.checkpoint)
PAD, UNK = "<pad>", "<unk>"
# word shapes; 0 is padding
CAPITALISED, ALL_CAPS, DIGITS, PUNCTUATION, OTHER = range(1, 6)
SHAPES = 6
# Longest stretch of tokens read as one sentence: a longer sentence (a text without punctuation) is read in
# windows of this many tokens, so the (sentences, L, max_width) span grid stays bounded. No sentence of LitBank
# (at most 307 tokens) or OntoGUM (134) is that long; a mention across a window boundary cannot be found.
MAX_SENTENCE_TOKENS = 512
Span = tuple[int, int]


class MentionModelError(CheckpointError):
    """A file that is not a saved :class:`MentionDetector` (or one this code cannot read); the message names it."""


@dataclass(frozen=True)
class MentionDetectorConfig:
    """Sizes and settings of a detector. ``max_width`` 0 means: choose it from the training data (``coverage``)."""

    vocabulary_size: int = 10_000  # at most this many word types, <pad> and <unk> included
    min_count: int = 2  # a training word seen fewer times is <unk>
    embedding_size: int = 100
    shape_size: int = 8
    suffix_buckets: int = 1000
    suffix_size: int = 16
    hidden_size: int = 128  # per LSTM direction
    layers: int = 2
    width_size: int = 20
    mlp_size: int = 150
    max_width: int = 0  # spans of at most this many tokens are candidates
    coverage: float = 0.99  # of training mentions that max_width must cover when it is chosen from the data
    dropout: float = 0.3
    threshold: float = 0.5  # a span whose probability is at least this is a mention (tuned on dev)
    lowercase: bool = False  # every token is lowercased before it is read (absent from older models: False)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> MentionDetectorConfig:
        known = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown mention detector settings {unknown}")
        return cls(**values)


# ---- inputs -------------------------------------------------------------------------------------------------


def word_shape(token: str) -> int:
    """The token's shape class: DIGITS, PUNCTUATION, ALL_CAPS (two or more letters), CAPITALISED or OTHER."""
    if any(character.isdigit() for character in token):
        return DIGITS
    if not any(character.isalnum() for character in token):
        return PUNCTUATION
    if token.isupper() and sum(character.isalpha() for character in token) > 1:
        return ALL_CAPS
    return CAPITALISED if token[:1].isupper() else OTHER


def suffix_bucket(token: str, buckets: int) -> int:
    """1 + the CRC-32 of the lowercased token's last three characters modulo ``buckets`` (0 is padding)."""
    return 1 + zlib.crc32(token.lower()[-3:].encode("utf-8")) % buckets


def build_vocabulary(documents: Sequence[Document], config: MentionDetectorConfig) -> list[str]:
    """``<pad>``, ``<unk>``, then the lowercased words seen ``min_count`` times or more, most frequent first."""
    counts = Counter(token.lower() for document in documents for token in document.tokens)
    frequent = sorted((word for word, count in counts.items() if count >= config.min_count),
                      key=lambda word: (-counts[word], word))
    return [PAD, UNK, *frequent[: max(config.vocabulary_size - 2, 0)]]


def mention_widths(documents: Sequence[Document]) -> np.ndarray:
    """The width (in tokens) of every distinct mention span of every document."""
    return np.array([end - start for document in documents
                     for start, end in {mention.span for mention in document.mentions}], dtype=np.int64)


def width_coverage(documents: Sequence[Document], max_width: int) -> float:
    """The share of the documents' distinct mention spans at most ``max_width`` tokens wide (1.0 if none)."""
    widths = mention_widths(documents)
    return float(np.mean(widths <= max_width)) if len(widths) else 1.0


def choose_max_width(documents: Sequence[Document], coverage: float = 0.99) -> int:
    """The smallest width that covers at least ``coverage`` of the documents' distinct mention spans (1 if none)."""
    widths = np.sort(mention_widths(documents))
    if not len(widths):
        return 1
    return max(1, int(widths[min(math.ceil(coverage * len(widths)), len(widths)) - 1]))


@dataclass(frozen=True)
class _Sentences:
    """Sentences as model inputs: token features, and where each sentence lies (document, first token).

    ``gold`` holds, per sentence, the ``(start, width - 1)`` of its gold spans that are candidates (both relative
    to the sentence); it is empty when the documents are only to be predicted.
    """

    words: list[np.ndarray]
    shapes: list[np.ndarray]
    suffixes: list[np.ndarray]
    document: np.ndarray
    offset: np.ndarray
    lengths: np.ndarray
    gold: list[np.ndarray]


def sentence_windows(sentences: Sequence[tuple[int, int]], max_tokens: int) -> list[tuple[int, int]]:
    """The sentences, each longer than ``max_tokens`` cut into consecutive windows of at most that many."""
    return [(begin, min(begin + max_tokens, end))
            for start, end in sentences for begin in range(start, end, max_tokens)]


def span_grid(lengths: torch.Tensor, length: int, max_width: int) -> torch.Tensor:
    """The candidate mask: ``[n, i, w]`` is True iff span ``(i, i + w + 1)`` lies inside sentence ``n``, whose
    ``lengths[n]`` tokens are padded to ``length``; ``w < max_width``. Shape ``(N, length, max_width)``."""
    ends = torch.arange(length)[:, None] + torch.arange(max_width)[None, :]  # (L, W), last token of the span
    return ends[None] < lengths[:, None, None]


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch on one thread meanwhile: the detector's small matrices gain nothing from a second one, and on a
    busy machine the thread pool's waiting made prediction 40x slower (26K words: 58 s on two threads, 1.4 s on
    one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def length_batches(lengths: np.ndarray, batch_tokens: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Sentence indices in batches of similar length whose padded size is at most ``batch_tokens`` (a longer
    sentence is a batch of its own). With ``rng``: ties broken and the batches ordered at random."""
    if rng is None:
        order = np.argsort(lengths, kind="stable")
    else:
        order = np.lexsort((rng.random(len(lengths)), lengths))
    batches, current = [], []
    for index in order:  # ascending lengths: the sentence added is the longest of its batch
        if current and (len(current) + 1) * lengths[index] > batch_tokens:
            batches.append(np.array(current))
            current = []
        current.append(index)
    if current:
        batches.append(np.array(current))
    if rng is not None:
        rng.shuffle(batches)
    return batches


# ---- the model ----------------------------------------------------------------------------------------------


class MentionDetector(nn.Module):
    """Scores every span of at most ``config.max_width`` tokens inside a sentence; see the module docstring."""

    def __init__(self, config: MentionDetectorConfig, vocabulary: Sequence[str]) -> None:
        super().__init__()
        if config.max_width < 1:
            raise ValueError(f"a detector needs max_width >= 1, got {config.max_width} (train_detector chooses it)")
        self.config = config
        self.vocabulary = list(vocabulary)
        self.word_index = {word: index for index, word in enumerate(self.vocabulary)}
        self.info: dict[str, Any] = {}  # what training reported, saved with the model
        c = config
        self.words = nn.Embedding(len(self.vocabulary), c.embedding_size, padding_idx=0)
        self.shapes = nn.Embedding(SHAPES, c.shape_size, padding_idx=0)
        self.suffixes = nn.Embedding(c.suffix_buckets + 1, c.suffix_size, padding_idx=0)
        self.lstm = nn.LSTM(c.embedding_size + c.shape_size + c.suffix_size, c.hidden_size, num_layers=c.layers,
                            batch_first=True, bidirectional=True, dropout=c.dropout if c.layers > 1 else 0.0)
        self.dropout = nn.Dropout(c.dropout)
        state = 2 * c.hidden_size
        # the MLP's first layer over [h_i, h_j, mean, width], one projection per part
        self.start_part = nn.Linear(state, c.mlp_size)
        self.end_part = nn.Linear(state, c.mlp_size, bias=False)
        self.mean_part = nn.Linear(state, c.mlp_size, bias=False)
        self.widths = nn.Embedding(c.max_width, c.width_size)
        self.width_part = nn.Linear(c.width_size, c.mlp_size, bias=False)
        self.output = nn.Linear(c.mlp_size, 1)

    # -- inputs --

    def _sentences(self, documents: Sequence[Document], with_gold: bool = False) -> _Sentences:
        """Every sentence of ``documents`` as input arrays (and its candidate gold spans with ``with_gold``), its
        tokens lowercased first if ``config.lowercase``."""
        unknown, buckets = self.word_index[UNK], self.config.suffix_buckets
        words, shapes, suffixes, document_of, offsets, lengths, gold = [], [], [], [], [], [], []
        for number, document in enumerate(documents):
            tokens = [token.lower() for token in document.tokens] if self.config.lowercase else document.tokens
            word_ids = np.array([self.word_index.get(token.lower(), unknown) for token in tokens])
            shape_ids = np.array([word_shape(token) for token in tokens])
            suffix_ids = np.array([suffix_bucket(token, buckets) for token in tokens])
            spans = np.array(sorted({mention.span for mention in document.mentions}) if with_gold else [],
                             dtype=np.int64).reshape(-1, 2)
            for start, end in sentence_windows(document.sentences, MAX_SENTENCE_TOKENS):
                words.append(word_ids[start:end])
                shapes.append(shape_ids[start:end])
                suffixes.append(suffix_ids[start:end])
                document_of.append(number)
                offsets.append(start)
                lengths.append(end - start)
                inside = (spans[:, 0] >= start) & (spans[:, 1] <= end)
                inside &= spans[:, 1] - spans[:, 0] <= self.config.max_width
                gold.append(np.stack([spans[inside, 0] - start, spans[inside, 1] - spans[inside, 0] - 1], axis=1))
        return _Sentences(words, shapes, suffixes, np.array(document_of, dtype=np.int64),
                          np.array(offsets, dtype=np.int64), np.array(lengths, dtype=np.int64), gold)

    @staticmethod
    def _pad(arrays: list[np.ndarray], indices: np.ndarray, length: int) -> torch.Tensor:
        padded = np.zeros((len(indices), length), dtype=np.int64)
        for row, index in enumerate(indices):
            padded[row, : len(arrays[index])] = arrays[index]
        return torch.from_numpy(padded)

    # -- scoring --

    def forward(self, words: torch.Tensor, shapes: torch.Tensor, suffixes: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        """Span logits ``(N, L, W)``: ``[n, i, w]`` scores tokens ``i .. i + w`` of sentence ``n`` (padded inputs
        ``(N, L)``, true ``lengths`` ``(N,)``). Positions outside :func:`span_grid` hold meaningless values."""
        N, L = words.shape
        W = self.config.max_width
        x = self.dropout(torch.cat([self.words(words), self.shapes(shapes), self.suffixes(suffixes)], dim=-1))
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        states, _ = self.lstm(packed)
        h = self.dropout(pad_packed_sequence(states, batch_first=True, total_length=L)[0])  # (N, L, 2H)

        offsets = torch.arange(W)
        ends = (torch.arange(L)[:, None] + offsets[None, :]).clamp(max=L - 1)  # (L, W), last token of each span
        start = self.start_part(h)[:, :, None, :]  # (N, L, 1, M)
        end = self.end_part(h)[:, ends]  # (N, L, W, M)
        mean_projection = self.mean_part(h)
        cumulative = torch.cat([mean_projection.new_zeros(N, 1, mean_projection.shape[-1]),
                                mean_projection.cumsum(dim=1)], dim=1)  # (N, L + 1, M)
        mean = (cumulative[:, ends + 1] - cumulative[:, :L, None]) / (offsets + 1)[:, None].to(h.dtype)
        width = self.width_part(self.widths(offsets))  # (W, M)
        hidden = self.dropout(torch.relu(start + end + mean + width))
        return self.output(hidden).squeeze(-1)

    def _batch_logits(self, data: _Sentences, batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits of one batch of sentences and their candidate mask."""
        lengths = torch.from_numpy(data.lengths[batch])
        L = int(lengths.max())
        logits = self(self._pad(data.words, batch, L), self._pad(data.shapes, batch, L),
                      self._pad(data.suffixes, batch, L), lengths)
        return logits, span_grid(lengths, L, self.config.max_width)

    @torch.no_grad()
    def candidate_logits(self, documents: Sequence[Document], batch_tokens: int = 4000
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every candidate span of ``documents`` and its logit: arrays ``(document, start, end, logit)`` with
        document-level token positions, ``end`` exclusive. The model is scored in eval mode."""
        was_training = self.training
        self.eval()
        data = self._sentences(documents)
        parts = []
        with _one_thread():
            for batch in length_batches(data.lengths, batch_tokens, None):
                logits, mask = self._batch_logits(data, batch)
                row, start, width = mask.nonzero(as_tuple=True)
                sentence = torch.from_numpy(batch)[row]
                begin = torch.from_numpy(data.offset)[sentence] + start
                parts.append(torch.stack([torch.from_numpy(data.document)[sentence], begin, begin + width + 1],
                                         dim=1))
                parts.append(logits[mask].double())
        self.train(was_training)
        spans = torch.cat(parts[0::2]).numpy() if parts else np.zeros((0, 3), dtype=np.int64)
        logits = torch.cat(parts[1::2]).numpy() if parts else np.zeros(0)
        return spans[:, 0], spans[:, 1], spans[:, 2], logits

    def predict(self, documents: Sequence[Document], batch_tokens: int = 4000, threshold: float | None = None
                ) -> list[list[Span]]:
        """The mention spans ``(start, end)`` (end exclusive, sorted) of each document: every span of at most
        ``max_width`` tokens inside one of its ``sentences`` whose probability is at least ``threshold`` (default:
        the one tuned on dev for mention F1; a ranker may ask for a lower one, to see more candidates), of two
        crossing spans only the more probable (:func:`without_crossing`). Only ``tokens`` and ``sentences`` are
        read; ``batch_tokens`` bounds a batch's padded tokens (memory)."""
        return [sorted(found) for found in self.span_probabilities(documents, batch_tokens, threshold)]

    def span_probabilities(self, documents: Sequence[Document], batch_tokens: int = 4000,
                           threshold: float | None = None) -> list[dict[Span, float]]:
        """:meth:`predict`'s spans of each document with their probabilities (:func:`without_crossing`)."""
        document, start, end, logits = self.candidate_logits(documents, batch_tokens)
        keep = logits >= _logit(self.config.threshold if threshold is None else threshold)
        probabilities = 1.0 / (1.0 + np.exp(-logits[keep]))
        found: list[dict[Span, float]] = [{} for _ in documents]
        for number, first, stop, probability in zip(document[keep].tolist(), start[keep].tolist(),
                                                    end[keep].tolist(), probabilities.tolist()):
            found[number][first, stop] = probability
        return [without_crossing(spans) for spans in found]

    # -- files --

    def checkpoint(self) -> Checkpoint:
        """The model as a :class:`~coref.io.checkpoint.Checkpoint` (its training info as the training record)."""
        return Checkpoint(KIND, asdict(self.config), {"words": list(self.vocabulary)}, {"model": self.state_dict()},
                          self.info)

    @classmethod
    def from_checkpoint(cls, checkpoint: Checkpoint, path: str | os.PathLike) -> MentionDetector:
        """The model a checkpoint holds, in eval mode; a :class:`MentionModelError` naming ``path`` if incomplete."""
        try:
            model = cls(MentionDetectorConfig.from_dict(checkpoint.config), checkpoint.vocabulary["words"])
            model.load_state_dict(checkpoint.weights["model"])
        except (KeyError, TypeError, ValueError, RuntimeError, AttributeError) as error:
            raise MentionModelError(f"{path}: not a complete mention detector "
                                    f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
                                    ) from error
        model.info = dict(checkpoint.training)
        return model.eval()

    def save(self, path: str | os.PathLike) -> None:
        """Write the model atomically, its weights in float16 (:meth:`Checkpoint.save`)."""
        self.checkpoint().save(path, half=True)

    @classmethod
    def load(cls, path: str | os.PathLike) -> MentionDetector:
        """Read a model :meth:`save` (or an earlier version) wrote, weights back in float32; anything else is a
        :class:`MentionModelError` naming the file."""
        return cls.from_checkpoint(load(path, "mention detector", {KIND}, MentionModelError), path)


def without_crossing(probabilities: dict[Span, float]) -> dict[Span, float]:
    """The spans (with their probabilities) left when, of two that cross, the less probable is dropped
    (:func:`coref.document.best_non_crossing`): no output can hold both ("My dear Miss Fairfax" and "Miss
    Fairfax, young ladies" in one entity has no CoNLL brackets), and the more probable is the better guess."""
    spans = list(probabilities)
    kept = best_non_crossing([Mention(start, end, 0) for start, end in spans], [probabilities[s] for s in spans])
    return {mention.span: probabilities[mention.span] for mention in kept}


def _logit(probability: float) -> float:
    if probability <= 0.0:
        return -math.inf
    if probability >= 1.0:
        return math.inf
    return math.log(probability / (1.0 - probability))


# ---- scoring ------------------------------------------------------------------------------------------------


def mention_scores(gold: Sequence[Document], predicted: Sequence[Sequence[Span]]) -> dict[str, float | int]:
    """Mention detection scores: exact span match, distinct spans per document, summed over documents.

    ``predicted[k]`` are the spans found in ``gold[k]``. Returns precision, recall and f1 (0 where undefined) and
    the counts ``gold``, ``predicted``, ``correct`` and ``documents``.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold documents but predictions for {len(predicted)}")
    gold_count = predicted_count = correct = 0
    for document, spans in zip(gold, predicted):
        key = {mention.span for mention in document.mentions}
        response = {(int(start), int(end)) for start, end in spans}
        gold_count += len(key)
        predicted_count += len(response)
        correct += len(key & response)
    precision = correct / predicted_count if predicted_count else 0.0
    recall = correct / gold_count if gold_count else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1, "gold": gold_count, "predicted": predicted_count,
            "correct": correct, "documents": len(gold)}


def _span_keys(document: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    return (document.astype(np.int64) << 42) | (start.astype(np.int64) << 21) | end.astype(np.int64)


def tune_threshold(model: MentionDetector, documents: Sequence[Document], batch_tokens: int = 4000
                   ) -> tuple[float, float]:
    """The probability threshold that maximises mention F1 on ``documents``, and that F1.

    The threshold lies halfway (in logits) between the lowest score kept and the highest one dropped. Gold spans
    that are no candidates (too wide) count as missed.
    """
    document, start, end, logits = model.candidate_logits(documents, batch_tokens)
    gold = np.array(sorted({(number, *mention.span) for number, d in enumerate(documents) for mention in d.mentions}),
                    dtype=np.int64).reshape(-1, 3)
    is_gold = np.isin(_span_keys(document, start, end), _span_keys(gold[:, 0], gold[:, 1], gold[:, 2]))
    if not len(logits) or not len(gold):
        return 0.5, 0.0
    order = np.argsort(-logits, kind="stable")
    ranked = logits[order]
    correct = np.cumsum(is_gold[order])
    f1 = 2 * correct / (np.arange(1, len(ranked) + 1) + len(gold))
    best = int(np.argmax(f1))
    below = ranked[best + 1] if best + 1 < len(ranked) else ranked[best] - 2.0
    cut = (ranked[best] + below) / 2
    return float(1.0 / (1.0 + math.exp(-cut))), float(f1[best])
