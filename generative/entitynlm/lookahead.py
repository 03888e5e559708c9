"""A share of EntityNLM's proposal that reads the word the way the model does: the model's locally optimal choice.

At a step where a mention may start, the model's own conditional of the choice given the word it must explain,

    p(R_t = r, E_t = e | history, x_t)  proportional to  p(r | h_{t-1}) p(e | h_{t-1}, entities) p(x_t | h_{t-1}, e)

(eqs. 3, 4 and 6; e is e_current when r = 0), is SMC's locally optimal proposal (Doucet, Godsill & Andrieu 2000):
drawn from it, the step's weight no longer depends on which (r, e) was drawn. The word site makes most of the
weights' per-step variance: Q reads x_t through its own LSTM, not through the model's softmax with each entity's
embedding. :class:`WordLookahead` computes that conditional over R = 0 and the ``top`` entities the
model finds likeliest (eq. 4), a new entity's embedding the candidate the model's table holds (its eq. 7 noise
already drawn, as the proposal's); x_t does not depend on L, so L's locally optimal choice is the model's own
p(L | h_{t-1}, e) (eq. 5). The proposal draws

    R from (1 - share) q(R) + share p(R | history, x_t),
    E from (1 - share) q(E | R = 1) + share p(E | R = 1, history, x_t)     (zero beyond the ``top``),
    L from (1 - share) q(L | E) + share p(L | h_{t-1}, e_E),

so every structure the proposal could draw keeps positive probability (share < 1) and the estimate stays
unbiased; Q (with the pipeline's hints, where given) keeps what it knows of the words after x_t. It reads the
model's entity state as prepared for step t (:meth:`EntityTracker.prepare`, which it calls once the proposal has
drawn its new-entity noise), before any choice, so it exists only in the lockstep pair
(:mod:`generative.entitynlm.lockstep`), which runs the model beside the proposal. It keeps eq. 4 of
every row (selecting those where a mention may start would be a host sync), and the model's E site reads it there
(:meth:`EntityTracker.keep_entity_logits`).
"""

from __future__ import annotations

import pyro.distributions as dist
import torch
import torch.nn.functional as F

from generative.entitynlm.model import EntityNLM, EntityTracker, SiteTransform
from generative.layers.batch import DocumentBatch
from generative.layers.categorical import Categorical

TOP_ENTITIES = 8  # entities whose word probability the lookahead computes (besides R = 0)


