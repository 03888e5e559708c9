"""A categorical distribution for small tensors drawn from at every step: logits normalised by one
``log_softmax``, draws by the inverse of the cumulative distribution.

torch's ``Categorical`` normalises logits by subtracting their ``logsumexp``, which on the CPU runs as about
eight small ops (max, subtract, exp, sum, log, add and the checks for infinities): on a sampler step's small
tensors (two mention types, a few rows of entity slots or lengths) it was 5-8 times slower than one
``log_softmax``, and EntityNLM's step normalises a dozen of them. Its draws go through ``torch.multinomial``,
about 40 us a call on such tensors, where a cumulative sum, one uniform per draw and a count take a few.
"""

from __future__ import annotations

import pyro.distributions as dist
import torch


class Categorical(dist.Categorical):
    """Pyro's ``Categorical``; given ``logits``, they are normalised by ``log_softmax`` (the same distribution as
    ``dist.Categorical(logits=logits)``, to rounding). A draw is the first category whose cumulative probability
    exceeds a uniform share of the total: the same distribution as torch's draws, from other random numbers."""

    def __init__(self, probs: torch.Tensor | None = None, logits: torch.Tensor | None = None,
                 validate_args: bool | None = None) -> None:
        if logits is None or probs is not None or logits.dim() < 1:  # torch's own checks and the probs form
            super().__init__(probs, logits, validate_args)
            return
        self.logits = torch.log_softmax(logits, dim=-1)
        self._param, self._num_events = self.logits, logits.shape[-1]
        torch.distributions.Distribution.__init__(self, logits.shape[:-1], validate_args=validate_args)

    def expand(self, batch_shape: torch.Size, _instance: Categorical | None = None) -> Categorical:
        return super().expand(batch_shape, self._get_checked_instance(Categorical, _instance))

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        """torch's, as Pyro's is for a value that is not its enumerated support; without Pyro's test for that (it
        compares ``id(self)``, which ``torch.compile`` cannot trace: a graph break at every site)."""
        return torch.distributions.Categorical.log_prob(self, value)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        cdf = self.probs.cumsum(-1)
        uniform = torch.rand((*self._extended_shape(sample_shape), 1), dtype=cdf.dtype, device=cdf.device)
        # the categories whose cumulative probability is at most u * total precede the draw (u < 1: never past the
        # last; a category of probability 0 adds nothing to the cumulative sum, so it is never drawn)
        return (cdf <= uniform * cdf[..., -1:]).sum(-1)
