"""EntityNLM with a copy of each entity's own mention words (``entity_words``, ours: generative/entitynlm/copying.py).

That every path computes the same model (the Pyro program, the known-annotation path with its gradients, the
lockstep sampler, the pooled and dense tables) is checked beside the paper's model, by parametrising the tests of
``test_entitynlm``, ``test_gold``, ``test_lockstep`` and ``test_entity_table``. Here: that it is a distribution,
that it does what it is for (a name the entity bore makes the link likelier), that the attention weighs the
remembered words as its equation says and starts as the uniform copy, that the sampler's estimate with it stays
exact, and that a fine-tuning can start from a checkpoint without it.
"""

from __future__ import annotations

import json
from functools import partial
from types import SimpleNamespace

import pyro
import pytest
import torch

from coref.io.checkpoint import CheckpointError
from generative.entitynlm.copying import INITIAL_GATE
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.lookahead import WordLookahead
from generative.entitynlm.model import EntityNLM
from generative.entitynlm.state import Annotation, DenseEmbeddings, EntityTable, PooledEmbeddings, blocked_shares
from generative.layers.document_cache import DocumentCache
from inference.algorithms.smc import sample_structures
from inference.training.checkpoint import (
    entitynlm_checkpoint,
    entitynlm_modules,
    read_torch_file,
    with_entity_words,
)
from tests.test_entitynlm import COUNTS, EOS, WORDS, exact_log_marginal, tiny_batch, tiny_models
from tests.test_hints import hinted


def test_a_name_the_entity_bore_makes_the_link_likelier_by_the_copy_alone():
    """Words 4 1 4, mentions at 0 and 2: linked, the second 4 may be copied from the first (g = sigmoid(3)); as a
    new entity it remembers nothing. Against the same weights without the copy, the link gains exactly
    log((1 - g) p(4) + g) - log p(4), p(4) the softmax's, and the new entity nothing."""
    model, _ = tiny_models(entity_words=2)
    with torch.no_grad():
        model.word_copy.gate.weight.zero_()
        model.word_copy.gate.bias.fill_(3.0)
    plain = EntityNLM(model.config.__class__(**{**model.config.to_dict(), "entity_words": 0}), COUNTS).eval()
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("word_copy")})
    row = {"words": [4, 1, 4], "R": [1, 0, 1], "L": [1, 1, 1]}
    batch = tiny_batch([{**row, "E": [1, 0, 1]}, {**row, "E": [1, 0, 2]}])  # linked, and a new entity
    with torch.no_grad():
        copied = model.token_log_probs(batch, Annotation.of(batch)).X
        alone = plain.token_log_probs(batch, Annotation.of(batch)).X
    gate = torch.sigmoid(torch.tensor(3.0))
    p = alone[0, 2].exp()
    torch.testing.assert_close(copied[0, 2], torch.log((1 - gate) * p + gate))
    torch.testing.assert_close(copied[1], alone[1])  # the new entity remembers nothing
    torch.testing.assert_close(copied[0, :2], alone[0, :2])  # nor does the first mention
    gain = (copied[0].sum() - copied[1].sum()) - (alone[0].sum() - alone[1].sum())
    assert gain > 1.0


def attention_models(weighting: str) -> EntityNLM:
    """The tiny model with the copy (2 words) weighted by ``weighting``, its gate at g = sigmoid(3)."""
    model, _ = tiny_models(entity_words=2, copy_weighting=weighting)
    with torch.no_grad():
        model.word_copy.gate.weight.zero_()
        model.word_copy.gate.bias.fill_(3.0)
        if model.word_copy.query is not None:
            model.word_copy.query.weight.zero_()
            model.word_copy.query.bias.zero_()
    return model


