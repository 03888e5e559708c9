"""MNEMELM: batches, causality, the T-XL cache, the entity memory (static, dynamic, w/o MI, closed gates), the
entity KL, the Pyro site, generation, and learning, on tiny float64 models."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from pyro import poutine

from generative.mneme import (
    CLOSED_GATE_BIAS,
    PRESETS,
    MnemeConfig,
    MnemeExample,
    MnemeLM,
    entity_kl,
    make_batch,
    nucleus_sample,
    parameter_count,
)

VOCAB = 23

# prompt "<sep> mary ann <sep> the dog <sep>": entity 0 = "mary ann", entity 1 = "the dog"
LONG = MnemeExample(
    prompt=[1, 2, 3, 1, 4, 5, 1], prompt_entity=[-1, 0, 0, -1, 1, 1, -1],
    story=[2, 3, 6, 7, 4, 5, 8, 9, 10, 2, 11, 12, 4, 5, 13, 14, 15],
    entity_labels=[{0}, {0}, {0}, {0, 1}, {1}, {1}, {1}, (), (), {0}, {0}, {0}, {1}, {1}, {1}, (), ()],
    mention_mask=[1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 0],
)
SHORT = MnemeExample(prompt=[1, 16, 1], prompt_entity=[-1, 0, -1], story=[16, 17, 18, 16, 19, 20],
                     entity_labels=[{0}, {0}, {0}, {0}, (), ()], mention_mask=[1, 0, 0, 1, 0, 0])


def config(name: str = "d_mneme", **overrides) -> MnemeConfig:
    sizes = dict(d_model=16, layers=2, heads=2, d_ff=32, dropout=0.0, chunk=3, segment=3, cache=64,
                 memory_heads=2, max_entities=4)
    return MnemeConfig.preset(name, VOCAB, **{**sizes, **overrides})


def build(name: str = "d_mneme", seed: int = 0, **overrides) -> MnemeLM:
    torch.manual_seed(seed)
    return MnemeLM(config(name, **overrides)).double().eval()


def like(source: MnemeLM, name: str, **overrides) -> MnemeLM:
    """A model of preset ``name`` with ``source``'s weights wherever it has the same parameters."""
    target = build(name, seed=1, **overrides)
    target.load_state_dict(source.state_dict(), strict=False)
    return target


@pytest.fixture(scope="module")
def batch():
    return make_batch([LONG, SHORT])


# ---- config and batches ----------------------------------------------------------------------------------------


def test_config_round_trips_and_checks():
    for name in PRESETS:
        c = config(name)
        assert MnemeConfig.from_dict(c.to_dict()) == c
    assert config("vanilla").memory == "none" and config("d_mneme_no_es").kl_weight == 0
    assert config("d_mneme_no_mi").memory_init == "random" and config("s_mneme").memory == "static"
    with pytest.raises(ValueError, match="unknown"):
        MnemeConfig.from_dict({"vocab_size": 5, "layer": 2})
    with pytest.raises(ValueError, match="kl_weight"):
        MnemeConfig(vocab_size=5, memory="none", kl_weight=1.0)
    with pytest.raises(ValueError, match="multiple"):
        MnemeConfig(vocab_size=5, d_model=10, heads=4)
    with pytest.raises(ValueError, match="segment"):
        MnemeConfig(vocab_size=5, chunk=64, segment=100)
    with pytest.raises(ValueError, match="preset"):
        MnemeConfig.preset("t_mneme", 5)


def test_make_batch_left_pads_prompts_and_labels_non_entity_slot(batch):
    assert batch.prompt.tolist()[1] == [0, 0, 0, 0, 1, 16, 1]
    assert batch.prompt_entity.tolist()[1] == [-1, -1, -1, -1, -1, 0, -1]
    assert batch.prompt_mask.tolist()[1] == [False] * 4 + [True] * 3
    assert batch.story_lengths.tolist() == [17, 6] and batch.story_mask[1].sum() == 6
    assert batch.entity_labels.shape == (2, 17, 3)
    assert batch.slot_mask.tolist() == [[True, True, True], [True, True, False]]
    assert batch.entity_labels[0, 3].tolist() == [False, True, True]  # {0, 1} -> slots 1 and 2
    assert batch.entity_labels[0, 7].tolist() == [True, False, False]  # no label -> the non-entity slot
    assert not batch.entity_labels[1, 6:].any()  # padding: no target
    assert batch.mention_mask[0, :3].tolist() == [True, True, False]
    plain = make_batch([{"prompt": [1], "prompt_entity": [-1], "story": [2, 3]}])
    assert plain.entity_labels.shape == (1, 2, 1) and plain.entity_labels.all()


