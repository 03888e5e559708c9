"""A few optimiser steps on one batch, for the tests that check a model learns."""

from __future__ import annotations

import torch

from generative.layers.batch import DocumentBatch
from generative.registry import LanguageModel


def adam_losses(model: LanguageModel, batch: DocumentBatch, steps: int = 15, lr: float = 0.02) -> list[float]:
    """The per-token negative log-likelihood before each of ``steps`` Adam steps on ``batch``."""
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = -model.log_likelihood(batch).sum() / batch.num_tokens
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses
