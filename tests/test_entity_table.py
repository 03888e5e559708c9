"""The entity table's two storages hold the same vectors -- dense rows per particle (what autograd follows) and
pointers into a pool that particles share (the sampler's) -- through writes, widening, resamplings and the
pool's clean-ups; and a resampling copies of the hinted proposal's memory only the pipeline mentions a later
step reads."""

from __future__ import annotations

import torch

from generative.entitynlm.hints import CorefHints
from generative.entitynlm.state import GROWTH_INTERVAL, DenseEmbeddings, EntityTable, PooledEmbeddings, Resampled
from inference.algorithms.smc import systematic_resampling


def test_pooled_embeddings_read_what_dense_ones_hold_through_writes_resamplings_and_clean_ups():
    generator = torch.Generator().manual_seed(0)
    particles, documents, width, size = 6, 2, 5, 3
    dense = DenseEmbeddings(torch.zeros(particles, documents, width, size))
    pooled = PooledEmbeddings.empty(particles, documents, width, size, torch.zeros(1))
    written, pools = 0, set()
    for step in range(400):
        where = torch.rand(particles, documents, generator=generator) < 0.7
        slot = torch.randint(0, width, (particles, documents), generator=generator)
        rows = torch.randn(particles, documents, size, generator=generator)
        for storage in (dense, pooled):
            storage.put(where, slot, rows)
        written += int(where.sum())
        pools.add(id(pooled.pool))
        if step % 3 == 0:
            moved = Resampled.of(systematic_resampling(3 * torch.randn(particles, documents, generator=generator),
                                                       generator))
            for storage in (dense, pooled):
                storage.copy(moved, width)
        if step in (100, 250):
            for storage in (dense, pooled):
                storage.widen(width)
            width *= 2
        assert torch.equal(pooled.table(width), dense.table(width))
    slot = torch.randint(0, width, (particles, documents), generator=generator)
    assert torch.equal(pooled.at(slot), dense.at(slot))
    rows = (torch.tensor([0, 3, 5]), torch.tensor([1, 0, 1]))
    projected = torch.randn(documents, size, generator=generator)  # eq. 4's W h of each document
    torch.testing.assert_close(pooled.scores(rows, width, projected), dense.scores(rows, width, projected))
    slots = torch.randint(0, width, (3, 4), generator=generator)
    assert torch.equal(pooled.at_rows(rows, slots), dense.at_rows(rows, slots))
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