@pytest.mark.parametrize("change, message", [
    ({"entity_labels": [{2}] + [()] * 16}, "outside"),
    ({"prompt_entity": [-1, 0, 0, -1, 2, 2, -1]}, "entity indices"),
    ({"mention_mask": [0]}, "mention flags"),
    ({"prompt": [], "prompt_entity": []}, "prompt"),
])
def test_make_batch_rejects_inconsistent_examples(change, message):
    with pytest.raises(ValueError, match=message):
        make_batch([replace(LONG, **change)])


def test_too_many_entities_for_the_config_is_an_error(batch):
    with pytest.raises(ValueError, match="max_entities"):
        build(max_entities=1).token_log_probs(batch)


# ---- the LM ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_shapes_and_padding(name, batch):
    model = build(name)
    log_p = model.token_log_probs(batch)
    assert log_p.shape == (2, 17) and (log_p[1, 6:] == 0).all() and (log_p[batch.story_mask] < 0).all()
    loss = model.loss(batch)
    assert loss.total.shape == loss.nll.shape == loss.kl.shape == ()
    assert torch.isclose(loss.nll, -log_p.sum() / 23)
    if name == "vanilla":
        with pytest.raises(ValueError):
            model.cross_attention(batch)
        return
    trace = model.cross_attention(batch)
    assert trace.attention.shape == (2, 2, 2, 17, 3)  # B, layers, memory heads, T, Z
    assert torch.allclose(trace.attention.sum(-1), torch.ones(2, 2, 2, 17, dtype=torch.float64))
    assert (trace.attention[1, ..., 2] == 0).all()  # the absent slot of the one-entity story
    assert trace.values.shape == (2, 7, 3, 16)  # before each of 6 chunks and after the last


def test_batching_matches_stories_read_alone(batch):
    for name in ("vanilla", "d_mneme"):
        model = build(name)
        together = model.token_log_probs(batch)
        for row, example in enumerate((LONG, SHORT)):
            alone = model.token_log_probs(make_batch([example]))[0]
            assert torch.allclose(together[row, : len(example.story)], alone, atol=1e-12)


@pytest.mark.parametrize("name", ["vanilla", "s_mneme", "d_mneme"])
def test_causal_later_tokens_do_not_change_earlier_log_probs(name):
    model = build(name)
    before = model.token_log_probs(make_batch([LONG]))[0]
    story = list(LONG.story)
    story[10] = 21
    after = model.token_log_probs(make_batch([replace(LONG, story=story)]))[0]
    assert torch.equal(before[:10], after[:10]) and not torch.allclose(before[11:], after[11:])
    unlabelled = model.token_log_probs(make_batch([replace(LONG, entity_labels=None)]))[0]
    assert torch.equal(before, unlabelled)  # the labels are supervision only


@pytest.mark.parametrize("name", ["vanilla", "s_mneme"])
def test_chunks_with_a_large_cache_read_as_one_segment(name, batch):
    chunked = build(name, chunk=3, cache=100)
    whole = like(chunked, name, chunk=99, segment=99, cache=100)
    assert torch.allclose(chunked.token_log_probs(batch), whole.token_log_probs(batch), atol=1e-12)


def test_dynamic_memory_in_one_chunk_is_static_and_updates_matter_across_chunks(batch):
    dynamic = build("d_mneme", chunk=99, segment=99)
    static = like(dynamic, "s_mneme", chunk=99, segment=99)
    assert torch.allclose(dynamic.token_log_probs(batch), static.token_log_probs(batch), atol=1e-12)
    dynamic, static = like(dynamic, "d_mneme"), like(dynamic, "s_mneme")  # chunk = 3: updates after each chunk
    first = slice(0, 4)  # tokens predicted before the first update (the prompt's output and chunk 0)
    dynamic_p, static_p = dynamic.token_log_probs(batch), static.token_log_probs(batch)
    assert torch.allclose(dynamic_p[:, first], static_p[:, first], atol=1e-12)
    assert not torch.allclose(dynamic_p[0, 4:], static_p[0, 4:])


