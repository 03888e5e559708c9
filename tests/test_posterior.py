"""Posterior samples of coreference structures: SIR and SMC against the exact posterior of a tiny model, the
decoding of sampled annotations, pairwise marginals, and the ``inference.posterior`` command."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pyro
import pytest
import torch

from coref.conll import read_conll
from coref.document import Document, EntityAnnotation, Mention
from inference import posterior
from inference.checkpoint import Checkpoint, pretrained
from inference.smc import sample_structures, stream_to_document, systematic_resampling
from tests.test_entitynlm import EOS, annotations, tiny_batch, tiny_models

# two sentences ("</s>" is word 3), so SMC has a resampling point inside the document; 208 annotations
WORDS = [4, EOS, 5, EOS]
SENTENCE = [0, 0, 1, 1]


def exact_posterior(model) -> tuple[dict[tuple, float], float, dict[tuple, float]]:
    """p(R, E, L | x) by enumerating every annotation of WORDS: the posterior, log p(x), and each joint."""
    every = list(annotations(len(WORDS), model.config.max_mention_length))
    batch = tiny_batch([{"words": WORDS, "sentence": SENTENCE, "R": R, "E": E, "L": L} for R, E, L in every])
    with torch.no_grad():
        joint = model.log_likelihood(batch)
    keys = [tuple(map(tuple, annotation)) for annotation in every]
    posterior_probabilities = torch.softmax(joint, 0).tolist()
    return dict(zip(keys, posterior_probabilities)), torch.logsumexp(joint, 0).item(), dict(zip(keys, joint.tolist()))


def weighted_frequencies(sampled) -> dict[tuple, float]:
    weights = sampled.normalized_weights()[:, 0].tolist()
    frequencies: dict[tuple, float] = defaultdict(float)
    for particle, weight in enumerate(weights):
        annotation = sampled.annotation(particle, 0, len(WORDS))
        frequencies[(annotation.R, annotation.E, annotation.L)] += weight
    return frequencies


@pytest.mark.parametrize("resample", ["never", "sentence"])
def test_samplers_approach_the_exact_posterior(resample):
    model, proposal = tiny_models()
    exact, log_marginal, joint = exact_posterior(model)
    batch = tiny_batch([{"words": WORDS, "sentence": SENTENCE}])
    pyro.set_rng_seed(0)
    sampled = sample_structures(model, proposal, batch, 20_000, EOS, resample, ess_threshold=1.0)
    assert int(sampled.resamplings) == (1 if resample == "sentence" else 0)  # the inner sentence end only
    frequencies = weighted_frequencies(sampled)
    assert set(frequencies) <= set(exact)  # every sample is a valid annotation
    total_variation = 0.5 * sum(abs(frequencies.get(z, 0.0) - p) for z, p in exact.items())
    assert total_variation < 0.05  # about 0.03 at this ESS (~11,000) from sampling noise alone
    for t in range(len(WORDS)):  # P(x_t is in a mention | x)
        in_mention = [sum(p for z, p in distribution.items() if z[0][t]) for distribution in (exact, frequencies)]
        assert in_mention[0] == pytest.approx(in_mention[1], abs=0.015)
    assert sampled.log_marginal.item() == pytest.approx(log_marginal, abs=0.03)
    for particle in range(100):  # log_joint is the model's log p(X, R, E, L) of the particle's annotation
        annotation = sampled.annotation(particle, 0, len(WORDS))
        expected = joint[(annotation.R, annotation.E, annotation.L)]
        assert sampled.log_joint[particle, 0].item() == pytest.approx(expected, abs=1e-4)


def test_smc_resampling_keeps_more_effective_samples_than_sir_on_a_longer_document():
    model, proposal = tiny_models()
    words = [4, 0, 5, EOS] * 6
    batch = tiny_batch([{"words": words, "sentence": [i // 4 for i in range(len(words))]}])
    ess = {}
    for resample in ("never", "sentence"):
        pyro.set_rng_seed(0)
        ess[resample] = sample_structures(model, proposal, batch, 200, EOS, resample).stage_ess.item()
    assert ess["sentence"] > ess["never"]


def test_systematic_resampling_copies_each_particle_in_proportion_to_its_weight():
    weights = torch.tensor([[0.5, 0.1], [0.25, 0.1], [0.25, 0.8]])  # (N=3 particles... of 2 documents)
    weights = torch.cat([weights, torch.zeros(1, 2)])  # a fourth particle with weight 0
    log_weights = torch.where(weights > 0, weights.log(), torch.full_like(weights, -torch.inf))
    ancestors = systematic_resampling(log_weights, torch.Generator().manual_seed(0))
    for document in range(2):
        counts = torch.bincount(ancestors[:, document], minlength=4).float()
        expected = 4 * weights[:, document]
        assert torch.all(counts >= expected.floor()) and torch.all(counts <= expected.ceil())
        assert counts[3] == 0


def test_sampled_mentions_are_cut_at_sentence_ends_and_the_document_end():
    document = Document("d", ["a", "b", "c", "d"], [(0, 2), (2, 4)])
    # stream: a b </s> c d </s>; a mention of 3 from "b" runs over "</s>"; one of 3 from "d" runs past the end
    annotation = EntityAnnotation(R=(0, 1, 1, 0, 1, 1), E=(0, 1, 1, 0, 2, 2), L=(1, 3, 2, 1, 3, 2))
    structure = stream_to_document(document, annotation)
    assert structure.mentions == (Mention(1, 2, 1), Mention(3, 4, 2))


def test_pairwise_marginals_weight_the_structures():
    tokens = ["Ann", "saw", "her"]
    together = Document("d", tokens, mentions=[Mention(0, 1, 1), Mention(2, 3, 1)])
    apart = Document("d", tokens, mentions=[Mention(0, 1, 1), Mention(2, 3, 2)])
    only_ann = Document("d", tokens, mentions=[Mention(0, 1, 1)])
    marginals = posterior.coreference_marginals([together, apart, only_ann], np.array([0.6, 0.3, 0.1]))
    assert marginals.spans == [(0, 1), (2, 3)] and marginals.texts == ["Ann", "her"]
    np.testing.assert_allclose(marginals.mention, [1.0, 0.9])
    np.testing.assert_allclose(marginals.coreference, [[1.0, 0.6], [0.6, 0.9]])
    dropped = posterior.coreference_marginals([together, apart, only_ann], np.array([0.6, 0.3, 0.1]), 0.95)
    assert dropped.spans == [(0, 1)]


def test_tokenize_splits_words_punctuation_and_sentences():
    document = posterior.tokenize("Anna's cat slept. Did it wake?  Yes")
    assert document.tokens == ("Anna's", "cat", "slept", ".", "Did", "it", "wake", "?", "Yes")
    assert document.sentences == ((0, 4), (4, 8), (8, 9))
    with pytest.raises(ValueError, match="no words"):
        posterior.tokenize("  ")


def test_the_command_writes_samples_marginals_and_heatmaps(tmp_path, capsys):
    text = "Anna met Tom at the station. She gave him a book, and he thanked her."
    out = tmp_path / "out"
    options = ["--text", text, "--particles", "20", "--samples", "7", "--out", str(out), "--device", "cpu",
               "--min-probability", "0"]
    assert posterior.main(options) == 0
    assert "MAP:" in capsys.readouterr().out
    samples, problems = read_conll(out / "samples.conll")
    assert len(samples) == 7 and not problems
    assert all(sample.tokens == posterior.tokenize(text).tokens for sample in samples)  # the original tokens
    (best,), _ = read_conll(out / "map.conll")
    marginals = json.loads((out / "marginals.json").read_text())["text"]
    spans = {(span["start"], span["end"]) for span in marginals["spans"]}
    assert {mention.span for mention in best.mentions} <= spans
    assert len(marginals["coreference"]) == len(marginals["spans"])
    assert (out / "heatmap-text.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["method"] == "smc" and 1 <= summary[0]["ess"] <= 20


def test_the_command_evaluates_the_map_structure_with_both_samplers(tmp_path, capsys):
    out = tmp_path / "result.json"
    options = ["--evaluate", "--corpus", "sample", "--split", "dev", "--method", "both", "--particles", "10",
               "--device", "cpu", "--json", str(out)]
    assert posterior.main(options) == 0
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"sir", "smc"}
    for row in result["methods"].values():
        assert 0 <= row["conll_f1"] <= 1 and row["perplexity"] > 1
        assert all(1 <= ess <= 10 + 1e-6 for ess in row["ess"])
    assert result["methods"]["sir"]["resamplings"] == [0, 0]
    assert "CoNLL F1" in capsys.readouterr().out


def test_the_command_refuses_bad_input_with_one_line(tmp_path, capsys):
    assert posterior.main(["--text", "Hi.", "--checkpoint", str(tmp_path / "missing.pt")]) == 2
    assert "missing.pt: no such checkpoint file" in capsys.readouterr().err
    empty = tmp_path / "empty.conll"
    empty.write_text("")
    assert posterior.main(["--conll", str(empty), "--device", "cpu"]) == 2
    assert f"{empty}: no documents" in capsys.readouterr().err
    forward_only = Checkpoint.load(pretrained("entitynlm.pt"))
    del forward_only.weights["bidirectional_proposal"]
    forward_only.save(tmp_path / "forward_only.pt")
    argv = ["--text", "Hi.", "--checkpoint", str(tmp_path / "forward_only.pt"), "--proposal", "bidirectional"]
    assert posterior.main([*argv, "--device", "cpu"]) == 2
    assert "no bidirectional proposal" in capsys.readouterr().err
    assert posterior.main(["--text", "caf\udce9 au lait.", "--out", str(tmp_path / "out"), "--device", "cpu"]) == 2
    assert "--text: not UTF-8 text" in capsys.readouterr().err and not (tmp_path / "out").exists()
