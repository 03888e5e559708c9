"""Coref-GRU: edges from clusters, the layer against a plain GRU and against a hand computation, padding, the
bidirectional layer, the readers' Pyro site, learning, and the 1-hot baseline's matched size."""

from __future__ import annotations

import math
import time

import pyro
import pytest
import torch
from pyro import poutine
from pyro.poutine.util import site_is_subsample
from torch import nn

from generative.coref_gru import (
    BiCorefGRU,
    BiReader,
    CorefEdges,
    CorefGRU,
    GatedAttentionReader,
    ReaderConfig,
    ReadingExample,
    make_reading_batch,
    matched_hidden_size,
    one_hot_size,
    parameter_count,
    reverse_padded,
)


def sigmoid(value: float) -> float:
    return 1 / (1 + math.exp(-value))


# ---- edges ----------------------------------------------------------------------------------------------------

# "mary got the ball . she went home . the ball was there"
#   0    1   2   3   4  5   6    7   8  9   10   11  12
#  mary (0,1) - she (5,6); the ball (2,4) - the ball (9,11)
CLUSTERS = [[(0, 1), (5, 6)], [(2, 4), (9, 11)]]


def test_edges_from_clusters_put_incoming_at_first_and_outgoing_at_last_token():
    edges = CorefEdges.from_clusters([13, 4], [CLUSTERS, []], max_chains=4)
    assert edges.incoming.shape == (2, 13, 4)
    # the sequential chain: both edges at every real token, relation 0
    assert edges.incoming[0, :, 0].all() and edges.outgoing[0, :, 0].all()
    assert edges.incoming[1, :, 0].tolist() == [True] * 4 + [False] * 9
    assert edges.outgoing[1, :, 0].tolist() == [True] * 4 + [False] * 9
    assert not edges.incoming[1, :, 1:].any() and not edges.outgoing[1, :, 1:].any()

    def where(tensor: torch.Tensor, chain: int) -> list[int]:
        return tensor[0, :, chain].nonzero().flatten().tolist()

    assert where(edges.outgoing, 1) == [0] and where(edges.incoming, 1) == [5]  # mary -> she
    assert where(edges.outgoing, 2) == [3] and where(edges.incoming, 2) == [9]  # "the ball": last -> first token
    assert not edges.incoming[0, :, 3].any()  # an unused chain
    assert where(edges.member, 2) == [2, 3, 9, 10]
    assert (edges.relation_in[0, :, 0] == 0).all() and edges.relation_in[0, 5, 1] == 1
    assert edges.relation_out[0, 3, 2] == 1 and edges.relation_out[0, 4, 2] == 0

    features = edges.one_hot_features()
    assert features.shape == (2, 13, one_hot_size(4))
    assert features[0, :, 0].tolist() == [1.0] * 13 and features[1, 4:].abs().sum() == 0
    assert features[0, :, 1].nonzero().flatten().tolist() == [5, 9]  # a coreference edge comes in
    assert features[0, 10, 2:].tolist() == [0.0, 1.0, 0.0]  # inside a mention of cluster 2


def test_edges_reject_bad_spans_and_cap_the_clusters():
    with pytest.raises(ValueError, match="not within"):
        CorefEdges.from_clusters([5], [[[(3, 6)]]], max_chains=3)
    with pytest.raises(ValueError, match="overlapping"):
        CorefEdges.from_clusters([5], [[[(0, 3), (2, 4)]]], max_chains=3)
    capped = CorefEdges.from_clusters([13], [CLUSTERS], max_chains=2)
    assert capped.num_chains == 2 and capped.incoming[0, :, 1].nonzero().flatten().tolist() == [5]


