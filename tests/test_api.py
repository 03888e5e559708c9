"""inference.api: the notebook API gives the library's own numbers, reproducibly, and refuses bad input clearly."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

import inference.api as elm
from coref.corpora.anonymise import anonymised_corpus, table1
from coref.corpora.babi import load_babi
from coref.corpora.preprocess import drop_singletons, preprocess_document
from coref.corpora.registry import load_corpus
from coref.corpora.stories import load_stories, story_stats
from coref.document import Document, Mention
from coref.io.conll import parse_conll, write_conll
from coref.io.text import plain_document as tokenize
from coref.io.text import tokenize as tokenize_text
from coref.metrics.coreference import evaluate
from coref.metrics.stories import StoryMetrics
from coref.resolution.kbest import greedy_tree
from coref.resolution.ranker import resolver_documents
from generative.coref_gru import make_reading_batch
from generative.layers.batch import make_batch
from generative.mneme import make_batch as make_story_batch
from inference.algorithms.importance import estimate_marginal
from inference.algorithms.scoring import candidate_log_joint, noise_free
from inference.commands import entity_cloze as entity_cloze_command
from inference.commands import generate, marginal_ppl
from inference.commands import perplexity as perplexity_command
from inference.commands import posterior as posterior_command
from inference.evaluation import perplexity
from inference.evaluation.rerank import gold_mention_split
from inference.runtime import batch_seed, set_seed
from inference.training import mneme as story_lm
from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained
from inference.training.resolution import train_ranker
from tests.test_babi import TASK11, write_task

TEXT = "Anna met her brother. She thanked him."


@pytest.fixture(scope="module")
def entitynlm() -> elm.LanguageModel:
    return elm.load("entitynlm")


@pytest.fixture(scope="module")
def rnnlm() -> elm.LanguageModel:
    return elm.load("rnnlm")


@pytest.fixture(scope="module")
def posterior(entitynlm) -> elm.PosteriorCoreference:
    return entitynlm.posterior(TEXT, "paper", sampler="smc", particles=40, seed=1)


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


@pytest.mark.parametrize("document_cache", [0.0, 0.3])
def test_log_likelihood_is_the_importance_sampling_estimate_of_the_same_batch(entitynlm, document_cache):
    """The same estimate as the sampler's on the same batch, with the document cache too (``document_cache``: the
    model reads it for this call only, as the command's ``--document-cache``)."""
    result = entitynlm.log_likelihood(TEXT, "paper", particles=20, seed=3, document_cache=document_cache)
    assert entitynlm.module.config.document_cache == 0  # the loaded model is left as trained
    checkpoint = Checkpoint.load(pretrained("entitynlm.pt"))
    model, proposal = entitynlm_modules(checkpoint)  # the checkpoint's proposal, as inference.evaluation.marginal_ppl
    model.config = replace(model.config, document_cache=document_cache)
    prepared, _ = preprocess_document(tokenize(TEXT), checkpoint.preprocess, checkpoint.vocabulary)
    batch = make_batch([prepared], checkpoint.vocabulary)
    set_seed(batch_seed(3, 0))  # the one batch's seed (inference.runtime.batch_seed)
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
    matrix = posterior.pairwise.matrix(range(len(posterior.pairwise.spans)))
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
    assert "log p_hat(x)" in repr(posterior) and "MAP clusters" in repr(posterior)
    assert isinstance(posterior.plot(), Figure)
    again = entitynlm.posterior(TEXT, "paper", sampler="smc", particles=40, seed=1)
    assert np.array_equal(again.weights, posterior.weights) and again.map == posterior.map
    assert all(ranking.mention <= 1 + 1e-9 for ranking in posterior.antecedents())


