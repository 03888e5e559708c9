"""Importance-sampled marginal likelihood of a latent-variable language model (Ji et al. 2017, eq. 11).

For each document, N annotations z_i are drawn from the proposal q(z | x) (the guide) in ONE vectorised run
over a ``particles`` plate; the model is replayed on them, and

    log p_hat(x) = logsumexp_i [log p(x, z_i) - log q(z_i | x)] - log N,

an unbiased estimate of p(x) (so log p_hat is biased low, less so as N grows). Beside it we report the
per-document ELBO (the mean log weight, a lower bound), the effective sample size (sum w)^2 / sum w^2 and the
Pareto k-hat of the weights from ArviZ's PSIS (k > 0.7: the estimate is unreliable).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample

from generative.batch import DocumentBatch

Program = Callable[..., None]  # model(batch, particles) / guide(batch, particles)


class LogDensity(Messenger):
    """Sums the (masked) log-probabilities of a program's sample sites as it runs, keeping only the values of
    its latent sites: unlike a trace, it holds no distribution objects, so memory stays flat in the number of
    steps. ``total`` is (P, B) under the programs' plates."""

    def __init__(self) -> None:
        super().__init__()
        self.total: torch.Tensor | float = 0.0
        self.latent_values: dict[str, torch.Tensor] = {}

    def _postprocess_message(self, msg: dict) -> None:
        if msg["type"] != "sample" or site_is_subsample(msg):
            return
        log_prob = msg["fn"].log_prob(msg["value"])
        self.total = self.total + scale_and_mask(log_prob, msg["scale"], msg["mask"])
        if not msg["is_observed"]:
            self.latent_values[msg["name"]] = msg["value"]


def log_importance_weights(model: Program, guide: Program, batch: DocumentBatch, particles: int) -> torch.Tensor:
    """(P, B): log p(x, z_i) - log q(z_i | x) per particle and document, z_i drawn from the guide.

    Every site counts: the model's observed words and latent R/E/L/noise (conditioned on the guide's draws),
    the guide's latent sites. Masked sites contribute 0 on both sides, so the weights are exact.
    """
    with LogDensity() as guide_density:
        guide(batch, particles)
    with LogDensity() as model_density:
        poutine.condition(model, data=guide_density.latent_values)(batch, particles)
    return model_density.total - guide_density.total


@dataclass(frozen=True)
class ImportanceEstimate:
    """Log importance weights (P, B) of B documents and what follows from them."""

    log_weights: torch.Tensor

    @property
    def particles(self) -> int:
        return self.log_weights.shape[0]

    @property
    def log_marginal(self) -> torch.Tensor:
        """(B,) log p_hat(x): the log of the mean weight."""
        return torch.logsumexp(self.log_weights, dim=0) - math.log(self.particles)

    @property
    def elbo(self) -> torch.Tensor:
        """(B,) the mean log weight: a lower bound on log p(x) in expectation."""
        return self.log_weights.mean(dim=0)

    @property
    def ess(self) -> torch.Tensor:
        """(B,) effective sample size (sum w)^2 / sum w^2, between 1 and N."""
        return torch.exp(2 * torch.logsumexp(self.log_weights, 0) - torch.logsumexp(2 * self.log_weights, 0))

    def normalized_weights(self) -> torch.Tensor:
        """(P, B) the self-normalised weights of each document's particles."""
        return torch.softmax(self.log_weights, dim=0)

    def psis_khat(self) -> np.ndarray:
        """(B,) Pareto k-hat of each document's weights (ArviZ PSIS); needs a few particles to be meaningful."""
        import arviz as az  # imported here: arviz is slow to import and only the diagnostics need it

        log_weights = self.log_weights.detach().double().cpu().numpy().T
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # arviz warns on few samples and on its own deprecations
            return np.asarray(az.psislw(log_weights)[1])

    def check_finite(self, what: str) -> None:
        """Raise instead of letting NaN or infinity reach a reported number."""
        if not torch.isfinite(self.log_weights).all():
            bad = (~torch.isfinite(self.log_weights)).any(0).nonzero().flatten().tolist()
            raise FloatingPointError(f"{what}: non-finite importance weights for documents {bad}")


@torch.no_grad()
def estimate_marginal(model: Program, guide: Program, batch: DocumentBatch, particles: int) -> ImportanceEstimate:
    """The importance-sampling estimate of log p(x) for every document of ``batch`` with ``particles`` samples."""
    estimate = ImportanceEstimate(log_importance_weights(model, guide, batch, particles))
    estimate.check_finite(f"documents {[key[0] for key in batch.keys]}")
    return estimate
