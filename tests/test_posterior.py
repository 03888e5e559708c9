"""Posterior samples of coreference structures: SIR and SMC against the exact posterior of a tiny model, the
decoding of sampled annotations, pairwise marginals, and the ``inference.algorithms.posterior`` command."""

from __future__ import annotations

import io
import json
import struct
import sys
from collections import defaultdict
from functools import partial
from pathlib import Path

import numpy as np
import pyro
import pytest
import torch

from coref.document import Document, EntityAnnotation, Mention
from coref.io.conll import read_conll
from coref.io.text import plain_document
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.state import Annotation, Resampled
from inference.algorithms import posterior
from inference.algorithms.smc import (
    conditional_resampling,
    particle_gibbs,
    sample_structures,
    stream_to_document,
    survivors_in_place,
    systematic_resampling,
)
from inference.commands import posterior as posterior_command
from inference.training.checkpoint import Checkpoint, pretrained
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
    sampled = sample_structures(EntityNLMParticles(model, proposal, batch, 20_000), EOS, resample, ess_threshold=1.0)
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
        system = EntityNLMParticles(model, proposal, batch, 200)
        ess[resample] = sample_structures(system, EOS, resample).stage_ess.item()
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


def test_resampling_keeps_survivors_in_their_slots_and_moves_only_the_dead():
    generator = torch.Generator().manual_seed(0)
    log_weights = 3 * torch.randn(50, 3, generator=generator)
    ancestors = systematic_resampling(log_weights, generator)
    for document in range(3):
        column = ancestors[:, document]
        assert all(column[survivor] == survivor for survivor in set(column.tolist()))
    assert torch.equal(survivors_in_place(torch.tensor([[0, 0, 0, 2, 3, 3]])), torch.tensor([[0, 0, 2, 3, 0, 3]]))
    table = torch.randn(50, 3, 7, 2, generator=generator)
    expected = table[ancestors, torch.arange(3)]  # every particle's row from its ancestor
    moved = Resampled.of(ancestors)
    assert moved.moved.sum() < 50 * 3
    assert torch.equal(moved.copy(table.clone()), expected)
    partly = moved.copy(table.clone(), columns=4)
    assert torch.equal(partly[:, :, :4], expected[:, :, :4])


def posterior_draws(exact: dict[tuple, float], count: int) -> Annotation:
    """``count`` annotations of WORDS drawn from the exact posterior, as site values (a conditional reference)."""
    keys = list(exact)
    drawn = torch.multinomial(torch.tensor([exact[key] for key in keys]), count, replacement=True).tolist()
    R, E, L = (torch.tensor([keys[i][part] for i in drawn]) for part in range(3))
    return Annotation.of_stream(R, E, L)


def total_variation_from(exact: dict[tuple, float], annotations: Annotation) -> float:
    counts: dict[tuple, float] = defaultdict(float)
    R, E, L = annotations.R, torch.where(annotations.R == 1, annotations.E + 1, 0), annotations.L + 1
    for row in zip(R.tolist(), E.tolist(), L.tolist()):
        counts[tuple(map(tuple, row))] += 1 / len(R)
    return 0.5 * sum(abs(counts.get(key, 0.0) - p) for key, p in exact.items()) + 0.5 * sum(
        share for key, share in counts.items() if key not in exact)