def test_the_attention_weighs_the_remembered_words_by_their_embeddings():
    """Words 4 1 5 4, mentions 4 1 (two tokens) then 4, linked: the last 4 may be copied from the two words the
    entity remembers, 4 and 1. At its initial (zero) query the attention is the uniform copy; with the query's bias
    u, a = softmax(u . emb(4), u . emb(1)) and x_4 gains log((1 - g) p(4) + g a_4), p(4) the softmax's."""
    row = {"words": [4, 1, 5, 4], "R": [1, 1, 0, 1], "E": [1, 1, 0, 1], "L": [2, 1, 1, 1]}
    batch = tiny_batch([row])
    uniform, attention = attention_models("uniform"), attention_models("attention")
    attention.load_state_dict(uniform.state_dict(), strict=False)  # the same weights; the query stays zero
    with torch.no_grad():
        alike = uniform.token_log_probs(batch, Annotation.of(batch)).X
        torch.testing.assert_close(attention.token_log_probs(batch, Annotation.of(batch)).X, alike)
        attention.word_copy.query.bias.copy_(attention.encoder.embedding.weight[4] * 2)
        weighted = attention.token_log_probs(batch, Annotation.of(batch)).X
        embedding = attention.encoder.embedding.weight
        share = torch.softmax(attention.word_copy.query.bias @ embedding[[4, 1]].T, 0)[0]
    gate = torch.sigmoid(torch.tensor(3.0))
    own = ((alike[0, 3].exp() - gate * 0.5) / (1 - gate))  # p(4) from the uniform copy: (1 - g) p + g / 2
    torch.testing.assert_close(weighted[0, 3], torch.log((1 - gate) * own + gate * share))
    assert share > 0.5 and weighted[0, 3] > alike[0, 3]  # the query prefers the word 4: the repeat gains
    torch.testing.assert_close(weighted[0, :3], alike[0, :3])


@pytest.mark.parametrize("lookahead", [0.0, 0.7])
@pytest.mark.parametrize(("options", "without"), [({"entity_words": 2}, {}),
                                                  ({"entity_words": 2, "copy_weighting": "attention"}, {}),
                                                  ({"entity_words": 2, "document_cache": 0.3}, {"entity_words": 2})],
                         ids=["copy", "attention", "copy+cache"])
def test_the_estimate_stays_exact_with_the_copy_and_the_cache(lookahead, options, without):
    """SMC resampling after any token (pooled tables: each particle's remembered words travel with its vectors),
    with the pipeline's hints and the lookahead (which reads the copy and the document cache too), against the
    enumerated marginal; the model ``without`` the feature has another."""
    model, proposal = tiny_models(**options)
    exact, _, _ = exact_log_marginal(model, WORDS)
    plain, _ = tiny_models(**without)
    assert abs(exact.item() - exact_log_marginal(plain, WORDS)[0].item()) > 0.1  # the feature changes p(x)
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(3)
    system = EntityNLMParticles(model, proposal, batch, 60_000, hints=hinted(batch, 0.7), lookahead=lookahead)
    sampled = sample_structures(system, EOS, "token", ess_threshold=0.5, history=False)
    assert sampled.log_marginal.item() == pytest.approx(exact.item(), abs=0.03)


def test_a_checkpoint_without_the_copy_is_given_one_at_its_initial_gate():
    path, checkpoint = entitynlm_checkpoint(None)
    given = with_entity_words(checkpoint, 8)
    assert given.config["entity_words"] == 8 and "entity_words" not in checkpoint.config
    model, _ = entitynlm_modules(given)
    before, _ = entitynlm_modules(checkpoint)
    gate = model.word_copy.gate.state_dict()
    assert float(gate["bias"]) == INITIAL_GATE and float(gate["weight"].abs().max()) == 0
    for name, value in before.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    assert with_entity_words(given, 8) is given and with_entity_words(given, 8, "uniform") is given
    with pytest.raises(CheckpointError, match="^copy.pt: its entities remember 8 words each, weighted uniform; a "
                                              "memory cannot be changed to 4 words weighted uniform$"):
        with_entity_words(given, 4, source="copy.pt")
    with pytest.raises(CheckpointError, match="cannot be changed to 8 words weighted attention$"):
        with_entity_words(given, 8, "attention")
    attending, _ = entitynlm_modules(with_entity_words(checkpoint, 8, "attention"))
    assert float(attending.word_copy.query.state_dict()["weight"].abs().max()) == 0  # starts as the uniform copy


