"""Correctness of EntityNLM's Pyro program, its proposal, and the importance-sampling estimator.

Tiny models (vocabulary of 6 words, 4 hidden units, mentions of at most 3 tokens, deterministic new-entity
embeddings) make exact answers computable: the marginal p(x) by enumerating every R/E/L annotation, and the
joint of a 3-token document by hand from the parameters.
"""

from __future__ import annotations

import itertools
import math

import pyro
import pyro.distributions as dist
import pytest
import torch
import torch.nn.functional as F
from pyro import poutine
from pyro.poutine.util import site_is_subsample

from coref.document import decode_entities
from generative.entitynlm.model import EntityNLM, EntityNLMConfig, EntityProposal
from generative.layers.batch import DocumentBatch
from inference.algorithms.importance import estimate_marginal, log_importance_weights

BOS, EOS = 2, 3
TINY = EntityNLMConfig(
    vocab_size=6, embedding_size=3, hidden_size=4, dropout=0.0, softmax="full", max_mention_length=3,
    new_entity_scale=0.0,
)
COUNTS = [1, 1, 1, 1, 5, 3]


def site_log_probs(trace: poutine.Trace, observed: bool | None = None) -> torch.Tensor:
    """An independent oracle for the library's streamed densities: the (P, B) sum of a full trace's masked
    site log-probabilities (only observed or only latent ones when ``observed`` says so)."""
    trace.compute_log_prob()
    total = 0.0
    for site in trace.nodes.values():
        if site["type"] == "sample" and not site_is_subsample(site):
            if observed is None or site["is_observed"] == observed:
                total = total + site["log_prob"]
    return total


def tiny_batch(rows: list[dict[str, list[int]]]) -> DocumentBatch:
    """A batch from explicit rows of words (and optionally R, E (1-based), L), padded with junk words."""
    steps = max(len(row["words"]) for row in rows)

    def padded(name: str, fill: int) -> torch.Tensor:
        return torch.tensor([row.get(name, [fill] * len(row["words"])) + [fill] * (steps - len(row["words"]))
                             for row in rows])

    words = torch.tensor([row["words"] + [5] * (steps - len(row["words"])) for row in rows])
    lengths = torch.tensor([len(row["words"]) for row in rows])
    return DocumentBatch(
        keys=tuple((f"d{i}", 0) for i in range(len(rows))),
        inputs=torch.cat([torch.full((len(rows), 1), BOS), words[:, :-1]], dim=1),
        words=words,
        mask=torch.arange(steps)[None] < lengths[:, None],
        sentence=padded("sentence", 0),
        R=padded("R", 0),
        E=padded("E", 0),
        L=padded("L", 1),
    )


def tiny_models(seed: int = 0, **changes) -> tuple[EntityNLM, EntityProposal]:
    torch.manual_seed(seed)
    pyro.clear_param_store()
    config = EntityNLMConfig(**{**TINY.to_dict(), **changes})
    model, proposal = EntityNLM(config, COUNTS).eval(), EntityProposal(config).eval()
    with torch.no_grad():  # make the distance weights matter, and the copy of an entity's words where there is one
        model.heads.entity.distance_weights.normal_()
        proposal.heads.entity.distance_weights.normal_()
        if model.word_copy is not None:
            model.word_copy.gate.weight.normal_()
            model.word_copy.gate.bias.zero_()
            if model.word_copy.query is not None:  # an attention that does not weigh the words alike
                model.word_copy.query.weight.normal_()
                model.word_copy.query.bias.normal_()
    return model, proposal


# the paper's eq. 6, and with a copy of each entity's words, weighted alike or by attention, or with a cache of the
# document's words, alone or beside the copy (ours)
EQ6_VARIANTS = {"eq6": {}, "copy": {"entity_words": 2}, "attention": {"entity_words": 2, "copy_weighting": "attention"},
                "cache": {"document_cache": 0.3}, "copy+cache": {"entity_words": 2, "document_cache": 0.3}}


