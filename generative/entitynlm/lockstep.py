"""EntityNLM's model and proposal run in lockstep, token by token: the particle system the samplers step.

The proposal Q chooses each token's R, E, L from the words (up to x_t for the paper's proposal, all of them for
the bidirectional one) and the particle's own history, so the importance weight of a whole annotation factors
over tokens:

    w_t = p(R_t, E_t, L_t, x_t | history) / q(R_t, E_t, L_t | history, x).

:class:`EntityNLMParticles` holds N particles of every document of a batch (the vectorised entity state of the
program: nothing loops over particles) and implements the samplers' protocol
(:class:`inference.algorithms.particles.ParticleSystem`): :meth:`~EntityNLMParticles.step` runs the program's own
steps (``proposal.step``, then ``model.step`` on the values the proposal drew) and returns w_t; ``resample``
moves each particle onto its ancestor's state. The LSTMs read words only and are shared by all particles, so a
resampling copies only the per-particle entity state (the entity table, the ongoing mention, e_current).

The sample statements are :class:`ProposalSites` and :class:`ModelSites`: each draws from a site's distribution
and takes its masked log-density directly, instead of through Pyro's messengers and mask wrappers: the same
torch calls in the same order as the Pyro program under ``poutine.condition`` and
:class:`~generative.layers.density.LogDensity`, so the same draws and weights (tests/test_lockstep.py holds it to
the Pyro program).

What reshapes the proposal is given here, once, as the proposal tracker's site transforms
(:class:`~generative.entitynlm.model.SiteTransform`), in this order: the proposal's temperature, the mixture with
the coreference pipeline's ``hints`` (:mod:`generative.entitynlm.hints`), the model's own choice given the word
(``lookahead``, :mod:`generative.entitynlm.lookahead`). ``mentions`` give R and L, so only E is sampled (the
posterior over the entities of given mentions), and a ``reference`` makes particle 0 follow a given annotation
(conditional SMC, the kernel of particle Gibbs).
"""

from __future__ import annotations

import pyro.distributions as dist
import torch

from generative.entitynlm.hints import CorefHints, HintMixture
from generative.entitynlm.lookahead import WordLookahead
from generative.entitynlm.model import NEW_ENTITY_SITE, EntityNLM, EntityProposal, SiteTransform
from generative.entitynlm.state import Annotation
from generative.layers.batch import DocumentBatch