def test_reversal_reverses_within_each_length_and_swaps_directions():
    lengths = torch.tensor([13, 7])
    edges = CorefEdges.from_clusters(lengths, [CLUSTERS, [[(1, 2), (4, 6)]]], max_chains=3)
    back = edges.reversed(lengths)
    # document 0 (no padding): position t of the reversed document is 12 - t
    assert back.incoming[0, :, 1].nonzero().flatten().tolist() == [12 - 0]  # mary's write becomes a read
    assert back.outgoing[0, :, 1].nonzero().flatten().tolist() == [12 - 5]
    assert back.incoming[0, :, 2].nonzero().flatten().tolist() == [12 - 3]
    assert back.outgoing[0, :, 2].nonzero().flatten().tolist() == [12 - 9]
    # document 1 (7 tokens, padded to 13): reversed within its 7, padding untouched
    assert back.incoming[1, :, 1].nonzero().flatten().tolist() == [6 - 1]
    assert back.outgoing[1, :, 1].nonzero().flatten().tolist() == [6 - 4]
    assert back.incoming[1, :, 0].tolist() == [True] * 7 + [False] * 6
    assert torch.equal(back.relation_in, reverse_padded(edges.relation_out, lengths))
    assert torch.equal(back.member, reverse_padded(edges.member, lengths))
    # in the reversed order every read still comes after the write it reads
    for chain in (1, 2):
        assert back.outgoing[0, :, chain].nonzero().max() < back.incoming[0, :, chain].nonzero().min()
    again = back.reversed(lengths)
    assert all(torch.equal(a, b) for a, b in zip(vars(again).values(), vars(edges).values()))


# ---- the layer ------------------------------------------------------------------------------------------------


def gru_blocks(layer: CorefGRU, gru: nn.GRU) -> None:
    """Copy ``gru`` (hidden Dr) into the relation-0 rows of every gate and the first Dr recurrent columns."""
    hidden, slot = layer.hidden_size, layer.slot_size
    with torch.no_grad():
        for gate in range(3):
            rows, source = slice(gate * hidden, gate * hidden + slot), slice(gate * slot, (gate + 1) * slot)
            layer.weight_ih[rows] = gru.weight_ih_l0[source]
            layer.weight_hh[rows, :slot] = gru.weight_hh_l0[source]
            layer.bias_ih[rows] = gru.bias_ih_l0[source]
            layer.bias_hh[rows] = gru.bias_hh_l0[source]


def test_without_coreference_the_layer_is_a_gru():
    torch.manual_seed(0)
    size, slot = 3, 4
    lengths = torch.tensor([7, 5])
    inputs = torch.randn(2, 7, size)
    edges = CorefEdges.from_clusters(lengths, [[], []], max_chains=3)  # the sequential chain only
    layer = CorefGRU(size, 2 * slot)
    gru = nn.GRU(size, slot, batch_first=True)
    gru_blocks(layer, gru)
    outputs, mass = layer(inputs, edges, lengths)
    assert torch.equal(mass[0, :, 1], torch.zeros(7))
    assert torch.equal(mass[1], torch.tensor([[1.0, 0.0]] * 5 + [[0.0, 0.0]] * 2))
    for b, n in enumerate(lengths.tolist()):
        expected, _ = gru(inputs[b : b + 1, :n])
        # the sequential slice is exactly the GRU, whatever the relation-1 rows hold
        torch.testing.assert_close(outputs[b, :n, :slot], expected[0], rtol=0, atol=1e-6)
        assert torch.equal(outputs[b, n:], outputs[b, n - 1 : n].expand(7 - n, -1))  # padding repeats
    # the coreference slice is a read-out (1 - z) h̃ with no recurrence; zero its rows and the layer is [GRU; 0]
    with torch.no_grad():
        for gate in range(3):
            rows = slice(gate * 2 * slot + slot, (gate + 1) * 2 * slot)
            layer.weight_ih[rows] = 0
            layer.weight_hh[rows] = 0
            layer.bias_ih[rows] = 0
            layer.bias_hh[rows] = 0
    outputs, _ = layer(inputs, edges, lengths)
    expected, _ = gru(inputs[:1])
    torch.testing.assert_close(outputs[0], torch.cat([expected[0], torch.zeros(7, slot)], dim=-1), rtol=0, atol=1e-6)
    # with one relation type the layer is nn.GRU itself, same weights, no mapping
    single = CorefGRU(size, slot, relations=1)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(single, name).copy_(getattr(gru, f"{name}_l0"))
    outputs, _ = single(inputs, CorefEdges.from_clusters(lengths, [[], []], max_chains=1), lengths)
    torch.testing.assert_close(outputs[0], expected[0], rtol=0, atol=1e-6)


