"""The sampler's token step makes no more host synchronisations (and not many more operations) than recorded: each
count is this branch's, so a change that adds a ``nonzero``, an ``item`` or a ``unique`` to the step fails here
(benchmarks/results/step_syncs.md has the history, on the bundled model)."""

from __future__ import annotations

import pyro
import pytest
import torch

from generative.entitynlm import state
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.layers.batch import make_batch
from inference.algorithms.smc import sample_structures, systematic_resampling
from inference.algorithms.syncs import OpCounter, is_sync, step_counts
from tests.test_hints import hinted
from tests.test_lockstep import sample_corpus, sample_corpus_models

PARTICLES = 16
# (syncs, ops) per token step of the sample corpus's first documents with the small random model, seed 0:
# "default" SMC at sentence ends, the proposal alone; "settled" SMC after any token, hints at weight 0.5,
# lookahead 0.8. Each growth check syncs twice per entity table: the widest row (``item``) and, since the pooled
# table drops the vectors no slot points at at every check (so that eq. 4 scores the few hundred in use, not the
# thousands a step's writes leave), how many it keeps (``nonzero``)
RECORDED = {"default": (0.15, 540), "settled": (1.15, 806)}
# the settled step's fixed-size form (off the CPU): the syncs of a growth check (steps 0, 32, 64, ...), made by
# the loop between steps (ParticleSystem.reserve): two per entity table, of the model's and of the proposal's
SYNCS_PER_CHECK = 4
OPS_SLACK = 1.05  # operation counts may move a little with the draws


def sampler_run(name: str, model, proposal, batch, eos: int):
    """A run of the sampler ``name``: its system started, then stepped to the end."""
    if name == "default":
        return lambda: sample_structures(EntityNLMParticles(model, proposal, batch, PARTICLES), eos, "sentence",
                                         history=False)
    return lambda: sample_structures(EntityNLMParticles(model, proposal, batch, PARTICLES, hinted(batch, 0.5), 0.8),
                                     eos, "token", history=False)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_token_step_makes_no_more_syncs_than_recorded(name):
    model, proposal, batch, eos = sample_corpus_models()
    pyro.set_rng_seed(0)
    counts = step_counts(sampler_run(name, model, proposal, batch, eos))
    print(f"{name}: {counts}")
    syncs, ops = RECORDED[name]
    assert counts.steps == batch.steps
    assert counts.syncs <= syncs, counts.sync_kinds
    assert counts.ops <= ops * OPS_SLACK
    if name == "default":  # the settled one deduplicates the lookahead's contexts on the CPU, at every step
        assert set(counts.sync_steps) <= set(range(0, counts.steps, state.GROWTH_INTERVAL))


@pytest.mark.parametrize("size", [3, 1])
def test_the_settled_step_on_an_accelerator_syncs_only_at_growth_checks(monkeypatch, size):
    """Off the CPU the lookahead's contexts are not deduplicated (a sort whose size the host must read): what is
    left are the entity tables' growth checks and clean-ups, every GROWTH_INTERVAL steps; the steps between make
    no host sync. A batch of one document (a book) scores its one word by the softmax's one-word path, which
    reads its class's rows without reading the class back."""
    monkeypatch.setattr(state, "CHEAP_SYNC_DEVICES", ())
    model, proposal, _, eos = sample_corpus_models()
    documents, vocabulary = sample_corpus()
    batch = make_batch(documents[:size], vocabulary)
    pyro.set_rng_seed(0)
    counts = step_counts(sampler_run("settled", model, proposal, batch, eos))
    print(f"settled, the fixed-size form: {counts}")
    checks = range(0, counts.steps, state.GROWTH_INTERVAL)
    assert set(counts.sync_steps) <= set(checks), counts.sync_kinds
    assert counts.syncs * counts.steps <= SYNCS_PER_CHECK * len(checks), counts.sync_kinds


def test_the_counter_sees_each_kind_of_sync():
    x = torch.arange(5.0)
    with torch.inference_mode(), OpCounter() as counter:
        (x > 2).nonzero(as_tuple=True)
        int(x.max())
        bool(x.any())
        torch.unique(x)
        x[x > 1]
        torch.where(x > 1, x, 0.0).sum()  # none
    assert sum(counter.syncs["setup"].values()) == 5


def test_a_copy_to_the_cpu_syncs_only_from_another_device():
    func = torch.ops.aten._to_copy.default
    assert not is_sync(func, (torch.zeros(1),), {"device": torch.device("cpu")})
    assert is_sync(func, (torch.zeros(1, device="meta"),), {"device": torch.device("cpu")})


def test_the_settled_step_compiles_whole(monkeypatch):
    """The settled sampler's token step (the system's step: proposal with hints and lookahead, model, weights; and a
    resampling of every particle) in its fixed-size form is one graph for ``torch.compile(fullgraph=True)``:
    nothing in it is read back to Python. Compiled, it draws and weighs what it does eagerly from the same random
    state."""
    monkeypatch.setattr(state, "CHEAP_SYNC_DEVICES", ())
    model, proposal, batch, eos = sample_corpus_models()

    def prepared():
        with torch.inference_mode():
            system = EntityNLMParticles(model, proposal, batch, PARTICLES, hinted(batch, 0.5), 0.8)

        def step(t: int) -> torch.Tensor:
            log_weights, _ = system.step(t)
            ancestors = systematic_resampling(log_weights)
            system.resample(ancestors)
            return log_weights.gather(0, ancestors)

        return step

    results = []
    for compiled in (False, True):
        step = prepared()
        pyro.set_rng_seed(0)
        with torch.inference_mode(), pyro.validation_enabled(False):
            for t in range(3):  # a few entities, and step 3 is no growth check
                step(t)
            results.append((torch.compile(step, fullgraph=True, backend="eager") if compiled else step)(3))
    assert torch.isfinite(results[0]).all()
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("size", [3, 1])
def test_the_step_itself_reads_nothing_back(monkeypatch, size):
    """In the fixed-size form a token step and a resampling make no host sync at any step, growth checks
    included: the entity tables make room between steps (``ParticleSystem.reserve``), where the sampler's loop
    reads their size back every GROWTH_INTERVAL steps."""
    monkeypatch.setattr(state, "CHEAP_SYNC_DEVICES", ())
    model, proposal, _, _ = sample_corpus_models()
    documents, vocabulary = sample_corpus()
    batch = make_batch(documents[:size], vocabulary)
    pyro.set_rng_seed(0)
    syncs = 0
    with torch.inference_mode(), pyro.validation_enabled(False):
        system = EntityNLMParticles(model, proposal, batch, PARTICLES, hinted(batch, 0.5), 0.8)
        for t in range(batch.steps):
            system.reserve(t)
            with OpCounter() as counter:
                log_weights, _ = system.step(t)
                system.resample(systematic_resampling(log_weights))
            syncs += sum(counter.syncs["setup"].values())
    assert batch.steps > 2 * state.GROWTH_INTERVAL and syncs == 0