def test_the_refine_command_trains_the_copy_and_the_posterior_reads_it(tmp_path):
    from inference.commands.posterior import main as posterior_main
    from inference.commands.refine import main as refine_main

    out = tmp_path / "copy.pt"
    refine_main(["--checkpoint", "inference/pretrained/entitynlm.pt", "--wake", "coref", "--coref-objective",
                 "local", "--supervised-weight", "0.1", "--entity-words", "4", "--copy-weighting", "attention",
                 "--steps", "3", "--eval-every", "3", "--eval-pieces", "5", "--lr", "1e-2", "--device", "cpu",
                 "--out", str(out)])
    _, refined = entitynlm_checkpoint(out)
    assert (refined.config["entity_words"], refined.config["copy_weighting"]) == (4, "attention")
    trained = read_torch_file(tmp_path / "copy.pt.state", "refinement state")["model"]  # the last step's
    assert float(trained["word_copy.gate.bias"]) != INITIAL_GATE
    assert float(trained["word_copy.query.bias"].abs().max()) > 0  # the attention learns
    folder = tmp_path / "posterior"
    assert posterior_main(["--checkpoint", str(out), "--text", "Anna met Tom. Anna thanked him.", "--particles",
                           "10", "--device", "cpu", "--out", str(folder)]) == 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary and (folder / "map.conll").read_text()


def test_the_lookahead_looks_at_the_entity_that_bore_the_word_however_unlikely_eq4_finds_it():
    """With one entity to score (top = 1), the lookahead picks by eq. 4 times the word's probability with the copy:
    the entity that remembers x_t, not eq. 4's favourite; without the copy, eq. 4's favourite."""
    model = attention_models("uniform")
    size = model.config.hidden_size
    table = DenseEmbeddings(torch.zeros(1, 1, 3, size), memory=2)  # one row, three entities
    every = (torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))
    table.put_rows(every, torch.arange(3), torch.zeros(3, size), words=torch.tensor([[5, -1], [4, -1], [-1, -1]]))
    tracker = SimpleNamespace(entities=EntityTable(table, torch.tensor([[3]]), 3))  # slot 1 bore the word 4
    batch = SimpleNamespace(words=torch.tensor([[4]]), size=1)
    states = torch.zeros(1, 1, size)  # h_{t-1} = 0, and e_current (slot -1: none yet) a zero vector
    log_entity = torch.tensor([[0.0, -3.0, -1.0]]).log_softmax(-1)  # 3 nats against; the copy gives about 4.7
    rows, current = (torch.tensor([0]), torch.tensor([0])), torch.tensor([[-1]])
    with torch.no_grad():
        chosen = WordLookahead(model, tracker, states, batch, 0.5, top=1).candidates(0, log_entity, current, rows)
        plain, _ = tiny_models()
        favourite = WordLookahead(plain, tracker, states, batch, 0.5, top=1).candidates(0, log_entity, current, rows)
    assert chosen.tolist() == [[1]] and favourite.tolist() == [[0]]


@pytest.mark.parametrize(("budget", "reads"), [(1 << 22, 1), (8, 3), (1, 5)])
def test_the_remembered_words_are_read_a_block_of_entities_at_a_time(monkeypatch, budget, reads):
    """The candidates' shares n_e(x_t) / n_e: read in blocks of entities (at most REMEMBERED_READ words at once,
    at least one entity), the same as one read of every entity; a memory that holds nothing shares 0."""
    monkeypatch.setattr("generative.entitynlm.state.REMEMBERED_READ", budget)
    remembered = torch.tensor([[[5, 4], [4, 4], [-1, -1], [7, -1], [4, -1]],
                               [[4, -1], [-1, -1], [4, 5], [4, 4], [6, 6]]])  # (S = 2, C = 5, M = 2)
    calls = []
    table = SimpleNamespace(memory=2, words_at_rows=lambda rows, slots: calls.append(slots.shape) or remembered.gather(
        1, slots[..., None].expand(-1, -1, 2)))
    rows = (torch.tensor([0, 0]), torch.tensor([0, 1]))
    shares = blocked_shares(table, rows, 5, torch.tensor([4, 6]))
    torch.testing.assert_close(shares, torch.tensor([[0.5, 1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0, 1.0]]))
    assert len(calls) == reads and all(shape[1] * 2 * 2 <= max(budget, 4) for shape in calls)


