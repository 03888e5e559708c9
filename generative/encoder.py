"""The word encoder every neural language model here shares: embeddings and one LSTM over the document."""

from __future__ import annotations

import torch
from torch import nn

from generative.batch import DocumentBatch
from generative.config import LanguageModelConfig


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
