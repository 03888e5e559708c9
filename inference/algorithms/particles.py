"""What the samplers need of a model and its proposal: the particle-system protocol.

Importance sampling, SMC (resampling at sentence ends or after any token), conditional SMC and particle Gibbs
(:mod:`inference.algorithms.smc`) run on any object with this interface, as Pyro's ``SMCFilter`` runs on a model
and guide with ``init`` and ``step``: N particles of each of B documents, advanced one token at a time, each step
returning its log importance weight increment; resampling reorders the particles by ancestors; a state that grows
makes room between steps (``reserve``), so that a step reads nothing back to the host. The samplers keep
the weights, the stage ends, the resampling and the annotations' genealogy; the system keeps the particles' state.

EntityNLM's model and proposal implement it in :class:`generative.entitynlm.lockstep.EntityNLMParticles`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from generative.layers.batch import DocumentBatch


class ParticleSystem(Protocol):
    """``particles`` (N) particles of each document of ``batch`` (B), stepped in lockstep over its token stream.

    ``conditional``: particle 0 follows a reference annotation (conditional SMC), so resampling keeps it.
    """

    batch: DocumentBatch
    particles: int
    conditional: bool

    def reserve(self, t: int) -> None:
        """Before step t, between steps: make room for the steps that follow (a state that grows, e.g. a table of
        entities, may read its size back to the host here). A step itself reads nothing back, so that it can be
        compiled whole and queued ahead on a device."""
        ...

    def step(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Advance every particle by token t: (log p - log q of the step's sites, log p of the structure's sites),
        each (N, B). Every row is stepped; padding past a document's end contributes 0."""
        ...

    def choices(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The last step's R, E (1..K by first mention, 0 outside mentions) and L of every particle, (N, B) each."""
        ...

    def resample(self, ancestors: torch.Tensor) -> None:
        """Particle p of document b continues the state of particle ``ancestors[p, b]`` ((N, B))."""
        ...


StartSystem = Callable[..., ParticleSystem]
"""``start(reference=...)``: a fresh system on the same documents, its particle 0 following a reference annotation
(None: none); particle Gibbs starts one a pass."""
