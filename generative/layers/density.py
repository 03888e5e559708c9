"""Log-densities of Pyro programs, summed site by site as they run."""

from __future__ import annotations

import torch
from pyro.distributions.util import scale_and_mask
from pyro.poutine.messenger import Messenger
from pyro.poutine.util import site_is_subsample


class LogDensity(Messenger):
    """Sums the (masked) log-probabilities of a program's sample sites as it runs: all of them, or only the
    observed (``observed=True``) or latent (``observed=False``) ones, less those whose names start with one of
    ``ignore``; keeps the values of the latent sites.

    Unlike a trace it holds no distribution objects, so memory stays flat in the number of steps. ``total``
    keeps the dimensions the program's plates give (P, B for the models here).
    """

    def __init__(self, observed: bool | None = None, ignore: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.observed = observed
        self.ignore = ignore
        self.total: torch.Tensor | float = 0.0
        self.latent_values: dict[str, torch.Tensor] = {}

    def _postprocess_message(self, msg: dict) -> None:
        if msg["type"] != "sample" or site_is_subsample(msg):
            return
        if not msg["is_observed"]:
            self.latent_values[msg["name"]] = msg["value"]
        if (self.observed is None or msg["is_observed"] == self.observed) and not msg["name"].startswith(self.ignore):
            log_prob = msg["fn"].log_prob(msg["value"])
            self.total = self.total + scale_and_mask(log_prob, msg["scale"], msg["mask"])
