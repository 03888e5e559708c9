"""Eq. 6 with a copy of the mentioned entity's own words: ours, off by default (``EntityNLMConfig.entity_words``).

EntityNLM draws a mention's words from softmax(W (h_{t-1} + W_e e_current)) (eq. 6): a name the entity has borne
is only as likely again as its embedding makes it, while a coreference resolver's strongest evidence is exactly
that ("Smith" after "Mr. Smith"). With ``entity_words = M`` every entity remembers the last M words of its
mention tokens (:class:`~generative.entitynlm.state.EntityTable`), and a mention token's word is drawn from

    p(x_t) = (1 - g_t) softmax(...)_x + g_t * n(x) / n,    g_t = sigmoid(w^T (h_{t-1} + W_e e_current) + b),

n(x) the times x is among the n words the entity remembers: a copy mechanism as in reference-aware language models
(Yang et al. 2017), read here by the posterior over E. A new entity, or a token outside mentions, remembers
nothing and draws from eq. 6 alone.

``copy_weighting = "attention"`` replaces the uniform n(x) / n by attention over the remembered words w_1..w_n,

    sum_j a_j [w_j = x],    a = softmax_j((U (h_{t-1} + W_e e_current) + u)^T emb(w_j)),

emb the encoder's word embeddings, so a head noun can count for more than "the" or "of", and what is copied can
depend on the context (a pronoun after a pronoun). U and u start at 0: the uniform copy, where a fine-tuning starts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution, constraints
from torch import nn

from generative.layers.categorical import Categorical

INITIAL_GATE = -3.0  # b at initialisation, w = 0: g = 0.047, so a model given the copy starts near eq. 6
COPY_WEIGHTINGS = ("uniform", "attention")  # how the copy weighs the remembered words
UNHELD = -1e4  # the log-weight of a memory place that holds no word (finite: no 0 / 0 in a gradient)


class EntityWordCopy(nn.Module):
    """The copy gate g_t of a mention token, and with ``weighting = "attention"`` the query U h + u of its
    attention over the remembered words, from what eq. 6's softmax reads (h = h_{t-1} + W_e e_current)."""

    def __init__(self, hidden_size: int, embedding_size: int, weighting: str = "uniform") -> None:
        super().__init__()
        if weighting not in COPY_WEIGHTINGS:
            raise ValueError(f"the copy's weighting must be one of {COPY_WEIGHTINGS}, got {weighting!r}")
        self.gate = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, INITIAL_GATE)
        self.query = nn.Linear(hidden_size, embedding_size) if weighting == "attention" else None
        if self.query is not None:  # a = uniform at the start
            nn.init.zeros_(self.query.weight)
            nn.init.zeros_(self.query.bias)

    def forward(self, words: TorchDistribution, inputs: torch.Tensor, remembered: torch.Tensor,
                embedding: nn.Embedding) -> CopyMixture:
        """Eq. 6's ``words`` (batch (...)) mixed with a copy of the ``remembered`` words (..., M; -1: none), the
        gate and the attention's query read from ``inputs`` (..., H), eq. 6's own; ``embedding``: the words'."""
        scores = torch.zeros(remembered.shape, dtype=inputs.dtype, device=inputs.device)
        if self.query is not None:
            keys = embedding(remembered.clamp(min=0))  # (..., M, E)
            scores = (keys @ self.query(inputs)[..., None])[..., 0]
        return CopyMixture(words, self.gate(inputs).squeeze(-1), remembered, scores)


class CopyMixture(TorchDistribution):
    """(1 - g) ``words`` + g sum_j a_j [``remembered``_j = x], g = sigmoid(``gate_logits``), a = softmax of
    ``scores`` over the places that hold a word, where one does; ``words`` alone elsewhere. Observed values may
    broadcast against the batch (a (B,) word for (U, B) rows)."""

    arg_constraints: dict = {}

    def __init__(self, words: TorchDistribution, gate_logits: torch.Tensor, remembered: torch.Tensor,
                 scores: torch.Tensor) -> None:
        self.words, self.gate_logits, self.remembered = words, gate_logits, remembered
        self.copy_logits = torch.log_softmax(torch.where(remembered >= 0, scores, UNHELD), -1)  # log a_j
        super().__init__(words.batch_shape, words.event_shape, validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return self.words.support

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        held = (self.remembered >= 0).any(-1)
        copied = torch.where(self.remembered == value[..., None], self.copy_logits, UNHELD).logsumexp(-1)
        own = self.words.log_prob(value)
        mixed = torch.logaddexp(F.logsigmoid(-self.gate_logits) + own, F.logsigmoid(self.gate_logits) + copied)
        return torch.where(held, mixed, own)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise ValueError("CopyMixture draws one value per row")
        held = self.remembered >= 0
        pick = Categorical(logits=self.copy_logits).sample()  # one remembered word, by its weight
        copied = self.remembered.gather(-1, pick[..., None])[..., 0]
        copying = held.any(-1) & (torch.rand_like(self.gate_logits) < torch.sigmoid(self.gate_logits))
        return torch.where(copying, copied, self.words.sample())