def test_posterior_with_issue_27s_sampler_is_the_commands(entitynlm, posterior, tmp_path):
    settled = entitynlm.posterior(TEXT, "paper", sampler="smc", particles=40, seed=1, resample="token",
                                  hint_weight=0.5, hint_temperature=4.0)
    args = posterior_command.parse_args(["--preset", "paper", "--text", TEXT, "--particles", "40", "--seed", "1",
                                         "--method", "smc",
                                         "--resample", "token", "--hint-weight", "0.5", "--hint-temperature", "4",
                                         "--out", str(tmp_path / "out")])
    (summary,) = posterior_command.run(args)["summary"]
    assert settled.log_marginal == summary["log_marginal"] and settled.resamplings == summary["resamplings"]
    assert settled.log_marginal != posterior.log_marginal  # the options reach the sampler


def test_posterior_with_a_new_entity_bias_is_the_commands_and_leaves_the_model_as_trained(entitynlm, posterior,
                                                                                         tmp_path):
    biased = entitynlm.posterior(TEXT, "paper", sampler="smc", particles=40, seed=1, new_entity_bias=2.0)
    args = posterior_command.parse_args(["--preset", "paper", "--text", TEXT, "--particles", "40", "--seed", "1",
                                         "--method", "smc", "--new-entity-bias", "2", "--out", str(tmp_path / "out")])
    (summary,) = posterior_command.run(args)["summary"]
    assert biased.log_marginal == summary["log_marginal"] != posterior.log_marginal
    again = entitynlm.posterior(TEXT, "paper", sampler="smc", particles=40, seed=1)  # for that call alone
    assert again.log_marginal == posterior.log_marginal


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
    (lambda m, r: m.posterior(TEXT, sampler="is", resample="tokens"), "resample must be one of"),
    (lambda m, r: m.log_likelihood(TEXT, resample="never"), "resample must be one of"),
    (lambda m, r: r.log_likelihood(TEXT, document_cache=1.0), r"document_cache must be in \[0, 1\), got 1.0"),
    (lambda m, r: m.log_likelihood(TEXT, preset="best"), "preset must be one of"),
    (lambda m, r: m.log_likelihood(TEXT, hint_wieght=0.5), "unknown sampling option 'hint_wieght'"),
    (lambda m, r: m.log_likelihood(TEXT, given_mentions="pipeline"), "given_mentions is for posterior"),
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


# ---- story language models (MNEMELM) ----------------------------------------------------------------------------

STORY_TINY = {"d_model": 16, "layers": 1, "heads": 2, "d_ff": 32, "chunk": 8, "segment": 16, "cache": 32,
              "vocab_size": 150, "batch_tokens": 300, "warmup": 0, "lr": 3e-3, "device": "cpu"}  # test_story_lm's
ENTITIES = ["Mia", "the bicycle"]
SPECIAL_WORDS = {"<pad>", "<sep>", "<eos>"}


@pytest.fixture(scope="module")
def story_models(tmp_path_factory) -> dict[str, elm.StoryLanguageModel]:
    """A tiny vanilla LM and D-MNEMELM, each trained for two epochs through the API."""
    root = tmp_path_factory.mktemp("story_api")
    return {name: elm.train(name, "sample", root / name, epochs=2, **STORY_TINY) for name in ("vanilla", "d_mneme")}


@pytest.fixture(scope="module")
def generated_story(story_models) -> elm.GeneratedStory:
    """The longest of a few D-MNEMELM samples (the tiny model often ends a story early)."""
    samples = [story_models["d_mneme"].generate(ENTITIES, tokens=40, seed=seed) for seed in range(4)]
    return max(samples, key=lambda sample: len(sample.words))


def test_train_gives_the_loaded_story_lm_and_its_history(story_models):
    model = story_models["d_mneme"]
    assert isinstance(model, elm.StoryLanguageModel) and model.kind == "d_mneme"
    assert model.path.name == "model.pt" and model.config.d_model == 16 and model.config.memory == "dynamic"
    text = repr(model)
    assert text.startswith("StoryLanguageModel(kind='d_mneme'") and "154 words" in text
    assert "device='cpu'" in text and f"parameters={sum(p.numel() for p in model.module.parameters()):,}" in text
    again = elm.load(model.path)
    assert isinstance(again, elm.StoryLanguageModel) and repr(again) == text
    assert model.history == story_lm.StoryLMCheckpoint.load(model.path).training["state"]["history"]
    assert [record["epoch"] for record in model.history] == [1, 2] and "dev_nll" in model.history[0]