@pytest.mark.parametrize("name", ["vanilla", "d_mneme"])
@pytest.mark.parametrize("segment, cache, changed", [(3, 10, 7), (3, 8, 4), (6, 8, 7), (99, 7, 17), (99, 6, 1)])
def test_a_smaller_cache_changes_log_probs_only_once_it_is_exceeded(name, segment, cache, changed):
    # a prompt of P = 7 positions, then segments of S tokens: token t > 0 is predicted in segment (t − 1) // S,
    # which starts at position 7 + S ((t − 1) // S); while that start is <= the cache, it still sees all the past
    model = build(name, segment=segment)
    single = make_batch([LONG])
    full, short = model.token_log_probs(single), model.token_log_probs(single, cache_size=cache)
    assert torch.equal(full[0, :changed], short[0, :changed])
    assert ((full[0, changed:] - short[0, changed:]).abs() > 1e-9).all()
    assert torch.isfinite(model.token_log_probs(single, cache_size=0)).all()


@pytest.mark.parametrize("segment, reached", [(3, [5]), (6, [4, 5]), (99, [0, 1, 2, 3, 4, 5])])
def test_gradients_cross_chunks_within_a_segment_but_not_the_cache(segment, reached):
    model = build("vanilla", segment=segment)
    inputs = []
    model.embedding.register_forward_hook(lambda module, args, output: inputs.append(output) or output.retain_grad())
    model.token_log_probs(make_batch([LONG]))[0, 16].backward()  # predicted at story position 15, in chunk 5
    prompt, chunks = inputs[0], inputs[1:]
    assert prompt.grad is None or not prompt.grad.any()
    assert [c for c, chunk in enumerate(chunks) if chunk.grad is not None and chunk.grad.any()] == reached


def test_static_memory_values_never_change_and_dynamic_ones_do(batch):
    d_mneme = build("d_mneme")
    static = like(d_mneme, "s_mneme").cross_attention(batch).values
    assert torch.equal(static, static[:, :1].expand_as(static))
    dynamic = d_mneme.cross_attention(batch).values
    assert torch.equal(static[:, 0], dynamic[:, 0])  # the same (prompt) initialisation
    assert (dynamic[0, 1:] - dynamic[0, :-1]).abs().amax((-1, -2)).gt(0).all()  # every chunk updates story 0
    assert torch.equal(dynamic[1, 3:], dynamic[1, 2:-1])  # story 1 ends in chunk 1: no update after chunk 2
    assert torch.equal(dynamic[1, 0, 2], torch.zeros(16, dtype=torch.float64))  # its absent slot stays empty


@pytest.mark.parametrize("name", ["s_mneme", "d_mneme"])
def test_memory_models_with_closed_gates_are_the_vanilla_lm(name, batch):
    memory_model = build(name)
    vanilla = like(memory_model, "vanilla")
    assert not torch.allclose(memory_model.token_log_probs(batch), vanilla.token_log_probs(batch))
    with torch.no_grad():
        for block in memory_model.blocks:
            block.memory.gate.weight.zero_()
            block.memory.gate.bias.fill_(-1e4)  # g = σ(−1e4) = 0 exactly: h' = h (eq. 3)
    assert torch.equal(memory_model.token_log_probs(batch), vanilla.token_log_probs(batch))


@pytest.mark.parametrize("name", ["vanilla", "s_mneme", "d_mneme", "d_mneme_no_mi"])
def test_a_model_started_from_a_base_lm_has_its_weights_and_nearly_closed_gates(name, batch):
    base, model = build("vanilla", seed=3), build(name)
    model.start_from(base)
    weights = model.state_dict()
    assert all(torch.equal(weights[key], value) for key, value in base.state_dict().items())
    gates = [block.memory.gate.bias for block in model.blocks if block.memory is not None]
    assert len(gates) == (0 if name == "vanilla" else 2)
    assert all(torch.all(bias == CLOSED_GATE_BIAS) for bias in gates)
    if name == "vanilla":
        assert torch.equal(model.token_log_probs(batch), base.token_log_probs(batch))


