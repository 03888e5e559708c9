"""The sampler's token step makes no more host synchronisations (and not many more operations) than recorded: each
count is this branch's, so a change that adds a ``nonzero``, an ``item`` or a ``unique`` to the step fails here
(benchmarks/results/step_syncs.md has the history, on the bundled model)."""

from __future__ import annotations

import pyro
import pytest
import torch

from generative.entitynlm import state
from generative.entitynlm.hints import hinted_tracker
from generative.entitynlm.lookahead import WordLookahead
from inference.algorithms.smc import ModelSites, ProposalSites, systematic_resampling
from inference.algorithms.syncs import OpCounter, is_sync, step_counts
from tests.test_hints import hinted
from tests.test_lockstep import sample_corpus_models

PARTICLES = 16
# (syncs, ops) per token step of the sample corpus's first documents with the small random model, seed 0:
# "default" SMC at sentence ends, the proposal alone; "settled" SMC after any token, hints at weight 0.5,
# lookahead 0.8. Each growth check syncs twice per entity table: the widest row (``item``) and, since the pooled
# table drops the vectors no slot points at at every check (so that eq. 4 scores the few hundred in use, not the
# thousands a step's writes leave), how many it keeps (``nonzero``)
RECORDED = {"default": (0.15, 540), "settled": (1.15, 806)}
FIXED_SIZE_SYNCS = 0.15  # the settled step's fixed-size form (off the CPU): growth checks at steps 0, 32 and 64
OPS_SLACK = 1.05  # operation counts may move a little with the draws


def sampler_options(name: str, batch) -> dict:
    if name == "default":
        return {"resample": "sentence"}
    return {"resample": "token", "hints": hinted(batch, 0.5), "lookahead": 0.8}


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_token_step_makes_no_more_syncs_than_recorded(name):
    model, proposal, batch, eos = sample_corpus_models()
    pyro.set_rng_seed(0)
    counts = step_counts(model, proposal, batch, PARTICLES, eos, history=False, **sampler_options(name, batch))
    print(f"{name}: {counts}")
    syncs, ops = RECORDED[name]
    assert counts.steps == batch.steps
    assert counts.syncs <= syncs, counts.sync_kinds
    assert counts.ops <= ops * OPS_SLACK
    if name == "default":  # the settled one deduplicates the lookahead's contexts on the CPU, at every step
        assert set(counts.sync_steps) <= set(range(0, counts.steps, state.GROWTH_INTERVAL))


def test_the_settled_step_on_an_accelerator_syncs_only_at_growth_checks(monkeypatch):
    """Off the CPU the lookahead's contexts are not deduplicated (a sort whose size the host must read): what is
    left are the entity tables' growth checks and clean-ups, every GROWTH_INTERVAL steps; the steps between make
    no host sync."""
    monkeypatch.setattr(state, "CHEAP_SYNC_DEVICES", ())
    model, proposal, batch, eos = sample_corpus_models()
    pyro.set_rng_seed(0)
    counts = step_counts(model, proposal, batch, PARTICLES, eos, history=False, **sampler_options("settled", batch))
    print(f"settled, the fixed-size form: {counts}")
    assert counts.syncs <= FIXED_SIZE_SYNCS, counts.sync_kinds
    assert set(counts.sync_steps) <= set(range(0, counts.steps, state.GROWTH_INTERVAL))


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
    """The settled sampler's token step (proposal with hints and lookahead, model, weights, a resampling of every
    particle) in its fixed-size form is one graph for ``torch.compile(fullgraph=True)``: nothing in it is read
    back to Python. Compiled, it draws and weighs what it does eagerly from the same random state."""
    monkeypatch.setattr(state, "CHEAP_SYNC_DEVICES", ())
    model, proposal, batch, eos = sample_corpus_models()

    def prepared():
        with torch.inference_mode():
            proposed = ProposalSites()
            scored = ModelSites(proposed)
            model_states, proposal_states = model.encoder(batch), proposal.encoder(batch)
            model_tracker = model.tracker(batch, PARTICLES, model_states, site=scored)
            proposal_tracker = hinted_tracker(proposal, batch, PARTICLES, proposal_states, proposed,
                                              hinted(batch, 0.5),
                                              WordLookahead(model, model_tracker, model_states, batch, 0.8))

        def step(t: int) -> torch.Tensor:
            proposed.start()
            scored.start()
            proposal.step(t, proposal_tracker)
            model.step(t, batch, model_states, model_tracker)
            log_weights = scored.joint - proposed.total
            ancestors = systematic_resampling(log_weights)
            for tracker in (model_tracker, proposal_tracker):
                tracker.resample(ancestors)
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