def test_train_passes_its_options_to_the_trainer_keeps_the_random_state_and_trains_the_rnnlm(tmp_path, capsys):
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    model = elm.train("rnnlm", "sample", tmp_path / "rnnlm", epochs=1, embedding_size=8, hidden_size=8,
                      proposals=["forward"], keep_singletons=False, device="cpu", verbose=True)
    assert torch.equal(torch.rand(3), expected)  # the trainer seeded its own run; the caller's stream is back
    assert isinstance(model, elm.LanguageModel) and model.kind == "rnnlm" and len(model.history) == 1
    assert '"epoch": 1' in capsys.readouterr().err  # verbose: the trainer's per-epoch line is shown
    assert model.checkpoint.training["args"]["embedding_size"] == 8


def test_story_generation_is_seeded_and_never_draws_special_tokens(story_models, generated_story, capsys):
    model = story_models["d_mneme"]
    assert generated_story.prompt == ("<sep>", "Mia", "<sep>", "the", "bicycle", "<sep>")
    seed = generated_story.seed
    assert model.generate(ENTITIES, tokens=40, seed=seed) == generated_story
    assert model.generate(ENTITIES, tokens=40, seed=seed + 1).words != generated_story.words
    assert generated_story.ended == (len(generated_story.words) < 40)
    for other in range(4):  # flattened, the tiny model would draw <pad> or <sep> in three of these if it could
        words = story_models["vanilla"].generate(ENTITIES, tokens=100, seed=other, top_p=1, temperature=3).words
        assert words and not SPECIAL_WORDS & set(words)
    assert generate.main(["--checkpoint", str(model.path), "--entities", *ENTITIES, "--max-tokens", "40",
                          "--seed", str(seed), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.split() == list(generated_story.words)  # python -m inference.generate's sample


def test_a_generated_story_is_annotated_and_measured(generated_story):
    document = generated_story.document
    assert document.tokens == tokenize_text(generated_story.text).tokens
    assert generated_story.text.split() == ["UNK" if word == "<unk>" else word for word in generated_story.words]
    assert set(generated_story.metrics) == set(StoryMetrics.__annotations__)
    assert generated_story.metrics["prompt_entities"] == 2
    assert all(len(cluster) >= 2 for cluster in document.clusters())  # singletons dropped, as the annotator does
    text = repr(generated_story)
    assert text.startswith(f"GeneratedStory(d_mneme from '<sep> Mia <sep> the bicycle <sep>' "
                           f"(seed {generated_story.seed}): {len(generated_story.words)} words")
    assert "metrics: sections 10" in text
    html = generated_story._repr_html_()
    assert "entitylm-coref" in html and "d_mneme from &#x27;&lt;sep&gt; Mia" in html and "<table>" in html


def test_memory_attention_per_chunk_and_slot(story_models, generated_story):
    words = generated_story.words
    assert len(words) > 16, "the sample spans several chunks"
    attention = generated_story.memory_attention()
    chunks = -(-len(words) // 8)
    assert attention.weights.shape == attention.moved.shape == (chunks, 3)
    assert np.allclose(attention.weights.sum(1), 1, atol=1e-5) and (attention.weights >= 0).all()
    assert attention.slots == ["non-entity", "Mia", "the bicycle"]
    assert attention.chunks[0] == (0, 8) and attention.chunks[-1][1] == len(words)
    assert (attention.moved >= 0).all() and attention.moved.any()  # D-MNEMELM rewrites its slots
    assert "chunks x 3 slots" in repr(attention) and "<table>" in attention._repr_html_()
    vanilla = story_models["vanilla"].generate(ENTITIES, tokens=10)
    with pytest.raises(ValueError, match="a vanilla model has no entity memory"):
        vanilla.memory_attention()


def test_story_log_likelihood_is_the_sum_of_token_log_probs(story_models):
    model = story_models["d_mneme"]
    story = load_stories("sample", "test")[0]
    module, checkpoint = story_lm.load_story_lm(model.path)
    batch = make_story_batch([story_lm.encode_story(story, checkpoint.vocabulary)])
    for cache_size in (None, 8):
        result = model.log_likelihood(story, cache_size=cache_size)
        with torch.no_grad():
            log_p = module.token_log_probs(batch, cache_size=cache_size)[0]
        mask = batch.mention_mask[0]
        assert result.log_p == pytest.approx(float(log_p.sum()), abs=1e-4)
        assert result.tokens == len(story.tokens) + 1 and result.mention_tokens == sum(story.mention_mask) > 0
        assert result.entity_nll == pytest.approx(-float(log_p[mask].mean()), abs=1e-5)
        assert result.other_nll == pytest.approx(-float(log_p[~mask].mean()), abs=1e-5)
    assert result.cache_size == 8 and model.log_likelihood(story).cache_size == 32
    assert model.perplexity(story) == pytest.approx(math.exp(-model.log_likelihood(story).log_p / result.tokens))
    assert "-log p_e" in repr(result) and 'title="entity 0' in result._repr_html_()
    text = model.log_likelihood("The bicycle was old. Mia fixed it.", entities=ENTITIES)
    assert text.story.entities == (("Mia",), ("the", "bicycle")) and text.entity_nll is None
    assert text.tokens == len(tokenize_text("The bicycle was old. Mia fixed it.").tokens) + 1


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.generate("Mia"), "entities are a list of strings"),
    (lambda m: m.generate(["Mia", " "]), "every entity is a non-empty string"),
    (lambda m: m.generate(ENTITIES, tokens=0), "tokens must be an integer of at least 1"),
    (lambda m: m.generate(ENTITIES, top_p=0), "top_p must be in"),
    (lambda m: m.log_likelihood(load_stories("sample", "test")[0], entities=["Mia"]), "has its own entities"),
    (lambda m: m.log_likelihood(42), "a story is a str or a coref.corpora.stories.PromptedStory"),
    (lambda m: m.log_likelihood("  "), "empty"),
    (lambda m: m.log_likelihood("Mia ran.", cache_size=-1), "cache_size must be an integer"),
    (lambda m: elm.train("d_mneme", "sample", m.path.parent / "new", bogus_option=1),
     "d_mneme has no option bogus_option"),
    (lambda m: elm.train("d_mneme", "sample", m.path.parent / "new", d_model=0), "--d-model: must be at least 1"),
    (lambda m: elm.train("d_mneme", "nope", m.path.parent / "new"), "unknown story corpus 'nope'"),
    (lambda m: elm.train("d_mneme", "sample", m.path.parent, **STORY_TINY), "holds an earlier run"),
    (lambda m: elm.train("ngram", "sample", m.path.parent / "new"), "this API trains and loads"),
])
def test_story_lm_bad_input_is_a_clear_value_error(story_models, call, message):
    with pytest.raises(ValueError, match=message):
        call(story_models["d_mneme"])


