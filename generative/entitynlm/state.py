"""EntityNLM's per-token state: the entity table of every (particle, document), the previous token's R, E, L,
what a step chose, and an annotation to observe. Plain tensors, no parameters: what the program
(:mod:`generative.entitynlm.model`) and the known-annotation path (:mod:`generative.entitynlm.annotated`) share.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from generative.layers.batch import DocumentBatch

GROWTH_INTERVAL = 32  # the entity table is resized at most once per this many steps (one host sync)


@dataclass
class EntityTable:
    """The entities of every (particle, document): slot k holds entity k + 1; slot ``count`` the new candidate.

    ``embeddings`` (P, B, C, D), ``last_position`` and ``last_sentence`` (P, B, C) of each entity's latest
    mention token, ``count`` (P, B). The first ``width`` slots are the ones eq. 4 scores (known entities, the
    candidate, and unavailable slots with probability 0); ``width`` grows by the same rule as ever
    (:meth:`reserve`), which fixes how many random numbers the E site draws, while the storage behind it grows by
    doubling, so a book's table is copied O(log C) times, not once per growth check. Writes are scatters of one
    row per (particle, document), in place unless autograd is recording.
    """

    embeddings: torch.Tensor
    last_position: torch.Tensor
    last_sentence: torch.Tensor
    count: torch.Tensor
    width: int

    @classmethod
    def empty(cls, particles: int, documents: int, size: int, like: torch.Tensor,
              capacity: int = GROWTH_INTERVAL + 1) -> EntityTable:
        zeros = like.new_zeros((particles, documents, capacity))
        return cls(like.new_zeros((particles, documents, capacity, size)), zeros, zeros.clone(), zeros[..., 0].long(),
                   capacity)

    def scored(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The embeddings, last positions and last sentences of the ``width`` slots that eq. 4 scores (views)."""
        return (self.embeddings[..., :self.width, :], self.last_position[..., :self.width],
                self.last_sentence[..., :self.width])

    def slots(self) -> torch.Tensor:
        return torch.arange(self.width, device=self.count.device)

    def reserve(self, step: int) -> None:
        """Widen to GROWTH_INTERVAL more entities than the most any row has, checking (one host sync) every
        GROWTH_INTERVAL steps: no row can then run out of slots before the next check."""
        if step % GROWTH_INTERVAL:
            return
        self.width = max(self.width, int(self.count.max()) + GROWTH_INTERVAL + 1)
        extra = self.width - self.embeddings.shape[-2]
        if extra > 0:
            extra = max(extra, self.embeddings.shape[-2])  # doubling: amortised O(1) copying per entity
            self.embeddings = F.pad(self.embeddings, (0, 0, 0, extra))
            self.last_position = F.pad(self.last_position, (0, extra))
            self.last_sentence = F.pad(self.last_sentence, (0, extra))

    def gather(self, slot: torch.Tensor) -> torch.Tensor:
        """The embedding in ``slot`` (P, B) of each (particle, document)."""
        return self.embeddings.gather(-2, self._row_index(slot)).squeeze(-2)

    def write(self, where: torch.Tensor, slot: torch.Tensor, embedding: torch.Tensor) -> None:
        """Put ``embedding`` (P, B, D) into ``slot`` (P, B) where ``where`` (P, B) holds."""
        self.embeddings = _put(self.embeddings, where, slot, embedding)

    def mention(self, where: torch.Tensor, slot: torch.Tensor, embedding: torch.Tensor, position: int | torch.Tensor,
                sentence: torch.Tensor) -> None:
        """An entity mentioned at ``position`` (a step, or (P, B) steps): its updated embedding and where it was
        last seen."""
        self.write(where, slot, embedding)
        for name, value in (("last_position", column(position)), ("last_sentence", sentence[..., None])):
            table = getattr(self, name)
            rows = torch.as_tensor(value).to(table).expand(*where.shape, 1)[..., 0]
            setattr(self, name, _put(table, where, slot, rows))

    def _row_index(self, slot: torch.Tensor) -> torch.Tensor:
        return slot.clamp(min=0)[..., None, None].expand(*slot.shape, 1, self.embeddings.shape[-1])


def _put(table: torch.Tensor, where: torch.Tensor, slot: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table`` (P, B, C, ...) with ``rows`` (P, B, ...) in slot ``slot`` (P, B) where ``where`` (P, B) holds.

    In place, touching only the rows written (a step writes a few of P x B), unless autograd is recording: then a
    new table by one scatter, as autograd may need the old one.
    """
    if not torch.is_grad_enabled():
        written = where.nonzero(as_tuple=True)
        table[(*written, slot[written])] = rows[written]
        return table
    index = slot.clamp(min=0).view(*slot.shape, 1, *([1] * (rows.dim() - 2))).expand(*slot.shape, 1, *rows.shape[2:])
    kept = torch.where(where.view(*where.shape, *([1] * (rows.dim() - 2))), rows, table.gather(2, index).squeeze(2))
    return table.scatter(2, index, kept.unsqueeze(2))


@dataclass(frozen=True)
class Resampled:
    """The particles a resampling moves: ``target`` (particle, document) indices of each particle whose ancestor
    is another, and ``source`` those of its ancestor."""

    target: tuple[torch.Tensor, torch.Tensor]
    source: tuple[torch.Tensor, torch.Tensor]

    @classmethod
    def of(cls, ancestors: torch.Tensor) -> Resampled:
        """From (P, B) ancestors (one host sync: how many move)."""
        particles = torch.arange(ancestors.shape[0], device=ancestors.device)[:, None]
        target = (ancestors != particles).nonzero(as_tuple=True)
        return cls(target, (ancestors[target], target[1]))

    def copy(self, values: torch.Tensor, slots: int | None = None) -> torch.Tensor:
        """``values`` (P, B, ...) with each moved particle's row replaced by its ancestor's (of the first ``slots``
        entries of dimension 2 only, when given), in place (the ancestors' rows are read before any is written)."""
        if slots is None:
            values[self.target] = values[self.source]
        else:
            values[(*self.target, slice(0, slots))] = values[(*self.source, slice(0, slots))]
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
    def of_stream(cls, R: torch.Tensor, E: torch.Tensor, L: torch.Tensor) -> Annotation:
        """The site values of a stream annotation (E numbered 1..K, 0 outside mentions; L the remaining length)."""
        return cls(R, (E - 1).clamp(min=0), L - 1)


def column(position: int | torch.Tensor) -> torch.Tensor | int:
    """A step, or (P, B) steps made to broadcast against the (P, B, C) entity slots."""
    return position if isinstance(position, int) else position[..., None]


