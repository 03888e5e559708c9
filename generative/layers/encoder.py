"""The word encoder every neural language model here shares: embeddings and one LSTM over the document."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from generative.layers.batch import DocumentBatch
from generative.layers.config import LanguageModelConfig


class WordEncoder(nn.Module):
    """Embeddings and a one-layer LSTM over ``<s> x_1 .. x_T``: states[:, t] encodes x_<=t (x_0 = <s>).

    The LSTM reads words only and the whole document (paper §2: no reset at sentence ends). Dropout acts on
    the embeddings and on the LSTM outputs, in training mode only.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.lstm = nn.LSTM(config.embedding_size, config.hidden_size, batch_first=True)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, batch: DocumentBatch) -> torch.Tensor:
        """(B, T + 1, H): states[:, t] = h_{t-1} predicts x_t; states[:, t + 1] = h_t has read it."""
        tokens = torch.cat([batch.inputs, batch.words[:, -1:]], dim=1)
        states, _ = self.lstm(self.dropout(self.embedding(tokens)))
        return self.dropout(states)


class BidirectionalWordEncoder(nn.Module):
    """Embeddings and a bidirectional LSTM over ``<s> x_1 .. x_T``: states[:, t] reads the whole document.

    The forward half of states[:, t] has read x_<=t, the backward half x_>=t (padding never: the sequences
    are packed by length); a linear layer and tanh bring the two halves back to the hidden size, so the
    proposal's heads are the same whichever encoder feeds them. This is what a proposal needs to see where a
    mention ends or whom a pronoun refers to before it commits to R_t, E_t, L_t.
    """

    def __init__(self, config: LanguageModelConfig) -> None:
        super().__init__()
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_size)
        self.lstm = nn.LSTM(config.embedding_size, config.hidden_size, batch_first=True, bidirectional=True)
        self.merge = nn.Linear(2 * config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, batch: DocumentBatch) -> torch.Tensor:
        """(B, T + 1, H), position t + 1 standing at x_t as in :class:`WordEncoder`."""
        tokens = torch.cat([batch.inputs, batch.words[:, -1:]], dim=1)
        packed = pack_padded_sequence(self.dropout(self.embedding(tokens)), (batch.lengths + 1).cpu(),
                                      batch_first=True, enforce_sorted=False)
        states, _ = pad_packed_sequence(self.lstm(packed)[0], batch_first=True, total_length=tokens.shape[1])
        return self.dropout(torch.tanh(self.merge(states)))