# ---- the Dynamic Neural Text Model ------------------------------------------------------------------------------

DNTM_TINY = {"vocab_size": 200, "embedding_size": 16, "hidden_size": 16, "context_size": 16, "batch_tokens": 400,
             "lr": 0.01, "epochs": 2, "device": "cpu"}


@pytest.fixture(scope="module")
def dntm_models(tmp_path_factory) -> dict[str, elm.DynamicTextModel]:
    folder = tmp_path_factory.mktemp("dntm")
    return {placement: elm.train("dntm", "sample", folder / placement, placement=placement, **DNTM_TINY)
            for placement in ("both", "none")}


@pytest.fixture(scope="module")
def anonymised_test():
    return anonymised_corpus("sample", "test")


def test_train_and_load_give_the_dntm_and_its_history(dntm_models):
    model = dntm_models["both"]
    assert isinstance(model, elm.DynamicTextModel) and isinstance(model, elm.LanguageModel)
    assert model.kind == "dntm" and model.config.placement == "both" and len(model.history) == 2
    again = elm.load(model.path)
    assert isinstance(again, elm.DynamicTextModel) and again.config == model.config
    assert repr(model).startswith("DynamicTextModel(kind='dntm'") and "200 words" in repr(model)


def test_dntm_likelihood_is_the_perplexity_commands_sum_for_every_form_of_a_document(dntm_models, anonymised_test):
    model = dntm_models["both"]
    documents = model.documents("sample", "test")
    log_probs = perplexity.document_log_probs(Checkpoint.load(model.path), documents, torch.device("cpu"), 32_000,
                                              progress=False)
    result = model.log_likelihood(documents)
    assert [r.log_p for r in result] == pytest.approx([float(values.sum()) for values in log_probs], abs=1e-4)
    assert [r.tokens for r in result] == [len(values) for values in log_probs]
    raw = load_corpus("sample", "test").documents[0]  # annotated: preprocessed and anonymised as the corpus is
    same = [model.log_likelihood(d).log_p for d in (raw, anonymised_test.originals[0], anonymised_test.documents[0])]
    assert same == pytest.approx([result[0].log_p] * 3, abs=1e-4)
    text = model.log_likelihood("<unk1> met <unk2> . <unk1> thanked <unk2> .")
    assert text.tokens == 10 and text.sampler == "exact" and "exact" in repr(text)


