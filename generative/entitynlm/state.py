"""EntityNLM's per-token state: the entity table of every (particle, document), the previous token's R, E, L,
what a step chose, and an annotation to observe. Plain tensors, no parameters: what the program
(:mod:`generative.entitynlm.model`) and the known-annotation path (:mod:`generative.entitynlm.annotated`) share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution, constraints

from generative.layers.batch import DocumentBatch

Distance = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""Eq. 4's distance term ``distance(sentence, last_position, last_sentence, known)`` of entities last seen at a
position and sentence, in a current sentence, known or not (broadcast): the entity head's, at one step."""
GROWTH_INTERVAL = 32  # the entity table is resized, and its pool cleaned up, at most once per this many steps
# device types where a host sync costs nothing (the host is the device): there the lookahead deduplicates its
# contexts, which reads a size back but does less arithmetic (PooledEmbeddings.distinct_at_rows); elsewhere it takes
# the fixed-size form, and a step makes no host sync between two growth checks (EntityTable.reserve)
CHEAP_SYNC_DEVICES = ("cpu",)
REMEMBERED_READ = 1 << 22  # remembered words a dense table reads at once for the lookahead (32 MB of indices)
# at most this many documents, eq. 4 scores each pooled vector against every document's W h by one matrix product
# (a vector reads its own): several times faster on the CPU than gathering each one's W h and multiplying
PRODUCT_DOCUMENTS = 8
WRITES_PER_STEP = 2  # the writes a tracker's step makes to each row's table: a new-entity candidate and a mention


