"""log p(R, E, L | ...) of a KNOWN annotation, computed at the cost of an RNNLM: EntityNLM's training path.

The Pyro program (:mod:`generative.entitynlm.model`) is the model's definition and runs token by token, because at
test time R, E and L are latent. Under a known annotation (the gold one in training, a candidate structure in
reranking) far less is sequential: the LSTM states depend on the words only, and the entity table changes only
at mention tokens. So the same terms are computed in two parts:

(a) one batched computation over all tokens of all documents: the R term (eq. 3) wherever a mention may start,
    and, once each token's current-entity vector is known, the L term (eq. 5) at mention starts and the
    word (eq. 6, in :meth:`EntityNLM.log_likelihood`);
(b) a loop over mention events only (the k-th mention token of every document at once): the entity choice
    (eq. 4) at each mention start and the eq. 8 update at every mention token.

Each new entity's embedding u = normalise(r_1 + sigma eps) (eq. 7) is written into its slot before the loop;
slots past the known entities are unavailable to the choice, as in the program, so only the next one is ever
the new-entity candidate. ``tests/test_gold.py`` checks values and gradients against the Pyro program on real
documents.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from generative.entitynlm.heads import EntityHeads, EntityNLMConfig
from generative.entitynlm.state import Annotation, DenseEmbeddings, EntityTable
from generative.layers.batch import DocumentBatch


@dataclass(frozen=True)
class AnnotationTerms:
    """Per-token log-probabilities (N, T) of one annotation per row, 0 where the story draws nothing.

    ``R`` is log p(R_t) where a mention may start, ``E`` and ``L`` log p(E_t), log p(L_t) at mention starts,
    ``X`` log p(x_t) (the model's; 0 for the proposal, which draws no words); ``entity_context`` (N, T, D) is
    e_current at each token, the entity vector the word distribution reads (eq. 6): the mentioned entity
    before this token's update, or the last updated entity outside mentions; ``entity_words`` (N, T, M) the words
    that entity remembers there, in mentions (-1 elsewhere, and where it remembers fewer; M = 0 without a memory).
    """

    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor
    entity_context: torch.Tensor
    entity_words: torch.Tensor
    X: torch.Tensor | float = 0.0

    @property
    def structure(self) -> torch.Tensor:
        """log p(R_t, E_t, L_t | ...) per token, (N, T)."""
        return self.R + self.E + self.L

    @property
    def total(self) -> torch.Tensor:
        """The log-density of each row's annotation (and words), (N,)."""
        return (self.structure + self.X).sum(-1)


def repeat_rows(value: torch.Tensor, rows: int) -> torch.Tensor:
    """A per-document tensor (B, ...) repeated for ``rows`` = P * B rows (P annotations per document)."""
    copies = rows // value.shape[0]
    return value.repeat(copies, *([1] * (value.dim() - 1))) if copies > 1 else value


def mention_may_start(length: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Where a mention may start, so that the R site counts: the ``valid`` tokens (rows, steps) at t = 0 or after
    one whose remaining mention length ``length`` (including the token) is 1, outside a mention or at its end."""
    return (F.pad(length[:, :-1], (1, 0), value=1) == 1) & valid


def annotation_terms(
    heads: EntityHeads,
    config: EntityNLMConfig,
    batch: DocumentBatch,
    annotation: Annotation,
    choice_states: torch.Tensor,
    update_states: torch.Tensor,
    noise: torch.Tensor | None = None,
    entity_words: int = 0,
) -> AnnotationTerms:
    """The R, E, L terms of ``annotation`` under ``heads`` (an :class:`EntityHeads`), rows = documents.

    ``annotation`` holds R, E as a slot and L - 1 (an :class:`Annotation`), (B, T) or (P, B, T) (then the P
    annotations of each document become P * B rows, document fastest). ``choice_states`` (B, T, H) is what
    the R/E/L heads read at each token (h_{t-1} for the model, h_t for the proposal), ``update_states``
    (B, T, H) what eq. 8 reads (h_t). ``noise`` (N, K, D): eps of eq. 7 for the K-th new entity of each row;
    drawn from N(0, I) when not given. ``entity_words``: how many of its mention words each entity remembers.
    """
    R, E, L = (value.reshape(-1, batch.steps) for value in (annotation.R, annotation.E, annotation.L))
    rows, steps = R.shape
    valid, sentence = repeat_rows(batch.mask, rows), repeat_rows(batch.sentence, rows)
    choice_states, update_states = repeat_rows(choice_states, rows), repeat_rows(update_states, rows)
    may_start = mention_may_start(L + 1, valid)  # the R site counts here
    in_mention = (R == 1) & valid
    starts = may_start & in_mention  # the E and L sites count here

    R_terms = heads.mention_type(choice_states).log_prob(R) * may_start

    # (b) the mention events, k-th mention token of every row at once
    events = int(in_mention.sum(-1).max()) if rows else 0
    positions = torch.arange(steps, device=R.device).expand(rows, steps)
    order = torch.argsort(torch.where(in_mention, positions, positions + steps), dim=-1)[:, :events]  # (N, K)
    event_valid = torch.gather(in_mention, 1, order)

    def at_events(value: torch.Tensor) -> torch.Tensor:
        index = order if value.dim() == 2 else order[..., None].expand(-1, -1, value.shape[-1])
        return torch.gather(value, 1, index)

    event_E, event_start, event_sentence = at_events(E), at_events(starts), at_events(sentence)
    event_choice, event_update = at_events(choice_states), at_events(update_states)
    event_word = at_events(repeat_rows(batch.words, rows))
    slots = int((E * in_mention).max()) + 2 if rows else 1  # the entities, and the candidate after the last
    table = _candidate_table(heads, config, rows, slots, choice_states, noise, entity_words)
    entity_before, entity_after, words_before, E_terms = [], [], [], []
    for k in range(events):
        where = event_valid[:, k][None]  # (1, N): the table has a particle dimension of 1
        slot, position = event_E[:, k][None], order[:, k][None]
        choice = heads.entity(event_choice[:, k], table, position, event_sentence[:, k][None])
        E_terms.append(choice.log_prob(slot) * (where & event_start[:, k]))
        entity = table.gather(slot)  # e_{E_t, t-1}, or the candidate for a new entity
        words_before.append(table.words_at(slot)[0])
        updated = heads.update(event_update[:, k], entity)
        table.mention(where, slot, updated, position, event_sentence[:, k][None], event_word[:, k][None])
        table.count = table.count + (where & (slot == table.count)).long()
        entity_before.append(entity[0])
        entity_after.append(updated[0])

    D = choice_states.shape[-1]
    entity_before = torch.stack(entity_before, 1) if events else choice_states.new_zeros(rows, 0, D)
    entity_after = torch.stack(entity_after, 1) if events else choice_states.new_zeros(rows, 0, D)
    E_events = torch.cat(E_terms, 0).T if events else choice_states.new_zeros(rows, 0)

    # (a) back on all tokens: the L term at starts, e_current everywhere
    L_events = heads.length(event_choice, entity_before).log_prob(at_events(L)) * (event_start & event_valid)
    to_tokens = torch.zeros_like(R_terms)
    E_terms = to_tokens.scatter(1, order, E_events)
    L_terms = to_tokens.scatter(1, order, L_events)
    mentions_before = torch.cumsum(in_mention.long(), -1) - in_mention.long()  # the event index of a mention token
    last_updated = torch.cat([entity_after.new_zeros(rows, 1, D), entity_after], 1)  # row 0: before any mention
    inside = torch.gather(F.pad(entity_before, (0, 0, 0, 1)), 1,
                          mentions_before.clamp(max=events)[..., None].expand(-1, -1, D))
    outside = torch.gather(last_updated, 1, mentions_before[..., None].expand(-1, -1, D))
    entity_context = torch.where(in_mention[..., None], inside, outside)
    words_before = torch.stack(words_before, 1) if events else R.new_zeros(rows, 0, entity_words)
    remembered = torch.gather(F.pad(words_before, (0, 0, 0, 1), value=-1), 1,
                              mentions_before.clamp(max=events)[..., None].expand(-1, -1, entity_words))
    remembered = torch.where(in_mention[..., None], remembered, -1)
    return AnnotationTerms(R_terms, E_terms, L_terms, entity_context, remembered)


def _candidate_table(heads: EntityHeads, config: EntityNLMConfig, rows: int, slots: int, like: torch.Tensor,
                     noise: torch.Tensor | None, entity_words: int) -> EntityTable:
    """An entity table (particle dimension 1) whose slot k holds the k-th new entity's embedding (eq. 7), each
    entity remembering ``entity_words`` words (none yet)."""
    table = EntityTable.empty(1, rows, config.hidden_size, like, capacity=slots, words=entity_words)
    prototype = heads.mention_type.entity_prototype.expand(1, rows, slots, config.hidden_size)
    if config.new_entity_scale > 0:
        if noise is None:
            noise = torch.randn(rows, slots, config.hidden_size, device=like.device, dtype=like.dtype)
        prototype = prototype + config.new_entity_scale * noise[:, :slots][None]
    table.embeddings = DenseEmbeddings(F.normalize(prototype, dim=-1), entity_words)
    return table