def test_six_tokens_by_hand():
    """D = 1, Dr = 1, R = 2; r = z = 1/2 everywhere; h̃_s = tanh(a_s x + b_s + ½ u_s m_s) per slice s."""
    x = [0.5, -1.0, 0.3, 0.8, -0.2, 1.0]
    a, b, u = (1.0, -0.5), (0.1, 0.2), (0.8, 1.5)
    k0, k1 = 0.7, -0.4  # attention vectors of relation 0 (sequential) and 1 (coreference)
    layer = CorefGRU(1, 2)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.zero_()
        layer.weight_ih[4:6, 0] = torch.tensor(a)  # candidate rows (gate order r, z, n)
        layer.bias_ih[4:6] = torch.tensor(b)
        layer.weight_hh[4, 0], layer.weight_hh[5, 1] = u
        layer.keys[:, 0] = torch.tensor([k0, k1])
    # one cluster, mentions (0, 2), (3, 4), (5, 6): writes at 1 and 3, reads at 3 and 5
    edges = CorefEdges.from_clusters([6], [[[(0, 2), (3, 4), (5, 6)]]], max_chains=2)
    outputs, mass = layer(torch.tensor(x).view(1, 6, 1), edges, torch.tensor([6]))

    def step(xt: float, m0: float, m1: float) -> tuple[float, float]:
        h0 = 0.5 * math.tanh(a[0] * xt + b[0] + 0.5 * u[0] * m0) + 0.5 * m0
        h1 = 0.5 * math.tanh(a[1] * xt + b[1] + 0.5 * u[1] * m1) + 0.5 * m1
        return h0, h1

    def coref_weight(xt: float) -> float:  # α of the cluster against the sequential chain
        return math.exp(k1 * xt) / (math.exp(k0 * xt) + math.exp(k1 * xt))

    h = [step(x[0], 0.0, 0.0)]  # M_seq = 0 at the start
    h.append(step(x[1], h[0][0], 0.0))  # end of mention 1: M_1 = h_1[1]
    h.append(step(x[2], h[1][0], 0.0))
    a3 = coref_weight(x[3])
    h.append(step(x[3], (1 - a3) * h[2][0], a3 * h[1][1]))  # mention 2 reads M_1, then writes M_1 = h_3[1]
    h.append(step(x[4], h[3][0], 0.0))
    a5 = coref_weight(x[5])
    h.append(step(x[5], (1 - a5) * h[4][0], a5 * h[3][1]))  # mention 3 reads M_1
    torch.testing.assert_close(outputs[0], torch.tensor(h), rtol=0, atol=1e-6)
    expected_mass = [[1.0, 0.0]] * 6
    expected_mass[3], expected_mass[5] = [1 - a3, a3], [1 - a5, a5]
    torch.testing.assert_close(mass[0], torch.tensor(expected_mass), rtol=0, atol=1e-6)


def test_attention_is_a_distribution_over_the_incoming_chains():
    torch.manual_seed(1)
    layer = CorefGRU(5, 6)
    inputs = torch.randn(2, 9, 5)
    incoming = torch.rand(2, 9, 4) < 0.5
    incoming[:, :, 0] = True
    incoming[1, 6:] = False  # padding
    relation = (torch.arange(4) > 0).long().expand(2, 9, 4) * incoming
    alpha = layer.attention(inputs, incoming, relation)
    assert (alpha[~incoming] == 0).all() and (alpha[incoming] > 0).all()
    torch.testing.assert_close(alpha.sum(-1), incoming.any(-1).float())
    # the scores are w_{r_c}ᵀ x_t: chains of one relation type share them
    b, t = incoming[:, :, 1:].sum(-1).argmax() // 9, incoming[:, :, 1:].sum(-1).argmax() % 9
    active = incoming[b, t].nonzero().flatten().tolist()
    scores = torch.stack([layer.keys[0 if c == 0 else 1] @ inputs[b, t] for c in active]).detach()
    torch.testing.assert_close(alpha[b, t, active], torch.softmax(scores, 0))


