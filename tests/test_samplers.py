"""Importance sampling and SMC as estimators of log p(x): on tiny documents of two and three sentences, where
p(x) can be enumerated, both converge to the exact value, SMC resampling at every inner sentence end."""

from __future__ import annotations

import pyro
import pytest
import torch

from generative.entitynlm.hints import CorefHints, StreamHint
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


# (resample, hint weight, lookahead): the paper's IS, SMC at sentence ends and after any token, and the settled
# proposal (the pipeline's hints and the model's lookahead) under token resampling
SAMPLERS = {"is": ("never", 0.0, 0.0), "smc-sentence": ("sentence", 0.0, 0.0), "smc-token": ("token", 0.0, 0.0),
            "settled": ("token", 0.5, 0.8)}
RUNS, FEW = 4_000, 3  # independent runs of one document (in one batch), each with few particles
# DOCUMENTS[1]: a pipeline that "reads" one-token mentions at 0 and 4, the second linked to the first
HINT = StreamHint(start=torch.tensor([0, 4]), length=torch.tensor([1, 1]), linked=torch.tensor([True, True]),
                  antecedents=torch.tensor([[-1], [0]]), probabilities=torch.tensor([[1.0, 0.0], [0.2, 0.8]]))


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_each_sampler_is_unbiased_in_p_of_x(name):
    """E[p_hat(x)] = p(x) at any N, not only in the limit: over RUNS independent runs with N = 3 particles, the mean
    of p_hat(x) / p(x) is 1 within four standard errors (a biased estimator, e.g. SMC without its earlier stages'
    mean weights, is many standard errors off: the last assertion)."""
    resample, weight, lookahead = SAMPLERS[name]
    model, proposal = tiny_models(new_entity_scale=0.01)
    words = DOCUMENTS[1]
    exact = exact_log_marginal(model, words, sentence_numbers(words))[0]
    batch = tiny_batch([{"words": words, "sentence": sentence_numbers(words)}] * RUNS)
    hints = CorefHints.of(batch, [HINT] * RUNS, weight) if weight else None
    pyro.set_rng_seed(0)
    sampled = sample_structures(EntityNLMParticles(model, proposal, batch, FEW, hints, lookahead), EOS, resample,
                                ess_threshold=1.0, history=False)
    ratio = (sampled.log_marginal - exact).exp()
    error = ratio.std() / RUNS**0.5
    assert abs(ratio.mean() - 1) < 4 * error, (ratio.mean(), error)
    if resample != "never":
        last_stage = (log_mean_exp(sampled.log_weights) - exact).exp()
        assert abs(last_stage.mean() - 1) > 10 * error