def test_dntm_token_groups_and_cloze_are_the_commands_numbers(dntm_models, anonymised_test, tmp_path, capsys):
    model = dntm_models["both"]
    argv = ["--checkpoint", str(model.path), "--corpus", "sample", "--split", "test", "--device", "cpu"]
    assert perplexity_command.main([*argv, "--json", str(tmp_path / "groups.json")]) == 0
    assert entity_cloze_command.main([*argv, "--max-clozes", "5", "--json", str(tmp_path / "cloze.json")]) == 0
    capsys.readouterr()
    groups = model.token_groups(list(anonymised_test.documents))
    expected = json.loads((tmp_path / "groups.json").read_text())["groups"]
    assert {g: groups[g] for g in perplexity.GROUPS} == pytest.approx({g: expected[g]["perplexity"]
                                                                        for g in perplexity.GROUPS})
    assert "reappearing_entities" in repr(groups) and "<table>" in groups._repr_html_()
    clozes = model.cloze(list(anonymised_test.documents), max_clozes=5)
    expected = json.loads((tmp_path / "cloze.json").read_text())
    assert (len(clozes), clozes.total) == (expected["clozes"], expected["clozes_in_split"])
    assert clozes.mean_quantile == pytest.approx(expected["mean_quantile"])
    every = model.cloze(list(anonymised_test.documents))
    assert len(every) == every.total >= len(clozes)
    first = every[0]
    assert first.answer in first.scores and set(first.scores) == set(first.cloze.candidates)
    assert "___" in first.sentence() and "mean quantile" in repr(every) and "quantile" in repr(first)


