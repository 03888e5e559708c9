"""The LSTM language model baseline (paper eq. 1-2), with EntityNLM's vocabulary, embeddings and softmax.

    h_t = LSTM(x_t, h_{t-1}),    p(x_t | x_<t) = softmax(W h_{t-1} + b)

The LSTM reads each whole document from ``<s>`` on (no reset at sentence ends, paper §2) in one fused
``nn.LSTM`` call; dropout acts on the embeddings and on the LSTM outputs in training mode only. The output
layer is the class-factored softmax of EntityNLM (or the full softmax), so the two models' perplexities are
over the same tokens with the same kind of word distribution.

As a Pyro program the model has one observed site ``X``: all the words of each document, an event of T tokens
(padding masked out) in the ``documents`` plate. Its log-probability is the training objective and the
evaluation; :meth:`RNNLM.log_likelihood` reads it from a trace of :meth:`RNNLM.model`, so there is one code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyro
import torch
from pyro import poutine
from pyro.nn import PyroModule, pyro_method

from generative.layers.batch import DocumentBatch
from generative.layers.config import LanguageModelConfig
from generative.layers.document_cache import with_cache
from generative.layers.encoder import WordEncoder
from generative.layers.softmax import make_softmax


@dataclass(frozen=True)
class RNNLMConfig(LanguageModelConfig):
    """The RNNLM has nothing beyond the shared sizes and softmax."""


class RNNLM(PyroModule):
    """LSTM language model over the documents of a :class:`DocumentBatch`."""

    def __init__(self, config: RNNLMConfig, counts: Sequence[int]) -> None:
        super().__init__()
        if len(counts) != config.vocab_size:
            raise ValueError(f"{len(counts)} word counts for a vocabulary of {config.vocab_size}")
        self.config = config
        self.encoder = WordEncoder(config)
        self.softmax = make_softmax(config.softmax, config.hidden_size, counts, config.num_classes)

    @pyro_method
    def model(self, batch: DocumentBatch) -> None:
        """The generative story: every document's words x_1..x_T, each from p(x_t | x_<t)."""
        hidden = self.encoder(batch)[:, :-1]  # h_{t-1} for every target x_t
        words = self.softmax(hidden)
        with pyro.plate("documents", batch.size, dim=-1):
            pyro.sample("X", words.mask(batch.mask).to_event(1), obs=batch.words)

    def token_log_probs(self, batch: DocumentBatch) -> torch.Tensor:
        """(B, T) log p(x_t | x_<t) of every target token, 0 at padding: the terms of :meth:`log_likelihood`."""
        hidden = self.encoder(batch)[:, :-1]  # h_{t-1} for every target x_t
        return self.softmax(hidden).log_prob(batch.words) * batch.mask

    def log_likelihood(self, batch: DocumentBatch, document_cache: float = 0.0) -> torch.Tensor:
        """log p(document) = sum over its real tokens of log p(x_t | x_<t), shape (B,); with ``document_cache``
        (lambda > 0) each p(x_t | x_<t) mixed with the unigram cache of the document's words before it
        (:mod:`generative.layers.document_cache`)."""
        if document_cache:
            return (with_cache(self.token_log_probs(batch), batch.words, document_cache) * batch.mask).sum(-1)
        trace = poutine.trace(self.model).get_trace(batch)
        trace.compute_log_prob()
        return trace.nodes["X"]["log_prob"]