class WordLookahead(SiteTransform):
    """The model's locally optimal choice of R_t, E_t and L_t, mixed into a proposal tracker's sites.

    ``model_tracker`` is the model's entity state in the same lockstep loop, ``states`` the model's LSTM states;
    an instance is the last of a proposal tracker's transforms (its R, then E, then L of each step).
    """

    def __init__(self, model: EntityNLM, model_tracker: EntityTracker, states: torch.Tensor, batch: DocumentBatch,
                 share: float, top: int = TOP_ENTITIES) -> None:
        if not 0.0 < share < 1.0:
            raise ValueError(f"the lookahead's share must be in (0, 1), got {share}: the proposal keeps a share so "
                             "that every structure stays possible")
        self.model, self.model_tracker, self.states, self.batch = model, model_tracker, states, batch
        self.share, self.top = share, top
        # the step's p(E | R = 1, x_t) of every row, at its candidate slots (S, top) each, and each row's place: R's
        # call to E's
        self.entity_given_word: tuple[torch.Tensor, torch.Tensor] | None = None
        self.row_of: torch.Tensor | None = None

    def __call__(self, kind: str, t: int, proposed: dist.Categorical, tracker: EntityTracker) -> dist.Categorical:
        """The distribution site ``kind`` of step t draws from: the proposal's, mixed with the model's choice (E's
        over the proposal ``tracker``'s drawn rows alone: E is drawn where a mention starts)."""
        if kind == "R":
            mention, self.entity_given_word, self.row_of = self.choice(t)
            local = torch.stack([1 - mention, mention], dim=-1)
        elif kind == "E":
            return Categorical(probs=self.entity_mixture(proposed.probs, self.row_of[tracker.drawn_rows]))
        else:  # L: x_t does not depend on it, so the model's own p(L | h, e) is the locally optimal choice
            local = self.length_prior(t, tracker.entity_slot, tracker.drawn_rows)
        return Categorical(probs=(1 - self.share) * proposed.probs + self.share * local)

    def entity_mixture(self, proposed: torch.Tensor, row: torch.Tensor) -> torch.Tensor:
        """(K, slots) (1 - share) q(E) + share p(E | R = 1, x_t) of K rows, their q(E) ``proposed`` and each one's
        place ``row`` (K,) among those the lookahead scored: p(E | R = 1, x_t) is zero beyond its candidate slots,
        so it is added at those alone (the same sums as with the zeros: a book's table has thousands of slots). The
        proposal's table may already be wider than the model's, or narrower: a slot it lacks is left out."""
        slots, probabilities = (value[row] for value in self.entity_given_word)
        width = proposed.shape[-1]
        local = torch.where(slots < width, self.share * probabilities, 0.0)
        return ((1 - self.share) * proposed).scatter_add_(-1, slots.clamp(max=width - 1), local)

    def length_prior(self, t: int, slot: torch.Tensor, rows: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """(K, lengths): the model's p(L_t | h_{t-1}, e) (eq. 5) for the entity in ``slot`` (P, B) of each of the K
        (particle, document) ``rows`` (a new one: the candidate the model's table holds)."""
        entity = self.model_tracker.entities.gather(slot)[rows]
        from_state = self.model_tracker.reads.length[rows[1], t]  # eq. 5's map of h_{t-1}, read once per batch
        return self.model.heads.length.choice(from_state, entity).probs

    def choice(self, t: int) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor], torch.Tensor]:
        """Under the model, from its state prepared for step t, over R = 0 and its ``top`` likeliest entities:
        p(R_t = 1 | history, x_t) (P, B), and p(E_t | R_t = 1, history, x_t) for the S = P x B rows (R is drawn where
        a mention may start; the other rows' are masked) as the slots (S, top) it is not zero at and its values there
        (S, top), with each row's place among them (P, B)."""
        tracker = self.model_tracker
        tracker.prepare(t)  # the new-entity candidates in place (the proposal's eq. 7 noise, drawn, scored by it)
        entities, previous = tracker.entities, tracker.previous
        rows = tracker.drawn_rows  # every row (selecting those where R is drawn would be a host sync)
        # eq. 4 (S, C), kept: the model's E site reads it
        kept = tracker.keep_entity_logits(t, t, rows)
        log_entity, row_of = kept.logits, kept.place
        log_mention = tracker.reads.mention_type[rows[1], t].log_softmax(-1)  # (S, 2), eq. 3; h_{t-1} is state t
        current = tracker.current_slot[rows][:, None]  # e_current's slot, which R = 0 reads (eq. 6)
        slots = self.candidates(t, log_entity, current, rows)
        log_entity = log_entity.gather(-1, slots)
        # what each entity remembers, for a model that copies it (none outside mentions; a new one has none yet)
        copied = None if self.model.word_copy is None else F.pad(slots < entities.count[rows][:, None], (1, 0))
        log_word = self.word_log_probs(t, rows, torch.cat([current, slots], dim=1), copied)
        outside = log_mention[:, 0] + log_word[:, 0]
        inside = log_mention[:, 1, None] + log_entity + log_word[:, 1:]
        mention = torch.zeros_like(previous.L, dtype=log_entity.dtype)
        mention[rows] = torch.sigmoid(inside.logsumexp(-1) - outside)
        return mention, (slots, inside.softmax(-1)), row_of

    def word_log_probs(self, t: int, rows: tuple[torch.Tensor, torch.Tensor], slots: torch.Tensor,
                       copied: torch.Tensor | None) -> torch.Tensor:
        """(S, n) log p(x_t | h_{t-1}, e) (eq. 6) of the S ``rows``, e the embedding in each of their ``slots``
        (S, n; -1: a zero vector), copying the words it remembers where ``copied`` (S, n; None: a model without
        the copy). h_{t-1} is each document's, not each particle's, so eq. 6 is computed once per distinct
        (document, vector) and read by each place: particles descend from few ancestors (on a book, a few dozen
        contexts behind 100 particles x 9), and these were 9 softmaxes per particle a step."""
        contexts = self.model_tracker.entities.distinct_at_rows(rows, slots, copied)
        inputs = self.softmax_inputs(t, contexts.values, contexts.document)
        log_word = self.model.word_distribution(inputs, contexts.words, self.model_tracker.cache, contexts.document)
        return log_word.log_prob(self.observed(t, contexts.document))[contexts.index]

    def softmax_inputs(self, t: int, values: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        """(U, H) what eq. 6's softmax reads at step t, h_{t-1} + W_e e, for entity vectors ``values`` (U, D) of
        the ``documents`` (U,)."""
        return self.states[documents, t] + self.model.entity_to_word(values)

    def observed(self, t: int, documents: torch.Tensor) -> torch.Tensor:
        """x_t of each of the ``documents`` (U,) (U,); of a batch of one document, its one word (1,), which
        broadcasts against them: the class-factored softmax then gathers its class's rows once, not once each."""
        return self.batch.words[:, t] if self.batch.size == 1 else self.batch.words[documents, t]

    def candidates(self, t: int, log_entity: torch.Tensor, current: torch.Tensor,
                   rows: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """(S, top) the slots whose p(R = 1, E = e | x_t) the lookahead computes: the ``top`` likeliest by eq. 4
        (``log_entity``, (S, C)); with the copy, by eq. 4 times the word's probability were the entity's own
        embedding e_current's (in slot ``current``, (S, 1); the gate and eq. 6 read once per distinct vector) and
        its remembered words weighed alike (x_t as :meth:`observed` gives it). So an entity that bore x_t ("Smith"
        after "Mr. Smith") is among them however unlikely eq. 4 finds it; the lookahead then scores each chosen
        one exactly, so the choice only decides which it sees."""
        top = min(self.top, log_entity.shape[-1])
        model = self.model
        if model.word_copy is None:
            return log_entity.topk(top, dim=-1).indices
        contexts = self.model_tracker.entities.distinct_at_rows(rows, current)
        inputs = self.softmax_inputs(t, contexts.values, contexts.document)
        own = model.softmax(inputs).log_prob(self.observed(t, contexts.document))[contexts.index[:, 0]]
        gate = model.word_copy.gate(inputs)[contexts.index[:, 0], 0]
        share = self.model_tracker.entities.embeddings.remembered_shares(rows, log_entity.shape[-1],
                                                                         self.batch.words[:, t])
        log_word = torch.logaddexp((F.logsigmoid(-gate) + own)[:, None], F.logsigmoid(gate)[:, None] + share.log())
        return (log_entity + log_word).topk(top, dim=-1).indices