@dataclass
class EntityTable:
    """The entities of every (particle, document): slot k holds entity k + 1; slot ``count`` the new candidate.

    ``embeddings`` the entity vectors (:class:`DenseEmbeddings` or :class:`PooledEmbeddings`, P x B x C of size D)
    with the step and sentence of each one's latest mention token (eq. 4's distance features), ``count`` (P, B).
    The first ``width`` slots are the ones eq. 4 scores (known entities, the candidate, and unavailable slots with
    probability 0); ``width`` grows by the same rule as ever (:meth:`reserve`), which fixes how many random
    numbers the E site draws, while the storage behind it grows by doubling, so a book's table is copied
    O(log C) times, not once per growth check. Writes are of one row per (particle, document), in place unless
    autograd is recording.

    Each entity also remembers the last ``words`` words of its mention tokens (word ids, -1 where fewer were
    read), beside its vector, for a model that copies them (``EntityNLMConfig.entity_words``; 0: no memory).
    """

    embeddings: DenseEmbeddings | PooledEmbeddings
    count: torch.Tensor
    width: int

    @classmethod
    def empty(cls, particles: int, documents: int, size: int, like: torch.Tensor,
              capacity: int = GROWTH_INTERVAL + 1, words: int = 0) -> EntityTable:
        """An empty table, each entity remembering ``words`` words; its embeddings pooled when no gradient is
        recorded (the sampler), dense otherwise."""
        if torch.is_grad_enabled():
            embeddings = DenseEmbeddings(like.new_zeros((particles, documents, capacity, size)), words)
        else:
            embeddings = PooledEmbeddings.empty(particles, documents, capacity, size, like, words)
        count = torch.zeros((particles, documents), dtype=torch.long, device=like.device)
        return cls(embeddings, count, capacity)

    def scored(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The embeddings (P, B, width, D), last positions and last sentences (P, B, width) of the ``width`` slots
        that eq. 4 scores."""
        return self.embeddings.table(self.width), *self.embeddings.last_seen(self.width)

    def scored_rows(self, rows: tuple[torch.Tensor, torch.Tensor], projected: torch.Tensor, sentence: torch.Tensor,
                    distance: Distance) -> torch.Tensor:
        """For the K (particle, document) ``rows`` alone: eq. 4's scores e^T (W h) + distance term (K, width) of the
        ``width`` slots, given each document's W h ``projected`` (B, D) and current ``sentence`` (B,), and the
        distance term ``distance(sentence, last_position, last_sentence, known)`` (broadcast). An entity is known
        when a mention wrote its slot: the slots below ``count``."""
        return self.embeddings.scored_rows(rows, self.width, projected, sentence, distance, self.count)

    def slots(self) -> torch.Tensor:
        return torch.arange(self.width, device=self.count.device)

    def reserve(self, step: int) -> None:
        """Widen to GROWTH_INTERVAL more entities than the most any row has, checking (one host sync) every
        GROWTH_INTERVAL steps: no row can then run out of slots before the next check; and make the storage room
        for the writes of the steps until then, so that the steps between two checks make no host sync."""
        if step % GROWTH_INTERVAL:
            return
        self.width = max(self.width, int(self.count.max()) + GROWTH_INTERVAL + 1)
        capacity = self.embeddings.capacity
        if self.width > capacity:
            self.embeddings.widen(max(self.width - capacity, capacity))  # doubling: amortised O(1) per entity
        self.embeddings.make_room(WRITES_PER_STEP * self.count.numel() * GROWTH_INTERVAL)

    def gather(self, slot: torch.Tensor) -> torch.Tensor:
        """The embedding in ``slot`` (P, B) of each (particle, document)."""
        return self.embeddings.at(slot)

    def at_or_zero(self, slot: torch.Tensor) -> torch.Tensor:
        """The embedding in ``slot`` (P, B) of each (particle, document), a zero vector where the slot is -1."""
        return torch.where((slot >= 0)[..., None], self.gather(slot), 0.0)

    def distinct(self, slot: torch.Tensor, remembered: torch.Tensor | None = None) -> DistinctRows:
        """The embedding in ``slot`` (P, B) of each (particle, document), a zero vector where the slot is -1, one per
        row (U = P): a fixed size, where keeping each document's distinct vectors once needed a host sync (how
        many; at 100 particles on the CPU the word site took the same time either way); with the slot's remembered
        words where ``remembered`` (P, B) holds (none elsewhere, nor when not given)."""
        words = None if remembered is None else torch.where(remembered[..., None], self.words_at(slot), -1)
        index = torch.arange(len(slot), device=slot.device)[:, None].expand_as(slot)
        return DistinctRows(self.at_or_zero(slot), index, words)

    def distinct_at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                         remembered: torch.Tensor | None = None) -> DistinctContexts:
        """The embeddings in ``slots`` (K, n) of the K (particle, document) ``rows`` (a zero vector where a slot is
        -1), each distinct vector of a document kept once (with the pooled table; once per place with a dense
        one); with its remembered words where ``remembered`` (K, n) holds (none elsewhere, nor when not given)."""
        return self.embeddings.distinct_at_rows(rows, slots, remembered)

    def words_at(self, slot: torch.Tensor) -> torch.Tensor:
        """The words (P, B, M) remembered by the entity in ``slot`` (P, B) of each (particle, document)."""
        return self.embeddings.words_at(slot)

    def write(self, where: torch.Tensor, slot: torch.Tensor, embedding: torch.Tensor) -> None:
        """Put ``embedding`` (P, B, D) into ``slot`` (P, B) where ``where`` (P, B) holds (a new-entity candidate: not
        a mention, so where it was last seen is not written, and it remembers no words)."""
        self.embeddings.put(where, slot, embedding)

    def mention(self, where: torch.Tensor, slot: torch.Tensor, embedding: torch.Tensor, position: int | torch.Tensor,
                sentence: torch.Tensor, word: torch.Tensor) -> None:
        """An entity mentioned by ``word`` (P, B) at ``position`` (a step, or (P, B) steps) in ``sentence``
        (P, B), where ``where`` (P, B) holds: its updated embedding, where it was last seen and its words."""
        words = remembering(self.words_at(slot), word) if self.embeddings.memory else None
        self.embeddings.put(where, slot, embedding,
                            (torch.as_tensor(position).to(sentence).expand_as(sentence), sentence), words)

    def resample(self, moved: Resampled) -> None:
        """Each moved particle takes its ancestor's entities (of the ``width`` slots in use)."""
        self.embeddings.copy(moved, self.width)
        self.count = moved.copy(self.count)