def test_the_pooled_table_shares_its_vectors_words_as_the_dense_table_reads_them():
    """The sampler's pooled table computes each pooled vector's share of the word once and reads it through the
    pointers: the same (K, width) shares as the dense table's read of every slot's words."""
    torch.manual_seed(0)
    particles, documents, slots, memory = 3, 2, 5, 3
    dense = DenseEmbeddings(torch.zeros(particles, documents, slots, 2), memory)
    pooled = PooledEmbeddings.empty(particles, documents, slots, 2, torch.zeros(1), memory)
    for _ in range(12):  # the same writes into both: some slots rewritten, some never written
        rows = (torch.randint(particles, (2,)), torch.tensor([0, 1]))
        slot, vectors = torch.randint(slots, (2,)), torch.randn(2, 2)
        words = torch.randint(-1, 4, (2, memory))
        for table in (dense, pooled):
            table.put_rows(rows, slot, vectors, words=words)
    every = torch.cartesian_prod(torch.arange(particles), torch.arange(documents)).T
    rows = (every[0], every[1])
    for words in (torch.tensor([1, 2]), torch.tensor([3, 0])):
        expected = dense.remembered_shares(rows, slots, words)
        assert float(expected.max()) > 0  # the word is remembered somewhere
        torch.testing.assert_close(pooled.remembered_shares(rows, slots, words), expected)


def test_a_single_documents_lookahead_reads_its_word_once_with_the_same_estimate(monkeypatch):
    """A batch of one document gives the lookahead its word once (1,), broadcast against the rows, so the softmax
    gathers the class's rows once: the same weights as the word given per row, with the copy and the cache."""
    model, proposal = tiny_models(entity_words=2, document_cache=0.3)
    batch = tiny_batch([{"words": WORDS}])
    shared = WordLookahead.observed
    seen = []
    monkeypatch.setattr(WordLookahead, "observed",
                        lambda self, t, documents: seen.append(shared(self, t, documents).shape)
                        or shared(self, t, documents))

    def weights():
        pyro.set_rng_seed(7)
        system = EntityNLMParticles(model, proposal, batch, 200, lookahead=0.7)
        return sample_structures(system, EOS, "token", history=False).log_weights

    once = weights()
    assert seen and set(seen) == {(1,)}
    monkeypatch.setattr(WordLookahead, "observed", lambda self, t, documents: self.batch.words[documents, t])
    torch.testing.assert_close(once, weights())


def test_the_estimate_stays_exact_when_the_lookahead_scores_one_entity(monkeypatch):
    """top = 1: the lookahead's share covers R = 0 and one entity, chosen with the copy; the estimate stays exact."""
    monkeypatch.setattr("generative.entitynlm.lockstep.WordLookahead", partial(WordLookahead, top=1))
    model, proposal = tiny_models(entity_words=2)
    exact, _, _ = exact_log_marginal(model, WORDS)
    batch = tiny_batch([{"words": WORDS}])
    pyro.set_rng_seed(4)
    system = EntityNLMParticles(model, proposal, batch, 60_000, lookahead=0.7)
    sampled = sample_structures(system, EOS, "token", ess_threshold=0.5, history=False)
    assert sampled.log_marginal.item() == pytest.approx(exact.item(), abs=0.03)


