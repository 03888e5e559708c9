"""Importance sampling and SMC as estimators of log p(x): on tiny documents of two and three sentences, where
p(x) can be enumerated, both converge to the exact value, SMC resampling at every inner sentence end."""

from __future__ import annotations

import pyro
import torch

from generative.entitynlm.lockstep import EntityNLMParticles
from generative.layers.batch import DocumentBatch
from inference.algorithms.importance import estimate_marginal, log_mean_exp
from inference.algorithms.smc import sample_structures
from tests.test_entitynlm import EOS, exact_log_marginal, tiny_batch, tiny_models

# "</s>" is word 3; the last sentence end is no resampling point, so these have one and two
DOCUMENTS = ([4, EOS, 5, EOS], [4, EOS, 5, EOS, 4, EOS])
COPIES, PARTICLES = 64, 500  # independent runs of each document, all in one batch


def sentence_numbers(words: list[int]) -> list[int]:
    """Each token's sentence: the number of sentence ends before it."""
    return [words[:t].count(EOS) for t in range(len(words))]


def copies_batch() -> DocumentBatch:
    """COPIES copies of each document: each copy has its own particles (and resamplings), an independent run."""
    return tiny_batch([{"words": words, "sentence": sentence_numbers(words)}
                       for words in DOCUMENTS for _ in range(COPIES)])


def pooled(log_marginal: torch.Tensor) -> torch.Tensor:
    """(documents,) log of the mean of p_hat(x) over each document's copies: unbiased estimates averaged, so it
    converges to log p(x) as COPIES x PARTICLES grows (the mean of log p_hat would stay below it)."""
    return log_mean_exp(log_marginal.view(len(DOCUMENTS), COPIES).T)


def test_importance_sampling_and_smc_converge_to_the_enumerated_marginal():
    model, proposal = tiny_models()
    exact = torch.stack([exact_log_marginal(model, words, sentence_numbers(words))[0] for words in DOCUMENTS])
    batch = copies_batch()
    pyro.set_rng_seed(0)
    importance = estimate_marginal(model.model, proposal.guide, batch, PARTICLES)
    smc = sample_structures(EntityNLMParticles(model, proposal, batch, PARTICLES), EOS, "sentence", ess_threshold=1.0)
    inner_sentence_ends = torch.tensor([words[:-1].count(EOS) for words in DOCUMENTS])
    assert torch.equal(smc.resamplings.view(len(DOCUMENTS), COPIES), inner_sentence_ends[:, None].expand(-1, COPIES))
    # one run's log p_hat has a spread of 0.04-0.1 nats here; pooled over 32,000 particles, about 0.01
    for estimate in (importance.log_marginal, smc.log_marginal):
        torch.testing.assert_close(pooled(estimate), exact, atol=0.04, rtol=0)
    # the check has teeth: SMC's last stage alone, without the earlier stages' mean weights, is 3-7 nats off
    assert ((pooled(log_mean_exp(smc.log_weights)) - exact).abs() > 1).all()