class DenseEmbeddings:
    """Entity embeddings stored per (particle, document, slot), (P, B, C, D), with each slot's last position and
    sentence (P, B, C): what autograd can follow (training through the program writes a new tensor per step,
    :func:`_put`)."""

    def __init__(self, values: torch.Tensor, memory: int = 0) -> None:
        self.values = values
        self.last_position = values.new_zeros(values.shape[:-1])
        self.last_sentence = values.new_zeros(values.shape[:-1])
        self.memory = memory  # the words each entity remembers, (P, B, C, memory), -1 where none
        self.words = torch.full((*values.shape[:-1], memory), -1, dtype=torch.long, device=values.device)

    @property
    def capacity(self) -> int:
        return self.values.shape[-2]

    def widen(self, extra: int) -> None:
        self.values = F.pad(self.values, (0, 0, 0, extra))
        self.last_position = F.pad(self.last_position, (0, extra))
        self.last_sentence = F.pad(self.last_sentence, (0, extra))
        self.words = F.pad(self.words, (0, 0, 0, extra), value=-1)

    def make_room(self, writes: int) -> None:
        """Nothing to do: each write replaces a slot's vector in place."""

    def table(self, width: int) -> torch.Tensor:
        return self.values[..., :width, :]

    def last_seen(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.last_position[..., :width], self.last_sentence[..., :width]

    def scored_rows(self, rows: tuple[torch.Tensor, torch.Tensor], width: int, projected: torch.Tensor,
                    sentence: torch.Tensor, distance: Distance, count: torch.Tensor) -> torch.Tensor:
        # an einsum, not a batched matmul: K tiny matrix-vector products ran 3-4x slower
        scores = torch.einsum("kcd,kd->kc", self.table(width)[rows], projected[rows[-1]])
        last_position, last_sentence = (seen[rows] for seen in self.last_seen(width))
        known = torch.arange(width, device=count.device) < count[rows][:, None]
        return scores + distance(sentence[rows[1]][:, None], last_position, last_sentence, known)

    def at(self, slot: torch.Tensor) -> torch.Tensor:
        index = slot.clamp(min=0)[..., None, None].expand(*slot.shape, 1, self.values.shape[-1])
        return self.values.gather(-2, index).squeeze(-2)

    def at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
        """(K, S, D): the embeddings in ``slots`` (K, S) of the K (particle, document) ``rows``."""
        return self.values[rows].gather(1, slots[..., None].expand(*slots.shape, self.values.shape[-1]))

    def words_at(self, slot: torch.Tensor) -> torch.Tensor:
        index = slot.clamp(min=0)[..., None, None].expand(*slot.shape, 1, self.memory)
        return torch.where((slot >= 0)[..., None], self.words.gather(-2, index).squeeze(-2), -1)

    def words_at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
        """(K, ..., M): the words remembered in ``slots`` (K, ...) of the K (particle, document) ``rows``."""
        return self.words[_row_index(rows, slots)]

    def remembered_shares(self, rows: tuple[torch.Tensor, torch.Tensor], width: int, words: torch.Tensor
                          ) -> torch.Tensor:
        """(K, width) n_e(x) / n_e of the first ``width`` slots of the K ``rows``: the share of the words each
        entity remembers that are its document's word x (``words``, (B,)); 0 where it remembers none."""
        return blocked_shares(self, rows, width, words[rows[1]])

    def distinct_at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                         remembered: torch.Tensor | None = None) -> DistinctContexts:
        held = (slots >= 0)[..., None]
        values = torch.where(held, self.at_rows(rows, slots.clamp(min=0)), 0.0).flatten(0, 1)
        words = None
        if remembered is not None:
            words = torch.where(held & remembered[..., None], self.words_at_rows(rows, slots.clamp(min=0)), -1)
            words = words.flatten(0, 1)
        index = torch.arange(slots.numel(), device=slots.device).view(slots.shape)
        return DistinctContexts(values, rows[1][:, None].expand_as(slots).flatten(), index, words)

    def put(self, where: torch.Tensor, slot: torch.Tensor, rows: torch.Tensor,
            seen: tuple[torch.Tensor, torch.Tensor] | None = None, words: torch.Tensor | None = None) -> None:
        """Put ``rows`` (P, B, D) into ``slot`` (P, B) where ``where`` (P, B) holds, last seen at ``seen`` (the
        position and sentence, (P, B) each; None: not a mention, where it was last seen is kept), remembering
        ``words`` (P, B, M; None: none)."""
        self.values = _put(self.values, where, slot, rows)
        if seen is not None:
            self.last_position = _put(self.last_position, where, slot, seen[0].to(self.last_position))
            self.last_sentence = _put(self.last_sentence, where, slot, seen[1].to(self.last_sentence))
        if self.memory:
            self.words = _put(self.words, where, slot, torch.full_like(self.words[:, :, 0], -1) if words is None
                              else words)

    def put_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slot: torch.Tensor, vectors: torch.Tensor,
                 seen: tuple[torch.Tensor, torch.Tensor] | None = None, words: torch.Tensor | None = None) -> None:
        """Put ``vectors`` (K, D) into ``slot`` (K,) of the K ``rows``, last seen at ``seen`` (position and
        sentence, (K,) each; None: not a mention, where it was last seen is kept), remembering ``words`` (K, M)
        (None: none, a fresh entity's)."""
        index = (*rows, slot)
        self.values = _put_rows(self.values, index, vectors)
        if seen is not None:
            self.last_position = _put_rows(self.last_position, index, seen[0])
            self.last_sentence = _put_rows(self.last_sentence, index, seen[1])
        if self.memory:
            remembered = torch.full_like(self.words[index], -1) if words is None else words
            self.words = _put_rows(self.words, index, remembered)

    def copy(self, moved: Resampled, width: int) -> None:
        self.values = moved.copy(self.values, width)
        self.last_position = moved.copy(self.last_position, width)
        self.last_sentence = moved.copy(self.last_sentence, width)
        self.words = moved.copy(self.words, width)


