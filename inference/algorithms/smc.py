"""Samplers of a particle system (:class:`inference.algorithms.particles.ParticleSystem`): importance resampling,
SMC, conditional SMC and particle Gibbs, for posterior samples of a coreference structure p(R, E, L | x) and
estimates of p(x).

:func:`sample_structures` steps a system token by token (N particles of every document of a batch) and multiplies
the per-step importance weights up. Three ways to use them:

- ``resample="never"``: sampling importance resampling (SIR). The weights are those of importance sampling
  (eq. 11); for EntityNLM, from the same random draws as :func:`inference.algorithms.importance.estimate_marginal`,
  which runs the whole guide first and the model after it: :func:`importance_sampling` is that estimate with
  memory flat in T. The samples are drawn from the particles in proportion to the weights at the end.
- ``resample="sentence"``: sequential Monte Carlo. At the end of every sentence of a document whose ESS has
  fallen below ``ess_threshold * N``, its particles are resampled (systematic resampling) and their weights
  reset, so particles whose early annotation explained the text badly are replaced before they ruin the whole
  document's weight. The last sentence end is not a resampling point: the final weights are kept, and samples
  are drawn from them as in SIR. The product over stages of the mean weight is again an unbiased estimate of p(x).
- ``resample="token"``: the same adaptive SMC, but a document may be resampled after any of its tokens, so a
  mention's choices are judged by the words that follow it before the next mention starts (at equal particles
  the estimate is higher and settles sooner than with sentence ends).

A system started on a reference annotation (``conditional``) makes a pass conditional SMC, the kernel of particle
Gibbs (:func:`particle_gibbs`). The annotations are kept by ancestry (:class:`Genealogy`): each step's choices
and each resampling's ancestors, traced back once at the end, so memory is linear in the tokens; a likelihood
alone (``history=False``) keeps none. The loop reads nothing back to the host: a stage end whose documents are
not resampled resamples each onto itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import torch

from coref.document import Document, EntityAnnotation, Mention
from coref.io.progress import progress as progress_bar
from generative.entitynlm.state import Annotation
from generative.layers.batch import stream_positions
from inference.algorithms.importance import ImportanceEstimate, effective_sample_size, log_mean_exp
from inference.algorithms.particles import ParticleSystem, StartSystem

SMC_RESAMPLING = ("sentence", "token")  # where SMC may resample: the commands' and the API's --resample / resample
RESAMPLING = ("never", *SMC_RESAMPLING)  # "never": importance sampling (SIR)
PROGRESS_STEPS = 5_000  # a batch this long (a chapter, a book) shows its token steps on a terminal


@dataclass(frozen=True)
class ParticleStructures:
    """N weighted annotations of each of B documents, and what the sampler measured on the way.

    ``R``, ``E``, ``L`` (N, B, T) are each particle's annotation of the token stream (E numbered 1..K by
    first mention, 0 outside mentions; L the remaining mention length), (N, B, 0) when the sampler kept no
    history; ``log_weights`` (N, B) their final
    log weights (since the last resampling); ``log_joint`` (N, B) log p(X, R, E, L | u) of each particle's
    whole annotation given its new-entity embeddings u (their Gaussian density, which falls with every entity
    in high dimension, is left out: it is not a probability of the structure); ``log_marginal`` (B,) the
    estimate of log p(x); ``resamplings`` (B,) how often each document was resampled; ``stage_ess`` (B,) the
    mean ESS at its sentence ends (before any resampling there).
    """

    R: torch.Tensor
    E: torch.Tensor
    L: torch.Tensor
    log_weights: torch.Tensor
    log_joint: torch.Tensor
    log_marginal: torch.Tensor
    resamplings: torch.Tensor
    stage_ess: torch.Tensor

    @property
    def particles(self) -> int:
        return self.R.shape[0]

    @property
    def ess(self) -> torch.Tensor:
        """(B,) effective sample size of the final weights, between 1 and N."""
        return effective_sample_size(self.log_weights)

    def normalized_weights(self) -> torch.Tensor:
        return torch.softmax(self.log_weights, dim=0)

    def annotations(self, mask: torch.Tensor) -> Annotation:
        """Every particle's annotation as site values (E as a slot, L - 1), (N, B, T), the padding (``mask`` (B, T)
        False) made the valid annotation the known-annotation path's masks ignore: the sampler's counters run on
        past a document's end."""
        return Annotation.of_stream(self.R * mask, self.E * mask, torch.where(mask, self.L, 1))

    def reference(self, chosen: torch.Tensor) -> Annotation:
        """Particle ``chosen[b]``'s annotation of each document b as site values (E as a slot, L - 1), the
        reference of a conditional SMC pass."""
        index = chosen[None, :, None].expand(1, *self.R.shape[1:])
        return Annotation.of_stream(*(value.gather(0, index)[0] for value in (self.R, self.E, self.L)))

    def annotation(self, particle: int, document: int, length: int) -> EntityAnnotation:
        """One particle's annotation of the first ``length`` stream tokens of one document."""
        R, E, L = (value[particle, document, :length].tolist() for value in (self.R, self.E, self.L))
        return EntityAnnotation(tuple(R), tuple(E), tuple(L))