def test_only_a_vanilla_lm_of_the_same_sizes_can_be_a_base():
    with pytest.raises(ValueError, match="differs in d_model"):
        build("d_mneme").start_from(build("vanilla", d_model=8))
    with pytest.raises(ValueError, match="must be a VANILLALM"):
        build("d_mneme").start_from(build("s_mneme"))


def test_memory_initialisation_is_the_mean_prompt_output_of_each_entity(batch):
    model = build("s_mneme")
    values = model.cross_attention(batch).values[:, 0]
    prompt_out = model._read_chunk(batch.prompt, batch.prompt_mask, None, None)[0]
    assert torch.allclose(values[0, 1], prompt_out[0, 1:3].mean(0))  # "mary ann"
    assert torch.allclose(values[0, 2], prompt_out[0, 4:6].mean(0))  # "the dog"
    assert torch.equal(values[:, 0], model.null_slot.detach().expand(2, -1))


def test_without_memory_initialisation_only_the_initial_slots_differ(batch):
    d_mneme = build("d_mneme")
    no_mi = like(d_mneme, "d_mneme_no_mi")
    assert set(no_mi.state_dict()) - set(d_mneme.state_dict()) == {"random_slots"}
    assert set(d_mneme.state_dict()) <= set(no_mi.state_dict())
    initial = no_mi.cross_attention(batch).values[:, 0]
    assert torch.equal(initial[0, 1:], no_mi.random_slots.detach()[:2])  # whatever the prompt says
    assert torch.equal(initial[1, 1], initial[0, 1])
    single = make_batch([LONG])
    assert not torch.allclose(no_mi.token_log_probs(single), d_mneme.token_log_probs(single))
    with torch.no_grad():  # give w/o MI the prompt-derived slots of this story: then they agree exactly
        no_mi.random_slots[:2] = d_mneme.cross_attention(single).values[0, 0, 1:]
    assert torch.equal(no_mi.token_log_probs(single), d_mneme.token_log_probs(single))


# ---- the objective ---------------------------------------------------------------------------------------------


def test_entity_kl_is_zero_at_the_target_and_positive_elsewhere():
    labels = torch.tensor([[[True, False, False], [False, True, True], [False, False, False]]])  # (1, 3, 3)
    q = torch.tensor([[[1.0, 0, 0], [0, 0.5, 0.5], [0, 0, 0]]], dtype=torch.float64)
    at_target = q.log()[:, None, None]  # (B, layers, H, T, Z), a = q with −inf where q = 0
    assert torch.equal(entity_kl(at_target, labels), torch.zeros(1, 3, dtype=torch.float64))
    off = torch.log_softmax(torch.randn(1, 2, 2, 3, 3, dtype=torch.float64), -1)
    kl = entity_kl(off, labels)
    assert (kl[0, :2] > 0).all() and kl[0, 2] == 0  # a token without labels (padding) has no term
    uniform = torch.full((1, 1, 1, 3, 3), 1 / 3, dtype=torch.float64).log()
    assert torch.allclose(entity_kl(uniform, labels)[0, :2],
                          torch.tensor([3, 1.5], dtype=torch.float64).log(), atol=1e-12)


def test_loss_weighs_the_kl_by_lambda_and_no_es_drops_it(batch):
    d_mneme = build("d_mneme", kl_weight=0.5)
    loss = d_mneme.loss(batch)
    assert loss.kl > 0 and torch.isclose(loss.total, loss.nll + 0.5 * loss.kl)
    no_es = like(d_mneme, "d_mneme_no_es")
    unsupervised = no_es.loss(batch)
    assert torch.equal(unsupervised.total, unsupervised.nll) and unsupervised.kl > 0
    assert torch.equal(unsupervised.nll, loss.nll)  # the same LM: only the objective differs
    vanilla = build("vanilla").loss(batch)
    assert vanilla.kl == 0 and torch.equal(vanilla.total, vanilla.nll)


@pytest.mark.parametrize("name", ["vanilla", "d_mneme"])
def test_model_site_log_prob_is_minus_the_nll(name, batch):
    model = build(name)
    trace = poutine.trace(model.model).get_trace(batch)
    site = trace.nodes["X"]
    assert site["is_observed"] and [f.name for f in site["cond_indep_stack"]] == ["stories"]
    log_likelihood = model.log_likelihood(batch)
    assert log_likelihood.shape == (2,)
    assert torch.allclose(log_likelihood, model.token_log_probs(batch).sum(1), atol=1e-10)
    assert torch.isclose(-log_likelihood.sum() / batch.story_mask.sum(), model.loss(batch).nll, atol=1e-12)


