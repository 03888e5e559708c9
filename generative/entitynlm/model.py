"""EntityNLM (Ji et al. 2017) as an explicit Pyro program, and its discriminative proposal Q as the guide.

At every target token t of every document the model has four sample sites (paper §2.2):

- ``R_t`` in {0, 1}: is x_t in an entity mention (eq. 3);
- ``E_t``: which entity, an index into the document's entity table, where the slot just past the known
  entities is the "new entity" candidate (eq. 4);
- ``L_t``: the mention's length, stored as L - 1 in 0..24 (eq. 5);
- ``X_t``: the word (eq. 6), observed.

R is drawn only when the previous mention has ended (L_{t-1} = 1), E and L only when a mention starts; inside a
mention the values are deterministic copies (R, E kept, L counted down) and those sites are masked, as is
padding. Sites exist at every step for every particle and document; masks, not branches, decide which count,
and the guide uses identical masks, so importance weights are exact. A new entity's embedding (eq. 7) is
u = r_1 + sigma * eps with eps a standard-normal site ``new_entity_t``; model and guide draw it from the same
N(0, I), so it cancels in the weights.

The LSTM reads words only, so it runs once per document (a fused ``nn.LSTM``) and all particles share its
states, and the heads' linear maps of them (``EntityHeads.read``), taken for the whole sequence at once; per
particle only the entity table, the last-seen positions and the current entity evolve. The
proposal (paper §5.1, "Proposal distribution") has the same R/E/L heads and its own LSTM, and reads the state
AFTER x_t: it sees the word it annotates. Everything is batched over a ``particles`` plate (dim -2) and a
``documents`` plate (dim -1). Every site goes through one sample statement (:func:`pyro_site`, the definition);
the lockstep sampler of :mod:`inference.algorithms.smc` swaps in one that calls the same distributions without Pyro's
messengers, and is tested to draw and weigh exactly as the program does.

The conditional distributions and the config are in :mod:`generative.entitynlm.heads`, the per-particle state
in :mod:`generative.entitynlm.state`. The paper's equations are the default; ``EntityNLMConfig`` names the
reference code's variants where they are cheap (reference-notes §1.11): exponential sentence distance, and the
swapped-delta / W_T entity update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pyro
import pyro.distributions as dist
import torch
import torch.nn.functional as F
from pyro.nn import PyroModule
from torch import nn

from coref.document import EntityAnnotation
from generative.entitynlm.annotated import AnnotationTerms, annotation_terms
from generative.entitynlm.copying import EntityWordCopy
from generative.entitynlm.heads import PROPOSAL_CONTEXTS, DrawnRows, EntityHeads, EntityNLMConfig, StandardNormal
from generative.entitynlm.state import Annotation, Choice, EntityTable, MentionState, Resampled, every_row
from generative.layers.batch import DocumentBatch
from generative.layers.categorical import Categorical
from generative.layers.density import LogDensity
from generative.layers.document_cache import DocumentCache, with_cache
from generative.layers.encoder import BidirectionalWordEncoder, WordEncoder
from generative.layers.softmax import make_softmax

NEW_ENTITY_SITE = "new_entity"  # the eq. 7 noise sites: a density, not part of the structure's probability


# ---- the program shared by model and guide -------------------------------------------------------------------


Site = Callable[[str, int, dist.TorchDistribution, torch.Tensor, torch.Tensor | None], torch.Tensor]
"""A sample statement ``site(kind, t, distribution, mask, obs) -> value``: the site ``f"{kind}_{t}"``."""


def pyro_site(kind: str, t: int, distribution: dist.TorchDistribution, mask: torch.Tensor,
              obs: torch.Tensor | None) -> torch.Tensor:
    """The program's sample statement: a masked Pyro site (the definition every fast path is tested against)."""
    return pyro.sample(f"{kind}_{t}", distribution.mask(mask), obs=obs)


class SiteTransform:
    """A reshaping of the distributions a tracker draws R, E and L from (a proposal's: :class:`Tempered`, the
    mixture with the pipeline's hints, the model's lookahead), with per-particle state of its own where it needs
    one: :meth:`chosen` reads each step's choices, :meth:`resample` follows the particles' ancestors."""

    def __call__(self, kind: str, t: int, categorical: dist.Categorical, tracker: EntityTracker
                 ) -> dist.Categorical:
        """The distribution site ``kind`` of step t draws from, given the one so far (``tracker``: its drawn rows,
        this step's E and entities)."""
        raise NotImplementedError

    def chosen(self, tracker: EntityTracker) -> None:
        """After the step's choices (``tracker.chosen``): nothing to keep, unless the transform remembers them."""

    def resample(self, moved: Resampled, t: int) -> None:
        """After a resampling that followed step t: nothing to copy, unless the transform keeps per-particle state."""