def annotations(steps: int, max_length: int):
    """Every R/E/L annotation of ``steps`` tokens (E 1-based by first mention, mentions may run past the end)."""

    def extend(t: int, known: int, R: list, E: list, L: list):
        if t == steps:
            yield R, E, L
            return
        if L and L[-1] > 1:  # inside a mention: copies
            yield from extend(t + 1, known, R + [1], E + [E[-1]], L + [L[-1] - 1])
            return
        yield from extend(t + 1, known, R + [0], E + [0], L + [1])
        for entity in range(1, known + 2):
            for length in range(1, max_length + 1):
                yield from extend(t + 1, max(known, entity), R + [1], E + [entity], L + [length])

    yield from extend(0, 0, [], [], [])


def exact_log_marginal(model: EntityNLM, words: list[int], sentence: list[int] | None = None
                       ) -> tuple[torch.Tensor, list, torch.Tensor]:
    """log p(x) by enumeration, with every annotation and its joint log-probability (``sentence``: each token's
    sentence number, 0 throughout when not given)."""
    every = list(annotations(len(words), model.config.max_mention_length))
    sentence = sentence if sentence is not None else [0] * len(words)
    batch = tiny_batch([{"words": words, "sentence": sentence, "R": R, "E": E, "L": L} for R, E, L in every])
    with torch.no_grad():
        joint = model.log_likelihood(batch)
    return torch.logsumexp(joint, 0), every, joint


WORDS = [4, 0, 5, 4]


@pytest.mark.parametrize("copy", EQ6_VARIANTS.values(), ids=EQ6_VARIANTS)
def test_enumerated_joint_is_a_distribution_over_annotations_and_words(copy):
    model, _ = tiny_models(**copy)
    # summing p(x, z) over all z and all x of length 2 gives 1 (mentions may run past the end: z covers them)
    total = torch.logsumexp(torch.stack([exact_log_marginal(model, list(x))[0]
                                         for x in itertools.product(range(6), repeat=2)]), 0)
    assert total.item() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 2.0])
def test_importance_estimate_converges_to_the_exact_marginal(temperature):
    model, proposal = tiny_models()
    proposal.temperature = temperature  # a widened proposal is still a valid one
    exact, _, _ = exact_log_marginal(model, WORDS)
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(1)
    estimate = estimate_marginal(model.model, proposal.guide, batch, particles=20_000)
    assert estimate.log_marginal.item() == pytest.approx(exact.item(), abs=0.02)
    assert estimate.elbo.item() < exact.item()  # the ELBO is a lower bound
    assert 1 <= estimate.ess.item() <= 20_000


def test_with_the_exact_posterior_as_proposal_the_weights_are_constant():
    model, _ = tiny_models()
    exact, every, joint = exact_log_marginal(model, WORDS)
    R_, E_, L_ = (torch.tensor(part) for part in zip(*every))  # (Z, T) each

    def posterior_guide(batch: DocumentBatch, particles: int) -> None:
        """Draw a whole annotation z from the exact posterior, then emit it site by site as point masses."""
        with pyro.plate("particles", particles, dim=-2), pyro.plate("documents", 1, dim=-1):
            choice = pyro.sample("annotation", dist.Categorical(logits=joint))
            for t in range(batch.steps):  # sites as the model names them: E as a slot, L as L - 1
                pyro.sample(f"R_{t}", dist.Delta(R_[choice, t]).mask(False))
                pyro.sample(f"E_{t}", dist.Delta((E_[choice, t] - 1).clamp(min=0)).mask(False))
                pyro.sample(f"L_{t}", dist.Delta(L_[choice, t] - 1).mask(False))

    pyro.set_rng_seed(0)
    with torch.no_grad():
        log_weights = log_importance_weights(model.model, posterior_guide, tiny_batch([{"words": WORDS}]), 50)
    assert torch.allclose(log_weights, exact.expand_as(log_weights), atol=1e-5)


