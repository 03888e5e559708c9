"""A proposal that knows coreference: EntityNLM's Q mixed with what the coreference pipeline believes.

The pipeline's reading of a document (:class:`coref.resolution.hints.CorefHint`: detected mentions, whether
each is linked, each one's antecedent distribution from the ranker), placed on the token stream, becomes a
distribution for every R, E and L site:

- R_t: a mention starts here with probability 1 - epsilon where the pipeline has a linked mention starting at t,
  epsilon elsewhere;
- L_t, where the pipeline's mention starts: its length, smoothed by epsilon over the lengths;
- E_t, where the pipeline's mention starts: the ranker's antecedent distribution carried onto the particle's
  own entities. Each particle remembers which entity it gave each pipeline mention (``hint_entity``); the
  probability of antecedent a goes to the entity the particle gave a, and that of "new", or of an antecedent
  the particle did not make a mention, to the new-entity slot.

Elsewhere (L and E away from a pipeline mention) the hint is Q itself. The proposal draws from the mixture

    q = (1 - weight) * Q_tempered + weight * hint,

so every structure Q could propose keeps positive probability (weight < 1) and importance weights stay exact
and the estimate unbiased; ``weight = 0`` is the paper's proposal. The mixture is per site, so q's density is
the mixture's, computed where the site is drawn: nothing outside the particle's own history is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyro.distributions as dist
import torch

from generative.entitynlm.model import EntityTracker, SiteTransform
from generative.entitynlm.state import Resampled
from generative.layers.batch import DocumentBatch
from generative.layers.categorical import Categorical


@dataclass(frozen=True)
class StreamHint:
    """One document's hint on its token stream: each pipeline mention's stream position ``start`` (M,) and
    ``length`` (M,) in tokens, ``linked`` (M,), ``antecedents`` (M, K) (earlier mention indices, -1 none) with
    ``probabilities`` (M, K + 1) (column 0: a new entity)."""

    start: torch.Tensor
    length: torch.Tensor
    linked: torch.Tensor
    antecedents: torch.Tensor
    probabilities: torch.Tensor


@dataclass(frozen=True)
class CorefHints:
    """The hints of a batch and how strongly the proposal follows them.

    Mention m of document b is row m + 1 (row 0: no mention): ``row`` (B, T) the row of the mention starting at
    each stream position (0: none); ``length`` (B, M + 1) L - 1; ``linked`` (B, M + 1); ``antecedents``
    (B, M + 1, K) rows (0: none); ``probabilities`` (B, M + 1, K + 1). ``weight`` is the mixture's share of the
    hint, ``epsilon`` the hint's smoothing.
    """

    row: torch.Tensor
    length: torch.Tensor
    linked: torch.Tensor
    antecedents: torch.Tensor
    probabilities: torch.Tensor
    weight: float
    epsilon: float = 0.02

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight < 1.0:
            raise ValueError(f"the hint's weight must be in [0, 1), got {self.weight}: Q keeps a share so that every "
                             "structure stays possible")
        if not 0.0 < self.epsilon < 1.0:
            raise ValueError(f"the hint's smoothing must be in (0, 1), got {self.epsilon}")

    @classmethod
    def of(cls, batch: DocumentBatch, hints: Sequence[StreamHint], weight: float, epsilon: float = 0.02
           ) -> CorefHints:
        """The hints of ``batch``'s documents (``hints`` in the batch's order), on the batch's device."""
        size, steps = batch.words.shape
        mentions = max((len(hint.start) for hint in hints), default=0) + 1
        top = max((hint.antecedents.shape[1] for hint in hints), default=1)
        row = torch.zeros((size, steps), dtype=torch.long)
        length = torch.zeros((size, mentions), dtype=torch.long)
        linked = torch.zeros((size, mentions), dtype=torch.bool)
        antecedents = torch.zeros((size, mentions, top), dtype=torch.long)
        probabilities = torch.zeros((size, mentions, top + 1))
        probabilities[..., 0] = 1.0
        for b, hint in enumerate(hints):
            count, k = len(hint.start), hint.antecedents.shape[1]
            row[b, hint.start] = torch.arange(1, count + 1)
            length[b, 1:count + 1] = hint.length - 1
            linked[b, 1:count + 1] = hint.linked
            antecedents[b, 1:count + 1, :k] = hint.antecedents + 1
            probabilities[b, 1:count + 1, :k + 1] = hint.probabilities.float()
        device = batch.words.device
        return cls(row.to(device), length.to(device), linked.to(device), antecedents.to(device),
                   probabilities.to(device), weight, epsilon)

    def rows_read_later(self) -> list[slice]:
        """For each step t, the rows a particle's memory of the pipeline's mentions (``hint_entity``) must keep
        after t, in every document: from the earliest antecedent of a mention still to come to the last mention
        reached. The rest is never read again (the ranker's antecedents lie a bounded number of mentions back), so
        a resampling copies these rows alone, not a row per mention of the whole book so far (one host sync)."""
        beyond = self.antecedents.shape[1]  # a row index past every row: "no antecedent"
        earliest = torch.where(self.antecedents > 0, self.antecedents, beyond).amin(-1)  # (B, M + 1); row 0: beyond
        at_step = earliest.gather(1, self.row)  # (B, T): the earliest antecedent of the mention starting at t
        still_to_come = torch.cat([at_step[:, 1:], torch.full_like(at_step[:, :1], beyond)], 1)  # steps after t
        first = still_to_come.flip(1).cummin(1).values.flip(1).amin(0)
        last = self.row.cummax(1).values.amax(0) + 1  # rows not reached yet hold -1 in every particle
        return [slice(min(lo, hi), hi) for lo, hi in zip(first.tolist(), last.tolist())]


