"""The entity table's two storages hold the same vectors, last-seen steps and remembered words -- dense rows per
particle (what autograd follows) and pointers into a pool that particles share (the sampler's) -- through writes,
widening, resamplings and the pool's clean-ups; and a resampling copies of the hinted proposal's memory only the
pipeline mentions a later step reads."""

from __future__ import annotations

from functools import partial

import pyro
import pyro.distributions as dist
import pytest
import torch

from generative.entitynlm.heads import EntityHead
from generative.entitynlm.hints import CorefHints
from generative.entitynlm.state import (
    GROWTH_INTERVAL,
    DenseEmbeddings,
    EntityTable,
    PooledEmbeddings,
    ReadByRow,
    Resampled,
)
from inference.algorithms.smc import systematic_resampling
from tests.test_entitynlm import tiny_models
from tests.test_lockstep import tiny_sentences_batch


def test_pooled_embeddings_read_what_dense_ones_hold_through_writes_resamplings_and_clean_ups():
    generator = torch.Generator().manual_seed(0)
    particles, documents, width, size, memory = 6, 2, 5, 3, 2
    dense = DenseEmbeddings(torch.zeros(particles, documents, width, size), memory)
    pooled = PooledEmbeddings.empty(particles, documents, width, size, torch.zeros(1), memory)
    written, pools = 0, set()
    mentioned = torch.zeros(particles, documents, width, dtype=torch.bool)
    for step in range(400):
        where = torch.rand(particles, documents, generator=generator) < 0.7
        slot = torch.randint(0, width, (particles, documents), generator=generator)
        rows = torch.randn(particles, documents, size, generator=generator)
        seen = (torch.full((particles, documents), step), torch.randint(0, 50, (particles, documents)))
        words = torch.randint(0, 9, (particles, documents, memory), generator=generator)  # what each remembers
        # a mention (last seen written) or, every fourth step, a new-entity candidate, which goes to a slot no
        # mention has written (last seen not written)
        candidate = step % 4 == 0
        if candidate:
            where &= ~mentioned.gather(2, slot[..., None])[..., 0]
        written_rows = where.nonzero(as_tuple=True)
        seen_rows = None if candidate else tuple(value[written_rows] for value in seen)
        remembered = None if candidate else words  # a candidate remembers nothing
        for storage in (dense, pooled):
            if step % 2:  # the writes of whole (P, B) rows, and of the K rows that write (the same)
                storage.put(where, slot, rows, seen, remembered)
            else:
                storage.put_rows(written_rows, slot[written_rows], rows[written_rows], seen_rows,
                                 None if candidate else words[written_rows])
        if not candidate:
            mentioned[(*written_rows, slot[written_rows])] = True
        written += len(written_rows[0])
        pools.add(id(pooled.pool))
        if step % 3 == 0:
            moved = Resampled.of(systematic_resampling(3 * torch.randn(particles, documents, generator=generator),
                                                       generator))
            for storage in (dense, pooled):
                storage.copy(moved, width)
            mentioned = moved.copy(mentioned)
        if step in (100, 250):
            for storage in (dense, pooled):
                storage.widen(width)
            mentioned = torch.nn.functional.pad(mentioned, (0, width))
            width *= 2
        assert torch.equal(pooled.table(width), dense.table(width))
        for pooled_seen, dense_seen in zip(pooled.last_seen(width), dense.last_seen(width)):
            assert torch.equal(pooled_seen, dense_seen)
        assert torch.equal(pooled.mentioned[pooled.pointer[..., :width]], mentioned)
        assert torch.equal(pooled.words[pooled.pointer[..., :width]], dense.words[..., :width, :])
    slot = torch.randint(0, width, (particles, documents), generator=generator)
    assert torch.equal(pooled.at(slot), dense.at(slot))
    # e_current's slot (-1: none yet, a zero vector), one row each, read with its words where the flag holds
    slot = torch.randint(-1, width, (particles, documents), generator=generator)
    expected = torch.where((slot >= 0)[..., None], dense.at(slot), 0.0)
    flag = torch.rand(particles, documents, generator=generator) < 0.5
    for storage in (pooled, dense):
        table = EntityTable(storage, torch.zeros((particles, documents), dtype=torch.long), width)
        assert torch.equal(table.distinct(slot).dense(), expected)
        read = table.distinct(slot, flag)
        words = read.words.gather(0, read.index[..., None].expand(-1, -1, memory))
        assert torch.equal(read.dense(), expected)
        assert torch.equal(words, torch.where(flag[..., None], dense.words_at(slot), -1))
    assert torch.equal(dense.words_at(slot)[slot < 0], torch.full((int((slot < 0).sum()), memory), -1))
    projected = torch.randn(documents, size, generator=generator)  # eq. 4's W h of each document
    sentence = torch.tensor([30, 45])  # each document's sentence now
    rows = (torch.tensor([0, 3, 5]), torch.tensor([1, 0, 1]))
    for form in ("paper", "reference"):  # eq. 4 with each distance term, per pooled vector or per slot
        head = EntityHead(size, form)
        torch.nn.init.normal_(head.distance_weights, generator=generator)
        distance = partial(head.distance_term, 400)
        # by hand from the dense table, an entity known where a mention wrote its slot (the test's record):
        # the dense table reads it from the count, which these random writes do not keep
        expected = torch.einsum("kcd,kd->kc", dense.table(width)[rows], projected[rows[1]]) + distance(
            sentence[rows[1]][:, None], *(seen[rows] for seen in dense.last_seen(width)), mentioned[rows])
        torch.testing.assert_close(pooled.scored_rows(rows, width, projected, sentence, distance, None), expected)
    slots = torch.randint(0, width, (3, 4), generator=generator)
    assert torch.equal(pooled.at_rows(rows, slots), dense.at_rows(rows, slots))
    assert torch.equal(pooled.words_at_rows(rows, slots), dense.words_at_rows(rows, slots))
    assert torch.equal(pooled.words_at_rows(rows, slots[:, 0]), dense.words_at_rows(rows, slots[:, 0]))
    # vectors no slot pointed at were dropped (several pools), and the pool stays within about twice the table
    assert len(pools) > 2 and pooled.used < written
    assert len(pooled.pool) <= 2 * (particles * documents * (width + 1) + 1) + particles * documents * GROWTH_INTERVAL