def _written_alike(particles: int, documents: int, slots: int, size: int, memory: int
                   ) -> tuple[DenseEmbeddings, PooledEmbeddings]:
    """A dense and a pooled table given the same random writes: some slots rewritten, some never written."""
    torch.manual_seed(0)
    dense = DenseEmbeddings(torch.zeros(particles, documents, slots, size), memory)
    pooled = PooledEmbeddings.empty(particles, documents, slots, size, torch.zeros(1), memory)
    for _ in range(12):
        rows = (torch.randint(particles, (documents,)), torch.arange(documents))
        slot, vectors = torch.randint(slots, (documents,)), torch.randn(documents, size)
        words = torch.randint(-1, 4, (documents, memory))
        for table in (dense, pooled):
            table.put_rows(rows, slot, vectors, words=words)
    return dense, pooled


def test_the_pooled_tables_distinct_contexts_read_what_the_dense_table_holds():
    """The lookahead's contexts, each distinct (document, vector, read with its words) kept once by the pooled
    table: read through their index they are the dense table's vectors and words, place by place, fewer of them."""
    dense, pooled = _written_alike(4, 2, 5, 3, 2)
    every = torch.cartesian_prod(torch.arange(4), torch.arange(2)).T
    rows = (every[0], every[1])
    slots = torch.randint(-1, 5, (8, 6))  # -1: no entity, a zero vector
    remembered = torch.rand(8, 6) < 0.5
    expected, shared = (table.distinct_at_rows(rows, slots, remembered) for table in (dense, pooled))
    for contexts in (expected, shared):
        assert contexts.document[contexts.index].equal(rows[1][:, None].expand_as(slots))
    torch.testing.assert_close(shared.values[shared.index], expected.values[expected.index])
    assert shared.words[shared.index].equal(expected.words[expected.index])
    assert not expected.words[expected.index][~remembered].ge(0).any()  # words only where read with them
    assert len(shared.values) < slots.numel() == len(expected.values)
    assert pooled.distinct_at_rows(rows, slots).words is None


@pytest.mark.parametrize("options", [{}, {"entity_words": 2, "document_cache": 0.3}], ids=["eq6", "copy+cache"])
def test_the_lookaheads_word_probabilities_are_eq6_at_each_place(options):
    """Computed once per distinct context (a pooled table) or once per place (a dense one), the lookahead's
    log p(x_t | h_{t-1}, e) of every place is eq. 6's with that place's entity: its vector (a zero vector for slot
    -1) and, where copied, its remembered words; with the document's cache."""
    model, _ = tiny_models(**options)
    dense, pooled = _written_alike(4, 2, 5, model.config.hidden_size, model.config.entity_words)
    every = torch.cartesian_prod(torch.arange(4), torch.arange(2)).T
    rows = (every[0], every[1])
    slots = torch.randint(-1, 5, (8, 6))
    copied = torch.rand(8, 6) < 0.7 if model.word_copy is not None else None
    batch = SimpleNamespace(words=torch.tensor([[3], [1]]), size=2)
    states = torch.randn(2, 1, model.config.hidden_size)
    cache = None
    if model.config.document_cache:
        cache = DocumentCache(model.config.document_cache, 2, len(COUNTS), torch.device("cpu"))
        cache.add(torch.tensor([3, 2]), torch.tensor([True, True]))
    with torch.no_grad():
        vectors = torch.where((slots >= 0)[..., None], dense.at_rows(rows, slots.clamp(min=0)), 0.0)
        remembered = None
        if copied is not None:
            remembered = torch.where((copied & (slots >= 0))[..., None], dense.words_at_rows(rows, slots.clamp(min=0)),
                                     -1)
        inputs = states[rows[1], 0][:, None] + model.entity_to_word(vectors)
        words = model.word_distribution(inputs, remembered, cache, rows[1])
        expected = words.log_prob(batch.words[rows[1], 0][:, None])
        for table in (dense, pooled):
            tracker = SimpleNamespace(entities=EntityTable(table, torch.full((4, 2), 5), 5), cache=cache)
            found = WordLookahead(model, tracker, states, batch, 0.5).word_log_probs(0, rows, slots, copied)
            torch.testing.assert_close(found, expected)