def test_padding_changes_nothing():
    torch.manual_seed(2)
    layer = BiCorefGRU(3, 4)
    short = CorefEdges.from_clusters([6], [[[(0, 1), (3, 5)]]], max_chains=3)
    both = CorefEdges.from_clusters([6, 10], [[[(0, 1), (3, 5)]], [[(1, 2), (8, 9)], [(0, 1), (4, 5)]]],
                                    max_chains=3)
    inputs = torch.randn(2, 10, 3)
    alone, alone_mass = layer(inputs[:1, :6], short, torch.tensor([6]))
    batched, batched_mass = layer(inputs, both, torch.tensor([6, 10]))
    assert batched.shape == (2, 10, 8) and batched_mass.shape == (2, 10, 2, 2)
    torch.testing.assert_close(batched[0, :6], alone[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(batched_mass[0, :6], alone_mass[0], rtol=0, atol=1e-6)
    # forward reads the cluster at the later mention's first token (3), backward at the earlier one's last (0)
    assert batched_mass[0, 3, 0, 1] > 0 and batched_mass[0, 3, 1, 1] == 0
    assert batched_mass[0, 0, 1, 1] > 0 and batched_mass[0, 0, 0, 1] == 0
    torch.testing.assert_close(batched_mass[:, :6].sum(-1), torch.ones(2, 6, 2))
    assert (batched_mass[0, 6:] == 0).all()
    # the backward direction is the forward layer on the reversed document with reversed, swapped edges
    lengths = torch.tensor([6, 10])
    backward, _ = layer.backward_layer(reverse_padded(inputs, lengths), both.reversed(lengths), lengths)
    torch.testing.assert_close(batched[..., 4:][0, :6], reverse_padded(backward, lengths)[0, :6])


# ---- readers ----------------------------------------------------------------------------------------------------

VOCAB = 12


def toy_examples(count: int, seed: int = 0) -> list[ReadingExample]:
    """Documents of random words 3..11 where the answer word is repeated later by a pronoun-like token 1; the
    query asks for it with token 2. Answers: the word itself (attention-sum) and a class (its id mod 3)."""
    generator = torch.Generator().manual_seed(seed)
    examples = []
    for _ in range(count):
        n = int(torch.randint(6, 10, (1,), generator=generator))
        words = torch.randint(3, VOCAB, (n,), generator=generator).tolist()
        where = int(torch.randint(0, n - 3, (1,), generator=generator))
        words[n - 1] = 1
        examples.append(ReadingExample(words, [2, words[where]], answer=words[where],
                                       clusters=[[(where, where + 1), (n - 1, n)]],
                                       candidates=list(range(n - 1))))
    return examples


def as_classes(examples: list[ReadingExample]) -> list[ReadingExample]:
    return [ReadingExample(e.document, e.query, e.answer % 3, e.clusters, None) for e in examples]


def tiny_config(recurrent: str, answer: str = "candidates", **changes) -> ReaderConfig:
    values = dict(vocab_size=VOCAB, embedding_size=8, hidden_size=6, layers=2, dropout=0.0, recurrent=recurrent,
                  answer=answer, num_answers=3 if answer == "classes" else None, max_chains=3)
    return ReaderConfig(**{**values, **changes})


READERS = [(GatedAttentionReader, "candidates"), (GatedAttentionReader, "classes"), (BiReader, "candidates"),
           (BiReader, "classes")]


def batch_for(answer: str, count: int = 6, seed: int = 0):
    examples = toy_examples(count, seed)
    return make_reading_batch(examples if answer == "candidates" else as_classes(examples), max_chains=3)


@pytest.mark.parametrize("recurrent", ["gru", "cgru", "gru_onehot"])
@pytest.mark.parametrize(("reader", "answer"), READERS)
def test_reader_has_one_observed_site_and_its_log_likelihood(reader, answer, recurrent):
    torch.manual_seed(3)
    model = reader(tiny_config(recurrent, answer)).eval()
    batch = batch_for(answer)
    trace = poutine.trace(model.model).get_trace(batch)
    sites = [name for name, site in trace.nodes.items() if site["type"] == "sample" and not site_is_subsample(site)]
    assert sites == ["answer"] and trace.nodes["answer"]["is_observed"]
    trace.compute_log_prob()
    log_likelihood = model.log_likelihood(batch)
    torch.testing.assert_close(log_likelihood, trace.nodes["answer"]["log_prob"])
    assert log_likelihood.shape == (6,) and (log_likelihood < 0).all()
    documents, query, attentions = model.encode(batch)
    scores = torch.einsum("bnd,bd->bn", documents, query)
    if answer == "candidates":  # attention-sum written out: p(answer) = Σ over candidate positions holding it
        allowed = batch.document_mask & batch.candidates
        p = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
        expected = ((batch.document == batch.answer[:, None]) * p).sum(-1).log()
        assert set(model.predict(batch).tolist()) <= set(batch.document[allowed].tolist())
    else:
        expected = torch.log_softmax(model.answer_logits(batch), -1).gather(1, batch.answer[:, None]).squeeze(1)
    torch.testing.assert_close(log_likelihood, expected)
    assert len(attentions) == (model.config.layers if recurrent == "cgru" else 0)


def test_reader_ignores_padding():
    torch.manual_seed(4)
    model = GatedAttentionReader(tiny_config("cgru")).eval()
    examples = toy_examples(3, seed=5)
    batched = model.log_likelihood(make_reading_batch(examples, max_chains=3))
    for b, example in enumerate(examples):
        alone = model.log_likelihood(make_reading_batch([example], max_chains=3))
        torch.testing.assert_close(batched[b : b + 1], alone)


@pytest.mark.parametrize("recurrent", ["gru", "cgru", "gru_onehot"])
@pytest.mark.parametrize(("reader", "answer"), READERS)
def test_adam_lowers_the_loss(reader, answer, recurrent):
    torch.manual_seed(6)
    pyro.clear_param_store()
    model = reader(tiny_config(recurrent, answer, dropout=0.1))
    batch = batch_for(answer, count=8, seed=7)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.03)
    losses = []
    for _ in range(12):
        loss = -model.log_likelihood(batch).mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert all(math.isfinite(value) for value in losses)
    model.eval()
    assert -model.log_likelihood(batch).mean().item() < 0.7 * losses[0]


def test_batches_from_dicts_and_validation():
    batch = make_reading_batch([{"document": [3, 4, 5], "query": [2], "answer": 4},
                                {"document": [6, 7], "query": [2, 6], "answer": 7, "clusters": [[(0, 1), (1, 2)]]}],
                               max_chains=2)
    assert batch.document.tolist() == [[3, 4, 5], [6, 7, 0]] and batch.candidates is None
    assert batch.query_lengths.tolist() == [1, 2] and batch.edges.incoming[1, 1, 1]
    with pytest.raises(ValueError):
        make_reading_batch([ReadingExample([], [2], 0)], max_chains=2)
    with pytest.raises(ValueError, match="candidate"):
        make_reading_batch([ReadingExample([3], [2], 3, candidates=[4])], max_chains=2)
    with pytest.raises(ValueError, match="multiple"):
        ReaderConfig(vocab_size=5, hidden_size=5, recurrent="cgru")
    with pytest.raises(ValueError, match="num_answers"):
        ReaderConfig(vocab_size=5, answer="classes")
    with pytest.raises(ValueError, match="chains"):
        GatedAttentionReader(tiny_config("gru_onehot", max_chains=4)).log_likelihood(batch_for("candidates"))
    assert ReaderConfig.from_dict(tiny_config("cgru").to_dict()) == tiny_config("cgru")


@pytest.mark.parametrize(("reader", "answer"), READERS)
def test_matched_hidden_size_equalises_parameter_counts(reader, answer):
    start = time.perf_counter()
    config = ReaderConfig(vocab_size=1000, answer=answer, num_answers=20 if answer == "classes" else None)
    hidden = matched_hidden_size(config, reader)
    assert hidden < config.hidden_size  # the 1-hot features cost input weights

    def recurrent_count(model: nn.Module) -> int:  # everything but the (shared) embeddings
        return parameter_count(model) - parameter_count(model.embedding)

    coref = recurrent_count(reader(config))
    onehot = recurrent_count(reader(ReaderConfig(**{**config.to_dict(), "recurrent": "gru_onehot",
                                                    "hidden_size": hidden})))
    assert abs(onehot - coref) / coref < 0.02
    assert time.perf_counter() - start < 5
