"""The cache control of benchmarks/cache_baseline.py: each token's share among the tokens before it, and the
RNNLM mixed with it (the first token of a document by the RNNLM alone)."""

from __future__ import annotations

import math

import torch

from benchmarks.cache_baseline import cache_probabilities, nats_per_token


def test_the_cache_is_each_words_share_of_the_tokens_before_it():
    words = torch.tensor([[5, 6, 5, 5, 0], [7, 7, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    expected = torch.tensor([[0, 0, 1 / 2, 2 / 3, 0], [0, 1, 0, 0, 0]], dtype=torch.float64)
    assert torch.allclose(cache_probabilities(words, mask), expected)


def test_the_mixture_at_lambda_0_is_the_rnnlm_and_otherwise_mixes_after_the_first_token():
    log_rnnlm = torch.log(torch.tensor([[0.1, 0.2, 0.3]], dtype=torch.float64))
    cache = torch.tensor([[0.0, 0.0, 0.5]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True]])
    assert math.isclose(nats_per_token([(log_rnnlm, cache, mask)], 0.0), -math.log(0.1 * 0.2 * 0.3) / 3)
    mixed = 0.1 * (0.8 * 0.2) * (0.8 * 0.3 + 0.2 * 0.5)
    assert math.isclose(nats_per_token([(log_rnnlm, cache, mask)], 0.2), -math.log(mixed) / 3)