class HintMixture(SiteTransform):
    """A proposal tracker's R, E and L drawn from the mixture with the pipeline's ``hints`` (module docstring)."""

    def __init__(self, hints: CorefHints, particles: int, max_mention_length: int) -> None:
        self.hints = hints
        # the entity slot each particle gave each pipeline mention (-1: not a mention start of its own)
        self.hint_entity = hints.row.new_full((particles, *hints.length.shape), -1)
        self.rows_read_later = hints.rows_read_later()  # a resampling after step t copies rows_read_later[t]
        # the hint's R (B, T, 2) at each step and L (B, M + 1, lengths) for each pipeline mention: the same for every
        # particle, so made once
        p_start = torch.where(hints.linked.gather(1, hints.row) & (hints.row > 0), 1 - hints.epsilon, hints.epsilon)
        self.start_hint = torch.stack([1 - p_start, p_start], dim=-1)
        lengths = max_mention_length
        self.length_hint = torch.full((*hints.length.shape, lengths), hints.epsilon / lengths,
                                      device=hints.length.device)
        self.length_hint.scatter_add_(-1, hints.length.clamp(max=lengths - 1)[..., None],
                                      torch.full_like(self.length_hint[..., :1], 1 - hints.epsilon))

    def __call__(self, kind: str, t: int, categorical: dist.Categorical, tracker: EntityTracker
                 ) -> dist.Categorical:
        """The mixture (1 - weight) Q + weight hint for site ``kind`` of step t."""
        own = categorical.probs
        hints = self.hints
        if kind == "R":  # (B, 2): each document's (eq. 3 reads h alone)
            hint = self.start_hint[:, t]
        else:  # E (K, slots) and L (K, lengths): the K rows that draw them (DrawnRows)
            particle, document = tracker.drawn_rows
            row = hints.row[document, t]
            at_row = (self.length_hint[document, row] if kind == "L"
                      else self._entity_hint(tracker, particle, document, row, own.shape[-1]))
            hint = torch.where((row > 0)[:, None], at_row, own)
        return Categorical(probs=(1 - hints.weight) * own + hints.weight * hint)

    def chosen(self, tracker: EntityTracker) -> None:
        """A particle whose mention starts where a pipeline mention does remembers the entity it chose for it."""
        row = self.hints.row[:, tracker.chosen.t].expand_as(tracker.chosen.E)[..., None]  # (P, B, 1); 0: none
        kept = self.hint_entity.gather(-1, row)  # stays -1, and so does every row where no mention starts
        starts = (tracker.mention_starts & (row[..., 0] > 0))[..., None]
        self.hint_entity.scatter_(-1, row, torch.where(starts, tracker.chosen.E[..., None], kept))

    def resample(self, moved: Resampled, t: int) -> None:
        self.hint_entity = moved.copy(self.hint_entity, self.rows_read_later[t])

    def _entity_hint(self, tracker: EntityTracker, particle: torch.Tensor, document: torch.Tensor, row: torch.Tensor,
                     slots: int) -> torch.Tensor:
        """(K, slots): for the K (particle, document) rows, the ranker's antecedent distribution of the document's
        mention ``row`` (K,), on the particle's entities; a new entity, or an antecedent the particle gave no
        entity, on the new slot."""
        hints = self.hints
        antecedent_rows = hints.antecedents[document, row]  # (K, A)
        probabilities = hints.probabilities[document, row]  # (K, A + 1)
        entity = self.hint_entity[particle[:, None], document[:, None], antecedent_rows]  # (K, A); row 0: -1
        new = tracker.entities.count[particle, document][:, None]
        target = torch.cat([new, torch.where(entity >= 0, entity, new)], dim=-1)
        return probabilities.new_zeros((len(row), slots)).scatter_add_(-1, target.clamp(max=slots - 1), probabilities)
