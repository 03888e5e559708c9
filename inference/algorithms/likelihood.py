"""EntityNLM's log p(x) per document from weighted particles, with the diagnostics every report carries: the one
library function behind the main job (``python -m inference.marginal_ppl``), the API's ``log_likelihood`` and the
benchmarks (:func:`run_samplers`).

Importance sampling (eq. 11) reports log p_hat(x), the ELBO, and the ESS and PSIS k-hat of its weights; SMC
reports log p_hat(x), the ESS of its final weights, the mean ESS at sentence ends, its resamplings, and the PSIS
k-hat of the final stage's weights (those since the last resampling). A k-hat JSON cannot hold (infinite when
ArviZ has too few tail weights to fit, always at N <= 20) is written as null with a ``psis_khat_note``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from generative.entitynlm.hints import CorefHints
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.model import EntityNLM, EntityProposal
from generative.layers.batch import DocumentBatch
from inference.algorithms.config import ProposalConfig, SamplingConfig
from inference.algorithms.driver import run_batches
from inference.algorithms.importance import ImportanceEstimate, psis_khat
from inference.algorithms.smc import ParticleStructures, importance_sampling, sample_structures

SAMPLER_NAMES = {"is": "importance sampling", "smc": "SMC"}
KHAT_NOTES = {
    "inf": "ArviZ found fewer than 5 weights in the tail to fit (always at N <= 20; otherwise the largest weights "
           "are tied or the rest underflow)",
    "nan": "ArviZ's Pareto fit of the tail failed (NaN)",
}


@dataclass(frozen=True)
class SamplerRun:
    """One sampler's run over a corpus: each document's key (name, part, tokens) and statistics, and the
    seconds its sampling took."""

    sampler: str
    keys: list[dict]
    statistics: list[dict]
    seconds: float

    @property
    def rows(self) -> list[dict]:
        """Each document's key and statistics in one flat row."""
        return [{**key, **row} for key, row in zip(self.keys, self.statistics)]

    def totals(self, tokens: int) -> dict:
        """Total log p_hat(x), its perplexity, the seconds and, for importance sampling, the ELBO perplexity."""
        log_likelihood = sum(row["log_likelihood"] for row in self.statistics)
        totals = {"log_likelihood": log_likelihood, "perplexity": math.exp(-log_likelihood / tokens),
                  "seconds": self.seconds}
        if self.sampler == "is":
            totals["elbo_perplexity"] = math.exp(-sum(row["elbo"] for row in self.statistics) / tokens)
        return totals


def run_samplers(batches: Sequence[DocumentBatch], model: EntityNLM, proposal: EntityProposal,
                 samplers: Sequence[str], eos: int, sampling: SamplingConfig, options: ProposalConfig,
                 hints: Sequence[CorefHints | None] | None = None, progress: bool = True) -> dict[str, SamplerRun]:
    """Each of ``samplers`` over every batch by the one batch driver (:func:`run_batches`: batch ``n`` from seed
    ``batch_seed(sampling.seed, n)``, so a sampler's figures do not depend on which others ran before it), with
    ``sampling``'s particles and resampling points and ``options``' lookahead; ``hints``: each batch's pipeline
    hints for the proposal (None: none). The modules are built for ``options`` (their temperature, cache and
    bias: :func:`inference.training.checkpoint.entitynlm_modules`)."""
    runs = {}
    for sampler in samplers:
        run = dataclasses.replace(sampling, sampler=sampler)

        def sample(batch: DocumentBatch, number: int, run: SamplingConfig = run) -> tuple[list, list, float]:
            statistics, seconds = sample_documents(batch, model, proposal, eos, run, options.lookahead,
                                                   None if hints is None else hints[number], progress)
            return document_keys(batch), statistics, seconds

        done = run_batches(batches, sample, sampling.seed,
                           f"{SAMPLER_NAMES[sampler]}, {sampling.particles} particles", progress)
        runs[sampler] = SamplerRun(sampler, [key for keys, _, _ in done for key in keys],
                                   [row for _, rows, _ in done for row in rows], sum(seconds for *_, seconds in done))
    return runs


def document_keys(batch: DocumentBatch) -> list[dict]:
    """Each document of ``batch``: its name, part and number of predicted tokens."""
    return [{"document": key[0], "part": key[1], "tokens": int(batch.lengths[i])} for i, key in enumerate(batch.keys)]


def khat_entry(khat: float) -> dict:
    """``{"psis_khat": k}``, or for a k that JSON cannot hold, ``{"psis_khat": None, "psis_khat_note": why}``."""
    if math.isfinite(khat):
        return {"psis_khat": khat}
    return {"psis_khat": None, "psis_khat_note": KHAT_NOTES["nan" if math.isnan(khat) else "inf"]}


def sample_documents(batch: DocumentBatch, model: EntityNLM, proposal: EntityProposal, eos: int,
                     sampling: SamplingConfig, lookahead: float = 0.0, hints: CorefHints | None = None,
                     progress: bool = False) -> tuple[list[dict], float]:
    """log p_hat(x) of each document of ``batch`` by ``sampling``'s sampler with its diagnostics, and the seconds
    the sampling took (the diagnostics, which cost both samplers alike, are not counted); ``progress`` shows the
    token steps of a long batch on a terminal; ``lookahead`` and ``hints`` reshape the proposal
    (:class:`~generative.entitynlm.lockstep.EntityNLMParticles`)."""
    system = EntityNLMParticles(model, proposal, batch, sampling.particles, hints, lookahead)
    started = time.perf_counter()
    if sampling.sampler == "is":  # estimate_marginal's draws and weights, by the lockstep loop (memory flat in T)
        estimate = importance_sampling(system, eos, progress)
        log_marginal = estimate.log_marginal.tolist()  # waits for the device, so the clock stops after the work
        return importance_statistics(estimate, log_marginal), time.perf_counter() - started
    sampled = sample_structures(system, eos, sampling.resample, sampling.ess_threshold, history=False,
                                progress=progress)
    log_marginal = sampled.log_marginal.tolist()
    return smc_statistics(sampled, log_marginal), time.perf_counter() - started


def importance_statistics(estimate: ImportanceEstimate, log_marginal: list[float]) -> list[dict]:
    """Per document: log p_hat(x), the ELBO, and the ESS and PSIS k-hat of the importance weights."""
    columns = zip(log_marginal, estimate.elbo.tolist(), estimate.ess.tolist(), estimate.psis_khat().tolist())
    return [{"log_likelihood": log_p, "elbo": elbo, "ess": ess, **khat_entry(khat)}
            for log_p, elbo, ess, khat in columns]


def smc_statistics(sampled: ParticleStructures, log_marginal: list[float]) -> list[dict]:
    """Per document: log p_hat(x), the ESS of the final weights, the mean ESS at sentence ends (``stage_ess``),
    the resamplings, and the PSIS k-hat of the final stage's weights (those since the last resampling). Its
    ``elbo`` is None, as it always was in the JSON of ``--sampler smc``."""
    columns = zip(log_marginal, sampled.ess.tolist(), sampled.stage_ess.tolist(), sampled.resamplings.tolist(),
                  psis_khat(sampled.log_weights).tolist())
    return [{"log_likelihood": log_p, "elbo": None, "ess": ess, "stage_ess": stage_ess, "resamplings": resamplings,
             **khat_entry(khat)} for log_p, ess, stage_ess, resamplings, khat in columns]