class PooledEmbeddings:
    """Entity embeddings as pointers ``pointer`` (P, B, C) into a pool of vectors ``pool`` (S, D) that particles
    share, for sampling without autograd.

    A resampled particle copies its ancestor's C pointers, not C vectors of size D: on a book the entity table
    was what resampling after any token copied, a cost that grew with the entities. A write appends a vector and
    points the slot at it, so a vector an ancestor shares with its copies is never overwritten. The step and
    sentence of an entity's latest mention (eq. 4's distance features) are those of the write that made its
    vector, so they are kept beside it in the pool (``position``, ``sentence``, (S,)), not per slot, and so are
    the words its entity remembers once the write is made (``words``, (S, M)): a resampling copies the pointers
    alone. At every growth check (:meth:`make_room`), and whenever the pool is full, the vectors no slot points at
    are dropped (marked through the pointers: linear in the table) and the pool is sized to at least twice what
    is left: memory stays within about twice a dense table's. Row 0 holds zeros, an empty slot's vector, seen at
    step 0 of sentence 0. Every read returns what a dense table would hold, bit for bit.

    Eq. 4's bilinear scores are computed once per pooled vector and read through the pointers
    (:meth:`scored_rows`), and the lookahead's word at a context once per distinct vector of a document
    (:meth:`distinct_at_rows`): particles descend from few ancestors, so they share most of their entities' vectors
    (on a LitBank book, 300-500 vectors in use behind 100 particles x 100-250 slots from 2K to 18K tokens). The
    scores equal a dense table's to rounding, not bit for bit (a matrix product instead of an einsum).
    """

    def __init__(self, pointer: torch.Tensor, pool: torch.Tensor, memory: int = 0) -> None:
        self.pointer, self.pool, self.used, self.memory = pointer, pool, 1, memory
        self.rows = every_row(*pointer.shape[:2], pointer.device)  # what a write of every row writes (:meth:`put`)
        self.document = pointer.new_zeros(len(pool))  # the document each pooled vector belongs to
        self.position = pool.new_zeros(len(pool))  # the step of the mention that wrote it (0: not a mention)
        self.sentence = pool.new_zeros(len(pool))  # and its sentence
        self.mentioned = torch.zeros(len(pool), dtype=torch.bool, device=pool.device)  # written by a mention
        # the words its entity remembers once the write is made (-1 where none)
        self.words = torch.full((len(pool), memory), -1, dtype=torch.long, device=pool.device)

    @classmethod
    def empty(cls, particles: int, documents: int, capacity: int, size: int, like: torch.Tensor, memory: int = 0
              ) -> PooledEmbeddings:
        pointer = torch.zeros((particles, documents, capacity), dtype=torch.long, device=like.device)
        return cls(pointer, like.new_zeros((1 + particles * documents * GROWTH_INTERVAL, size)), memory)

    @property
    def capacity(self) -> int:
        return self.pointer.shape[-1]

    def widen(self, extra: int) -> None:
        self.pointer = F.pad(self.pointer, (0, extra))

    def make_room(self, writes: int) -> None:
        """Drop the vectors no slot points at now (a host sync: how many are kept) and make room in the pool for
        ``writes`` more, so that no write before the next such call must: eq. 4 scores every vector in the pool
        (:meth:`scored_rows`), and a step appends a vector per row for each write, most of which no slot keeps
        (on a LitBank book, cleaning up only when the pool was full left a few hundred vectors in use among
        13,000)."""
        self._drop_unused(writes)

    def table(self, width: int) -> torch.Tensor:
        return self.vectors(self.pointer[..., :width])

    def last_seen(self, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step and sentence (P, B, width) of the mention that wrote each slot's pooled vector."""
        pointer = self.pointer[..., :width]
        flat = pointer.reshape(-1)
        return (torch.index_select(self.position, 0, flat).view(pointer.shape),
                torch.index_select(self.sentence, 0, flat).view(pointer.shape))

    def scored_rows(self, rows: tuple[torch.Tensor, torch.Tensor], width: int, projected: torch.Tensor,
                    sentence: torch.Tensor, distance: Distance, count: torch.Tensor) -> torch.Tensor:
        """Eq. 4's scores of the pooled vectors (a bilinear score against their document's W h, and a distance
        term: a vector written by a mention is a known entity's, one written without is a new-entity candidate's,
        and row 0 an unavailable slot's, so ``count`` is not read): of every vector in the pool, once each, read
        through the rows' pointers, or, when the rows read fewer pointers than the pool holds vectors, of the
        vector behind each pointer. Both are fixed-size (the sizes are the host's): selecting the vectors the rows
        point at would need a host sync (how many)."""
        pointers = self.row_pointers(rows, width)  # (K, width)
        if pointers.numel() < self.used:
            return self._scores(pointers, _read(self.pool, pointers), projected[rows[1]][:, None],
                                sentence[rows[1]][:, None], distance)
        in_use = slice(0, self.used)
        document = self.document[in_use]
        pooled = self.pool[in_use]
        if projected.shape[0] <= PRODUCT_DOCUMENTS:  # each vector against every document's W h, then its own
            bilinear = (pooled @ projected.T).gather(1, document[:, None])[:, 0]
        else:
            bilinear = (pooled * _read(projected, document)).sum(-1)
        distance_term = distance(sentence[document], self.position[in_use], self.sentence[in_use],
                                 self.mentioned[in_use])
        return _read(bilinear + distance_term, pointers)

    def _scores(self, at: torch.Tensor, vectors: torch.Tensor, projected: torch.Tensor, sentence: torch.Tensor,
                distance: Distance) -> torch.Tensor:
        """Eq. 4's scores of the pooled ``vectors`` (..., D), those ``at`` in the pool, against their documents' W h
        ``projected`` and in their documents' ``sentence`` (broadcast). A product and a sum: an einsum of one vector
        against one ran as a batched matmul of 1 x 1 products, at twice the time."""
        return (vectors * projected).sum(-1) + distance(sentence, self.position[at], self.sentence[at],
                                                       self.mentioned[at])

    def row_pointers(self, rows: tuple[torch.Tensor, torch.Tensor], width: int) -> torch.Tensor:
        """(K, width) the pointers of the first ``width`` slots of the K (particle, document) ``rows``: one
        ``index_select`` of rows of the flattened table (a quarter of the time of indexing by the two index
        tensors), of those slots alone (the storage behind them is up to twice as wide)."""
        documents, capacity = self.pointer.shape[1:]
        return self.pointer.view(-1, capacity)[:, :width].index_select(0, rows[0] * documents + rows[1])

    def pointers_at(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
        """(K, n) the pointers in ``slots`` (K, n) of the K (particle, document) ``rows``, read one by one: a
        lookahead reads a few slots of each row, not the row."""
        documents, capacity = self.pointer.shape[1:]
        index = ((rows[0] * documents + rows[1])[:, None] * capacity + slots).flatten()
        return self.pointer.view(-1).index_select(0, index).view(slots.shape)

    def at(self, slot: torch.Tensor) -> torch.Tensor:
        return self.vectors(self.pointer.gather(-1, slot.clamp(min=0)[..., None])[..., 0])

    def at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
        """(K, S, D): the embeddings in ``slots`` (K, S) of the K (particle, document) ``rows``."""
        return self.vectors(self.pointers_at(rows, slots))

    def words_at(self, slot: torch.Tensor) -> torch.Tensor:
        pointer = self.pointer.gather(-1, slot.clamp(min=0)[..., None])[..., 0]
        return torch.where((slot >= 0)[..., None], self.words[pointer], -1)

    def words_at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> torch.Tensor:
        """(K, ..., M): the words remembered in ``slots`` (K, ...) of the K (particle, document) ``rows``."""
        return self.words[self.pointer[_row_index(rows, slots)]]

    def remembered_shares(self, rows: tuple[torch.Tensor, torch.Tensor], width: int, words: torch.Tensor
                          ) -> torch.Tensor:
        """As :meth:`DenseEmbeddings.remembered_shares`, computed once per pooled vector (the words its entity
        remembers against its document's word) and read through the rows' pointers: O(pool x M + K x width), where
        reading every slot's words is K x width x M (particles share most of their entities' vectors)."""
        remembered = self.words[:self.used]
        held = (remembered >= 0).sum(-1)
        share = (remembered == words[self.document[:self.used], None]).sum(-1) / held.clamp(min=1)
        return _read(share, self.row_pointers(rows, width))

    def distinct_at_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                         remembered: torch.Tensor | None = None) -> DistinctContexts:
        """On a device of :data:`CHEAP_SYNC_DEVICES` (the CPU), each distinct (document, pooled vector, read with its
        words) once, by one sort: a host sync (how many), which costs a CPU nothing, and the settled sampler's
        lookahead then ran 3x faster at 100 particles (18 against 54 ms a step: eq. 6 at U contexts instead of
        P x B x 9). Elsewhere every place is its own context: a fixed size, no host sync."""
        pointer = torch.where(slots >= 0, self.pointers_at(rows, slots.clamp(min=0)), 0)
        if pointer.device.type not in CHEAP_SYNC_DEVICES:
            key = 2 * pointer + (0 if remembered is None else remembered.long())
            return DistinctContexts(self.vectors(pointer).flatten(0, 1), rows[1][:, None].expand_as(slots).flatten(),
                                    torch.arange(slots.numel(), device=slots.device).view(slots.shape),
                                    self._words_of_keys(key.flatten(), remembered))
        document, unique_key, inverse = self._distinct_keys(rows[1][:, None], pointer, remembered)
        return DistinctContexts(self.vectors(unique_key // 2), document, inverse,
                                self._words_of_keys(unique_key, remembered))

    def _distinct_keys(self, document: torch.Tensor, pointer: torch.Tensor, remembered: torch.Tensor | None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The distinct (document, pointer, read with its words) of ``pointer`` with its ``document`` (broadcast)
        and ``remembered``, by one sort (one host sync: how many): sorted by document, then pointer, then whether
        read with its words, each as its document (U,) and key 2 x pointer + read with words (U,), and the one
        each entry of ``pointer`` is (its shape)."""
        size = 2 * len(self.pool)
        flag = torch.zeros_like(pointer) if remembered is None else remembered.long()
        unique, inverse = torch.unique(document * size + 2 * pointer + flag, return_inverse=True)
        return unique // size, unique % size, inverse

    def _words_of_keys(self, key: torch.Tensor, remembered: torch.Tensor | None) -> torch.Tensor | None:
        """The words remembered by the pooled vectors of ``key`` (2 x pointer + read with words) that are read with
        their words, -1 elsewhere; None when no words are read."""
        return None if remembered is None else torch.where((key % 2 == 1)[..., None], self.words[key // 2], -1)

    def vectors(self, pointer: torch.Tensor) -> torch.Tensor:
        """(..., D): the pooled vectors at ``pointer`` (...) (``index_select``: 2-3 times faster than indexing)."""
        return _read(self.pool, pointer)

    def put(self, where: torch.Tensor, slot: torch.Tensor, rows: torch.Tensor,
            seen: tuple[torch.Tensor, torch.Tensor] | None = None, words: torch.Tensor | None = None) -> None:
        """As :meth:`DenseEmbeddings.put`: every (particle, document)'s vector is appended to the pool (a fixed
        size, so no host sync selects the rows written) and ``slot`` points at it where ``where`` holds; the
        others are dropped with the next vectors no slot points at (:meth:`_drop_unused`)."""
        count = where.numel()
        if self.used + count > self.pool.shape[0]:
            self._drop_unused(count)  # first: it renumbers the pointers
        slot = slot.clamp(min=0)[..., None]  # (a slot -1 where nothing is written keeps slot 0's pointer)
        kept = self.pointer.gather(-1, slot)  # what a slot not written keeps
        self.put_rows(self.rows, slot.flatten(), rows.flatten(0, 1),
                      None if seen is None else (seen[0].flatten(), seen[1].flatten()),
                      None if words is None else words.flatten(0, 1))
        appended = torch.arange(self.used - count, self.used, device=where.device).view_as(kept)
        self.pointer.scatter_(-1, slot, torch.where(where[..., None], appended, kept))

    def put_rows(self, rows: tuple[torch.Tensor, torch.Tensor], slot: torch.Tensor, vectors: torch.Tensor,
                 seen: tuple[torch.Tensor, torch.Tensor] | None = None, words: torch.Tensor | None = None) -> None:
        """Append ``vectors`` (K, D) to the pool, last seen at ``seen`` (position and sentence, (K,) each; None:
        not a mention, as a dense table's unmentioned slot: step 0 of sentence 0), remembering ``words`` (K, M;
        None: none), and point ``slot`` (K,) of the K ``rows`` at them."""
        count = len(vectors)
        if self.used + count > self.pool.shape[0]:
            self._drop_unused(count)
        written = slice(self.used, self.used + count)
        self.pool[written] = vectors
        self.document[written] = rows[1]
        if seen is None:
            self.position[written], self.sentence[written] = 0.0, 0.0
        else:
            self.position[written], self.sentence[written] = seen
        self.mentioned[written] = seen is not None
        self.words[written] = -1 if words is None else words
        self.pointer[(*rows, slot)] = torch.arange(self.used, self.used + count, device=self.pointer.device)
        self.used += count

    def copy(self, moved: Resampled, width: int) -> None:
        self.pointer = moved.copy(self.pointer, width)

    def _drop_unused(self, room: int) -> None:
        """Keep the vectors some slot points at (row 0 first, the rest in their order), in a pool with space for
        ``room`` more and as many again as are kept. The vectors in use are marked through the pointers and
        renumbered by a cumulative sum: linear in the table, where sorting the pointers was not."""
        live = torch.zeros(self.used, dtype=torch.bool, device=self.pointer.device)
        live[0] = True
        live.index_fill_(0, self.pointer.flatten(), True)
        renumbered = live.cumsum(0) - 1
        kept = live.nonzero().flatten()  # the host sync: how many are kept
        size = max(2 * (len(kept) + room), self.pointer[..., 0].numel() * GROWTH_INTERVAL)
        for name in ("pool", "document", "position", "sentence", "mentioned", "words"):  # each pooled vector's rows
            old = getattr(self, name)
            kept_rows = old.new_empty((size, *old.shape[1:]))  # rows past the kept ones are written before read
            kept_rows[:len(kept)] = old[kept]
            setattr(self, name, kept_rows)
        self.pointer, self.used = _read(renumbered, self.pointer), len(kept)


def blocked_shares(table: DenseEmbeddings, rows: tuple[torch.Tensor, torch.Tensor], width: int, word: torch.Tensor
                   ) -> torch.Tensor:
    """(K, width) the share of each slot's remembered words that are the row's ``word`` (K,), read a block of
    slots at a time, so that at most :data:`REMEMBERED_READ` remembered words are held at once: on a book a row
    has thousands of entities, and (K, width, M) of them at once would grow with the book."""
    block = max(1, REMEMBERED_READ // max(1, len(word) * table.memory))
    shares = []
    for first in range(0, width, block):
        slots = torch.arange(first, min(first + block, width), device=word.device).expand(len(word), -1)
        remembered = table.words_at_rows(rows, slots)  # (K, block, M)
        held = (remembered >= 0).sum(-1)
        shares.append((remembered == word[:, None, None]).sum(-1) / held.clamp(min=1))
    return torch.cat(shares, -1)  # width >= 1: eq. 4 always offers a new entity


def every_row(particles: int, documents: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The (particle, document) indices of every row of a (P, B) batch, particle-major (as ``flatten`` orders
    them)."""
    return (torch.arange(particles, device=device).repeat_interleave(documents, output_size=particles * documents),
            torch.arange(documents, device=device).repeat(particles))


def _read(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` (index's shape, then values' trailing ones) by ``index_select``: a quarter of the time of
    indexing on a book's K x width pointers, 2-3 times faster on the pool's vectors."""
    return values.index_select(0, index.reshape(-1)).view(*index.shape, *values.shape[1:])


def _row_index(rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The index of ``slots`` (K, ...) of the K (particle, document) ``rows`` in a (P, B, C, ...) table."""
    shape = (-1, *([1] * (slots.dim() - 1)))
    return rows[0].view(shape), rows[1].view(shape), slots


def _put(table: torch.Tensor, where: torch.Tensor, slot: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table`` (P, B, C, ...) with ``rows`` (P, B, ...) in slot ``slot`` (P, B) where ``where`` (P, B) holds.

    In place, touching only the rows written (a step writes a few of P x B), unless autograd is recording: then a
    new table by one scatter, as autograd may need the old one.
    """
    if not torch.is_grad_enabled():
        written = where.nonzero(as_tuple=True)
        return _put_rows(table, (*written, slot[written]), rows[written])
    index = slot.clamp(min=0).view(*slot.shape, 1, *([1] * (rows.dim() - 2))).expand(*slot.shape, 1, *rows.shape[2:])
    kept = torch.where(where.view(*where.shape, *([1] * (rows.dim() - 2))), rows, table.gather(2, index).squeeze(2))
    return table.scatter(2, index, kept.unsqueeze(2))


def _put_rows(table: torch.Tensor, index: tuple[torch.Tensor, ...], values: torch.Tensor) -> torch.Tensor:
    """``table`` with ``values`` at ``index``: in place unless autograd is recording (then a new table, as autograd
    may need the old one)."""
    if torch.is_grad_enabled():
        return table.index_put(index, values.to(table.dtype))
    table[index] = values.to(table.dtype)
    return table


@dataclass(frozen=True)
class DistinctRows:
    """Vectors of (P, B) (particle, document) rows kept once per distinct vector of each document: ``values``
    (U, B, D), the U distinct vectors of each document (padded with zeros where a document has fewer), and
    ``index`` (P, B), the one each row reads. What reads them is computed U x B times, not P x B: particles
    descend from few ancestors, so most share their context vectors (eq. 6's word site reads e_current)."""

    values: torch.Tensor
    index: torch.Tensor
    words: torch.Tensor | None = None  # (U, B, M): the words each one remembers where read with them, else -1

    def dense(self) -> torch.Tensor:
        """(P, B, D): each row's vector."""
        return self.values.gather(0, self.index[..., None].expand(*self.index.shape, self.values.shape[-1]))

    def read(self, distribution: TorchDistribution) -> ReadByRow:
        """``distribution`` of batch shape (U, B), made of ``values``, as the (P, B) rows read it."""
        return ReadByRow(distribution, self.index)


@dataclass(frozen=True)
class DistinctContexts:
    """Vectors read at (K, n) places of K (particle, document) rows, each distinct vector of a document kept once:
    ``values`` (U, D) and their ``document`` (U,), ``index`` (K, n) the one each place reads, and ``words`` (U, M)
    the words each remembers where read with them (-1 elsewhere; None when none are read). What reads a vector
    with its document's state (eq. 6's word at the lookahead's contexts) is computed U times, not K x n."""

    values: torch.Tensor
    document: torch.Tensor
    index: torch.Tensor
    words: torch.Tensor | None = None


class ReadByRow(TorchDistribution):
    """A distribution of batch shape (P, B) whose rows share U x B distributions (``distinct``, batch (U, B)):
    row (p, b) is ``distinct``'s (``index[p, b]``, b). For a value the particles share ((B,), an observed word):
    its log-density is computed U x B times and read by each row. Only observed values are scored; it draws
    nothing."""

    arg_constraints: dict = {}

    def __init__(self, distinct: TorchDistribution, index: torch.Tensor) -> None:
        self.distinct, self.index = distinct, index
        super().__init__(index.shape, distinct.event_shape, validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return self.distinct.support

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        if value.dim() - len(self.event_shape) > 1:
            raise ValueError("ReadByRow scores values the particles share: (B,) for a (P, B) batch")
        return self.distinct.log_prob(value).gather(0, self.index)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        raise ValueError("ReadByRow scores observed values only: its site is observed")


@dataclass(frozen=True)
class Resampled:
    """A resampling's ``ancestors`` (P, B): particle p of document b continues particle ``ancestors[p, b]``.

    A copy gathers every particle's row from its ancestor's, a fixed-size operation with no host sync (selecting
    the particles that move would need a ``nonzero``); with ancestors from
    :func:`inference.algorithms.smc.survivors_in_place` the survivors copy themselves."""

    ancestors: torch.Tensor
    sources: torch.Tensor  # (P x B,): the (particle, document) row, particle-major, that each row copies

    @classmethod
    def of(cls, ancestors: torch.Tensor) -> Resampled:
        documents = ancestors.shape[1]
        return cls(ancestors, (ancestors * documents + torch.arange(documents, device=ancestors.device)).flatten())

    @property
    def moved(self) -> torch.Tensor:
        """(P, B): whether each particle's ancestor is another particle."""
        return self.ancestors != torch.arange(self.ancestors.shape[0], device=self.ancestors.device)[:, None]

    def copy(self, values: torch.Tensor, columns: int | slice | None = None) -> torch.Tensor:
        """``values`` (P, B, ...), laid out particle-major as every per-particle state is, with each particle's row
        replaced by its ancestor's (of the entries ``columns`` of dimension 2 only, when given; an int n: the first
        n), in place (every row is read before any is written). Whole rows move by one ``index_select`` over the
        P x B rows: a quarter of the time of a ``gather`` by an index the size of the rows, on a book's tables."""
        rows = values.view(-1, *values.shape[2:])
        if columns is not None:
            rows = rows[:, :columns] if isinstance(columns, int) else rows[:, columns]
        rows.copy_(rows.index_select(0, self.sources))
        return values


@dataclass
class MentionState:
    """R, E (as a slot, -1 outside mentions) and L of the previous token, per (particle, document)."""

    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor
    needs_candidate: torch.Tensor  # the new-entity candidate was used up (or none exists yet)


@dataclass
class Choice:
    """What step t chose (R, E as a slot, L) and the entity embedding it read, awaiting the update with h_t."""

    t: int
    valid: torch.Tensor
    sentence: torch.Tensor
    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor
    entity: torch.Tensor


@dataclass(frozen=True)
class Annotation:
    """Values to observe at the R/E/L sites, E as a slot (entity - 1, 0 outside mentions): (B, T) tensors for
    one annotation per document (the gold), or (P, B, T) for one per particle (reranking's candidates)."""

    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor

    @classmethod
    def of(cls, batch: DocumentBatch) -> Annotation:
        return cls.of_stream(batch.R, batch.E, batch.L)

    @classmethod
    def mentions_of(cls, batch: DocumentBatch) -> Annotation:
        """The batch's gold mentions alone, R and L - 1 with E None: the sampler's ``mentions``, E to be drawn."""
        return cls(batch.R, None, batch.L - 1)

    @classmethod
    def of_stream(cls, R: torch.Tensor, E: torch.Tensor, L: torch.Tensor) -> Annotation:
        """The site values of a stream annotation (E numbered 1..K, 0 outside mentions; L the remaining length)."""
        return cls(R, (E - 1).clamp(min=0), L - 1)


def remembering(words: torch.Tensor, word: torch.Tensor) -> torch.Tensor:
    """The last M words (..., M) once ``word`` (...) is read after ``words`` (..., M): the oldest forgotten."""
    return torch.cat([words[..., 1:], word[..., None].to(words)], -1)


def column(position: int | torch.Tensor) -> torch.Tensor | int:
    """A step, or (P, B) steps made to broadcast against the (P, B, C) entity slots."""
    return position if isinstance(position, int) else position[..., None]


