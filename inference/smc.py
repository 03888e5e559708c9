"""Posterior samples of EntityNLM's coreference structure p(R, E, L | X): importance resampling and SMC.

The proposal Q chooses each token's R, E, L from the words (up to x_t for the paper's proposal, all of them for
the bidirectional one) and the particle's own history, so the importance weight of a whole annotation factors
over tokens:

    w_t = p(R_t, E_t, L_t, x_t | history) / q(R_t, E_t, L_t | history, x).

:func:`sample_structures` runs the model and the proposal in lockstep, token by token, for N particles of every
document of a batch (the same vectorised state as importance sampling: nothing loops over particles), and
multiplies the w_t up. Two ways to use the weights:

- ``resample="never"``: sampling importance resampling (SIR). The weights are those of importance sampling
  (eq. 11); the samples are drawn from the particles in proportion to them at the end.
- ``resample="sentence"``: sequential Monte Carlo. At the end of every sentence of a document whose ESS has
  fallen below ``ess_threshold * N``, its particles are resampled (systematic resampling) and their weights
  reset, so particles whose early annotation explained the text badly are replaced before they ruin the whole
  document's weight. The last sentence end is not a resampling point: the final weights are kept, and samples
  are drawn from them as in SIR. The product over stages of the mean weight is again an unbiased estimate of p(x).

Either way the state that resampling copies is only the per-particle entity state (the entity table, the
ongoing mention, e_current): the LSTMs read words only and are shared by all particles.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyro
import torch
from pyro import poutine

from coref.document import Document, EntityAnnotation, Mention
from generative.batch import DocumentBatch, stream_positions
from generative.density import LogDensity
from generative.entitynlm import NEW_ENTITY_SITE, EntityNLM, EntityProposal
from inference.importance import effective_sample_size, log_mean_exp

RESAMPLING = ("never", "sentence")


@dataclass(frozen=True)
class ParticleStructures:
    """N weighted annotations of each of B documents, and what the sampler measured on the way.

    ``R``, ``E``, ``L`` (N, B, T) are each particle's annotation of the token stream (E numbered 1..K by
    first mention, 0 outside mentions; L the remaining mention length); ``log_weights`` (N, B) their final
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

    def annotation(self, particle: int, document: int, length: int) -> EntityAnnotation:
        """One particle's annotation of the first ``length`` stream tokens of one document."""
        R, E, L = (value[particle, document, :length].tolist() for value in (self.R, self.E, self.L))
        return EntityAnnotation(tuple(R), tuple(E), tuple(L))


def systematic_resampling(log_weights: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """(N, B) ancestor indices: one uniform offset per document, N evenly spaced points through the weights' CDF."""
    particles, documents = log_weights.shape
    cdf = torch.softmax(log_weights.T.double(), dim=-1).cumsum(-1)  # (B, N)
    offset = torch.rand((documents, 1), generator=generator, device=cdf.device, dtype=cdf.dtype)
    points = (offset + torch.arange(particles, device=cdf.device, dtype=cdf.dtype)) / particles
    return torch.searchsorted(cdf, points).clamp(max=particles - 1).T


@torch.no_grad()
def sample_structures(
    model: EntityNLM,
    proposal: EntityProposal,
    batch: DocumentBatch,
    particles: int,
    eos: int,
    resample: str = "sentence",
    ess_threshold: float = 0.5,
) -> ParticleStructures:
    """Weighted annotations of every document of ``batch`` by SIR (``resample="never"``) or SMC (``"sentence"``).

    ``eos`` is the id of ``</s>``: a document may be resampled after each of its sentence ends.
    """
    if resample not in RESAMPLING:
        raise ValueError(f"resample must be one of {RESAMPLING}, got {resample!r}")
    if particles < 1:
        raise ValueError(f"particles must be at least 1, got {particles}")
    model_states, proposal_states = model.encoder(batch), proposal.encoder(batch)
    shape = (particles, batch.size)
    device = batch.words.device
    history = {name: torch.zeros((*shape, batch.steps), dtype=torch.long, device=device) for name in "REL"}
    log_weights = torch.zeros(shape, device=device)
    log_joint = torch.zeros(shape, device=device)
    log_marginal = torch.zeros(batch.size, device=device)
    resamplings = torch.zeros(batch.size, dtype=torch.long, device=device)
    ess_sum = torch.zeros(batch.size, device=device)
    sentence_end = (batch.words == eos) & batch.mask  # (B, T)
    last_token = torch.arange(batch.steps, device=device) == (batch.lengths - 1)[:, None]
    may_resample = sentence_end & ~last_token & (resample == "sentence")  # the final weights are kept for drawing
    sentence_end_steps = set(sentence_end.any(0).nonzero().flatten().tolist())  # one host sync, before the loop
    with pyro.plate("particles", particles, dim=-2), pyro.plate("documents", batch.size, dim=-1):
        model_tracker = model.tracker(batch, particles, model_states)
        proposal_tracker = proposal.tracker(batch, particles, proposal_states)
        for t in range(batch.steps):
            with LogDensity() as proposed:
                proposal.step(t, proposal_states, proposal_tracker)
            with LogDensity() as joint, LogDensity(ignore=(NEW_ENTITY_SITE,)) as structure:
                poutine.condition(model.step, data=proposed.latent_values)(t, batch, model_states, model_tracker)
            log_weights += joint.total - proposed.total  # the new-entity noise cancels: same value, same density
            log_joint += structure.total
            chosen = proposal_tracker.previous
            history["R"][..., t] = chosen.R
            history["E"][..., t] = torch.where(chosen.R == 1, chosen.E + 1, torch.zeros_like(chosen.E))
            history["L"][..., t] = chosen.L
            if t not in sentence_end_steps:
                continue
            at_end = sentence_end[:, t]
            ess = effective_sample_size(log_weights)
            ess_sum += torch.where(at_end, ess, torch.zeros_like(ess))
            chosen_to_resample = may_resample[:, t] & (ess < ess_threshold * particles)
            log_marginal += torch.where(chosen_to_resample, log_mean_exp(log_weights), torch.zeros_like(ess))
            ancestors = torch.where(
                chosen_to_resample, systematic_resampling(log_weights), torch.arange(particles, device=device)[:, None]
            )
            for tracker in (model_tracker, proposal_tracker):
                tracker.resample(ancestors)
            for name, values in history.items():
                history[name] = values.gather(0, ancestors[..., None].expand_as(values))
            log_joint = log_joint.gather(0, ancestors)
            log_weights = torch.where(chosen_to_resample, torch.zeros_like(log_weights), log_weights)
            resamplings += chosen_to_resample.long()
    log_marginal += log_mean_exp(log_weights)
    if not torch.isfinite(log_marginal).all():
        bad = [batch.keys[i][0] for i in (~torch.isfinite(log_marginal)).nonzero().flatten().tolist()]
        raise FloatingPointError(f"non-finite weights for documents {bad}")
    stage_ess = ess_sum / sentence_end.sum(-1).clamp(min=1)
    return ParticleStructures(
        history["R"], history["E"], history["L"], log_weights, log_joint, log_marginal, resamplings, stage_ess
    )


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