@pytest.mark.parametrize("resample", ["never", "sentence"])
def test_conditional_smc_leaves_the_exact_posterior_invariant(resample):
    """Particle Gibbs's kernel: references drawn from the exact posterior, one conditional pass of 2 particles each,
    and the next reference drawn from its weights is again distributed as the exact posterior (total variation
    about 0.02 from 20,000 draws; the same pass without the reference, plain SIR/SMC of 2 particles, is 0.15 away)."""
    model, proposal = tiny_models()
    exact, _, joint = exact_posterior(model)
    chains = 20_000
    pyro.set_rng_seed(1)
    reference = posterior_draws(exact, chains)
    batch = tiny_batch([{"words": WORDS, "sentence": SENTENCE}] * chains)
    distance = {}
    for conditional in (True, False):
        system = EntityNLMParticles(model, proposal, batch, 2, reference=reference if conditional else None)
        sampled = sample_structures(system, EOS, resample, ess_threshold=1.0)
        if conditional:  # particle 0 follows its reference, and is scored as the model scores it
            assert torch.equal(sampled.reference(torch.zeros(chains, dtype=torch.long)).R, reference.R)
            first = sampled.annotation(0, 0, len(WORDS))
            assert sampled.log_joint[0, 0].item() == pytest.approx(joint[first.R, first.E, first.L], abs=1e-4)
        chosen = torch.multinomial(sampled.normalized_weights().T, 1)[:, 0]
        distance[conditional] = total_variation_from(exact, sampled.reference(chosen))
    assert distance[True] < 0.04
    assert distance[False] > 0.1


def test_conditional_resampling_keeps_the_reference_and_draws_the_rest_by_weight():
    weights = torch.tensor([[1.0, 1.0], [1.0, 0.0], [3.0, 1.0]])  # (N=3, B=2)
    ancestors = conditional_resampling(weights.log().repeat(1, 10_000), torch.Generator().manual_seed(0))
    assert ancestors.shape == (3, 20_000) and torch.all(ancestors[0] == 0)
    for document, expected in ((0, [0.2, 0.2, 0.6]), (1, [0.5, 0.0, 0.5])):
        drawn = ancestors[1:, document::2].flatten()  # the other particles: 20,000 draws in all
        assert (torch.bincount(drawn, minlength=3) / len(drawn)).tolist() == pytest.approx(expected, abs=0.01)