def test_entity_states_change_exactly_where_the_entity_is_mentioned(dntm_models, anonymised_test):
    model, document = dntm_models["both"], anonymised_test.documents[0]
    states = model.entity_states(document)
    entities = len(document.entities())
    assert states.states.shape == (len(document.sentences), entities, 16)
    assert np.array_equal(states.changed, states.mentioned) and states.mentioned.any(0).all()
    with torch.no_grad():
        expected = model.module.entity_states(make_batch([document], model.checkpoint.vocabulary))[0, :, :entities]
    assert np.allclose(states.states, expected.numpy())
    assert np.isnan(states.cosine()[0, states.mentioned[0].argmin()]) or not (~states.mentioned[0]).any()
    assert "<unk1>" in repr(states) and "<table>" in states._repr_html_()


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m["none"].entity_states("<unk1> ran ."), "placement 'none'"),
    (lambda m: m["both"].entity_states(["<unk1> ran ."]), "entity_states takes one text"),
    (lambda m: m["both"].log_likelihood("<unk2> met <unk1> ."), "in order of first appearance"),
    (lambda m: m["both"].posterior("<unk1> ran ."), "needs EntityNLM's latent entities"),
    (lambda m: m["both"].log_likelihood(""), "empty"),
    (lambda m: m["both"].log_likelihood("<unk1> ran .", document_cache=0.1), "applies to EntityNLM and the RNNLM"),
])
def test_dntm_bad_input_is_a_clear_value_error(dntm_models, call, message):
    with pytest.raises(ValueError, match=message):
        call(dntm_models)


# ---- the Coref-GRU readers --------------------------------------------------------------------------------------

READER_TINY = {"embedding_size": 8, "hidden_size": 8, "epochs": 2, "patience": 5, "device": "cpu"}


@pytest.fixture(scope="module")
def babi_data(tmp_path_factory) -> str:
    """Task 11 written by hand (tests/test_babi.py's stories), so that the readers need no downloaded data."""
    folder = tmp_path_factory.mktemp("data")
    write_task(folder, "qa11_basic-coreference_train.txt", TASK11 * 6)
    write_task(folder, "qa11_basic-coreference_test.txt", TASK11)
    return str(folder)


@pytest.fixture(scope="module")
def readers(babi_data, tmp_path_factory) -> dict[str, elm.Reader]:
    folder = tmp_path_factory.mktemp("readers")
    return {model: elm.train(model, out=folder / model, data_dir=babi_data, task="babi:11", **READER_TINY)
            for model in ("ga_cgru", "bi_gru")}


def test_train_and_load_give_the_reader_and_its_test_accuracy(readers, babi_data):
    reader = readers["ga_cgru"]
    assert isinstance(reader, elm.Reader) and (reader.kind, reader.task) == ("ga_cgru", "babi:11")
    assert reader.history and reader.test_accuracy == pytest.approx(reader.accuracy("test", data_dir=babi_data))
    assert isinstance(elm.load(reader.path), elm.Reader)
    assert "task='babi:11'" in repr(reader) and "test accuracy" in repr(reader)


def test_an_answer_is_the_readers_attention_sum_in_every_form_of_a_question(readers, babi_data):
    reader = readers["ga_cgru"]
    item = load_babi(11, "test", babi_data)[0]
    example = reader.examples("test", babi_data)[0]
    answers = [reader.answer(story) for story in (item, example, TASK11.split("4 Daniel")[0])]
    batch = make_reading_batch([example], reader.config.max_chains)
    with torch.no_grad():
        expected = reader.module.answer_logits(batch)[0].exp()
    for answer in answers:
        assert answer.probabilities[answer.predicted] == pytest.approx(expected.max().item(), abs=1e-6)
        assert answer.question.answer == "bedroom" and answer.correct == (answer.predicted == "bedroom")
    assert list(answers[0].probabilities.values()) == sorted(answers[0].probabilities.values(), reverse=True)
    assert "where is mary ?" in repr(answers[0]) and "<table>" in answers[0]._repr_html_()
    without = reader.answer(item, chains=False)
    assert not without.with_chains and "without chains" in repr(without)
    assert 0.0 <= reader.accuracy([item], chains=False) <= 1.0


def test_relation_attention_per_token_layer_and_direction(readers, babi_data):
    reader = readers["ga_cgru"]
    item = load_babi(11, "test", babi_data)[0]  # mary ... she: one chain, an edge each way
    attention = reader.relation_attention(item)
    assert attention.masses.shape == (3, len(item.document), 2, 2)
    assert np.allclose(attention.masses.sum(-1), 1.0) and np.all(attention.coreferent[:, ~attention.choice] == 0)
    she = item.document.index("she")
    assert attention.choice[she, 0] and attention.choice[0, 1]  # she reads mary forward, mary reads she backward
    preferences = reader.word_preferences(["she", "mary"])
    assert preferences.values["she"][0] == pytest.approx(attention.masses[0, she, 0, 1], abs=1e-5)
    assert "coreferent attention" in repr(attention) and "she" in repr(preferences)
    assert isinstance(attention.plot(), Figure) and "<table>" in attention._repr_html_()