def test_joint_of_a_three_token_document_by_hand():
    """[w4]1 w0 [w5]1 with gold R/E/L, computed from the parameters with the paper's equations."""
    model, _ = tiny_models()
    batch = tiny_batch([{"words": [4, 0, 5], "R": [1, 0, 1], "E": [1, 0, 1], "L": [1, 1, 1]}])
    heads = model.heads
    with torch.no_grad():
        s = model.encoder(batch)[0]  # s[t] = h_{t-1}, s[t + 1] = h_t
        r = heads.mention_type.type_embeddings

        def log_R(h):  # eq. 3
            return F.log_softmax(heads.mention_type.bilinear(h) @ r.T, -1)

        def log_L(h, e):  # eq. 5
            return F.log_softmax(heads.length.from_state(h) + heads.length.from_entity(e), -1)

        def log_X(h, e):  # eq. 6, full softmax
            return F.log_softmax(model.softmax.words(h + model.entity_to_word(e)), -1)

        def update(h, e):  # eq. 8
            delta = torch.sigmoid(heads.update.gate(h) @ e)
            return F.normalize(delta * e + (1 - delta) * h, dim=-1)

        u = F.normalize(r[1], dim=-1)  # eq. 7 with sigma = 0
        total = log_R(s[0])[1] + 0.0 + log_L(s[0], u)[0] + log_X(s[0], u)[4]  # t=0: the only choice is "new"
        e1 = update(s[1], u)
        total += log_R(s[1])[0] + log_X(s[1], e1)[0]  # t=1: no mention; the word sees the latest entity
        w_dist = heads.entity.distance_weights
        known = e1 @ heads.entity.bilinear(s[2]) + w_dist @ torch.tensor([math.log1p(2), math.log1p(0)])
        new = u @ heads.entity.bilinear(s[2])
        total += log_R(s[2])[1] + F.log_softmax(torch.stack([known, new]), 0)[0]  # t=2: entity 1 again
        total += log_L(s[2], e1)[0] + log_X(s[2], e1)[5]
        assert model.log_likelihood(batch).item() == pytest.approx(total.item(), abs=1e-5)


def _particle(trace: poutine.Trace, particle: int, document: int, steps: int) -> dict[str, torch.Tensor]:
    """The latent values one particle drew for one document, for the first ``steps`` steps."""
    return {
        name: site["value"][particle : particle + 1, document : document + 1]
        for name, site in trace.nodes.items()
        if site["type"] == "sample" and not site_is_subsample(site) and not site["is_observed"]
        and int(name.split("_")[-1]) < steps
    }


def _single_log_weight(model: EntityNLM, proposal: EntityProposal, batch: DocumentBatch, values: dict) -> float:
    """log p(x, z) - log q(z | x) of one given annotation z, each program run alone with z observed."""
    log_p = site_log_probs(poutine.trace(poutine.condition(model.model, values)).get_trace(batch, 1))
    log_q = site_log_probs(poutine.trace(poutine.condition(proposal.guide, values)).get_trace(batch, 1))
    return (log_p - log_q).item()


@pytest.mark.parametrize("new_entity_scale,copy", [(0.0, {}), *((0.01, copy) for copy in EQ6_VARIANTS.values())])
def test_particle_vectorised_run_equals_a_loop_of_single_particle_runs(new_entity_scale, copy):
    model, proposal = tiny_models(new_entity_scale=new_entity_scale, **copy)
    batch = tiny_batch([{"words": [4, 0, 5, 4, 1, 4]}])
    pyro.set_rng_seed(3)
    with torch.no_grad():
        guide_trace = poutine.trace(proposal.guide).get_trace(batch, 8)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(batch, 8)
        vectorised = site_log_probs(model_trace) - site_log_probs(guide_trace, observed=False)
        for p in range(8):
            single = _single_log_weight(model, proposal, batch, _particle(guide_trace, p, 0, batch.steps))
            assert single == pytest.approx(vectorised[p, 0].item(), abs=1e-5)


