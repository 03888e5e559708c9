"""The LSTM language model baseline: its likelihood, its Pyro site, padding, training and evaluation mode."""

from __future__ import annotations

import pyro
import pytest
import torch

from coref.corpora.preprocess import Vocabulary, preprocess_documents
from coref.corpora.registry import load_corpus
from generative.baselines.rnnlm import RNNLM, RNNLMConfig
from generative.layers.batch import DocumentBatch, make_batch
from tests.training import adam_losses

torch.set_flush_denormal(True)


@pytest.fixture(scope="module")
def corpus() -> tuple[list, Vocabulary]:
    documents, _ = preprocess_documents(load_corpus("sample", "train").documents)
    return documents, Vocabulary.build(documents)


@pytest.fixture(autouse=True)
def fresh_param_store() -> None:
    pyro.clear_param_store()


def tiny_model(vocabulary: Vocabulary, softmax: str = "class", dropout: float = 0.2) -> RNNLM:
    torch.manual_seed(0)
    config = RNNLMConfig(len(vocabulary), embedding_size=16, hidden_size=16, dropout=dropout, softmax=softmax)
    return RNNLM(config, vocabulary.counts)


def manual_log_likelihood(model: RNNLM, batch: DocumentBatch) -> torch.Tensor:
    """Token by token: the LSTM cell stepped by hand, each real target scored alone under the output layer."""
    cell = torch.nn.LSTMCell(model.config.embedding_size, model.config.hidden_size)
    cell.load_state_dict({name[: -len("_l0")]: value for name, value in model.encoder.lstm.state_dict().items()})
    totals = []
    for b in range(batch.size):
        state, total = None, torch.tensor(0.0)
        for t in range(int(batch.lengths[b])):
            state = cell(model.encoder.embedding(batch.inputs[b, t : t + 1]), state)
            total = total + model.softmax(state[0][0]).log_prob(batch.words[b, t])
        totals.append(total)
    return torch.stack(totals)


@pytest.mark.parametrize("softmax", ["class", "full"])
def test_log_likelihood_is_the_sum_of_next_word_log_probs(corpus, softmax: str) -> None:
    documents, vocabulary = corpus
    model = tiny_model(vocabulary, softmax).eval()
    batch = make_batch(documents[:3], vocabulary)
    with torch.no_grad():
        log_likelihood = model.log_likelihood(batch)
        assert log_likelihood.shape == (3,)
        assert torch.allclose(log_likelihood, manual_log_likelihood(model, batch), atol=1e-3)


def test_padding_is_irrelevant(corpus) -> None:
    documents, vocabulary = corpus
    model = tiny_model(vocabulary).eval()
    batch = make_batch(documents, vocabulary)
    shortest = int(batch.lengths.argmin())
    assert int(batch.lengths[shortest]) < batch.steps  # it is padded in the batch
    with torch.no_grad():
        alone = model.log_likelihood(make_batch([documents[shortest]], vocabulary))
        assert torch.allclose(model.log_likelihood(batch)[shortest], alone[0], atol=1e-4)


def test_pyro_trace_has_the_observed_words(corpus) -> None:
    documents, vocabulary = corpus
    model = tiny_model(vocabulary).eval()
    batch = make_batch(documents, vocabulary)
    trace = pyro.poutine.trace(model.model).get_trace(batch)
    site = trace.nodes["X"]
    assert site["is_observed"] and torch.equal(site["value"], batch.words)
    assert site["fn"].batch_shape == (batch.size,) and site["fn"].event_shape == (batch.steps,)
    assert [frame.name for frame in site["cond_indep_stack"]] == ["documents"]
    masked = torch.where(batch.mask, site["fn"].base_dist.base_dist.log_prob(batch.words), 0.0)
    assert torch.allclose(trace.log_prob_sum(), masked.sum())
    assert torch.allclose(model.log_likelihood(batch), masked.sum(-1))
    # Trace_ELBO with no latent site is the negative log-likelihood, and sees every parameter.
    params = {name for name, node in trace.nodes.items() if node["type"] == "param"}
    assert len(params) == len(list(model.parameters()))
    loss = pyro.infer.Trace_ELBO().loss(model.model, lambda batch: None, batch)
    assert loss == pytest.approx(-masked.sum().item(), rel=1e-5)


def test_eval_mode_is_deterministic_and_train_mode_drops_out(corpus) -> None:
    documents, vocabulary = corpus
    model = tiny_model(vocabulary, dropout=0.5)
    batch = make_batch(documents[:2], vocabulary)
    with torch.no_grad():
        assert not torch.equal(model.log_likelihood(batch), model.log_likelihood(batch))
        model.eval()
        assert torch.equal(model.log_likelihood(batch), model.log_likelihood(batch))


@pytest.mark.parametrize("softmax", ["class", "full"])
def test_adam_steps_reduce_the_loss(corpus, softmax: str) -> None:
    documents, vocabulary = corpus
    model = tiny_model(vocabulary, softmax, dropout=0.0)
    batch = make_batch(documents, vocabulary)
    losses = adam_losses(model, batch)
    assert losses[-1] < losses[0] - 0.5


def test_counts_must_match_the_vocabulary(corpus) -> None:
    _, vocabulary = corpus
    with pytest.raises(ValueError, match="counts"):
        RNNLM(RNNLMConfig(len(vocabulary) + 1), vocabulary.counts)
