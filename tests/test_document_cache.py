"""The unigram cache of the document so far (generative/layers/document_cache.py): its shares against a plain
count, its mixture as a distribution, the running cache against the whole-document shares, and EntityNLM with it:
a repeated word gains what the equation says, and the main job gives its baselines the same cache (and the
notebook API the same figure) (that the
estimate stays exact with it, lookahead included: test_entity_words). That every path
of EntityNLM computes the same model with the cache is checked by ``EQ6_VARIANTS`` in test_entitynlm, test_lockstep
and test_gold."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import inference.api as elm
from coref.corpora.registry import load_corpus
from generative.entitynlm.state import Annotation
from generative.layers.batch import make_batch
from generative.layers.document_cache import CacheMixture, DocumentCache, cache_shares, check_cache_weight
from generative.layers.softmax import ClassFactoredCategorical, make_softmax
from inference.data import prepared_documents
from inference.evaluation.marginal_ppl import MarginalConfig, marginal_perplexity
from inference.training.checkpoint import Checkpoint, language_model, pretrained
from tests.test_entitynlm import tiny_batch, tiny_models


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=12), min_size=1, max_size=3))
def test_the_shares_are_each_tokens_count_among_the_tokens_before_it(rows):
    steps = max(map(len, rows))
    words = torch.tensor([row + [0] * (steps - len(row)) for row in rows])  # padded with word 0 at the end
    shares = cache_shares(words)
    for row, got in zip(rows, shares):
        expected = [row[:t].count(word) / t if t else 0.0 for t, word in enumerate(row)]
        assert got[:len(row)].tolist() == pytest.approx(expected)


def test_the_mixture_is_a_distribution_and_the_model_alone_before_any_word():
    torch.manual_seed(0)
    softmax = make_softmax("class", 4, [5, 3, 3, 2, 1, 1])
    words = softmax(torch.randn(2, 4))  # two documents
    cache = DocumentCache(0.25, documents=2, vocab_size=6, device=torch.device("cpu"))
    vocabulary = torch.arange(6)[:, None].expand(6, 2)
    torch.testing.assert_close(cache.mix(words).log_prob(vocabulary), words.log_prob(vocabulary))  # empty cache
    cache.add(torch.tensor([3, 1]), torch.tensor([True, True]))
    cache.add(torch.tensor([3, 2]), torch.tensor([True, False]))  # document 1 has ended
    mixed = cache.mix(words).log_prob(vocabulary)  # (V, B)
    torch.testing.assert_close(mixed.logsumexp(0), torch.zeros(2))
    own = words.log_prob(vocabulary).exp()
    torch.testing.assert_close(mixed[3, 0].exp(), 0.75 * own[3, 0] + 0.25)  # "3 3": all of the cache
    torch.testing.assert_close(mixed[2, 1].exp(), 0.75 * own[2, 1])  # the ended document's 2 was not counted
    torch.testing.assert_close(mixed[1, 1].exp(), 0.75 * own[1, 1] + 0.25)


@pytest.mark.parametrize("rows", [0, 3])
def test_the_cache_mixes_into_rows_of_chosen_documents_none_included(rows):
    """The lookahead's form: (K, 1 + top) rows of the K ``documents`` given, K = 0 at a step where no mention may
    start."""
    softmax = make_softmax("class", 4, [5, 3, 3, 2, 1, 1])
    cache = DocumentCache(0.5, documents=2, vocab_size=6, device=torch.device("cpu"))
    cache.add(torch.tensor([3, 1]), torch.tensor([True, True]))
    documents = torch.tensor([1, 0, 1])[:rows]
    words = ClassFactoredCategorical(torch.randn(rows, 2, 4), softmax, validate_args=False)  # as the samplers run
    mixed = cache.mix(words, documents).log_prob(torch.full((rows, 1), 1))
    own = words.log_prob(torch.full((rows, 1), 1)).exp()
    expected = torch.log(0.5 * own + 0.5 * (documents == 1).float()[:, None])
    torch.testing.assert_close(mixed, expected)


def test_the_running_cache_equals_the_whole_document_shares():
    words = torch.tensor([[4, 1, 4, 4, 2, 1], [0, 0, 5, 1, 1, 1]])
    cache = DocumentCache(0.4, documents=2, vocab_size=6, device=torch.device("cpu"))
    own = torch.full((2,), -2.0)
    stepped = []
    for t in range(words.shape[1]):
        counts, seen = cache.counts, cache.seen
        count = counts.gather(1, words[:, t, None])[:, 0]
        stepped.append(CacheMixture(_Fixed(own), counts, seen, 0.4).log_prob(words[:, t]))
        assert torch.equal(count / seen.clamp(min=1), cache_shares(words)[:, t])
        cache.add(words[:, t], torch.ones(2, dtype=torch.bool))
    shares = cache_shares(words)
    expected = torch.where(torch.arange(6) > 0, torch.log(0.6 * math.exp(-2.0) + 0.4 * shares), -2.0)
    torch.testing.assert_close(torch.stack(stepped, 1), expected)


def test_the_cache_draws_the_words_it_holds():
    torch.manual_seed(1)
    softmax = make_softmax("full", 3, [1] * 6)
    cache = DocumentCache(0.9, documents=1, vocab_size=6, device=torch.device("cpu"))
    cache.add(torch.tensor([5]), torch.tensor([True]))
    mixture = cache.mix(softmax(torch.zeros(4000, 1, 3)))  # uniform own distribution, 4,000 rows
    drawn = mixture.sample()
    assert drawn.shape == (4000, 1)
    assert (drawn == 5).float().mean().item() == pytest.approx(0.9 + 0.1 / 6, abs=0.02)


@pytest.mark.parametrize("weight", [-0.1, 1.0, 1.5])
def test_a_weight_outside_0_to_1_is_refused(weight):
    with pytest.raises(ValueError, match=r"lambda must be in \[0, 1\)"):
        check_cache_weight(weight)
    with pytest.raises(ValueError, match="lambda"):
        tiny_models(document_cache=weight)


def test_a_repeated_word_gains_what_the_cache_gives_it():
    """EntityNLM's x_t with the cache is log((1 - lambda) p + lambda n_<t(x_t) / t), p the model's eq. 6."""
    model, _ = tiny_models(document_cache=0.3)
    plain, _ = tiny_models()
    plain.load_state_dict(model.state_dict())
    row = {"words": [4, 1, 4], "R": [1, 0, 1], "E": [1, 0, 1], "L": [1, 1, 1]}
    batch = tiny_batch([row])
    with torch.no_grad():
        cached = model.token_log_probs(batch, Annotation.of(batch)).X[0]
        alone = plain.token_log_probs(batch, Annotation.of(batch)).X[0]
    torch.testing.assert_close(cached[0], alone[0])
    torch.testing.assert_close(cached[1].exp(), 0.7 * alone[1].exp())  # "1" not seen before
    torch.testing.assert_close(cached[2].exp(), 0.7 * alone[2].exp() + 0.3 * 0.5)  # "4" once in two


def test_the_main_job_gives_entitynlm_and_its_baseline_the_same_cache():
    """``--document-cache``: the RNNLM baseline's perplexity is its own per-token probabilities mixed with a plain
    count of each document's earlier words, and EntityNLM's estimate changes with the cache (its model reads it)."""
    checkpoint = Checkpoint.load(pretrained("rnnlm.pt"))
    rnnlm = language_model(checkpoint)
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    batch = make_batch(documents, checkpoint.vocabulary)
    with torch.no_grad():
        own = rnnlm.token_log_probs(batch).exp()
    total, tokens = 0.0, 0
    for row, words in enumerate(batch.words.tolist()):
        length = int(batch.mask[row].sum())
        for t in range(length):
            share = words[:t].count(words[t]) / t if t else None
            p = float(own[row, t]) if share is None else 0.8 * float(own[row, t]) + 0.2 * share
            total, tokens = total + math.log(p), tokens + 1
    cached = marginal_perplexity(MarginalConfig.of(particles=4, document_cache=0.2))
    plain = marginal_perplexity(MarginalConfig.of(particles=4))
    assert cached["document_cache"] == 0.2 and cached["tokens"] == tokens
    assert cached["baselines"]["rnnlm"] == pytest.approx(math.exp(-total / tokens), rel=1e-5)
    api = elm.load("rnnlm").log_likelihood(load_corpus("sample", "test", None).documents, document_cache=0.2)
    assert api.perplexity == pytest.approx(math.exp(-total / tokens), rel=1e-5)  # the notebook API's figure too
    assert cached["baselines"]["rnnlm"] < plain["baselines"]["rnnlm"]
    assert cached["perplexity"] != pytest.approx(plain["perplexity"], rel=1e-3)


class _Fixed(torch.distributions.Distribution):
    """A distribution that gives every value the same log-probability (the model's part of a mixture, held fixed)."""

    arg_constraints: dict = {}

    def __init__(self, log_prob: torch.Tensor) -> None:
        self.value = log_prob
        super().__init__(log_prob.shape, validate_args=False)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return self.value.expand(value.shape)
