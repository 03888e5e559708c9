"""The cache control of benchmarks/cache_baseline.py: the RNNLM mixed with the cache (the first token of a document
by the RNNLM alone). The cache's shares themselves: tests/test_document_cache.py."""

from __future__ import annotations

import math

import torch

from benchmarks.cache_baseline import nats_per_token


def test_the_mixture_at_lambda_0_is_the_rnnlm_and_otherwise_mixes_after_the_first_token():
    log_rnnlm = torch.log(torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64))
    cache = torch.tensor([[0.0, 0.0, 0.5]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True]])
    assert math.isclose(nats_per_token([(log_rnnlm, cache, mask)], 0.0), -math.log(0.1 * 0.2 * 0.3) / 3)
    mixed = 0.1 * (0.8 * 0.2) * (0.8 * 0.3 + 0.2 * 0.5)
    assert math.isclose(nats_per_token([(log_rnnlm, cache, mask)], 0.2), -math.log(mixed) / 3)