def test_the_sampler_pools_the_table_and_training_keeps_it_dense():
    like = torch.zeros(1)
    with torch.no_grad():
        assert isinstance(EntityTable.empty(2, 1, 4, like).embeddings, PooledEmbeddings)
    assert isinstance(EntityTable.empty(2, 1, 4, like).embeddings, DenseEmbeddings)


def test_a_resampling_copies_the_pipeline_mentions_a_later_step_reads():
    # mentions (rows 1-5) start at steps 0, 2, 4, 6, 8; their antecedents are earlier rows (0: none)
    row = torch.tensor([[1, 0, 2, 0, 3, 0, 4, 0, 5, 0]])
    antecedents = torch.tensor([[[0, 0], [0, 0], [1, 0], [2, 1], [3, 0], [2, 4]]])
    hints = CorefHints(row, torch.zeros(1, 6, dtype=torch.long), torch.ones(1, 6, dtype=torch.bool), antecedents,
                       torch.full((1, 6, 3), 1 / 3), weight=0.5)
    kept = [(rows.start, rows.stop) for rows in hints.rows_read_later()]
    # after step 4 (row 3 reached) rows 4 and 5 are still to come: they read rows 2 and 3 (4 is not reached yet)
    assert kept == [(1, 2), (1, 2), (1, 3), (1, 3), (2, 4), (2, 4), (2, 5), (2, 5), (6, 6), (6, 6)]


def test_rows_that_share_a_distribution_read_its_log_density_of_a_shared_value():
    generator = torch.Generator().manual_seed(1)
    logits = torch.randn(3, 2, 5, generator=generator)  # 3 distinct distributions of each of 2 documents
    index = torch.tensor([[0, 2], [1, 2], [0, 0], [2, 1]])  # which one each of 4 particles reads
    read = ReadByRow(dist.Categorical(logits=logits), index)
    words = torch.tensor([4, 1])  # one observed value per document
    per_row = dist.Categorical(logits=logits[index, torch.arange(2)]).log_prob(words)
    assert read.batch_shape == (4, 2) and torch.equal(read.log_prob(words), per_row)
    with pytest.raises(ValueError, match="share"):
        read.log_prob(torch.zeros(4, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="observed"):
        read.sample()


def test_a_pooled_vector_is_written_by_a_mention_exactly_when_it_holds_a_known_entity():
    """What eq. 4's distance term reads as "known" from the pooled table (a mention wrote the vector) is the paper's
    "known", which the dense table reads from the count: the slots below the entity count, at every step of the
    program."""
    model, _ = tiny_models(new_entity_scale=0.01)
    batch = tiny_sentences_batch()
    particles = 16
    pyro.set_rng_seed(0)
    with torch.no_grad(), pyro.plate("particles", particles, dim=-2), pyro.plate("documents", batch.size, dim=-1):
        states = model.encoder(batch)
        tracker = model.tracker(batch, particles, states)
        for t in range(batch.steps):
            model.step(t, batch, states, tracker)
            entities = tracker.entities
            pooled = entities.embeddings
            mentioned = pooled.mentioned[pooled.pointer[..., :entities.width]]
            assert torch.equal(mentioned, entities.slots() < entities.count[..., None])
    assert int(tracker.entities.count.max()) > 1