@pytest.mark.parametrize(("call", "message"), [
    (lambda r, data: r["bi_gru"].relation_attention(TASK11), "no C-GRU layers"),
    (lambda r, data: r["ga_cgru"].answer(42), "a question is a bAbI story"),
    (lambda r, data: r["ga_cgru"].word_preferences(["zebra"]), "outside the reader's vocabulary"),
    (lambda r, data: r["ga_cgru"].examples("valid", data), "split must be one of"),
    (lambda r, data: elm.train("ga_cgru", "babi:11", task="babi:11"), "the corpus or the task, not both"),
    (lambda r, data: elm.train("ga_cgru", task="babi:11"), "an output folder"),
])
def test_reader_bad_input_is_a_clear_value_error(readers, babi_data, call, message):
    with pytest.raises(ValueError, match=message):
        call(readers, babi_data)


# ---- reranking a resolver's k-best list, and the corpora ----------------------------------------------------------


@pytest.fixture(scope="module")
def sample_resolver():
    return elm.train_resolver(corpus="sample", split="train")  # the notebook's: the six training stories


@pytest.fixture(scope="module")
def reranking(entitynlm, sample_resolver) -> elm.Reranking:
    return entitynlm.rerank(elm.documents("sample", "dev")[0], sample_resolver, k=6, weight=0.5)


def test_train_resolver_is_the_commands_resolver(sample_resolver):
    documents = resolver_documents("sample", "train", None)
    trained = train_ranker(documents, epochs=5, seed=23, progress=False)
    assert np.array_equal(sample_resolver.weights, trained.weights)
    assert sample_resolver.settings["corpus"] == "sample" and not sample_resolver.settings["keep_singletons"]


def test_rerank_candidates_are_the_resolvers_k_best_scored_by_entitynlm(entitynlm, sample_resolver, reranking):
    checkpoint = entitynlm.checkpoint
    split = gold_mention_split("sample", "dev", None, checkpoint)  # what python -m inference.rerank reads
    document, model_document = split.documents[0], split.model_documents[0]
    assert reranking.document == document and 1 <= len(reranking) <= 6
    table = sample_resolver.arc_scores(document)
    best = greedy_tree(table)
    assert reranking.base == 0 and reranking[0].partition == best.partition
    assert reranking.resolver_scores[0] == pytest.approx(best.score) == pytest.approx(reranking.resolver_scores.max())
    assert len({candidate.partition for candidate in reranking.candidates.candidates}) == len(reranking)
    scorer = entitynlm_modules(noise_free(checkpoint), entitynlm.device)[0]
    (expected,) = candidate_log_joint(scorer, checkpoint, model_document, [reranking[1].partition], entitynlm.device)
    assert reranking.log_probs[1] == pytest.approx(expected, abs=1e-4)
    assert entitynlm.rerank(elm.documents("sample", "dev")[0], sample_resolver, k=6).log_probs.tolist() == \
        pytest.approx(reranking.log_probs.tolist(), abs=1e-5)  # deterministic: the new-entity noise is off
    assert reranking.entitynlm == int(np.argmax(reranking.log_probs))
    assert reranking.interpolated == int(np.argmax(reranking.log_probs + 0.5 * reranking.resolver_scores))