def systematic_resampling(log_weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """(N, B) ancestor indices: one uniform offset per document, N evenly spaced points through the weights' CDF,
    placed by :func:`survivors_in_place`."""
    particles, documents = log_weights.shape
    cdf = torch.softmax(log_weights.T.double(), dim=-1).cumsum(-1)  # (B, N)
    offset = torch.rand((documents, 1), generator=generator, device=cdf.device, dtype=cdf.dtype)
    points = (offset + torch.arange(particles, device=cdf.device, dtype=cdf.dtype)) / particles
    return survivors_in_place(torch.searchsorted(cdf, points).clamp(max=particles - 1)).T


def conditional_resampling(log_weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Conditional SMC's (N, B) ancestor indices (Andrieu, Doucet & Holenstein 2010): particle 0, the reference,
    continues itself; each other particle draws its ancestor independently in proportion to the weights."""
    particles, documents = log_weights.shape
    reference = torch.zeros((1, documents), dtype=torch.long, device=log_weights.device)
    if particles == 1:
        return reference
    probabilities = torch.softmax(log_weights.T.double(), dim=-1)  # (B, N)
    drawn = torch.multinomial(probabilities, particles - 1, replacement=True, generator=generator)
    return torch.cat([reference, drawn.T])


def survivors_in_place(ancestors: torch.Tensor) -> torch.Tensor:
    """(B, N) ancestors, increasing along N, reordered so that every particle that survives keeps its own slot
    and its extra copies fill the slots of particles that died, in order: the same multiset of ancestors (the
    particles are exchangeable, so the estimate's distribution is unchanged), but a resampling then copies the
    state of the dead particles only (:meth:`generative.entitynlm.model.EntityTracker.resample`), not of all N.
    On a book the entity table is what resampling copies, and after any token it was the sampler's growing cost.
    """
    documents, particles = ancestors.shape
    slots = torch.arange(particles, device=ancestors.device).expand(documents, particles)
    alive = torch.zeros_like(ancestors, dtype=torch.bool).scatter_(1, ancestors, True)
    repeated = torch.cat([ancestors.new_zeros((documents, 1), dtype=torch.bool),
                          ancestors[:, 1:] == ancestors[:, :-1]], dim=1)  # an extra copy of its left neighbour
    # the k-th extra copy goes to the k-th dead slot (there are as many of each); column 0 collects the rest
    rank_of_copy = torch.where(repeated, repeated.long().cumsum(1), 0)
    copies = ancestors.new_zeros((documents, particles + 1)).scatter_(1, rank_of_copy, ancestors)
    rank_of_dead = torch.where(alive, 0, (~alive).long().cumsum(1))
    return torch.where(alive, slots, copies.gather(1, rank_of_dead))


class Genealogy:
    """The particles' annotations kept by ancestry: each step's R, E (1..K, 0 outside mentions) and L per particle
    in compact integers, and the ancestor indices of each resampling; :meth:`trace` follows every final particle's
    line back once. Memory is linear in the tokens, and resampling copies nothing of the past."""

    def __init__(self, particles: int, documents: int, steps: int, device: torch.device) -> None:
        entity = torch.int16 if steps < 2**15 else torch.int32  # E <= t + 1
        shape = (steps, particles, documents)
        self.values = {name: torch.zeros(shape, dtype=dtype, device=device)
                       for name, dtype in (("R", torch.int8), ("E", entity), ("L", torch.int8))}
        self.resamplings: list[tuple[int, torch.Tensor]] = []

    def record(self, t: int, R: torch.Tensor, E: torch.Tensor, L: torch.Tensor) -> None:
        """Step t's choices, (N, B) each (E numbered 1..K, 0 outside mentions)."""
        values = self.values
        values["R"][t], values["E"][t], values["L"][t] = R, E, L

    def resampled(self, t: int, ancestors: torch.Tensor) -> None:
        """Particle p of document b continued particle ``ancestors[p, b]`` after step t."""
        self.resamplings.append((t, ancestors))

    def trace(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(N, B, T) int64 R, E, L of each final particle's line."""
        steps, particles, documents = self.values["R"].shape
        device = self.values["R"].device
        lineage = torch.arange(particles, device=device)[:, None].expand(particles, documents)
        traced = {name: torch.empty((particles, documents, steps), dtype=torch.long, device=device)
                  for name in self.values}
        end = steps
        for t, ancestors in [*reversed(self.resamplings), (-1, None)]:  # a resampling after t reordered steps <= t
            for name, values in self.values.items():
                segment = values[t + 1:end]
                index = lineage.expand(segment.shape[0], particles, documents)
                traced[name][..., t + 1:end] = segment.gather(1, index).permute(1, 2, 0)
            if ancestors is not None:
                lineage = ancestors.gather(0, lineage)
            end = t + 1
        return traced["R"], traced["E"], traced["L"]


@torch.no_grad()
def sample_structures(system: ParticleSystem, eos: int, resample: str = "sentence", ess_threshold: float = 0.5,
                      history: bool = True, progress: bool = False) -> ParticleStructures:
    """Weighted annotations of every document of the ``system``'s batch by SIR (``resample="never"``) or SMC
    (``"sentence"``: a document may be resampled after each of its sentence ends; ``"token"``: after any of its
    tokens).

    ``eos`` is the id of ``</s>``. ``history=False`` keeps no annotations (R, E, L come back (N, B, 0)): what a
    likelihood needs, in memory flat in T. A ``conditional`` system's particle 0 is never resampled away
    (:func:`particle_gibbs`); ``log_marginal`` is then not an estimate of p(x).
    """
    if resample not in RESAMPLING:
        raise ValueError(f"resample must be one of {RESAMPLING}, got {resample!r}")
    batch, particles = system.batch, system.particles
    # the loop's tensors are inference tensors (no version counters, no view tracking: a tenth of a step's time
    # on the CPU, where a step is some two hundred small operations); what it returns is made outside
    with torch.inference_mode():
        shape = (particles, batch.size)
        device = batch.words.device
        genealogy = Genealogy(particles, batch.size, batch.steps if history else 0, device)
        log_weights = torch.zeros(shape, device=device)
        log_joint = torch.zeros(shape, device=device)
        log_marginal = torch.zeros(batch.size, device=device)
        resamplings = torch.zeros(batch.size, dtype=torch.long, device=device)
        ess_sum = torch.zeros(batch.size, device=device)
        identity = torch.arange(particles, device=device)[:, None]
        sentence_end = (batch.words == eos) & batch.mask  # (B, T)
        last_token = torch.arange(batch.steps, device=device) == (batch.lengths - 1)[:, None]
        stage_end = batch.mask if resample == "token" else sentence_end  # where a document may be resampled
        may_resample = stage_end & ~last_token  # the final weights are kept for drawing
        stage_end_steps = set(stage_end.any(0).nonzero().flatten().tolist())  # one host sync, before the loop
        resampling = conditional_resampling if system.conditional else systematic_resampling
        with pyro.validation_enabled(False):  # argument and support checks cost several small ops per site
            steps = progress_bar(range(batch.steps), desc=f"{particles} particles", unit="token", leave=False,
                                 enabled=progress and batch.steps >= PROGRESS_STEPS)
            for t in steps:
                system.reserve(t)  # between steps: the one read-back, at the system's growth checks
                log_weight, log_structure = system.step(t)
                log_weights += log_weight
                log_joint += log_structure
                if history:
                    genealogy.record(t, *system.choices())
                if t not in stage_end_steps:
                    continue
                ess = effective_sample_size(log_weights)
                ess_sum += torch.where(sentence_end[:, t], ess, torch.zeros_like(ess))
                if resample == "never":
                    continue
                # every stage end resamples, each document that is not chosen to onto itself: no host sync to ask
                # whether any is chosen (the resampling offsets are drawn either way)
                chosen_to_resample = may_resample[:, t] & (ess < ess_threshold * particles)
                log_marginal += torch.where(chosen_to_resample, log_mean_exp(log_weights), torch.zeros_like(ess))
                ancestors = torch.where(chosen_to_resample, resampling(log_weights), identity)
                system.resample(ancestors)
                if history:
                    genealogy.resampled(t, ancestors)
                log_joint = log_joint.gather(0, ancestors)
                log_weights = torch.where(chosen_to_resample, torch.zeros_like(log_weights), log_weights)
                resamplings += chosen_to_resample.long()
    # out of inference mode: each tensor returned is an ordinary one (a caller may train on the draws)
    log_weights, log_joint, log_marginal, resamplings = (
        value.clone() for value in (log_weights, log_joint, log_marginal, resamplings))
    log_marginal += log_mean_exp(log_weights)
    if not torch.isfinite(log_marginal).all():
        bad = [batch.keys[i][0] for i in (~torch.isfinite(log_marginal)).nonzero().flatten().tolist()]
        raise FloatingPointError(f"non-finite weights for documents {bad}")
    stage_ess = ess_sum / sentence_end.sum(-1).clamp(min=1)
    R, E, L = genealogy.trace()
    return ParticleStructures(R, E, L, log_weights, log_joint, log_marginal, resamplings, stage_ess)


@torch.no_grad()
def particle_gibbs(start: StartSystem, eos: int, sweeps: int, resample: str = "sentence",
                   reference: Annotation | None = None, **options) -> ParticleStructures:
    """Particle Gibbs (Andrieu, Doucet & Holenstein 2010): ``sweeps`` passes over each document, each on a system
    ``start(reference=...)`` makes, the first an ordinary SMC (or SIR) pass, or conditional on ``reference`` when given
    (e.g. the coreference pipeline's structure), each later one conditional SMC on a reference drawn from the last
    pass's final weights, so a structure once found stays among the particles until a better-weighted one
    replaces it.

    Returns every pass's particles pooled (N x sweeps), each pass weighted 1 / sweeps: the Rao-Blackwellised
    particle Gibbs estimate of posterior expectations; ``log_joint``'s argmax is the best structure the chain
    met. ``log_marginal`` is the first pass's: an SMC estimate of log p(x) when ``reference`` is None (conditional
    passes give none). ``options`` go to :func:`sample_structures`. Exact for EntityNLM without new-entity noise
    (sigma = 0): a reference keeps R, E and L, while its new-entity embeddings are drawn afresh from eq. 7.
    """
    if sweeps < 1:
        raise ValueError(f"sweeps must be at least 1, got {sweeps}")
    passes = [sample_structures(start(reference=reference), eos, resample, **options)]
    for _ in range(sweeps - 1):
        chosen = torch.multinomial(passes[-1].normalized_weights().T, 1)[:, 0]  # (B,)
        passes.append(sample_structures(start(reference=passes[-1].reference(chosen)), eos, resample, **options))
    if sweeps == 1:
        return passes[0]
    log_share = torch.log(torch.tensor(float(sweeps)))

    def pooled(name: str) -> torch.Tensor:
        return torch.cat([getattr(one, name) for one in passes])

    return ParticleStructures(
        pooled("R"), pooled("E"), pooled("L"),
        torch.cat([torch.log_softmax(one.log_weights, 0) - log_share for one in passes]), pooled("log_joint"),
        passes[0].log_marginal, sum(one.resamplings for one in passes),
        torch.stack([one.stage_ess for one in passes]).mean(0))


def importance_sampling(system: ParticleSystem, eos: int, progress: bool = False) -> ImportanceEstimate:
    """Importance sampling (eq. 11) by the lockstep loop, in memory flat in T: for EntityNLM the draws of
    ``estimate_marginal(model.model, proposal.guide, batch, particles)`` for the same random state, and its
    weights up to the order of the sums (each step's ratio is summed, not each density)."""
    return ImportanceEstimate(sample_structures(system, eos, "never", history=False, progress=progress).log_weights)


def stream_to_document(document: Document, annotation: EntityAnnotation) -> Document:
    """``document`` with the mentions of a sampled annotation of its token stream (words and ``</s>`` per sentence).

    A mention starts where R_t = 1 follows a token with L = 1 and lasts L_t tokens (the tracker keeps R, E, L
    consistent inside it). A sampled mention may run over a sentence end or the document's end (the model
    gives that small but non-zero probability); it is cut there, and one left empty is dropped.
    """
    token_at = {position: token for token, position in enumerate(stream_positions(document))}  # no </s> in it
    R, E, L = annotation.R, annotation.E, annotation.L
    mentions = []
    for t in range(len(R)):
        if R[t] == 1 and (t == 0 or L[t - 1] == 1) and t in token_at:
            end = t
            while end < min(t + L[t], len(R)) and end in token_at:
                end += 1
            mentions.append(Mention(token_at[t], token_at[end - 1] + 1, E[t]))
    return document.replace(mentions=mentions)