def _masked(log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A site's log-density where ``mask`` holds, 0 elsewhere: what Pyro's ``scale_and_mask`` gives a masked site
    at scale 1, bit for bit, in one op (its checks and its product by the scale cost more than the site's draw)."""
    return torch.where(mask, log_prob, 0.0)


class ProposalSites:
    """The proposal's sample statement: each site's distribution is drawn from (the torch calls ``pyro.sample``
    makes; masking does not change a draw) and its log-density, masked as a masked distribution's is
    (:func:`_masked`), added in site order, as LogDensity adds it. The mask wrapper itself is not built at every
    site of every step.

    ``reference`` (conditional SMC): particle 0's R, E and L are not drawn but the reference's (site values,
    (B, T) each), and scored by the same proposal density, so it follows the reference annotation throughout."""

    def __init__(self, reference: Annotation | None = None) -> None:
        self.reference = reference
        self.start()

    def start(self) -> None:
        """A new step: no values, a zero total."""
        self.values: dict[str, torch.Tensor] = {}
        self.total: torch.Tensor | float = 0.0

    def __call__(self, kind: str, t: int, distribution: dist.TorchDistribution, mask: torch.Tensor,
                 obs: torch.Tensor | None) -> torch.Tensor:
        if obs is not None:  # given (the mentions, when E alone is sampled): not proposed, so no density of q
            self.values[kind] = obs
            return obs
        value = distribution()
        if self.reference is not None and kind != NEW_ENTITY_SITE:
            value = value.clone()  # (a draw may be a view)
            value[0] = torch.where(mask[0], getattr(self.reference, kind)[:, t], value[0])
        self.values[kind] = value
        self.total = self.total + _masked(distribution.log_prob(value), mask)
        return value


class ModelSites:
    """The model's sample statement, conditioned on the proposal's values of the same step (``poutine.condition``):
    it sums log p of all sites (``joint``) and of all but the new-entity noise (``structure``)."""

    def __init__(self, proposed: ProposalSites) -> None:
        self.proposed = proposed
        self.start()

    def start(self) -> None:
        self.joint: torch.Tensor | float = 0.0
        self.structure: torch.Tensor | float = 0.0

    def __call__(self, kind: str, t: int, distribution: dist.TorchDistribution, mask: torch.Tensor,
                 obs: torch.Tensor | None) -> torch.Tensor:
        value = self.proposed.values[kind] if obs is None else obs
        log_prob = _masked(distribution.log_prob(value), mask)
        self.joint = self.joint + log_prob
        if kind != NEW_ENTITY_SITE:
            self.structure = self.structure + log_prob
        return value


class EntityNLMParticles:
    """N particles of each document of ``batch``, EntityNLM's model and proposal stepped in lockstep (module
    docstring): a :class:`~inference.algorithms.particles.ParticleSystem`.

    ``hints``: the proposal draws from its mixture with the coreference pipeline's; ``lookahead`` > 0: that share of
    R's, E's and L's proposal is the model's locally optimal choice given the word; ``mentions``: R and L given
    ((B, T) each, E None), so only E is sampled and the weights are those of p(E | x, R, L); ``reference`` (site
    values, (B, T) each): particle 0 keeps that annotation (conditional SMC).

    Its state is made, and must be stepped, in inference mode (what the samplers do): no gradient is recorded, so
    the entity table pools its vectors (:class:`~generative.entitynlm.state.PooledEmbeddings`) and is written in
    place.
    """

    @torch.inference_mode()
    def __init__(self, model: EntityNLM, proposal: EntityProposal, batch: DocumentBatch, particles: int,
                 hints: CorefHints | None = None, lookahead: float = 0.0, mentions: Annotation | None = None,
                 reference: Annotation | None = None) -> None:
        if particles < 1:
            raise ValueError(f"particles must be at least 1, got {particles}")
        self.model, self.proposal, self.batch, self.particles = model, proposal, batch, particles
        self.mentions, self.conditional = mentions, reference is not None
        self.model_states, proposal_states = model.encoder(batch), proposal.encoder(batch)
        self.proposed = ProposalSites(reference)
        self.scored = ModelSites(self.proposed)
        self.model_tracker = model.tracker(batch, particles, self.model_states, site=self.scored)
        transforms: list[SiteTransform] = []
        if hints is not None:
            transforms.append(HintMixture(hints, particles, proposal.config.max_mention_length))
        if lookahead > 0:
            transforms.append(WordLookahead(model, self.model_tracker, self.model_states, batch, lookahead))
        self.proposal_tracker = proposal.tracker(batch, particles, proposal_states, site=self.proposed,
                                                 transforms=transforms)

    def reserve(self, t: int) -> None:
        """Between steps, before step t: both entity tables make room for the steps until their next growth check
        (the only read-back of the sampler's loop, every GROWTH_INTERVAL steps)."""
        self.model_tracker.reserve(t)
        self.proposal_tracker.reserve(t)

    def step(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Token t of every particle: (log w_t, log p of its R, E, L, x_t), each (N, B); the new-entity noise
        cancels in w_t (the same value and density in both) and is left out of the structure's probability (its
        Gaussian density, which falls with every entity in high dimension, is not a probability of the
        structure)."""
        self.proposed.start()
        self.scored.start()
        self.proposal.step(t, self.proposal_tracker, self.mentions)
        self.model.step(t, self.batch, self.model_states, self.model_tracker, self.mentions)
        return self.scored.joint - self.proposed.total, self.scored.structure

    def choices(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The last step's R, E (1..K, 0 outside mentions) and L of every particle, (N, B) each."""
        chosen = self.proposal_tracker.previous
        return chosen.R, torch.where(chosen.R == 1, chosen.E + 1, 0), chosen.L

    def resample(self, ancestors: torch.Tensor) -> None:
        """Particle p of document b continues the state of particle ``ancestors[p, b]``."""
        self.model_tracker.resample(ancestors)
        self.proposal_tracker.resample(ancestors)