def test_rerank_scores_every_candidate_against_the_gold(reranking):
    f1 = reranking.conll_f1
    assert f1.shape == (len(reranking),) and np.all((0 <= f1) & (f1 <= 1))
    assert f1[reranking.oracle] == f1.max()
    structure = reranking.structure(2)  # the gold mentions with candidate 2's clusters
    assert [mention.span for mention in structure.mentions] == [m.span for m in reranking.document.mentions]
    expected = evaluate([reranking.document], [structure.replace(mentions=drop_singletons(structure.mentions))])
    assert f1[2] == pytest.approx(expected.conll_f1)
    clusters = reranking.clusters(0)
    assert len(clusters) == len(reranking.partition(0)) and sum(map(len, clusters)) == len(structure.mentions)


def test_rerank_displays_a_table_of_candidates(reranking):
    text = repr(reranking)
    assert text.startswith("Reranking(sample_library") and "log p(R,E,L,X)" in text
    assert len(text.splitlines()) == 2 + len(reranking)
    assert "<- base" in text and "oracle" in text and "interpolated" in text
    html = reranking._repr_html_()
    assert html.startswith("<table>") and html.count("<tr>") == 1 + len(reranking) and "CoNLL F1" in html


def test_rerank_takes_a_resolvers_path_or_the_bundled_one(entitynlm, sample_resolver, reranking, tmp_path):
    path = tmp_path / "resolver.npz"
    sample_resolver.save(path)
    document = elm.documents("sample", "dev")[0]
    by_path = entitynlm.rerank(document, str(path), k=6)
    assert by_path.resolver_scores.tolist() == pytest.approx(reranking.resolver_scores.tolist())
    assert by_path.interpolated is None and "interpolated" not in by_path.choices
    bundled = entitynlm.rerank(document, k=3, generator="exact")
    assert 1 <= len(bundled) <= 3 and bundled.generator == "exact"


@pytest.mark.parametrize(("call", "message"), [
    (lambda m, r, d: m.rerank(TEXT), "rerank takes a Document with mentions"),
    (lambda m, r, d: r.rerank(d), "rerank needs EntityNLM's latent entities; this is a rnnlm model"),
    (lambda m, r, d: m.rerank(d, k=0), "k must be an integer of at least 1"),
    (lambda m, r, d: m.rerank(d, weight=-1.0), "weight must be a number of at least 0"),
    (lambda m, r, d: m.rerank(d, weight=math.nan), "weight must be a number"),
    (lambda m, r, d: m.rerank(d, generator="beam"), "generator must be one of"),
    (lambda m, r, d: m.rerank(d, resolver=42), "resolver must be a MentionRanker"),
    (lambda m, r, d: m.rerank(d.replace(mentions=()), k=2), "has no mentions to rerank"),
    (lambda m, r, d: elm.train_resolver(epochs=0), "epochs must be an integer"),
    (lambda m, r, d: elm.documents("sample", "validation"), "split"),
    (lambda m, r, d: elm.documents("nonesuch", "train"), "nonesuch"),
])
def test_rerank_and_corpora_bad_input_is_a_clear_value_error(entitynlm, rnnlm, call, message):
    with pytest.raises(ValueError, match=message):
        call(entitynlm, rnnlm, elm.documents("sample", "dev")[0])


def test_the_corpora_are_the_library_readers(babi_data):
    for split in ("train", "dev", "test"):
        assert elm.documents("sample", split) == list(load_corpus("sample", split).documents)
        assert elm.stories("sample", split) == load_stories("sample", split)
    read, expected = elm.anonymised("sample", "train"), anonymised_corpus("sample", "train")
    assert (read.documents, read.originals) == (expected.documents, expected.originals)
    assert elm.restore(read.documents[0], read.originals[0]) == read.originals[0]
    assert elm.anonymised_stats(read.documents) == table1(read.documents)
    assert elm.story_stats(elm.stories("sample", "test")) == story_stats(load_stories("sample", "test"))
    assert elm.babi(11, "test", babi_data) == load_babi(11, "test", babi_data)
    assert elm.babi(11, "dev", babi_data) == load_babi(11, "dev", babi_data)
    assert "he" in elm.BABI_PRONOUNS and elm.Document is Document and elm.Mention is Mention
