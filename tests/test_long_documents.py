"""Book-length input through EntityNLM's jobs: one document of 15,000 tokens (the embedded sample corpus's
documents end to end: a long chapter, over 1,000 resamplings), a small model, two particles. What these
check is that nothing breaks or grows out of bounds on a long text: the sampler without history (the
log-likelihood), the sampler with its genealogy traced back (the posterior), the structures and the sparse
marginals. Each run takes about 25 s on a CPU core; time and memory up to 128,000 tokens are measured by
``benchmarks/long_documents.py``, not here (raw-text coreference of a long text:
tests/test_long_resolve.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from coref.corpora.preprocess import EOS
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.layers.batch import make_batch
from inference.algorithms.config import settings_for
from inference.algorithms.posterior import Posterior, antecedent_rankings, coreference_marginals, posteriors
from inference.algorithms.smc import ParticleStructures, sample_structures
from inference.runtime import batch_seed, set_seed
from tests.test_lockstep import sample_corpus, small_models

BOOK_TOKENS = 15_000
ALWAYS = 1.0  # resample at every sentence end whose ESS is below N: two particles resample often


@pytest.fixture(scope="module")
def book() -> tuple[int, ParticleStructures, Posterior]:
    """The book's length, its log-likelihood run and its posterior, from the same random state."""
    documents, vocabulary = sample_corpus(BOOK_TOKENS)
    model, proposal = small_models(vocabulary)
    set_seed(batch_seed(0, 0))  # what posteriors(..., seed=0) seeds its one batch with
    system = EntityNLMParticles(model, proposal, make_batch(documents, vocabulary), 2)
    likelihood = sample_structures(system, vocabulary.index(EOS), "sentence", ALWAYS, history=False)
    settings = settings_for("posterior", "paper", sampler="smc", resample="sentence", particles=2, ess_threshold=ALWAYS)
    (posterior,) = posteriors(model, proposal, documents, vocabulary, settings, progress=False)
    return len(documents[0].tokens), likelihood, posterior


def test_the_log_likelihood_of_a_book_keeps_no_history(book):
    tokens, likelihood, posterior = book
    assert tokens >= BOOK_TOKENS and likelihood.R.shape == (2, 1, 0)
    assert torch.isfinite(likelihood.log_marginal).all() and likelihood.resamplings.item() > 1_000
    assert likelihood.log_marginal.item() == posterior.log_marginal  # keeping the history changes no number


def test_the_posterior_of_a_book_is_traced_back_and_summarised_sparsely(book):
    tokens, _, posterior = book
    assert posterior.weights.sum() == pytest.approx(1.0) and posterior.resamplings > 1_000
    mentions = [structure.mentions for structure in posterior.structures]
    assert all(len(found) > 1_000 for found in mentions)  # annotations of the whole book, not of its start
    assert max(mention.end for found in mentions for mention in found) > 0.9 * tokens
    marginals = coreference_marginals(posterior.structures, posterior.weights)
    assert len(marginals.entities.span) == sum(len(found) for found in mentions)  # a row per mention, no more
    assert np.isclose(marginals.mention.max(), 1.0)
    rankings = antecedent_rankings(posterior.structures, posterior.weights, top=3)
    assert len(rankings) == len(marginals.spans) and all(len(r.antecedents) <= 3 for r in rankings)


def test_the_benchmark_draws_the_docs_figure_only_from_its_default_run(monkeypatch):
    """``--plot`` defaults to the docs' figure with the default ``--out``, and beside the JSON with another one: a
    measurement written elsewhere does not redraw docs/img/long_documents.png."""
    from benchmarks import long_documents

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert long_documents.parse_args([]).plot == "docs/img/long_documents.png"
    assert long_documents.parse_args(["--out", "runs/book/x"]).plot == str(Path("runs/book/x/long_documents.png"))
    assert long_documents.parse_args(["--out", "runs/x", "--plot", "runs/y.png"]).plot == "runs/y.png"

