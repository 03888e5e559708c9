"""EntityNLM's parameters: its config and the conditional distributions of the story, one small module each --
p(R_t) (eq. 3), p(E_t) (eq. 4), p(L_t) (eq. 5), the new-entity prototype (eq. 7) and the entity update (eq. 8).

The model and the proposal (:mod:`generative.entitynlm.model`) each hold one :class:`EntityHeads`; the
known-annotation path (:mod:`generative.entitynlm.annotated`) reads the same heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.distributions import TorchDistribution, constraints
from torch import nn

from generative.entitynlm.copying import COPY_WEIGHTINGS
from generative.entitynlm.state import EntityTable, column
from generative.layers.categorical import Categorical
from generative.layers.config import LanguageModelConfig
from generative.layers.document_cache import check_cache_weight

PROPOSAL_CONTEXTS = ("forward", "bidirectional")  # what the proposal reads: x_<=t (the paper's), or all of x
IMPOSSIBLE = -1e4  # logit of an unavailable entity slot: a large negative number, not -inf (NaN-safe)


@dataclass(frozen=True)
class EntityNLMConfig(LanguageModelConfig):
    """Sizes and modelling choices; the defaults are the paper's.

    ``hidden_size`` is also the entity-embedding size: eq. 8 mixes entity embeddings with LSTM states.
    ``distance``: "paper" scores w_dist . f(e) with f = [log(1 + tokens since e was last mentioned),
    log(1 + sentences since)] and f = 0 for the new entity (eq. 4); "reference" is the DyNet code's
    exp(lambda * (last sentence of e - current sentence)). ``update``: "paper" is eq. 8; "reference" is the
    code's delta = sigmoid(e W h), e <- normalise((1 - delta) e + delta W_T h). ``entity_words`` (ours; 0 is the
    paper's eq. 6): each entity remembers the last this many words of its mention tokens, and a mention's word may
    be copied from them (:mod:`generative.entitynlm.copying`), each alike (``copy_weighting = "uniform"``) or by
    a learned attention ("attention"). ``document_cache`` (ours; 0 is the paper's): lambda of a unigram cache of
    the document so far mixed into eq. 6 at every token (:mod:`generative.layers.document_cache`), a fixed weight
    that evaluation sets (``python -m inference.marginal_ppl --document-cache``). ``new_entity_bias`` (ours; 0 is
    the paper's) is added to the new entity's logit in eq. 4: a decision-time setting of the posterior as a
    resolver (``python -m inference.posterior --new-entity-bias``). Both are settings of a run, not of training:
    :func:`inference.training.checkpoint.entitynlm_modules` builds a model with the run's values.
    """

    max_mention_length: int = 25
    new_entity_scale: float = 0.01  # sigma of eq. 7; 0 makes new entities deterministic (tests enumerate)
    distance: str = "paper"
    update: str = "paper"
    proposal: str = "forward"  # the proposal the commands use by default (a key of PROPOSAL_CONTEXTS)
    entity_words: int = 0
    copy_weighting: str = "uniform"
    document_cache: float = 0.0
    new_entity_bias: float = 0.0

    def __post_init__(self) -> None:
        if self.proposal not in PROPOSAL_CONTEXTS:
            raise ValueError(f"proposal must be one of {PROPOSAL_CONTEXTS}, got {self.proposal!r}")
        if self.distance not in ("paper", "reference"):
            raise ValueError(f"distance must be 'paper' or 'reference', got {self.distance!r}")
        if self.update not in ("paper", "reference"):
            raise ValueError(f"update must be 'paper' or 'reference', got {self.update!r}")
        if self.entity_words < 0:
            raise ValueError(f"entity_words must be at least 0, got {self.entity_words}")
        check_cache_weight(self.document_cache)
        if self.copy_weighting not in COPY_WEIGHTINGS:
            raise ValueError(f"copy_weighting must be one of {COPY_WEIGHTINGS}, got {self.copy_weighting!r}")


class MentionTypeHead(nn.Module):
    """p(R_t = r | h) proportional to exp(h^T W_r r_r) (eq. 3); r_1 is also the new-entity prototype (eq. 7)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.type_embeddings = nn.Parameter(torch.randn(2, hidden_size) / hidden_size**0.5)
        self.bilinear = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, h: torch.Tensor) -> dist.Categorical:
        return Categorical(logits=self.logits(h))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """h^T W_r r for both types (..., 2), unnormalised: what the categorical reads of h."""
        return self.bilinear(h) @ self.type_embeddings.T

    @property
    def entity_prototype(self) -> torch.Tensor:
        return self.type_embeddings[1]


class EntityHead(nn.Module):
    """p(E_t = e | R_t = 1, h) proportional to exp(h^T W_entity e_e + w_dist^T f(e)), known entities and new (eq. 4).

    ``new_entity_bias`` (0: eq. 4 as trained) is added to the new entity's logit: a decision-time shift of how
    readily the model opens an entity, chosen on dev where the posterior is used as a resolver
    (``python -m inference.posterior --new-entity-bias``), as entity prediction chooses its own; fixed when the
    head is built (:attr:`EntityNLMConfig.new_entity_bias`), not a parameter, and not saved with the weights.
    """

    def __init__(self, hidden_size: int, distance: str, new_entity_bias: float = 0.0) -> None:
        super().__init__()
        self.bilinear = nn.Linear(hidden_size, hidden_size, bias=False)
        self.distance = distance
        self.distance_weights = nn.Parameter(torch.zeros(2 if distance == "paper" else 1))
        self.new_entity_bias = new_entity_bias

    def forward(
        self, h: torch.Tensor, entities: EntityTable, position: int | torch.Tensor, sentence: torch.Tensor,
        rows: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dist.Categorical:
        """The choice at token ``position`` (a step, or (P, B) steps) of sentence ``sentence`` (P, B): a (P, B, C)
        categorical (eq. 4's logits, unavailable slots made impossible).

        ``rows`` ((particle, document) indices, K of them), when given, are the pairs whose E is drawn at this
        step (``position`` is then a step; the tracker passes every pair, masked where no mention starts): their
        entity tables are scored, and the categorical is theirs, (K, C) (:class:`DrawnRows` puts its draws in
        place); with the sampler's pooled table each entity vector in use is scored once, with its distance term,
        however many particles share it (:meth:`~generative.entitynlm.state.PooledEmbeddings.scored_rows`).
        """
        return self.choice(self.bilinear(h), entities, position, sentence, rows)

    def choice(
        self, projected: torch.Tensor, entities: EntityTable, position: int | torch.Tensor, sentence: torch.Tensor,
        rows: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> dist.Categorical:
        """:meth:`forward` given W_entity h (``projected``, (B, H)), as :class:`StateReads` holds it."""
        if rows is None:
            embeddings, last_position, last_sentence = entities.scored()
            # (P, B, C); an einsum, not a batched matmul: P x B tiny matrix-vector products ran 3-4x slower
            scores = torch.einsum("pbcd,bd->pbc", embeddings, projected)
            count = entities.count[..., None]
            scores = scores + self.distance_term(column(position), sentence[..., None], last_position, last_sentence,
                                                 entities.slots() < count)
            return Categorical(logits=self.logits(scores, entities.slots(), count))
        if not isinstance(position, int):
            raise TypeError("the rows that draw E are scored at one step of every document: position is an int")
        # sentence[0]: each document's sentence, the same for all its particles
        scores = entities.scored_rows(rows, projected, sentence[0], partial(self.distance_term, position))
        # no validation: its checks cost several small ops a step
        return Categorical(logits=self.logits(scores, entities.slots(), entities.count[rows][:, None]),
                           validate_args=False)

    def logits(self, scores: torch.Tensor, slots: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """Eq. 4's logits from the ``scores`` of entity ``slots`` when ``count`` entities are known: the new
        entity's (slot ``count``) shifted by :attr:`new_entity_bias`, the slots past it impossible."""
        if self.new_entity_bias:
            scores = scores + self.new_entity_bias * (slots == count)
        return torch.where(slots <= count, scores, IMPOSSIBLE)

    def distance_term(self, position: int | torch.Tensor, sentence: torch.Tensor, last_position: torch.Tensor,
                      last_sentence: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
        """Eq. 4's distance term of entities last seen at ``last_position`` in ``last_sentence``, now at
        ``position`` in ``sentence`` (all broadcast): w_dist . f(e) for a ``known`` entity, 0 for the candidate
        and unavailable slots; the reference code's exp(lambda * (last sentence - current sentence)) for every
        slot (the candidate's and unavailable slots' last sentence is 0)."""
        if self.distance == "paper":
            tokens_since = (position - last_position).clamp(min=0)
            sentences_since = (sentence - last_sentence).clamp(min=0)
            features = torch.stack([tokens_since.log1p(), sentences_since.log1p()], dim=-1)
            return known * (features @ self.distance_weights)
        return torch.exp(self.distance_weights * (last_sentence - sentence))


class DrawnRows(TorchDistribution):
    """A site of a (P, B) batch when only K rows draw it: ``drawn``, a distribution of batch shape (K,) for the
    rows at ``rows`` ((particle, document) indices), put in place. The other rows get the value 0 and the
    log-density 0: their site is masked, so the distribution of what counts is ``drawn``'s, and a step draws and
    normalises over K rows instead of P x B: E and L where a mention starts (eqs. 4, 5, over K entity tables),
    the eq. 7 noise where a new-entity candidate is placed."""

    arg_constraints: dict = {}

    def __init__(self, drawn: dist.TorchDistribution, rows: tuple[torch.Tensor, torch.Tensor], shape: torch.Size
                 ) -> None:
        self.drawn, self.rows = drawn, rows
        super().__init__(torch.Size(shape), drawn.event_shape, validate_args=False)

    @property
    def support(self) -> constraints.Constraint:
        return self.drawn.support

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        if sample_shape:
            raise ValueError("DrawnRows draws one value per row")
        drawn = self.drawn.sample()
        value = drawn.new_zeros(self.batch_shape + self.event_shape)
        value[self.rows] = drawn
        return value

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        drawn = self.drawn.log_prob(value.expand(self.batch_shape + self.event_shape)[self.rows])
        result = drawn.new_zeros(self.batch_shape)
        result[self.rows] = drawn
        return result


class StandardNormal(TorchDistribution):
    """N(0, I) of vectors (the last dimension of ``shape``), a batch of the rest: eq. 7's noise, drawn at every row
    at every step. ``Normal(0, 1).to_event(1)`` is the same density, but recomputes log(scale) over the whole
    batch at each log_prob (half the noise site's time at 100 particles); this reads the values alone."""

    arg_constraints: dict = {}
    support = constraints.independent(constraints.real, 1)

    def __init__(self, shape: torch.Size, like: torch.Tensor) -> None:
        self.like = like  # the dtype and device of a draw
        super().__init__(torch.Size(shape[:-1]), torch.Size(shape[-1:]), validate_args=False)

    def sample(self, sample_shape: torch.Size = torch.Size()) -> torch.Tensor:
        return torch.randn(self._extended_shape(sample_shape), dtype=self.like.dtype, device=self.like.device)

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        return -0.5 * (value * value).sum(-1) - 0.5 * self.event_shape[0] * math.log(2 * math.pi)


class LengthHead(nn.Module):
    """p(L_t = l | h, e) proportional to exp(W_length,l^T [h; e] + b_l) (eq. 5); the value is l - 1.

    W_length [h; e] is computed as W_h h + W_e e, so the shared h part is not repeated per particle.
    """

    def __init__(self, hidden_size: int, max_mention_length: int) -> None:
        super().__init__()
        self.from_state = nn.Linear(hidden_size, max_mention_length)
        self.from_entity = nn.Linear(hidden_size, max_mention_length, bias=False)

    def forward(self, h: torch.Tensor, entity: torch.Tensor) -> dist.Categorical:
        return self.choice(self.from_state(h), entity)

    def choice(self, from_state: torch.Tensor, entity: torch.Tensor) -> dist.Categorical:
        """:meth:`forward` given W_h h + b (``from_state``), as :class:`StateReads` holds it."""
        return Categorical(logits=from_state + self.from_entity(entity), validate_args=False)


class EntityUpdate(nn.Module):
    """The new embedding of the mentioned entity after reading h_t (eq. 8, or the reference code's form)."""

    def __init__(self, hidden_size: int, form: str) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden_size, hidden_size, bias=False)
        self.project = nn.Linear(hidden_size, hidden_size, bias=False) if form == "reference" else None

    def forward(self, h: torch.Tensor, entity: torch.Tensor) -> torch.Tensor:
        """``entity`` (..., D) updated by ``h``, broadcast against it."""
        return self.applied(self.gate(h), self.read(h), entity)

    def read(self, h: torch.Tensor) -> torch.Tensor:
        """What the update mixes into the entity: h (eq. 8), or the reference form's W_T h."""
        return h if self.project is None else self.project(h)

    def applied(self, gate: torch.Tensor, read: torch.Tensor, entity: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` given the gate's map of h and :meth:`read`, as :class:`StateReads` holds them."""
        delta = torch.sigmoid((gate * entity).sum(-1, keepdim=True))
        if self.project is None:
            return F.normalize(delta * entity + (1 - delta) * read, dim=-1)
        return F.normalize((1 - delta) * entity + delta * read, dim=-1)


class EntityHeads(nn.Module):
    """The R, E, L heads and the entity update: what model and proposal each have one of."""

    def __init__(self, config: EntityNLMConfig) -> None:
        super().__init__()
        self.mention_type = MentionTypeHead(config.hidden_size)
        self.entity = EntityHead(config.hidden_size, config.distance, config.new_entity_bias)
        self.length = LengthHead(config.hidden_size, config.max_mention_length)
        self.update = EntityUpdate(config.hidden_size, config.update)

    def read(self, states: torch.Tensor) -> StateReads:
        """The heads' linear maps of LSTM states (B, S, H): for a batch's whole sequence at once, one matrix
        product per map instead of one per step (the sampler's step is many small operations)."""
        return StateReads(self.mention_type.logits(states), self.entity.bilinear(states),
                          self.length.from_state(states), self.update.gate(states), self.update.read(states))


@dataclass(frozen=True)
class StateReads:
    """What the heads read of LSTM states h (B, S, H), (B, S, width) each, the same for every particle: eq. 3's
    logits h^T W_r r, eq. 4's W_entity h, eq. 5's W_h h + b, and eq. 8's gate of h and what it mixes in."""

    mention_type: torch.Tensor
    entity: torch.Tensor
    length: torch.Tensor
    gate: torch.Tensor
    read: torch.Tensor
