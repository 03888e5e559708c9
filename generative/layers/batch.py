"""Documents as padded tensors: the token stream every language model in entitylm reads.

Every model (EntityNLM, the RNNLM, the n-gram) predicts the same stream, so that their perplexities are over
the same tokens: each sentence's words followed by ``</s>``, one document after another sentence by sentence,
the history starting from ``<s>`` at the start of the document (the LSTM runs over the whole document, paper
§2; the reference code instead resets it at every sentence, an option of the model). ``</s>`` is a predicted
token, as in the reference code's word counts; ``<s>`` is context only.

Alongside the words a batch carries EntityNLM's annotation of every target token (R, E, L of
:func:`coref.document.encode_entities`; ``</s>`` is outside every mention), so the document must be
R/E/L-encodable (see :mod:`coref.corpora.preprocess`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from coref.corpora.preprocess import BOS, EOS, Vocabulary
from coref.document import Document, encode_entities


@dataclass(frozen=True)
class TokenStream:
    """One document's targets: word ids, sentence index, and the R/E/L annotation of each target."""

    words: list[int]
    sentence: list[int]
    R: list[int]
    E: list[int]
    L: list[int]


def token_stream(document: Document, vocabulary: Vocabulary) -> TokenStream:
    """The targets of one document: each sentence's words then ``</s>``, with their R/E/L."""
    annotation = encode_entities(document)
    stream = TokenStream([], [], [], [], [])
    end_of_sentence = vocabulary.index(EOS)
    for number, (start, end) in enumerate(document.sentences):
        stream.words.extend(vocabulary.encode(document.tokens[start:end]) + [end_of_sentence])
        stream.sentence.extend([number] * (end - start + 1))
        stream.R.extend([*annotation.R[start:end], 0])
        stream.E.extend([*annotation.E[start:end], 0])
        stream.L.extend([*annotation.L[start:end], 1])
    return stream


def stream_positions(document: Document) -> list[int]:
    """Where every token of ``document`` stands in its token stream (sentence ``k`` is shifted by the ``k``
    ``</s>`` before it)."""
    return [token + number for number, (start, end) in enumerate(document.sentences) for token in range(start, end)]


@dataclass(frozen=True)
class DocumentBatch:
    """B documents as (B, T) tensors, padded at the end; ``mask`` marks the real target tokens.

    ``inputs[b, t]`` is the token before ``words[b, t]`` (``<s>`` at t = 0), so an LSTM over ``inputs`` gives
    h_{t-1} for predicting x_t. ``R``, ``E``, ``L`` are the gold annotation of the targets (E numbered by first
    mention, 0 outside mentions; L the remaining mention length including the token, 1 outside mentions).
    Padding holds ``</s>``, R = E = 0, L = 1, so that it is a valid annotation the masks then ignore.
    """

    keys: tuple[tuple[str, int], ...]
    inputs: torch.Tensor
    words: torch.Tensor
    mask: torch.Tensor
    sentence: torch.Tensor
    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor

    @property
    def size(self) -> int:
        return self.words.shape[0]

    @property
    def steps(self) -> int:
        return self.words.shape[1]

    @property
    def lengths(self) -> torch.Tensor:
        return self.mask.sum(-1)

    @property
    def num_tokens(self) -> int:
        """Target tokens in the batch (host sync: call it outside per-step code)."""
        return int(self.mask.sum())

    def rows(self, indices: Sequence[int]) -> DocumentBatch:
        """The batch of documents ``indices`` alone (padded to the longest of them): a rank's share of a batch."""
        index = torch.as_tensor(list(indices), dtype=torch.long, device=self.words.device)
        steps = int(self.lengths[index].max())
        picked = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in picked.items():
            if isinstance(value, torch.Tensor):
                picked[name] = value[index, :steps]
        picked["keys"] = tuple(self.keys[i] for i in indices)
        return DocumentBatch(**picked)

    def to(self, device: torch.device | str) -> DocumentBatch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for name, value in moved.items():
            if isinstance(value, torch.Tensor):
                moved[name] = value.to(device)
        return DocumentBatch(**moved)


def make_batch(documents: Sequence[Document], vocabulary: Vocabulary) -> DocumentBatch:
    """Pad the token streams of ``documents`` into one :class:`DocumentBatch` (on the CPU)."""
    if not documents:
        raise ValueError("cannot make a batch of no documents")
    streams = [token_stream(document, vocabulary) for document in documents]
    steps = max(len(stream.words) for stream in streams)
    pad_word, start = vocabulary.index(EOS), vocabulary.index(BOS)

    def padded(rows: list[list[int]], fill: int) -> torch.Tensor:
        return torch.tensor([row + [fill] * (steps - len(row)) for row in rows], dtype=torch.long)

    words = padded([s.words for s in streams], pad_word)
    inputs = torch.cat([torch.full((len(streams), 1), start, dtype=torch.long), words[:, :-1]], dim=1)
    lengths = torch.tensor([len(s.words) for s in streams])
    return DocumentBatch(
        keys=tuple(document.key for document in documents),
        inputs=inputs,
        words=words,
        mask=torch.arange(steps)[None, :] < lengths[:, None],
        sentence=padded([s.sentence for s in streams], 0),
        R=padded([s.R for s in streams], 0),
        E=padded([s.E for s in streams], 0),
        L=padded([s.L for s in streams], 1),
    )


def batches_by_length(
    documents: Sequence[Document], vocabulary: Vocabulary, max_tokens: int
) -> list[DocumentBatch]:
    """Documents grouped into batches of similar length with at most ``max_tokens`` padded tokens each.

    Sorting by length keeps padding (wasted steps) small; a document longer than ``max_tokens`` is a batch of
    its own.
    """
    sizes = [len(document.tokens) + len(document.sentences) for document in documents]  # words + </s>
    batches, current, longest = [], [], 0
    for i in sorted(range(len(documents)), key=sizes.__getitem__):
        size = sizes[i]
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(make_batch([documents[j] for j in current], vocabulary))
            current, longest = [], 0
        current.append(i)
        longest = max(longest, size)
    if current:
        batches.append(make_batch([documents[j] for j in current], vocabulary))
    return batches
