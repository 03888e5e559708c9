"""inference.api: the notebook API gives the library's own numbers, reproducibly, and refuses bad input clearly."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import inference.api as elm
from coref.conll import parse_conll, write_conll
from coref.corpora import load_corpus
from coref.document import Document, Mention
from coref.metrics import evaluate
from coref.preprocess import preprocess_document
from generative.batch import make_batch
from inference import marginal_ppl
from inference.checkpoint import Checkpoint, entitynlm_modules, pretrained
from inference.common import set_seed
from inference.importance import estimate_marginal
from inference.posterior import tokenize

TEXT = "Anna met her brother. She thanked him."


@pytest.fixture(scope="module")
def entitynlm() -> elm.LanguageModel:
    return elm.load("entitynlm")


@pytest.fixture(scope="module")
def rnnlm() -> elm.LanguageModel:
    return elm.load("rnnlm")


@pytest.fixture(scope="module")
def posterior(entitynlm) -> elm.PosteriorCoreference:
    return entitynlm.posterior(TEXT, particles=40, seed=1)


def test_load_by_name_and_by_path(entitynlm, rnnlm):
    assert (entitynlm.kind, rnnlm.kind) == ("entitynlm", "rnnlm")
    by_path = elm.load(str(pretrained("rnnlm.pt")))
    assert by_path.kind == "rnnlm" and by_path.path == rnnlm.path
    text = repr(entitynlm)
    assert "'entitynlm'" in text and str(pretrained("entitynlm.pt")) in text and "10000 words" in text
    assert "device='cpu'" in text and "parameters=" in text


def test_an_unknown_name_or_a_bad_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="'entitynml': neither a bundled model"):
        elm.load("entitynml")
    with pytest.raises(ValueError, match="missing.pt"):
        elm.load(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt: not an entitylm checkpoint"):
        elm.load(tmp_path / "junk.pt")


def test_log_likelihood_is_the_importance_sampling_estimate_of_the_same_batch(entitynlm):
    result = entitynlm.log_likelihood(TEXT, particles=20, sampler="is", seed=3)
    checkpoint = Checkpoint.load(pretrained("entitynlm.pt"))
    model, proposal = entitynlm_modules(checkpoint)  # the checkpoint's proposal, as inference.marginal_ppl
    prepared, _ = preprocess_document(tokenize(TEXT), checkpoint.preprocess, checkpoint.vocabulary)
    batch = make_batch([prepared], checkpoint.vocabulary)
    set_seed(3)
    estimate = estimate_marginal(model.model, proposal.guide, batch, 20)
    assert result.tokens == batch.num_tokens == 9  # 7 words (punctuation dropped) and 2 sentence ends
    assert result.log_p == pytest.approx(estimate.log_marginal.item(), abs=1e-4)
    assert result.ess == pytest.approx(estimate.ess.item(), rel=1e-4)
    assert result.statistics["elbo"] == pytest.approx(estimate.elbo.item(), abs=1e-4)
    assert result.perplexity == pytest.approx(math.exp(-result.log_p / result.tokens))
    assert "log p = " in repr(result) and "<table>" in result._repr_html_()


def test_the_seed_reproduces_and_the_callers_random_state_is_kept(entitynlm):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = entitynlm.log_likelihood(TEXT, particles=10, seed=5)
    assert torch.equal(torch.rand(3), expected_next)  # the notebook's own random stream did not move
    assert entitynlm.log_likelihood(TEXT, particles=10, seed=5) == first
    assert entitynlm.log_likelihood(TEXT, particles=10, seed=6).log_p != first.log_p
    assert entitynlm.perplexity(TEXT, particles=10, seed=5) == first.perplexity


def test_a_list_of_texts_gives_each_document_and_the_corpus_perplexity(entitynlm, rnnlm):
    texts = [TEXT, "The dog barked at the postman."]
    results = entitynlm.log_likelihood(texts, particles=10, sampler="is")
    assert isinstance(results, elm.Likelihoods) and [r.document for r in results] == ["text 0", "text 1"]
    assert [r.tokens for r in results] == [9, 7]
    assert results.perplexity == pytest.approx(math.exp(-sum(r.log_p for r in results) / 16))
    exact = rnnlm.log_likelihood(texts)  # exact: each document's figure is the one it has alone
    assert exact[1].log_p == pytest.approx(rnnlm.log_likelihood(texts[1]).log_p, abs=1e-4)
    assert exact[0].sampler == "exact" and exact[0].ess is None
    assert "2 documents, 16 tokens" in repr(exact) and "<caption>" in exact._repr_html_()


def test_a_corpus_gets_the_numbers_of_inference_marginal_ppl(entitynlm, rnnlm, tmp_path):
    out = tmp_path / "result.json"
    assert marginal_ppl.main(["--device", "cpu", "--json", str(out)]) == 0  # the embedded sample corpus, 100 SMC
    command = json.loads(out.read_text())
    documents = load_corpus("sample", "test", None).documents
    assert rnnlm.perplexity(documents) == pytest.approx(command["baselines"]["rnnlm"], rel=1e-6)
    results = entitynlm.log_likelihood(documents, particles=100, sampler="smc")
    by_name = {row["document"]: row["tokens"] for row in command["per_document"]}
    assert {r.document: r.tokens for r in results} == by_name and results.tokens == command["tokens"]
    assert results.perplexity == pytest.approx(command["perplexity"], rel=0.05)  # another random stream
    for result, row in zip(results, sorted(command["per_document"], key=lambda row: row["document"])):
        assert set(row) - {"document", "part", "tokens"} == set(result.statistics)  # the command's statistics
        assert result.psis_khat is not None and 1 <= result.ess <= 100


def test_posterior_weights_map_and_pairwise_marginals(posterior):
    assert len(posterior.samples) == posterior.particles == 40
    assert posterior.weights.sum() == pytest.approx(1.0)
    assert posterior.map == posterior.samples[int(np.argmax(posterior.log_joint))]
    assert posterior.map.tokens == tokenize(TEXT).tokens  # the original tokens, punctuation included
    matrix = posterior.pairwise.coreference
    assert np.allclose(matrix, matrix.T) and matrix.min() >= 0 and matrix.max() <= 1 + 1e-9
    assert np.allclose(np.diag(matrix), posterior.pairwise.mention)
    assert posterior.map.mentions, "the MAP structure of this text has mentions"
    for span, title in posterior.mention_titles().items():  # P(mention): the weight of particles with the span
        expected = sum(w for s, w in zip(posterior.samples, posterior.weights) if span in {m.span for m in s.mentions})
        assert title.startswith(f"P(mention) = {expected:.2f}")


def test_posterior_displays_exports_and_reproduces(entitynlm, posterior):
    (read,), _ = parse_conll(posterior.to_conll())
    assert read.tokens == posterior.map.tokens and read.mentions == posterior.map.mentions
    html = posterior._repr_html_()
    first = posterior.map.mentions[0]
    assert f">{posterior.map.mention_text(first)}<sub" in html and 'title="entity 1; P(mention) = ' in html
    assert "log p_hat(x)" in repr(posterior) and "MAP: " in repr(posterior)
    assert isinstance(posterior.plot(), Figure)
    again = entitynlm.posterior(TEXT, particles=40, seed=1)
    assert np.array_equal(again.weights, posterior.weights) and again.map == posterior.map
    assert all(ranking.mention <= 1 + 1e-9 for ranking in posterior.antecedents())


def test_generate_is_seeded_and_decodes_its_entities(entitynlm, rnnlm):
    generated = entitynlm.generate(tokens=15, seed=2)
    assert len(generated.R) == len(generated.document.tokens) >= 15
    assert generated.text.split() == list(generated.document.tokens)
    assert entitynlm.generate(tokens=15, seed=2) == generated
    assert "entitylm-coref" in generated._repr_html_() and repr(generated).startswith("Generated(")
    with pytest.raises(ValueError, match="generate needs EntityNLM"):
        rnnlm.generate()


def his_brother() -> Document:
    tokens = "Anna met her brother . She thanked him .".split()
    mentions = [Mention(0, 1, 1), Mention(2, 3, 1), Mention(2, 4, 2), Mention(5, 6, 1), Mention(7, 8, 2)]
    return Document("key", tokens, [(0, 5), (5, 9)], mentions)


def test_coreference_and_its_score_against_a_key(tmp_path):
    resolved = elm.coreference(TEXT)
    assert resolved.document.tokens == his_brother().tokens
    assert all("start_char" in mention for entity in resolved.clusters() for mention in entity)
    assert "entities mentioned more than once" in repr(resolved) and "<span" in resolved._repr_html_()
    scores = elm.score(his_brother(), resolved.document)  # two single documents match whatever their names
    expected = evaluate([his_brother()], [resolved.document.replace(id="key")])
    assert scores.conll_f1 == expected.conll_f1 and scores["muc"] == expected.muc
    write_conll([his_brother()], tmp_path / "key.conll")
    perfect = elm.score(tmp_path / "key.conll", str(tmp_path / "key.conll"), metrics=("muc", "bcub", "lea"))
    assert perfect.conll_f1 == 1.0 and perfect["lea"].f1 == 1.0
    assert "CoNLL F1: 100.00" in repr(perfect) and "ceafm" not in repr(perfect) and "<table>" in perfect._repr_html_()
    one_entity = his_brother().replace(mentions=[Mention(m.start, m.end, 1) for m in his_brother().mentions])
    merged = elm.score([his_brother()], [one_entity])
    assert merged["muc"].recall == 1.0 and merged["muc"].precision < 1.0 and merged.conll_f1 < 1.0
    (read,), _ = parse_conll(resolved.to_conll())
    assert read.mentions == resolved.document.mentions


@pytest.mark.parametrize(("call", "message"), [
    (lambda m, r: m.log_likelihood(""), "text is empty"),
    (lambda m, r: m.log_likelihood([TEXT, "  \n"]), "text 1 is empty"),
    (lambda m, r: m.log_likelihood([]), "no texts given"),
    (lambda m, r: m.log_likelihood(TEXT, sampler="mcmc"), "sampler must be one of"),
    (lambda m, r: m.log_likelihood(TEXT, particles=0), "particles must be an integer of at least 1"),
    (lambda m, r: m.posterior(TEXT, particles=2.5), "particles must be an integer"),
    (lambda m, r: m.posterior([TEXT, TEXT]), "posterior takes one text"),
    (lambda m, r: m.log_likelihood(["a b.", tokenize("c d.", "text 0")]), "two documents are named 'text 0'"),
    (lambda m, r: m.log_likelihood(42), "a text is a str or a coref.document.Document"),
    (lambda m, r: m.log_likelihood("!!! ..."), "empty after preprocessing"),
    (lambda m, r: r.posterior(TEXT), "posterior needs EntityNLM's latent entities; this is a rnnlm model"),
    (lambda m, r: m.generate(tokens=0), "tokens must be an integer of at least 1"),
    (lambda m, r: elm.coreference("   "), "empty"),
    (lambda m, r: elm.score(his_brother(), his_brother(), metrics=("muc", "f1")), r"unknown metrics \['f1'\]"),
    (lambda m, r: elm.score(his_brother(), ["not a document"]), "the response must be a Document"),
])
def test_bad_input_is_a_clear_value_error(entitynlm, rnnlm, call, message):
    with pytest.raises(ValueError, match=message):
        call(entitynlm, rnnlm)