def test_particle_gibbs_pools_its_passes_and_keeps_the_first_passes_estimate():
    model, proposal = tiny_models()
    words = [4, 0, 5, EOS] * 6
    batch = tiny_batch([{"words": words, "sentence": [i // 4 for i in range(len(words))]}] * 2)
    pyro.set_rng_seed(0)
    first = sample_structures(EntityNLMParticles(model, proposal, batch, 10), EOS, "sentence")
    pyro.set_rng_seed(0)
    chain = particle_gibbs(partial(EntityNLMParticles, model, proposal, batch, 10), EOS, sweeps=4, resample="sentence")
    assert chain.particles == 40
    assert torch.equal(chain.R[:10], first.R) and torch.equal(chain.log_marginal, first.log_marginal)
    assert torch.allclose(chain.normalized_weights().sum(0), torch.ones(2))
    assert torch.allclose(chain.normalized_weights()[:10], first.normalized_weights() / 4)
    assert torch.all(chain.log_joint.max(0).values >= first.log_joint.max(0).values)
    with pytest.raises(ValueError, match="sweeps must be at least 1"):
        particle_gibbs(partial(EntityNLMParticles, model, proposal, batch, 10), EOS, sweeps=0)


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
    np.testing.assert_allclose(marginals.matrix([0, 1]), [[1.0, 0.6], [0.6, 0.9]])
    np.testing.assert_allclose(marginals.same_entity([1, 0], [0, 0]), [0.6, 1.0])
    dropped = posterior.coreference_marginals([together, apart, only_ann], np.array([0.6, 0.3, 0.1]), 0.95)
    assert dropped.spans == [(0, 1)]


def test_tokenize_splits_words_punctuation_and_sentences():
    document = plain_document("Anna's cat slept. Did it wake?  Yes")
    assert document.tokens == ("Anna's", "cat", "slept", ".", "Did", "it", "wake", "?", "Yes")
    assert document.sentences == ((0, 4), (4, 8), (8, 9))
    with pytest.raises(ValueError, match="no words"):
        plain_document("  ")


def test_antecedents_are_the_closest_earlier_mention_of_the_entity_weighted_over_particles():
    tokens = ["Ann", "saw", "Bob", "and", "her"]
    ann, bob, her = (0, 1), (2, 3), (4, 5)

    def structure(*mentions):
        return Document("d", tokens, mentions=[Mention(*span, entity) for span, entity in mentions])

    structures = [
        structure((ann, 1), (bob, 2), (her, 1)),  # her -> Ann
        structure((ann, 1), (bob, 2), (her, 2)),  # her -> Bob
        structure((ann, 1), (her, 1)),  # her -> Ann, Bob no mention
        structure((ann, 1), (bob, 1), (her, 1)),  # one chain: her -> Bob (the closest), Bob -> Ann
    ]
    weights = np.array([0.4, 0.3, 0.2, 0.1])
    rankings = {r.span: r for r in posterior.antecedent_rankings(structures, weights)}
    assert list(rankings) == [ann, bob, her]  # text order
    assert rankings[ann].antecedents == [(None, None, pytest.approx(1.0))]
    assert rankings[bob].mention == pytest.approx(0.8)
    assert rankings[bob].antecedents == [(None, None, pytest.approx(0.7)), (ann, "Ann", pytest.approx(0.1))]
    assert rankings[her].antecedents == [(ann, "Ann", pytest.approx(0.6)), (bob, "Bob", pytest.approx(0.4))]
    likely = {r.span: r for r in posterior.antecedent_rankings(structures, weights, min_probability=0.15)}
    assert likely[bob].antecedents == [(None, None, pytest.approx(0.7))]  # Ann (0.1) is left out
    assert likely[bob].to_json()["antecedents"] == [{"antecedent": None, "probability": 0.7}]
    assert likely[her].to_json()["antecedents"][0] == {"antecedent": {"start": 0, "end": 1, "text": "Ann"},
                                                      "probability": 0.6}
    text = posterior.format_antecedents("d", likely.values())
    assert "Bob [2:3]  (mention 0.800)\n  0.700  new entity\n" in text
    assert "  0.600  Ann [0:1]\n  0.400  Bob [2:3]\n" in text
    assert posterior.antecedent_rankings([Document("d", tokens)], np.array([1.0])) == []  # no mention at all


@pytest.mark.parametrize(("text", "width", "expected"), [
    ("Anna", 28, "Anna"),
    ("the old man who lived by the sea", 12, "the old man…"),
    ("the old man who lived by the sea", 11, "the old…"),  # "man" would need 12 with its ellipsis
    ("the old man who lived by the sea", 8, "the old…"),  # the cut falls on a space
    ("extraordinarily", 6, "extra…"),  # a single word longer than the width is cut inside, marked
])
def test_labels_are_shortened_at_word_boundaries_with_an_ellipsis(text, width, expected):
    shortened = posterior.shorten(text, width)
    assert shortened == expected and len(shortened) <= width
    if shortened != text:
        assert shortened.endswith("…") and text.startswith(shortened[:-1])


def test_the_heatmap_keeps_the_most_probable_spans_in_text_order_with_short_labels():
    assert posterior.span_label("a very long mention of the lady in the white dress", 7) == \
        "a very long mention of the… [7]"
    mention = np.array([0.2, 0.9, 0.5, 0.9, 0.1, 0.7])
    assert posterior.heatmap_spans(mention, 3).tolist() == [1, 3, 5]
    assert posterior.heatmap_spans(mention, 100).tolist() == list(range(6))


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def random_structures(rng: np.random.Generator, particles: int, tokens: int, word: str = "w") -> list[Document]:
    """Annotations of one text as a sampler makes them: per particle, non-overlapping spans, random entities."""
    words = [f"{word}{t}" for t in range(tokens)]
    structures = []
    for _ in range(particles):
        mentions, t = [], 0
        while t < tokens:
            length = int(rng.integers(1, 4))
            if rng.random() < 0.4 and t + length <= tokens:
                mentions.append(Mention(t, t + length, int(rng.integers(1, 5))))
            t += length
        structures.append(Document("d", words, mentions=mentions))
    return structures


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sparse_marginals_equal_the_dense_ones_on_small_documents(seed):
    rng = np.random.default_rng(seed)
    structures = random_structures(rng, particles=30, tokens=40)
    weights = rng.dirichlet(np.ones(30))
    marginals = posterior.coreference_marginals(structures, weights)
    spans = marginals.spans
    # the dense definition: a particles x spans x spans table of "same entity"
    entity = np.full((30, len(spans)), -1)
    for p, structure in enumerate(structures):
        for m in structure.mentions:
            entity[p, spans.index(m.span)] = m.entity
    dense = np.einsum("p,pab->ab", weights, (entity[:, :, None] == entity[:, None, :]) & (entity[:, :, None] >= 0))
    np.testing.assert_allclose(marginals.matrix(range(len(spans))), dense, atol=1e-12)
    np.testing.assert_allclose(marginals.mention, np.diag(dense), atol=1e-12)
    # the antecedent marginals: each span's closest earlier mention of its entity, summed over the particles
    closest = np.zeros((len(spans), len(spans) + 1))  # the last column: a new entity
    for p in range(30):
        last: dict[int, int] = {}
        for a in np.flatnonzero(entity[p] >= 0):
            closest[a, last.get(entity[p, a], len(spans))] += weights[p]
            last[entity[p, a]] = a
    for top in (None, 1, 2):
        rankings = posterior.antecedent_rankings(structures, weights, top=top)
        assert [r.span for r in rankings] == spans
        for a, ranking in enumerate(rankings):
            expected = sorted(((b, q) for b, q in enumerate(closest[a]) if q > 0), key=lambda pair: -pair[1])
            listed = [(len(spans) if x.span is None else spans.index(x.span), x.probability)
                      for x in ranking.antecedents]
            assert len(listed) == min(len(expected), top or len(expected))
            for _, q in listed:  # the most probable ones
                assert q >= max((q for _, q in expected[len(listed):]), default=0.0) - 1e-12
            for b, q in listed:
                assert q == pytest.approx(closest[a, b])
            assert ranking.remainder == pytest.approx(ranking.mention - sum(q for _, q in listed), abs=1e-12)
            assert ranking.remainder == pytest.approx(sum(q for _, q in expected[len(listed):]), abs=1e-12)


def test_marginals_of_many_spans_are_held_sparsely():
    """A long text's thousands of spans: memory of the particles' mentions, never a spans x spans table."""
    rng = np.random.default_rng(3)
    structures = random_structures(rng, particles=20, tokens=30_000)
    marginals = posterior.coreference_marginals(structures, np.full(20, 1 / 20))
    assert len(marginals.spans) > 10_000
    held = [value.nbytes for value in (marginals.mention, marginals.entities.particle, marginals.entities.span,
                                       marginals.entities.entity)]
    assert sum(held) < 40 * sum(len(s.mentions) for s in structures)  # a few integers per mention
    as_json = marginals.to_json(max_spans=40)
    assert len(as_json["coreference"]["spans"]) == 40 and np.array(as_json["coreference"]["matrix"]).shape == (40, 40)


@pytest.mark.parametrize("max_spans", [40, 200])
def test_the_heatmap_has_a_bounded_size_however_many_spans(tmp_path, max_spans):
    rng = np.random.default_rng(0)
    structures = random_structures(rng, particles=10, tokens=600, word="word " * 20)  # labels to shorten
    marginals = posterior.coreference_marginals(structures, rng.dirichlet(np.ones(10)))
    assert len(marginals.spans) > max_spans
    posterior.plot_marginals(marginals, tmp_path / "h.png", "a long document", max_spans)
    width, height = png_size(tmp_path / "h.png")
    assert width <= 2000 and height <= 2000
    tokens = ["Anna"]
    for few in ([], [Mention(0, 1, 1)]):  # nothing to pair: a figure that says so
        small = posterior.coreference_marginals([Document("d", tokens, mentions=few)], np.ones(1))
        posterior.plot_marginals(small, tmp_path / "few.png", "short", max_spans)
        assert png_size(tmp_path / "few.png")[0] > 0


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr (argument errors exit through SystemExit), on the model's own
    mentions unless ``argv`` says otherwise: what this file tests (the pipeline's mentions given, the default, are
    tested in tests/test_hints.py)."""
    own = [] if {"--given-mentions", "--preset", "--help"} & set(argv) else ["--given-mentions", "none"]
    try:
        status = posterior_command.main([*argv, *own, "--device", "cpu"])
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


TEXT = "Anna met Tom at the station. She gave him a book, and he thanked her."


def test_the_command_writes_samples_marginals_antecedents_and_heatmaps(tmp_path, capsys):
    out = tmp_path / "out"
    status, stdout, stderr = run(capsys, "--text", TEXT, "--particles", "20", "--samples", "7", "--out", str(out),
                                 "--min-probability", "0")
    assert status == 0 and "MAP:" in stdout and stderr == ""  # progress bars only on a terminal
    assert sorted(path.name for path in out.iterdir()) == sorted([*posterior.OUTPUT_FILES, "heatmap-text.png"])
    samples, problems = read_conll(out / "samples.conll")
    assert len(samples) == 7 and not problems
    assert all(sample.tokens == plain_document(TEXT).tokens for sample in samples)  # the original tokens
    (best,), _ = read_conll(out / "map.conll")
    marginals = json.loads((out / "marginals.json").read_text())["text"]
    spans = {(span["start"], span["end"]) for span in marginals["spans"]}
    assert {mention.span for mention in best.mentions} <= spans
    shown = marginals["coreference"]["spans"]  # the heatmap's spans: the 40 most probable (--max-spans)
    assert len(shown) == min(40, len(marginals["spans"])) and shown == sorted(shown)
    assert np.array(marginals["coreference"]["matrix"]).shape == (len(shown), len(shown))
    rankings = json.loads((out / "antecedents.json").read_text())["text"]
    assert [(r["start"], r["end"]) for r in rankings] == [(s["start"], s["end"]) for s in marginals["spans"]]
    for ranking in rankings:
        probabilities = [a["probability"] for a in ranking["antecedents"]]
        assert probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) <= ranking["mention_probability"] + 1e-5 <= 1 + 2e-5
        assert len(probabilities) <= 5  # --top-antecedents
        assert sum(probabilities) + ranking["remainder"] == pytest.approx(ranking["mention_probability"], abs=1e-5)
        assert all(a["antecedent"] is None or a["antecedent"]["end"] <= ranking["start"]
                   for a in ranking["antecedents"])
    assert any(a["antecedent"] is not None for r in rankings for a in r["antecedents"])
    assert (out / "antecedents.txt").read_text().startswith("# text\n")
    summary = json.loads((out / "summary.json").read_text())
    assert summary[0]["method"] == "sir" and summary[0]["proposal"] == "forward"  # the measured better resolver
    assert summary[0]["heatmap"] == "heatmap-text.png" and 1 <= summary[0]["ess"] <= 20


def test_a_long_text_gives_a_bounded_heatmap_of_the_likeliest_spans(tmp_path, capsys):
    text = " ".join(f"Anna met Tom at station {i}. She gave him a book, and he thanked her." for i in range(25))
    out = tmp_path / "out"
    assert run(capsys, "--text", text, "--particles", "2", "--samples", "1", "--out", str(out),
               "--max-spans", "10")[0] == 0
    assert len(json.loads((out / "marginals.json").read_text())["text"]["spans"]) > 10
    width, height = png_size(out / "heatmap-text.png")
    assert width <= 1000 and height <= 1000  # all its spans would make it about 1860 x 1680


def write_conll(path, *ids: str) -> str:
    """A CoNLL file of one short document per id, without mentions; its path."""
    lines = []
    for id in ids:
        lines += [f"#begin document ({id}); part 000", *(f"{id}\t0\t{i}\t{word}\t-" for i, word in
                                                         enumerate(["Anna", "saw", "Tom", "."])), "", "#end document"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_reusing_the_output_folder_leaves_no_file_of_the_earlier_run(tmp_path, capsys):
    out = tmp_path / "out"
    options = ("--particles", "2", "--samples", "1", "--out", str(out))
    assert run(capsys, "--conll", write_conll(tmp_path / "two.conll", "a", "b/c"), *options)[0] == 0
    assert {"heatmap-a.png", "heatmap-b_c.png"} <= {path.name for path in out.iterdir()}
    assert run(capsys, "--conll", write_conll(tmp_path / "one.conll", "a"), *options)[0] == 0
    assert sorted(path.name for path in out.iterdir()) == sorted([*posterior.OUTPUT_FILES, "heatmap-a.png"])
    assert [row["document"] for row in json.loads((out / "summary.json").read_text())] == ["a"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["one.conll", "out", "two.conll"]  # no leftovers


def test_an_output_folder_with_other_files_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "out"
    assert run(capsys, "--text", TEXT, "--particles", "2", "--samples", "1", "--out", str(out))[0] == 0
    (out / "notes.txt").write_text("mine")
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    status, _, stderr = run(capsys, "--text", "Tom left.", "--particles", "2", "--out", str(out))
    assert status == 2 and stderr.count("\n") == 1 and "'notes.txt'" in stderr and "refusing" in stderr
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_failure_or_ctrl_c_leaves_the_output_folder_as_it_was(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert run(capsys, "--text", TEXT, "--particles", "2", "--samples", "1", "--out", str(out))[0] == 0
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(posterior, "plot_marginals", disk_full)
    status, _, stderr = run(capsys, "--text", "Tom left.", "--particles", "2", "--out", str(out))
    assert status == 2 and stderr.splitlines()[-1] == "error: [Errno 28] No space left on device"
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(posterior, "posteriors", interrupted)
    fresh = tmp_path / "new" / "deeper" / "out"
    status, _, stderr = run(capsys, "--text", "Tom left.", "--particles", "2", "--out", str(fresh))
    assert status == 130 and stderr == "interrupted\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # nor the parent folders made for it


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, where progress bars are drawn."""

    def isatty(self) -> bool:
        return True


def test_progress_bars_on_a_terminal_say_what_they_count(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    argv = ["--text", TEXT, "--particles", "2", "--out", str(tmp_path / "out"), "--device", "cpu"]
    assert posterior_command.main(argv) == 0
    bars = sys.stderr.getvalue()
    assert "SIR posteriors, 2 particles each: 100%" in bars and "marginals, antecedents and heatmaps: 100%" in bars
    assert ("document/s" in bars or "s/document" in bars) and "it/s" not in bars and "s/it" not in bars


def test_a_text_file_is_read_as_the_same_text(tmp_path, capsys):
    path = tmp_path / "story.txt"
    path.write_text(TEXT + "\n", encoding="utf-8")
    for source, out in ((["--file", str(path)], "file"), (["--text", TEXT], "text")):
        assert run(capsys, *source, "--particles", "5", "--out", str(tmp_path / out))[0] == 0
    (from_file,), _ = read_conll(tmp_path / "file" / "map.conll")
    (from_text,), _ = read_conll(tmp_path / "text" / "map.conll")
    assert from_file.id == "story" and from_file.tokens == from_text.tokens
    assert from_file.mentions == from_text.mentions  # the same seed, the same text
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    status, _, stderr = run(capsys, "--file", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "none"))
    assert status == 2 and stderr.strip().endswith(f"{tmp_path / 'empty.txt'}: the text has no words")


def test_smc_resamples_below_the_ess_threshold(tmp_path, capsys):
    resamplings = {}
    for threshold in ("0", "1"):
        out = tmp_path / threshold
        assert run(capsys, "--text", TEXT + " Tom left. Anna stayed.", "--method", "smc", "--particles", "10",
                   "--ess-threshold", threshold, "--out", str(out))[0] == 0
        resamplings[threshold] = json.loads((out / "summary.json").read_text())[0]["resamplings"]
    assert resamplings["0"] == 0 and resamplings["1"] > 0


def test_help_shows_the_whole_description_every_option_and_its_default(capsys):
    status, stdout, _ = run(capsys, "--help")
    assert status == 0
    assert posterior_command.__doc__.strip().splitlines()[-1].strip() in stdout  # not cut after the first line
    assert "  antecedents.json  the same as JSON\n" in stdout  # nor re-wrapped
    assert "(default: settled)" in stdout and "(default: 40)" in stdout and "(default: None)" not in stdout
    assert "the posterior that resolves" in stdout
    assert all(action.help for action in posterior_command.build_parser()._actions)


def test_the_checkpoint_default_proposal_stands_in_when_it_has_no_forward_one(tmp_path, capsys):
    bidirectional_only = Checkpoint.load(pretrained("entitynlm.pt"))
    del bidirectional_only.weights["proposal"]
    bidirectional_only.save(tmp_path / "bidirectional_only.pt")
    out = tmp_path / "out"
    assert run(capsys, "--text", "Hi.", "--particles", "2", "--checkpoint", str(tmp_path / "bidirectional_only.pt"),
               "--out", str(out))[0] == 0
    assert json.loads((out / "summary.json").read_text())[0]["proposal"] == "bidirectional"


def test_the_command_evaluates_the_map_structure_with_both_samplers(tmp_path, capsys):
    out = tmp_path / "result.json"
    status, stdout, stderr = run(capsys, "--evaluate", "--corpus", "sample", "--split", "dev", "--method", "both",
                                 "--particles", "10", "--sweeps", "1", "--json", str(out))
    assert status == 0 and "CoNLL F1" in stdout
    result = json.loads(out.read_text())
    assert set(result["methods"]) == {"sir", "smc"} and result["proposal"] == "forward"
    for row in result["methods"].values():
        assert 0 <= row["conll_f1"] <= 1 and row["perplexity"] > 1
        assert all(1 <= ess <= 10 + 1e-6 for ess in row["ess"])
    assert result["methods"]["sir"]["resamplings"] == [0, 0]


def write_bad_files(folder) -> None:
    """The files the bad inputs below name, in ``folder``."""
    good = Path(write_conll(folder / "good.conll", "a")).read_bytes()
    files = {
        "empty.conll": b"",
        "binary.conll": bytes(range(256)),
        "latin1.conll": "#begin document (a); part 000\na\t0\t0\tcafé\t-\n#end document\n".encode("latin-1"),
        "truncated.conll": good[: len(good) // 2],
        "unended.conll": good.replace(b"#end document\n", b""),
        "twice.conll": good + good,
        "a_file": b"",
        "truncated.pt": pretrained("entitynlm.pt").read_bytes()[:100_000],
        "random.pt": np.random.default_rng(0).bytes(3000),
    }
    for name, content in files.items():
        (folder / name).write_bytes(content)


# each bad input's options ({tmp}: the test's folder, holding write_bad_files) and a part of its one-line message
BAD_INPUTS = {
    "empty text": (["--text", ""], "--text: the text has no words"),
    "blank text": (["--text", " \n "], "--text: the text has no words"),
    "empty conll": (["--conll", "{tmp}/empty.conll"], "empty.conll"),
    "binary conll": (["--conll", "{tmp}/binary.conll"], "binary.conll:2: not UTF-8"),
    "latin-1 conll": (["--conll", "{tmp}/latin1.conll"], "latin1.conll:2: not UTF-8"),
    "truncated conll": (["--conll", "{tmp}/truncated.conll"], "truncated.conll:3: too few columns"),  # cut in line 3
    "conll without its end": (["--conll", "{tmp}/unended.conll"], "unended.conll:1: '#begin document' without"),
    "repeated document": (["--conll", "{tmp}/twice.conll"], "twice.conll: document 'a' part 0"),
    "missing conll": (["--conll", "{tmp}/missing.conll"], "missing.conll: No such file or directory"),
    "out under a file": (["--text", "Hi.", "--out", "{tmp}/a_file/out"], "a_file is a file, not a folder"),
    "out is a file": (["--text", "Hi.", "--out", "{tmp}/a_file"], "a_file: exists and is not a folder"),
    "no particles": (["--text", "Hi.", "--particles", "0"], "--particles: must be at least 1, got 0"),
    "negative particles": (["--text", "Hi.", "--particles", "-3"], "--particles: must be at least 1, got -3"),
    "particles not a number": (["--text", "Hi.", "--particles", "many"], "expected an integer, got 'many'"),
    "no samples": (["--text", "Hi.", "--samples", "0"], "--samples: must be at least 1"),
    "no spans": (["--text", "Hi.", "--max-spans", "0"], "--max-spans: must be at least 1"),
    "probability below 0": (["--text", "Hi.", "--min-probability", "-0.1"], "--min-probability must be in [0, 1]"),
    "probability above 1": (["--text", "Hi.", "--min-probability", "1.5"], "--min-probability must be in [0, 1]"),
    "threshold above 1": (["--text", "Hi.", "--ess-threshold", "2"], "ess_threshold must be in [0, 1]"),
    "json without evaluate": (["--text", "Hi.", "--json", "{tmp}/r.json"], "--json is for --evaluate"),
    "no source": ([], "one of the arguments --text --file --conll --evaluate is required"),
    "unknown corpus": (["--evaluate", "--corpus", "nope"], "unknown corpus 'nope'"),
    "missing checkpoint": (["--text", "Hi.", "--checkpoint", "{tmp}/missing.pt"], "missing.pt: no such checkpoint"),
    "truncated checkpoint": (["--text", "Hi.", "--checkpoint", "{tmp}/truncated.pt"],
                             "truncated.pt: not an entitylm checkpoint"),
    "random checkpoint": (["--text", "Hi.", "--checkpoint", "{tmp}/random.pt"],
                          "random.pt: not an entitylm checkpoint"),
    "unwritable json": (["--evaluate", "--json", "{tmp}/a_file/r.json"], "a_file is a file, not a folder"),
    "undecodable text": (["--text", "caf\udce9 au lait."], "--text: not UTF-8 text"),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_fails_in_one_line_and_writes_nothing(tmp_path, capsys, case):
    write_bad_files(tmp_path)
    options, message = BAD_INPUTS[case]
    options = [option.replace("{tmp}", str(tmp_path)) for option in options]
    if "--out" not in options:
        options += ["--out", str(tmp_path / "out")]
    before = sorted(path.name for path in tmp_path.iterdir())
    status, stdout, stderr = run(capsys, *options)
    assert status != 0 and stdout == ""
    assert stderr.count("\n") == 1 and "error: " in stderr and message in stderr, stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == before  # no output, no leftovers


def test_a_missing_proposal_is_refused_in_one_line(tmp_path, capsys):
    forward_only = Checkpoint.load(pretrained("entitynlm.pt"))
    del forward_only.weights["bidirectional_proposal"]
    forward_only.save(tmp_path / "forward_only.pt")
    status, _, stderr = run(capsys, "--text", "Hi.", "--checkpoint", str(tmp_path / "forward_only.pt"),
                            "--proposal", "bidirectional", "--out", str(tmp_path / "out"))
    assert status == 2 and stderr.count("\n") == 1 and "no bidirectional proposal" in stderr
    assert not (tmp_path / "out").exists()