def test_masks_make_padding_irrelevant():
    model, proposal = tiny_models()  # deterministic new entities: the gold likelihoods below are exact
    short = {"words": [4, 0, 5], "R": [1, 0, 1], "E": [1, 0, 1], "L": [1, 1, 1]}
    long = {"words": [1, 4, 4, 0, 5, 4, 4], "R": [0, 1, 1, 0, 1, 1, 0], "E": [0, 1, 1, 0, 2, 1, 0],
            "L": [1, 2, 1, 1, 1, 1, 1]}
    with torch.no_grad():
        together = model.log_likelihood(tiny_batch([short, long]))
        alone = torch.cat([model.log_likelihood(tiny_batch([short])), model.log_likelihood(tiny_batch([long]))])
        assert torch.allclose(together, alone, atol=1e-5)
        assert torch.allclose(proposal.log_likelihood(tiny_batch([short, long])),
                              torch.cat([proposal.log_likelihood(tiny_batch([row])) for row in (short, long)]),
                              atol=1e-5)

        model, proposal = tiny_models(new_entity_scale=0.01)  # importance weights with noise sites too
        pyro.set_rng_seed(5)
        batch = tiny_batch([short, long])
        guide_trace = poutine.trace(proposal.guide).get_trace(batch, 16)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(batch, 16)
        batched = site_log_probs(model_trace) - site_log_probs(guide_trace, observed=False)
        alone = tiny_batch([short])
        for p in range(16):
            single = _single_log_weight(model, proposal, alone, _particle(guide_trace, p, 0, alone.steps))
            assert single == pytest.approx(batched[p, 0].item(), abs=1e-5)


def test_the_entity_table_grows_past_its_initial_capacity():
    model, _ = tiny_models(max_mention_length=1)
    steps = 80  # every token a new entity: more entities than the initial 33 slots
    batch = tiny_batch([{"words": [4] * steps, "R": [1] * steps, "E": list(range(1, steps + 1)), "L": [1] * steps}])
    with torch.no_grad():
        assert torch.isfinite(model.log_likelihood(batch)).all()


@pytest.mark.parametrize("changes", [{"distance": "reference"}, {"update": "reference"}, {"softmax": "class"}])
def test_reference_code_variants_run_and_normalise(changes):
    model, _ = tiny_models(**changes)
    total = torch.logsumexp(torch.stack([exact_log_marginal(model, list(x))[0]
                                         for x in itertools.product(range(6), repeat=2)]), 0)
    assert total.item() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("copy", EQ6_VARIANTS.values(), ids=EQ6_VARIANTS)
def test_generated_documents_carry_a_consistent_annotation(copy):
    model, _ = tiny_models(new_entity_scale=0.01, **copy)
    pyro.set_rng_seed(0)
    words, annotation = model.generate(30, BOS, EOS)
    assert len(words) >= 30 and annotation.L[-1] == 1 and all(0 <= w < 6 for w in words)
    document = decode_entities("generated", [str(w) for w in words], annotation)  # raises if inconsistent
    assert [m.entity for m in document.mentions][:1] in ([], [1])


def test_streaming_log_densities_equal_the_trace_based_weights():
    model, proposal = tiny_models(new_entity_scale=0.01)
    batch = tiny_batch([{"words": [4, 0, 5, 4, 1, 4]}, {"words": [1, 4, 4]}])
    with torch.no_grad():
        pyro.set_rng_seed(11)
        streamed = log_importance_weights(model.model, proposal.guide, batch, 16)
        pyro.set_rng_seed(11)  # the same draws, through full traces
        guide_trace = poutine.trace(proposal.guide).get_trace(batch, 16)
        model_trace = poutine.trace(poutine.replay(model.model, trace=guide_trace)).get_trace(batch, 16)
        traced = site_log_probs(model_trace) - site_log_probs(guide_trace, observed=False)
    assert torch.allclose(streamed, traced, atol=1e-5)
