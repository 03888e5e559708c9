"""Importance-sampled marginal likelihood of a latent-variable language model (Ji et al. 2017, eq. 11).

For each document, N annotations z_i are drawn from the proposal q(z | x) (the guide) in ONE vectorised run
over a ``particles`` plate; the model is replayed on them, and

    log p_hat(x) = logsumexp_i [log p(x, z_i) - log q(z_i | x)] - log N,

an unbiased estimate of p(x) (so log p_hat is biased low, less so as N grows). Beside it we report the
per-document ELBO (the mean log weight, a lower bound), the effective sample size (sum w)^2 / sum w^2 and the
Pareto k-hat of the weights from ArviZ's PSIS (k > 0.7: the estimate is unreliable).

The functions here take any model and guide and keep the whole run's site densities (proposal refinement
differentiates the guide's). For EntityNLM,
:func:`inference.algorithms.smc.importance_sampling` gives the same draws and
weights, bit for bit, from the model and proposal run in lockstep, in memory flat in the document's length:
what ``python -m inference.marginal_ppl --sampler is`` uses.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from pyro import poutine

from generative.layers.batch import DocumentBatch
from generative.layers.density import LogDensity

Program = Callable[..., None]  # model(batch, particles) / guide(batch, particles)


def importance_log_densities(
    model: Program, guide: Program, batch: DocumentBatch, particles: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(x, z_i), log q(z_i | x)), each (P, B), for z_i drawn from the guide in one vectorised run.

    Every site counts: the model's observed words and latent R/E/L/noise (conditioned on the guide's draws),
    the guide's latent sites; masked sites contribute 0 on both sides, so the weights are exact. Only the
    guide's density carries gradients (proposal refinement differentiates it); the model is scored without.
    """
    with LogDensity() as guide_density:
        guide(batch, particles)
    with torch.no_grad(), LogDensity() as model_density:
        poutine.condition(model, data=guide_density.latent_values)(batch, particles)
    return model_density.total, guide_density.total


def log_importance_weights(model: Program, guide: Program, batch: DocumentBatch, particles: int) -> torch.Tensor:
    """(P, B): log p(x, z_i) - log q(z_i | x) per particle and document, z_i drawn from the guide."""
    log_p, log_q = importance_log_densities(model, guide, batch, particles)
    return log_p - log_q


def log_mean_exp(log_weights: torch.Tensor) -> torch.Tensor:
    """log of the mean weight over dim 0 (the particles)."""
    return torch.logsumexp(log_weights, 0) - math.log(log_weights.shape[0])


def effective_sample_size(log_weights: torch.Tensor) -> torch.Tensor:
    """(sum w)^2 / sum w^2 over dim 0 (the particles), between 1 and N: 1 / sum of the squared normalised weights
    (a softmax: one kernel, where each logsumexp is about eight small ops on the CPU, and SMC asks at every
    token)."""
    return 1 / torch.softmax(log_weights, 0).square().sum(0)


def psis_khat(log_weights: torch.Tensor) -> np.ndarray:
    """(B,) Pareto k-hat of each document's log weights (P, B), from ArviZ's PSIS (k > 0.7: unreliable).

    ArviZ fits a generalised Pareto distribution to the largest min(0.2 N, 3 sqrt N) weights and returns
    infinity when fewer than 5 of them lie strictly above the cut-off: always at N <= 20, and also when the
    largest weights are tied or the others underflow (more than about 708 nats below the largest).
    """
    import arviz as az  # imported here: arviz is slow to import and only the diagnostics need it

    if log_weights.shape[0] < 2:  # one weight has no tail (ArviZ fails on it): as "too few tail weights"
        return np.full(log_weights.shape[1], np.inf)
    as_numpy = log_weights.detach().double().cpu().numpy().T
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # arviz warns on few samples and on its own deprecations
        return np.asarray(az.psislw(as_numpy)[1])


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
        return log_mean_exp(self.log_weights)

    @property
    def elbo(self) -> torch.Tensor:
        """(B,) the mean log weight: a lower bound on log p(x) in expectation."""
        return self.log_weights.mean(dim=0)

    @property
    def ess(self) -> torch.Tensor:
        """(B,) effective sample size (sum w)^2 / sum w^2, between 1 and N."""
        return effective_sample_size(self.log_weights)

    def normalized_weights(self) -> torch.Tensor:
        """(P, B) the self-normalised weights of each document's particles."""
        return torch.softmax(self.log_weights, dim=0)

    def psis_khat(self) -> np.ndarray:
        """(B,) Pareto k-hat of each document's weights (ArviZ PSIS): see :func:`psis_khat`."""
        return psis_khat(self.log_weights)

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