# ---- generation ------------------------------------------------------------------------------------------------


def test_nucleus_sampling_keeps_the_smallest_set_reaching_top_p():
    logits = torch.tensor([[0.5, 0.3, 0.2]]).log().expand(2000, -1)
    generator = torch.Generator().manual_seed(0)
    assert set(nucleus_sample(logits, 0.6, generator).tolist()) == {0, 1}
    assert set(nucleus_sample(logits, 0.5, generator).tolist()) == {0}
    assert set(nucleus_sample(logits, 1.0, generator).tolist()) == {0, 1, 2}


def test_the_nucleus_beyond_the_candidates_is_found_by_sorting():
    generator = torch.Generator().manual_seed(0)
    peaked = (-torch.arange(1000.0)).expand(500, -1)  # p(0) = 0.63, p(0) + p(1) = 0.86
    assert set(nucleus_sample(peaked, 0.8, generator, candidates=8).tolist()) == {0, 1}
    flat = (-0.001 * torch.arange(1000.0)).expand(2000, -1)  # half the mass in about the first 400 words
    drawn = nucleus_sample(flat, 0.5, generator, candidates=8)
    assert drawn.max() > 300 and drawn.max() < 420


def generate(model: MnemeLM, tokens: int, seed: int = 0, **options) -> torch.Tensor:
    steps = model.generate([LONG.prompt, SHORT.prompt], [LONG.prompt_entity, SHORT.prompt_entity], tokens,
                           generator=torch.Generator().manual_seed(seed), **options)
    return torch.stack(list(steps), dim=1)


def test_generation_is_seeded_and_streams():
    model = build("d_mneme")
    first, again, other = generate(model, 12), generate(model, 12), generate(model, 12, seed=1)
    assert first.shape == (2, 12) and torch.equal(first, again) and not torch.equal(first, other)
    stream = model.generate([LONG.prompt], [LONG.prompt_entity], 5)
    assert next(stream).shape == (1,)
    with pytest.raises(RuntimeError, match="eval"):
        next(build("d_mneme").train().generate([LONG.prompt], [LONG.prompt_entity], 5))


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("segment", [3, 6])
def test_greedy_generation_follows_the_chunked_reading(name, segment):
    # token by token, with the cache cut at segment ends and memory updates after chunks, the conditionals must
    # be those of read(): with a tiny top_p every sampled token is the argmax of read()'s logits for that story
    model = build(name, segment=segment, cache=5)
    tokens = generate(model, 14, top_p=1e-9)
    stories = [MnemeExample(LONG.prompt, LONG.prompt_entity, tokens[0].tolist()),
               MnemeExample(SHORT.prompt, SHORT.prompt_entity, tokens[1].tolist())]
    logits = model.logits(model.read(make_batch(stories)).hidden)
    assert torch.equal(logits.argmax(-1), tokens)


# ---- learning --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(PRESETS))
def test_a_few_adam_steps_reduce_the_loss(name, batch):
    torch.manual_seed(0)
    model = MnemeLM(config(name, dropout=0.1))
    optimiser = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.eval()
    before = model.loss(batch).total.item()
    model.train()
    for _ in range(25):
        optimiser.zero_grad()
        model.loss(batch).total.backward()
        optimiser.step()
    model.eval()
    assert model.loss(batch).total.item() < 0.8 * before


def test_memory_adds_only_the_cross_attention_and_slot_parameters():
    counts = {name: parameter_count(build(name)) for name in PRESETS}
    d, layers = 16, 2
    cross = layers * (8 * d * d + 5 * d)  # W_Q, W_K, W_M, W_E, W_R per layer
    assert counts["s_mneme"] == counts["vanilla"] + cross + d
    assert counts["d_mneme"] == counts["s_mneme"] + 2 * d * d + d  # W_U
    assert counts["d_mneme_no_mi"] == counts["d_mneme"] + 4 * d and counts["d_mneme_no_es"] == counts["d_mneme"]
