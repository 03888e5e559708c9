"""Eq. 6 with a copy of the mentioned entity's own words: ours, off by default (``EntityNLMConfig.entity_words``).

EntityNLM draws a mention's words from softmax(W (h_{t-1} + W_e e_current)) (eq. 6): a name the entity has borne
is only as likely again as its embedding makes it, while a coreference resolver's strongest evidence is exactly
that ("Smith" after "Mr. Smith"). With ``entity_words = M`` every entity remembers the last M words of its
mention tokens (:class:`~generative.entitynlm.state.EntityTable`), and a mention token's word is drawn from

    p(x_t) = (1 - g_t) softmax(...)_x + g_t * n(x) / n,    g_t = sigmoid(w^T (h_{t-1} + W_e e_current) + b),

n(x) the times x is among the n words the entity remembers: a copy mechanism as in reference-aware language models
(Yang et al. 2017), read here by the posterior over E. A new entity, or a token outside mentions, remembers
nothing and draws from eq. 6 alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution, constraints
from torch import nn

from generative.layers.categorical import Categorical

INITIAL_GATE = -3.0  # b at initialisation, w = 0: g = 0.047, so a model given the copy starts near eq. 6


class EntityWordCopy(nn.Module):
    """The copy gate g_t of a mention token, from what eq. 6's softmax reads (h_{t-1} + W_e e_current)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, INITIAL_GATE)

    def forward(self, words: TorchDistribution, inputs: torch.Tensor, remembered: torch.Tensor) -> CopyMixture:
        """Eq. 6's ``words`` (batch (...)) mixed with a copy of the ``remembered`` words (..., M; -1: none), the
        gate read from ``inputs`` (..., H), eq. 6's own."""
        return CopyMixture(words, self.gate(inputs).squeeze(-1), remembered)


class CopyMixture(TorchDistribution):
    """(1 - g) ``words`` + g Uniform(``remembered``), g = sigmoid(``gate_logits``), where a word is remembered;
    ``words`` alone elsewhere. Observed values may broadcast against the batch (a (B,) word for (U, B) rows)."""

    arg_constraints: dict = {}

    def __init__(self, words: TorchDistribution, gate_logits: torch.Tensor, remembered: torch.Tensor) -> None:
        self.words, self.gate_logits, self.remembered = words, gate_logits, remembered
        super().__init__(words.batch_shape, words.event_shape, validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return self.words.support

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        held = (self.remembered >= 0).sum(-1)
        share = (self.remembered == value[..., None]).sum(-1) / held.clamp(min=1)
        own = self.words.log_prob(value)
        mixed = torch.logaddexp(F.logsigmoid(-self.gate_logits) + own, F.logsigmoid(self.gate_logits) + share.log())
        return torch.where(held > 0, mixed, own)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise ValueError("CopyMixture draws one value per row")
        held = self.remembered >= 0
        pick = Categorical(logits=torch.where(held, 0.0, -1e4)).sample()  # one remembered word, uniformly
        copied = self.remembered.gather(-1, pick[..., None])[..., 0]
        copying = held.any(-1) & (torch.rand_like(self.gate_logits) < torch.sigmoid(self.gate_logits))
        return torch.where(copying, copied, self.words.sample())