class Tempered(SiteTransform):
    """The logits of R, E and L divided by ``temperature``: above 1 a proposal is widened (paper §5.1's Q is trained
    on gold annotations, sharper than the model's posterior, which makes the importance weights heavy-tailed)."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature

    def __call__(self, kind: str, t: int, categorical: dist.Categorical, tracker: EntityTracker
                 ) -> dist.Categorical:
        return Categorical(logits=categorical.logits / self.temperature)


class EntityTracker:
    """One pass over a batch with one set of heads: the sample sites of R, E, L and the new-entity noise at each
    step, and the entity table they imply. The model and the proposal each drive one, with their own heads and
    LSTM states; the model adds the word site.

    ``site`` is the sample statement: :func:`pyro_site` makes this the Pyro program; the lockstep pair
    (:mod:`generative.entitynlm.lockstep`) passes handlers that draw and score the same distributions directly,
    without Pyro's per-site messenger stack. ``entity_words``: how many of its mention words each entity of the
    table remembers (the model's, when it copies them: :mod:`generative.entitynlm.copying`; 0 for a proposal).
    ``document_cache``: lambda of the model's cache of each document's words so far (its :attr:`cache`, which
    :meth:`update` adds each token's word to; None at 0, and for a proposal). ``transforms`` reshape the
    distributions R, E and L are drawn from, in order (:class:`SiteTransform`: a proposal's temperature, the
    mixture with the pipeline's hints, the model's lookahead).
    """

    def __init__(
        self,
        heads: EntityHeads,
        config: EntityNLMConfig,
        batch: DocumentBatch,
        particles: int,
        states: torch.Tensor,
        site: Site = pyro_site,
        entity_words: int = 0,
        document_cache: float = 0.0,
        transforms: Sequence[SiteTransform] = (),
    ) -> None:
        self.heads = heads
        self.site = site
        # the rows (particle and document indices) that read and draw eq. 4 and 5: every one, masked where no
        # mention starts (selecting those would be a host sync); DrawnRows puts their draws in place
        self.drawn_rows = every_row(particles, batch.size, batch.words.device)
        self.transforms = tuple(transforms)
        self.entity_slot: torch.Tensor | None = None  # this step's E (a slot, -1 outside mentions), before L
        self.mention_starts: torch.Tensor | None = None  # (P, B) where a mention starts at this step
        self.config = config
        self.batch = batch
        shape = (particles, batch.size)
        self.entities = EntityTable.empty(particles, batch.size, config.hidden_size, states, words=entity_words)
        self.read(states)
        ones = batch.words.new_ones(shape)
        self.previous = MentionState(R=ones * 0, E=-ones, L=ones, needs_candidate=ones.bool())
        self.current_slot = -ones  # e_current's slot: the latest mentioned entity's (-1: none yet, a zero vector)
        self.prepared = -1  # the latest step whose table is made (:meth:`prepare`)
        self.reserved = -1  # the latest step the table made room for (:meth:`reserve`)
        self.kept_entity_logits: KeptLogits | None = None  # eq. 4 at one step's rows (:meth:`keep_entity_logits`)
        self.cache = (DocumentCache(document_cache, batch.size, config.vocab_size, ones.device)
                      if document_cache else None)  # the same for every particle: it reads only the words

    def read(self, states: torch.Tensor) -> None:
        """The LSTM states (B, S, H) the heads read from now on, by index (:meth:`choose`, :meth:`update`): their
        linear maps of every state are taken here at once (:meth:`EntityHeads.read`). Generation, whose states
        come one at a time, reads each as it comes."""
        self.reads = self.heads.read(states)

    def choose(self, t: int, at: int, gold: Annotation | None) -> torch.Tensor:
        """The R, E, L sites of step t (steps 1-2 of the story); returns the slot (P, B) of e_current for the word
        at t: the mentioned entity's, whose embedding there is the one BEFORE this step's update, or the latest
        entity's outside mentions (-1 before any: a zero vector; :meth:`EntityTable.distinct` reads it).

        The heads read state ``at`` of the states read (:meth:`read`), shared by all particles and broadcast
        against the per-particle entity state (P, B, ...).
        """
        heads, previous, entities, reads = self.heads, self.previous, self.entities, self.reads
        valid = self.batch.mask[:, t].expand_as(previous.R)
        sentence = self.batch.sentence[:, t].expand_as(previous.R)
        self.prepare(t)

        starts = (previous.L == 1) & valid  # eq.: R is drawn only when no mention is ongoing
        # eq. 3 reads h alone: R's distribution is each document's, tempered and reshaped once, then read by all
        R_dist = self._drawn_from("R", t, Categorical(logits=reads.mention_type[:, at])).expand(starts.shape)
        drawn_R = self.site("R", t, R_dist, starts, _at(gold, "R", t))
        R = torch.where(starts, drawn_R, previous.R)
        self.mention_starts = mention_starts = starts & (R == 1)
        # eqs. 4 and 5 on every row, (P x B, C) and (P x B, lengths), put in place by DrawnRows and masked where no
        # mention starts: a fixed-size step (selecting the rows that start one would be a host sync)
        rows = self.drawn_rows
        E_dist = self._drawn_on_rows("E", t, Categorical(logits=self.entity_logits(t, at, rows), validate_args=False))
        drawn_E = self.site("E", t, E_dist, mention_starts, _at(gold, "E", t))
        E = torch.where(mention_starts, drawn_E, torch.where(R == 1, previous.E, -torch.ones_like(drawn_E)))
        self.entity_slot = E
        entity = entities.gather(E)  # e_{E_t, t-1}, or the candidate for a new entity
        L_dist = self._drawn_on_rows("L", t, heads.length.choice(reads.length[rows[1], at], entity[rows]))
        drawn_L = self.site("L", t, L_dist, mention_starts, _at(gold, "L", t))
        L = torch.where(mention_starts, drawn_L + 1, torch.where(starts, torch.ones_like(drawn_L), previous.L - 1))
        self.chosen = Choice(t, valid, sentence, R, E, L, entity)
        for transform in self.transforms:
            transform.chosen(self)
        return torch.where((R == 1) & valid, E, self.current_slot)

    def prepare(self, t: int) -> None:
        """Step t's entity table, before any choice: widened where needed (:meth:`EntityTable.reserve`), and a
        new-entity candidate placed (eq. 7) where the last one was used. Once per step: the sampler's lookahead
        prepares the model's table before the proposal draws R, so that it reads the table the model's E site will
        score (the candidates in place), and :meth:`choose` then finds it done."""
        if self.prepared == t:
            return
        self.prepared = t
        self.reserve(t)
        self._offer_candidate(t, self.previous.needs_candidate & self.batch.mask[:, t].expand_as(self.previous.R))

    def reserve(self, t: int) -> None:
        """Room in the entity table for the steps from t to the next growth check
        (:meth:`EntityTable.reserve`: the one read-back of a size, every GROWTH_INTERVAL steps). The lockstep
        sampler calls it between steps, so that a step itself reads nothing back; :meth:`prepare` calls it too,
        for the Pyro program, and then finds it done."""
        if self.reserved != t:
            self.reserved = t
            self.entities.reserve(t)

    def entity_logits(self, t: int, at: int, rows: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """(K, width): eq. 4's normalised logits at step t, reading state ``at``, of the K (particle, document)
        ``rows``; read off what :meth:`keep_entity_logits` kept, where it kept step t's (rows among those it kept:
        the model's E site draws where a mention starts, among the rows where one may)."""
        kept = self.kept_entity_logits
        if kept is not None and kept.step == t:
            return kept.logits[kept.place[rows]]
        sentence = self.batch.sentence[:, t].expand_as(self.previous.R)
        return self.heads.entity.choice(self.reads.entity[:, at], self.entities, t, sentence, rows).logits

    def keep_entity_logits(self, t: int, at: int, rows: tuple[torch.Tensor, torch.Tensor]) -> KeptLogits:
        """:meth:`entity_logits` of the K ``rows``, kept for the rest of step t: the lookahead scores eq. 4 at every
        row where a mention may start, and the model's E site then reads the rows that start one from there."""
        logits = self.entity_logits(t, at, rows)
        place = torch.full_like(self.previous.L, -1)
        place[rows] = torch.arange(len(rows[0]), device=place.device)
        self.kept_entity_logits = KeptLogits(t, place, logits)
        return self.kept_entity_logits

    @property
    def in_mention(self) -> torch.Tensor:
        """(P, B): whether this step's token lies in a mention (after :meth:`choose`)."""
        return (self.chosen.R == 1) & self.chosen.valid

    @property
    def current(self) -> torch.Tensor:
        """e_current (P, B, D): the latest mentioned entity's embedding, as updated (zeros before any mention)."""
        return self.entities.at_or_zero(self.current_slot)

    def update(self, at: int) -> None:
        """Steps 5-6 of the story: the mentioned entity reads h_t, state ``at`` of the states read (eq. 8), a used
        candidate becomes an entity, and R, E, L become the previous token's. The entity remembers the token's
        word when its table keeps words, and the document cache, if any, counts it."""
        chosen, entities, previous, reads = self.chosen, self.entities, self.previous, self.reads
        in_mention = self.in_mention
        # eq. 8 on every row, written where a mention is (selecting those rows would be a host sync)
        updated = self.heads.update.applied(reads.gate[:, at], reads.read[:, at], chosen.entity)
        entities.mention(in_mention, chosen.E, updated, chosen.t, chosen.sentence,
                         self.batch.words[:, chosen.t].expand_as(chosen.E))
        if self.cache is not None:
            self.cache.add(self.batch.words[:, chosen.t], self.batch.mask[:, chosen.t])
        created = in_mention & (chosen.E == entities.count)
        entities.count = entities.count + created.long()
        self.current_slot = torch.where(in_mention, chosen.E, self.current_slot)  # it now holds the update
        self.previous = MentionState(
            R=chosen.R, E=chosen.E, L=chosen.L, needs_candidate=created | (previous.needs_candidate & ~chosen.valid)
        )

    def resample(self, ancestors: torch.Tensor) -> None:
        """Particle p of document b continues the state of particle ``ancestors[p, b]`` (SMC resampling).

        Every particle's state is gathered from its ancestor's (:class:`~generative.entitynlm.state.Resampled`: no
        host sync), in place, and of the entity table only the slots in use, as pointers when the sampler pools the
        embeddings (:class:`~generative.entitynlm.state.PooledEmbeddings`): on a book that table was what
        resamplings moved.
        """
        self._resample(Resampled.of(ancestors))

    def _resample(self, moved: Resampled) -> None:
        """The copies, given the particles that moved: the tracker's state and its transforms'."""
        entities, previous = self.entities, self.previous
        entities.resample(moved)
        self.previous = MentionState(*(moved.copy(value) for value in (previous.R, previous.E, previous.L,
                                                                         previous.needs_candidate)))
        self.current_slot = moved.copy(self.current_slot)
        for transform in self.transforms:
            transform.resample(moved, self.chosen.t)

    def _drawn_on_rows(self, kind: str, t: int, categorical: dist.Categorical) -> DrawnRows:
        """Site ``kind`` (E or L) of step t on the rows that draw it (:attr:`drawn_rows`): the head's
        ``categorical``, as :meth:`_drawn_from` reshapes it, put in place."""
        return DrawnRows(self._drawn_from(kind, t, categorical), self.drawn_rows, self.previous.R.shape)

    def _drawn_from(self, kind: str, t: int, categorical: dist.Categorical) -> dist.Categorical:
        """The distribution site ``kind`` (R, E or L) of step t draws from: the head's ``categorical``, reshaped by
        each transform in turn."""
        for transform in self.transforms:
            categorical = transform(kind, t, categorical, self)
        return categorical

    def _offer_candidate(self, t: int, needed: torch.Tensor) -> None:
        """Place a fresh new-entity embedding u = normalise(r_1 + sigma eps) (eq. 7) where the last one was used.

        The noise site is drawn for every row at every step, masked where none is needed (a candidate waits until
        a mention makes it an entity), and the candidate written where one is: no host sync selects the rows."""
        prototype = self.heads.mention_type.entity_prototype.expand(*needed.shape, -1)
        if self.config.new_entity_scale > 0:
            noise_dist = StandardNormal(prototype.shape, prototype)
            noise = self.site(NEW_ENTITY_SITE, t, noise_dist, needed, None)
            prototype = prototype + self.config.new_entity_scale * noise
        self.entities.write(needed, self.entities.count, F.normalize(prototype, dim=-1))


@dataclasses.dataclass
class KeptLogits:
    """Eq. 4's logits (K, width) of K rows at ``step``, and each (particle, document)'s row among them (P, B; -1:
    none)."""

    step: int
    place: torch.Tensor
    logits: torch.Tensor


def _at(gold: Annotation | None, name: str, t: int) -> torch.Tensor | None:
    value = None if gold is None else getattr(gold, name)  # None: latent (e.g. E, given the mentions)
    return None if value is None else value[..., t]


# ---- the model and the proposal ------------------------------------------------------------------------------


class EntityNLM(PyroModule):
    """The generative model p(X, R, E, L) (paper §2)."""

    def __init__(self, config: EntityNLMConfig, counts: list[int]) -> None:
        super().__init__()
        self.config = config
        self.encoder = WordEncoder(config)
        self.heads = EntityHeads(config)
        self.entity_to_word = nn.Linear(config.hidden_size, config.hidden_size, bias=False)  # W_e of eq. 6
        self.softmax = make_softmax(config.softmax, config.hidden_size, counts, config.num_classes)
        self.word_copy = (EntityWordCopy(config.hidden_size, config.embedding_size, config.copy_weighting)
                          if config.entity_words else None)

    def word_distribution(self, inputs: torch.Tensor, remembered: torch.Tensor | None,
                          cache: DocumentCache | None = None, documents: torch.Tensor | None = None
                          ) -> dist.TorchDistribution:
        """Eq. 6 over what its softmax reads, ``inputs`` (..., H) = h_{t-1} + W_e e_current; with
        ``entity_words``, mixed with a copy of the words e_current's entity ``remembered`` (..., M; -1: none); with
        a ``cache`` (the tracker's, at ``document_cache``), mixed with the document's words so far (rows of the
        ``documents`` given: :meth:`DocumentCache.mix`)."""
        words = self.softmax(inputs)
        if self.word_copy is not None:
            words = self.word_copy(words, inputs, remembered, self.encoder.embedding)
        return words if cache is None else cache.mix(words, documents)

    def model(self, batch: DocumentBatch, particles: int = 1, annotated: bool = False) -> None:
        """The generative story over a batch; ``annotated`` observes the gold R, E, L (training)."""
        self.story(batch, particles, Annotation.of(batch) if annotated else None)

    def story(self, batch: DocumentBatch, particles: int, gold: Annotation | None) -> None:
        """The generative story with the R, E, L sites observed at ``gold`` when given (B, T or P, B, T)."""
        states = self.encoder(batch)
        with pyro.plate("particles", particles, dim=-2), pyro.plate("documents", batch.size, dim=-1):
            tracker = self.tracker(batch, particles, states)
            for t in range(batch.steps):
                self.step(t, batch, states, tracker, gold)

    def tracker(self, batch: DocumentBatch, particles: int, states: torch.Tensor, site: Site = pyro_site
                ) -> EntityTracker:
        """A fresh entity state for ``particles`` runs of the story over ``batch`` (``site``: see EntityTracker)."""
        return EntityTracker(self.heads, self.config, batch, particles, states, site=site,
                             entity_words=self.config.entity_words, document_cache=self.config.document_cache)

    def step(self, t: int, batch: DocumentBatch, states: torch.Tensor, tracker: EntityTracker,
             gold: Annotation | None = None) -> None:
        """Token t of the story: R, E, L from h_{t-1} and the entities, the word x_t (eq. 6), the entity update."""
        h_previous = states[:, t]
        slot = tracker.choose(t, t, gold)
        remembered = tracker.in_mention if self.word_copy is not None else None  # a mention's words may be copied
        context = tracker.entities.distinct(slot, remembered)  # e_current of every row
        words = self.word_distribution(h_previous + self.entity_to_word(context.values), context.words,
                                       tracker.cache)  # eq. 6
        tracker.site("X", t, context.read(words), batch.mask[:, t], batch.words[:, t])
        tracker.update(t + 1)

    @torch.no_grad()
    def generate(self, max_tokens: int, bos: int, eos: int) -> tuple[list[int], EntityAnnotation]:
        """Sample a document from the model: word ids and their R, E, L (entities 1..K by first mention).

        It runs the generative story forward (the LSTM one token at a time, since each word feeds the next
        state) for ``max_tokens`` tokens, and on until the last mention has ended. Time and memory are linear in
        the tokens: the values stay on the device until the end, and the only host sync per token is the stopping
        test once ``max_tokens`` are out.
        """
        steps = max_tokens + self.config.max_mention_length
        ones = torch.ones((1, steps), dtype=torch.long, device=self.entity_to_word.weight.device)
        scratch = DocumentBatch((("generated", 0),), ones, ones, ones.bool(), ones * 0, ones, ones, ones)
        encoder, entity_to_word = self.encoder, self.entity_to_word
        previous_word, state = torch.tensor([[bos]], device=ones.device), None
        sentence = ones.new_zeros(())
        drawn: list[tuple[torch.Tensor, ...]] = []  # (word, R, E slot, L) of each token, each (1, 1)
        with pyro.plate("particles", 1, dim=-2), pyro.plate("documents", 1, dim=-1):
            output, state = encoder.lstm(encoder.embedding(previous_word), state)
            tracker = EntityTracker(self.heads, self.config, scratch, 1, output,
                                    entity_words=self.config.entity_words, document_cache=self.config.document_cache)
            for t in range(steps):
                scratch.sentence[0, t] = sentence
                h_previous = output[:, 0]
                slot = tracker.choose(t, 0, None)
                remembered = torch.where(tracker.in_mention[..., None], tracker.entities.words_at(slot), -1)
                inputs = h_previous + entity_to_word(tracker.entities.at_or_zero(slot))
                word = pyro.sample(f"X_{t}", self.word_distribution(inputs, remembered, tracker.cache))  # (1, 1)
                scratch.words[0, t] = word[0, 0]  # the mentioned entity remembers it (its update reads it)
                output, state = encoder.lstm(encoder.embedding(word), state)
                tracker.read(output)
                tracker.update(0)
                mention = tracker.previous
                drawn.append((word, mention.R, mention.E, mention.L))
                sentence = sentence + (word[0, 0] == eos)
                if t + 1 >= max_tokens and int(mention.L) == 1:
                    break
        words, R, E, L = (torch.cat(values).flatten().tolist() for values in zip(*drawn))
        return words, EntityAnnotation(tuple(R), tuple(e + 1 if r else 0 for r, e in zip(R, E)), tuple(L))

    def log_likelihood(self, batch: DocumentBatch) -> torch.Tensor:
        """log p(R, E, L, X) of the gold annotation, per document (B,): the training objective (eq. 9)."""
        return self.log_joint(batch, Annotation.of(batch)).squeeze(0)

    def log_joint(self, batch: DocumentBatch, annotation: Annotation, noise: torch.Tensor | None = None
                  ) -> torch.Tensor:
        """log p(R, E, L, X) (eq. 12) of each annotation, (P, B) for (P, B, T) annotations ((1, B) for (B, T)):
        P candidate structures of the same words in one run, sharing the LSTM, as reranking needs.

        Computed the fast way (:mod:`generative.entitynlm.annotated`), equal to :meth:`program_log_joint`;
        ``noise`` as there.
        """
        terms = self.token_log_probs(batch, annotation, noise)
        return terms.total.view(-1, batch.size)

    def token_log_probs(self, batch: DocumentBatch, annotation: Annotation, noise: torch.Tensor | None = None
                        ) -> AnnotationTerms:
        """Per-token log p(R_t), p(E_t), p(L_t), p(x_t) of each annotation, (P * B, T) rows (document fastest).

        ``noise`` (P * B, K, D) is eps of eq. 7 for each row's K-th new entity (drawn when not given).
        """
        states = self.encoder(batch)
        terms = annotation_terms(self.heads, self.config, batch, annotation, states[:, :-1], states[:, 1:], noise,
                                 self.config.entity_words)
        rows, (size, steps) = terms.R.shape[0], batch.words.shape
        # (P, B, T, H) against the (B, T) words: the softmax gathers each observed word's class rows once, not
        # once per annotation (P candidates of a 3,000-token document would otherwise need gigabytes)
        context = self.entity_to_word(terms.entity_context).view(rows // size, size, steps, -1)
        remembered = terms.entity_words.view(rows // size, size, steps, -1)
        X = self.word_distribution(states[:, :-1] + context, remembered).log_prob(batch.words)  # eq. 6
        X = with_cache(X, batch.words, self.config.document_cache)  # the same cache for every row
        X = (X * batch.mask).view(rows, steps)
        return dataclasses.replace(terms, X=X)

    def program_log_joint(self, batch: DocumentBatch, annotation: Annotation) -> torch.Tensor:
        """:meth:`log_joint` read off the Pyro program itself, token by token: the definition the fast path
        is tested against."""
        particles = annotation.R.shape[0] if annotation.R.dim() == 3 else 1
        with LogDensity(observed=True) as density:
            self.story(batch, particles, annotation)
        return density.total


class EntityProposal(PyroModule):
    """The proposal Q(R, E, L | X): EntityNLM's heads reading the state at x_t, and the particle's own entities.

    ``context="forward"`` is the paper's (§5.1): an LSTM state h_t that has read x_<=t, so Q cannot know where
    a mention ends or whom a pronoun refers to until the words after it arrive. ``context="bidirectional"``
    reads the whole document (:class:`BidirectionalWordEncoder`): q(R_t, E_t, L_t | x_1:T, z_<t). The sites,
    masks and entity table are the same either way, so both are guides of the same model.

    ``temperature`` (not a parameter: given when the proposal is built) divides the logits of R, E and L
    (:class:`Tempered`). Trained on gold annotations, Q is sharper than the model's posterior, which makes
    importance weights heavy-tailed; a temperature above 1 widens it. Any Q with full support gives a valid
    estimator; the choice is made on dev.
    """

    def __init__(self, config: EntityNLMConfig, temperature: float = 1.0, context: str = "forward") -> None:
        super().__init__()
        if context not in PROPOSAL_CONTEXTS:
            raise ValueError(f"context must be one of {PROPOSAL_CONTEXTS}, got {context!r}")
        self.config = config
        self.temperature = temperature
        self.context = context
        self.encoder = BidirectionalWordEncoder(config) if context == "bidirectional" else WordEncoder(config)
        self.heads = EntityHeads(config)

    def guide(self, batch: DocumentBatch, particles: int = 1, annotated: bool = False) -> None:
        """Propose R, E, L for every token given the words; ``annotated`` observes the gold (supervised fit)."""
        states = self.encoder(batch)
        gold = Annotation.of(batch) if annotated else None
        with pyro.plate("particles", particles, dim=-2), pyro.plate("documents", batch.size, dim=-1):
            tracker = self.tracker(batch, particles, states, tempered=not annotated)  # the fit uses Q itself
            for t in range(batch.steps):
                self.step(t, tracker, gold)

    def tracker(self, batch: DocumentBatch, particles: int, states: torch.Tensor, tempered: bool = True,
                site: Site = pyro_site, transforms: Sequence[SiteTransform] = ()) -> EntityTracker:
        """A fresh entity state for ``particles`` proposals over ``batch``, at the proposal's temperature (unless
        ``tempered`` is False), its sites then reshaped by ``transforms`` (the lockstep pair's hints and
        lookahead: :mod:`generative.entitynlm.lockstep`)."""
        if tempered and self.temperature != 1.0:
            transforms = (Tempered(self.temperature), *transforms)
        return EntityTracker(self.heads, self.config, batch, particles, states, site, transforms=transforms)

    def step(self, t: int, tracker: EntityTracker, gold: Annotation | None = None) -> None:
        """Token t: R, E, L proposed from h_t, the state after reading x_t (the tracker's state t + 1), and the
        entity update."""
        tracker.choose(t, t + 1, gold)
        tracker.update(t + 1)

    def log_likelihood(self, batch: DocumentBatch, noise: torch.Tensor | None = None) -> torch.Tensor:
        """log Q(R, E, L | X) of the gold annotation, per document (B,): the proposal's supervised objective.

        Computed the fast way (:mod:`generative.entitynlm.annotated`), equal to :meth:`program_log_likelihood`.
        """
        states = self.encoder(batch)[:, 1:]  # h_t, having read x_t: what the heads and the update read
        return annotation_terms(self.heads, self.config, batch, Annotation.of(batch), states, states, noise).total

    def program_log_likelihood(self, batch: DocumentBatch) -> torch.Tensor:
        """:meth:`log_likelihood` read off the Pyro guide, token by token."""
        with LogDensity(observed=True) as density:
            self.guide(batch, 1, True)
        return density.total.squeeze(0)
