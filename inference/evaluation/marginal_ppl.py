"""Marginal perplexity of EntityNLM by SMC or importance sampling (paper §5.1), beside its baselines:
:func:`marginal_perplexity` of a :class:`MarginalConfig`. Its command is :mod:`inference.commands.marginal_ppl`
(``python -m inference.marginal_ppl``).

R, E and L are latent at test time: for each document N annotations are drawn from the proposal and p(x) is
estimated from their weights. Perplexity = exp(-sum_docs log p_hat(x) / tokens), over the word tokens and
sentence ends every model predicts, beside the baselines' perplexities on the same tokens with the same
vocabulary. ``--sampler is`` is the paper's importance sampling (eq. 11: the mean importance weight; printed
per document with ESS and PSIS k-hat, and in total with the ELBO perplexity, a bound). ``--sampler smc``, the
default, is sequential Monte Carlo with the same proposal and particle count (:mod:`inference.algorithms.smc`):
particles are resampled at sentence ends when their ESS falls below half, and the product of the stages'
mean weights is again an unbiased estimate of p(x); on dev it had the lower variance at equal particles and at
equal seconds (``benchmarks/samplers.py``).

``--sampler both`` runs the two in turn, each from the same random state (so each column is what a run of
that sampler alone with the same seed gives), and reports them side by side per document: for importance
sampling log p_hat(x), ESS and PSIS k-hat; for SMC log p_hat(x), the ESS of the final weights, the mean ESS
at sentence ends (before resampling there), the number of resamplings, and the PSIS k-hat of the final
stage's weights (those since the last resampling: it diagnoses that stage only). Its JSON keeps the totals
under ``samplers`` ({"is": {...}, "smc": {...}}) and each document's statistics under ``per_document[i]["is"]``
and ``["smc"]``; the single-sampler modes keep their flat keys. A k-hat JSON cannot hold (infinite when ArviZ
has too few tail weights to fit, always at N <= 20) is written as null with a ``psis_khat_note`` saying why.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

import pyro.util
import torch

from coref.corpora.preprocess import EOS, Vocabulary
from coref.document import Document
from coref.io.progress import progress as progress_bar
from coref.resolution.pipeline import CorefPipeline
from generative.entitynlm.hints import CorefHints
from generative.entitynlm.model import EntityNLM, EntityProposal
from generative.layers.batch import DocumentBatch, batches_by_length, token_stream
from generative.layers.document_cache import with_cache
from inference.algorithms.hints import HintOptions, batch_hints, corpus_hints
from inference.algorithms.importance import ImportanceEstimate, psis_khat
from inference.algorithms.smc import ParticleStructures, importance_sampling, sample_structures
from inference.data import prepared_documents
from inference.distributed import ranks
from inference.runtime import batch_seed, resolve_device, set_seed
from inference.training.checkpoint import (
    Checkpoint,
    CheckpointError,
    entitynlm_checkpoint,
    entitynlm_modules,
    language_model,
    ngram_model,
    pretrained,
)

DEFAULT_BASELINES = ("rnnlm.pt",)
SAMPLERS = ("is", "smc")
SAMPLER_NAMES = {"is": "importance sampling", "smc": "SMC"}
KHAT_NOTES = {
    "inf": "ArviZ found fewer than 5 weights in the tail to fit (always at N <= 20; otherwise the largest weights "
           "are tied or the rest underflow)",
    "nan": "ArviZ's Pareto fit of the tail failed (NaN)",
}


@dataclass(frozen=True)
class MarginalConfig(HintOptions):
    """What a marginal perplexity is estimated of, and how: the options of ``python -m inference.marginal_ppl``.

    ``checkpoint`` None is the bundled EntityNLM; ``sampler`` is ``smc``, ``is`` or ``both`` (the two in turn,
    each from the same random state); ``proposal`` None is the checkpoint's own; ``baselines`` None is the
    bundled RNNLM beside the bundled model (none beside another), and an empty sequence is no baseline;
    ``batch_tokens`` counts particles x padded tokens per batch. ``resample`` is where SMC may resample: at
    ``sentence`` ends (below half the particles' ESS) or after any ``token``. ``hint_weight`` > 0 mixes the
    proposal with the coreference pipeline's reading (:mod:`generative.entitynlm.hints`), the ranker's scores
    divided by ``hint_temperature``, from ``hint_detector`` and ``hint_resolver`` (None: the bundled ones).
    ``document_cache`` > 0 mixes a unigram cache of the document so far into every model's word distribution,
    EntityNLM's and the baselines' alike, with this weight lambda (:mod:`generative.layers.document_cache`)."""

    checkpoint: str | None = None
    corpus: str = "sample"
    split: str = "test"
    data_dir: str | None = None
    particles: int = 100
    sampler: str = "smc"
    proposal: str | None = None
    proposal_temperature: float = 1.0
    baselines: Sequence[str] | None = None
    batch_tokens: int = 20_000
    device: str = "auto"
    seed: int = 0
    resample: str = "sentence"
    document_cache: float = 0.0


def samplers_of(sampler: str) -> tuple[str, ...]:
    """The samplers that ``sampler`` (``--sampler``) runs."""
    return SAMPLERS if sampler == "both" else (sampler,)


def stored_result(path: Path, expected: dict) -> dict | None:
    """A result this command wrote to ``path`` earlier (the benchmarks keep them to resume a sweep), or None
    when there is none; one made with other settings (``expected``: result keys and values, e.g. the checkpoint
    and the particles) is refused rather than reused as if it were this setting's."""
    if not path.exists():
        return None
    try:
        stored = json.loads(path.read_bytes())
    except ValueError as error:  # not JSON, or not UTF-8
        raise ValueError(f"{path}: not a result of entitylm marginal-ppl ({error}); delete it to measure "
                         "again") from None
    differs = [f"{key} {stored.get(key)!r} (now {value!r})" for key, value in expected.items()
               if not isinstance(stored, dict) or stored.get(key) != value]
    if differs:
        raise ValueError(f"{path}: a result with other settings: {', '.join(differs)}; delete it to measure again, "
                         "or choose another --out")
    return stored


def baseline_paths(config: MarginalConfig) -> list[Path]:
    """The baseline checkpoints of ``config``: its own, or the bundled ones beside the bundled model."""
    if config.baselines is None:
        return [pretrained(name) for name in DEFAULT_BASELINES] if config.checkpoint is None else []
    return [Path(path) for path in config.baselines]


def baseline_log_likelihood(checkpoint: Checkpoint, documents: list[Document], batches: list[DocumentBatch],
                            device: torch.device, document_cache: float = 0.0) -> float:
    """Total log-likelihood of the documents under an RNNLM or n-gram baseline, its word distribution mixed with
    the cache of each document's words so far at weight ``document_cache`` (0: none)."""
    if checkpoint.kind == "ngram":
        ngram = ngram_model(checkpoint)
        streams = [token_stream(d, checkpoint.vocabulary).words for d in documents]
        return float(sum(with_cache(torch.as_tensor(ngram.log_prob(words))[None], torch.tensor([words]),
                                    document_cache).sum() for words in streams))
    if checkpoint.kind == "rnnlm":  # under torchrun, each rank its share of the batches
        model, run = language_model(checkpoint, device), ranks()
        with torch.no_grad():
            mine = [model.log_likelihood(batch, document_cache).sum() for batch in run.shard(batches)]
            return float(run.total(torch.stack(mine).sum() if mine else torch.zeros((), device=device)))
    raise CheckpointError(f"a baseline must be an rnnlm or ngram checkpoint, not {checkpoint.kind}")


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


def load_modules_and_batches(config: MarginalConfig, checkpoint: Checkpoint, device: torch.device,
                             max_documents: int | None = None
                             ) -> tuple[EntityNLM, EntityProposal, list[Document], list[DocumentBatch]]:
    """The checkpoint's model and proposal (at the config's proposal temperature), the corpus split after its
    preprocessing (its first ``max_documents``; what the reader and preprocessing dropped is reported on stderr),
    and those in batches of about ``batch_tokens`` particles x tokens, on the device."""
    model, proposal = entitynlm_modules(checkpoint, device, config.proposal)
    model.config = replace(model.config, document_cache=config.document_cache)  # an evaluation's choice
    proposal.temperature = config.proposal_temperature
    documents = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                                   checkpoint.vocabulary)[:max_documents]
    return model, proposal, documents, particle_batches(documents, checkpoint.vocabulary, config.particles,
                                                        config.batch_tokens, device)


def proposal_hints(config: MarginalConfig, pipeline: CorefPipeline | None, checkpoint: Checkpoint,
                   documents: Sequence[Document], batches: Sequence[DocumentBatch]) -> list[CorefHints | None] | None:
    """``pipeline``'s hints for each batch (None without a pipeline: the proposal alone)."""
    if pipeline is None:
        return None
    settings = config.hints()
    hints = corpus_hints(settings, pipeline, config.corpus, config.split, config.data_dir, documents,
                         checkpoint.preprocess)
    by_key = {(document.id, document.part): document for document in documents}
    return [batch_hints(settings, batch, hints, by_key) for batch in batches]


def particle_batches(documents: Sequence[Document], vocabulary: Vocabulary, particles: int, batch_tokens: int,
                     device: torch.device | str) -> list[DocumentBatch]:
    """``documents`` in batches of similar length holding about ``batch_tokens`` particles x padded tokens each,
    on the device: how this command groups a corpus (sampling draws per batch, so the grouping is part of what a
    seed reproduces)."""
    return [b.to(device) for b in batches_by_length(documents, vocabulary, max(1, batch_tokens // particles))]


def marginal_perplexity(config: MarginalConfig) -> dict:
    """EntityNLM's marginal perplexity of a corpus split by the config's sampler(s), beside its baselines': the
    result ``python -m inference.marginal_ppl`` prints and writes as JSON (totals, each document's statistics,
    the setting). Seeded by ``config.seed``, so a run is reproducible."""
    set_seed(config.seed)
    device = resolve_device(config.device)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    baselines = [(p, Checkpoint.load(p)) for p in baseline_paths(config)]
    for baseline_path, baseline in baselines:
        checkpoint.require_vocabulary(baseline.vocabulary, f"baseline {baseline_path}")
    pipeline = config.hints().pipeline() if config.hints().used else None
    model, proposal, documents, batches = load_modules_and_batches(config, checkpoint, device)
    samplers = samplers_of(config.sampler)
    hints = proposal_hints(config, pipeline, checkpoint, documents, batches)
    runs = run_samplers(batches, model, proposal, config.particles, samplers, checkpoint.vocabulary.index(EOS),
                        config.seed, hints=hints, resample=config.resample, lookahead=config.lookahead)
    first = runs[samplers[0]]
    tokens = sum(key["tokens"] for key in first.keys)
    result = {
        "corpus": config.corpus, "split": config.split, "checkpoint": str(path), "device": str(device),
        "documents": len(first.keys), "tokens": tokens, "particles": config.particles,
        "proposal": proposal.context, "proposal_temperature": config.proposal_temperature, "sampler": config.sampler,
        "resample": config.resample, "hint_weight": config.hint_weight, "hint_temperature": config.hint_temperature,
        "lookahead": config.lookahead, "document_cache": config.document_cache,
        "samplers": {name: sampler_run.totals(tokens) for name, sampler_run in runs.items()},
        "baselines": {}, "seconds": sum(sampler_run.seconds for sampler_run in runs.values()),
        "threads": torch.get_num_threads(),  # what the seconds were measured on (the numbers do not depend on it)
    }
    if config.sampler == "both":
        result["per_document"] = [{**key, **{name: runs[name].statistics[i] for name in samplers}}
                                  for i, key in enumerate(first.keys)]
    else:  # the flat keys of a single sampler's run
        totals = result["samplers"][config.sampler]
        result.update({"log_likelihood": totals["log_likelihood"], "perplexity": totals["perplexity"],
                       "elbo_perplexity": totals.get("elbo_perplexity"),
                       "ess": [row["ess"] for row in first.statistics],
                       "psis_khat": [row["psis_khat"] for row in first.statistics], "per_document": first.rows})
    for baseline_path, baseline in baselines:
        name = baseline.kind
        if name in result["baselines"]:  # a second baseline of one kind is named by its file's folder
            name = f"{baseline.kind}:{baseline_path.parent.name}"
        total = baseline_log_likelihood(baseline, documents, batches, device, config.document_cache)
        result["baselines"][name] = math.exp(-total / tokens)
    return result


def random_state() -> dict:
    """Python's, numpy's and torch's random states (CUDA's too where there is CUDA): what the API keeps for its
    caller around a seeded call."""
    state = pyro.util.get_rng_state()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict) -> None:
    pyro.util.set_rng_state(state)
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


def run_samplers(batches: list[DocumentBatch], model: EntityNLM, proposal: EntityProposal, particles: int,
                 samplers: Sequence[str], eos: int, seed: int, progress: bool = True,
                 hints: Sequence[CorefHints | None] | None = None, resample: str = "sentence",
                 lookahead: float = 0.0) -> dict[str, SamplerRun]:
    """Each sampler over every batch, batch ``n`` from seed :func:`batch_seed` ``(seed, n)``: a sampler's figures
    do not depend on which other samplers ran before it, and under torchrun each rank samples every
    ``world``-th batch and all get every batch's figures in order (the same as one process's). ``hints``: each
    batch's pipeline hints for the proposal; ``resample``: SMC's resampling points (``sentence`` or ``token``);
    ``lookahead``: the share of the model's own choice given the word in the proposal."""
    run = ranks()
    runs = {}
    for sampler in samplers:
        done = []
        for number in progress_bar(run.shard(range(len(batches))), desc=f"{SAMPLER_NAMES[sampler]}, {particles} "
                                   "particles", unit="batch", enabled=progress and run.leader):
            set_seed(batch_seed(seed, number))
            batch = batches[number]
            statistics, seconds = sample_documents(batch, model, proposal, particles, sampler, eos,
                                                   progress and run.leader, None if hints is None else hints[number],
                                                   resample, lookahead)
            done.append((document_keys(batch), statistics, seconds))
        done = run.gather(done)
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


def sample_documents(batch: DocumentBatch, model: EntityNLM, proposal: EntityProposal, particles: int,
                     sampler: str, eos: int, progress: bool = False, hints: CorefHints | None = None,
                     resample: str = "sentence", lookahead: float = 0.0) -> tuple[list[dict], float]:
    """log p_hat(x) of each document of ``batch`` by one sampler with its diagnostics, and the seconds the
    sampling took (the diagnostics, which cost both samplers alike, are not counted); ``progress`` shows the
    token steps of a long batch on a terminal; ``hints``, ``resample`` and ``lookahead`` as :func:`run_samplers`."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    started = time.perf_counter()
    if sampler == "is":  # estimate_marginal's draws and weights, by the lockstep loop (memory flat in T)
        estimate = importance_sampling(model, proposal, batch, particles, eos, progress, hints, lookahead)
        log_marginal = estimate.log_marginal.tolist()  # waits for the device, so the clock stops after the work
        return importance_statistics(estimate, log_marginal), time.perf_counter() - started
    sampled = sample_structures(model, proposal, batch, particles, eos, resample, history=False, progress=progress,
                                hints=hints, lookahead=lookahead)
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


# Each sampler's table columns: (header, statistic, width, format). ESS is that of the final weights.
COLUMNS = {
    "is": (("log p_hat(x)", "log_likelihood", 13, ".2f"), ("ESS", "ess", 7, ".1f"), ("k-hat", "psis_khat", 8, ".2f")),
    "smc": (("log p_hat(x)", "log_likelihood", 13, ".2f"), ("ESS", "ess", 7, ".1f"), ("ESS</s>", "stage_ess", 8, ".1f"),
            ("resampl.", "resamplings", 8, "d"), ("k-hat", "psis_khat", 8, ".2f")),
}
LEGEND = {
    "is": "IS:  importance sampling (eq. 11). ESS: of its weights, of N. k-hat: their PSIS Pareto k (> 0.7: "
          "unreliable).",
    "smc": "SMC: resampling at sentence ends. ESS: of its final weights. ESS</s>: its mean ESS at sentence ends, "
           "before\n     resampling there. resampl.: resamplings. k-hat: PSIS Pareto k of the final stage's weights "
           "(since the last\n     resampling).",
    "n/a": "n/a: a k-hat ArviZ could not fit (fewer than 5 tail weights; always at N <= 20).",
}


def cells(statistics: dict, sampler: str) -> str:
    """One document's statistics by one sampler, in that sampler's columns (n/a for a missing value)."""
    return " ".join(f"{'n/a' if statistics[key] is None else format(statistics[key], spec):>{width}}"
                    for _, key, width, spec in COLUMNS[sampler])


def headers(sampler: str) -> str:
    return " ".join(f"{header:>{width}}" for header, _, width, _ in COLUMNS[sampler])


def document_table(result: dict) -> list[str]:
    """The per-document table: one sampler's columns, or with ``both`` IS's and SMC's side by side."""
    if result["sampler"] != "both":
        sampler = result["sampler"]
        lines = [f"{'document':<40} {'tokens':>7} {headers(sampler)}"]
        lines += [f"{row['document'][:40]:<40} {row['tokens']:>7} {cells(row, sampler)}"
                  for row in result["per_document"]]
        return lines
    widths = {sampler: len(headers(sampler)) for sampler in SAMPLERS}
    lines = [f"{'':<30} {'':>7} {'importance sampling (IS)':^{widths['is']}} | "
             f"{'SMC, resampling at sentence ends':^{widths['smc']}}".rstrip(),
             f"{'document':<30} {'tokens':>7} {headers('is')} | {headers('smc')}"]
    lines += [f"{row['document'][:30]:<30} {row['tokens']:>7} {cells(row['is'], 'is')} | {cells(row['smc'], 'smc')}"
              for row in result["per_document"]]
    return lines


def legend(result: dict) -> list[str]:
    """What the columns mean, under a table with SMC in it (the IS-only table is the paper's), and what n/a is."""
    samplers = samplers_of(result["sampler"])
    rows = result["per_document"]
    statistics = [row[sampler] for row in rows for sampler in samplers] if result["sampler"] == "both" else rows
    notes = [LEGEND[sampler] for sampler in samplers] if "smc" in samplers else []
    if any(row["psis_khat"] is None for row in statistics):
        notes.append(LEGEND["n/a"])
    return ["", *notes] if notes else []


def format_result(result: dict) -> str:
    """The result as the command prints it: the per-document table, its legend, and the perplexities."""
    lines = document_table(result) + legend(result)
    samplers = samplers_of(result["sampler"])
    seconds = ", ".join(f"{result['samplers'][sampler]['seconds']:.1f} s"
                        + (f" ({sampler.upper()})" if len(samplers) > 1 else "") for sampler in samplers)
    lines.append(
        f"\n{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens, "
        f"{result['particles']} particles, {seconds}"
        + (f", every model with the document cache at lambda {result['document_cache']:g}"
           if result.get("document_cache") else "")
    )
    for sampler in samplers:
        label = f"EntityNLM perplexity ({SAMPLER_NAMES[sampler]}): "
        lines.append(f"{label:<43}{result['samplers'][sampler]['perplexity']:.2f}")
    if "is" in samplers:
        lines.append(f"{'EntityNLM ELBO perplexity (bound):':<43}{result['samplers']['is']['elbo_perplexity']:.2f}")
    for name, perplexity in result["baselines"].items():
        lines.append(f"{name + ' perplexity:':<43}{perplexity:.2f}")
    return "\n".join(lines)


# ---- convergence: the estimate at several particle counts and seeds ---------------------------------------------


def convergence(config: MarginalConfig, particles: Sequence[int], seeds: Sequence[int]) -> dict:
    """Whether the estimate has settled: :func:`marginal_perplexity` of ``config`` at every particle count of
    ``particles`` with every seed of ``seeds`` (the baselines, which need no sampling, once).

    log p_hat(x) is biased low by about half its variance, so an estimate that still falls as N grows has not
    settled, and the spread over seeds says how much one run can be trusted. One row per sampler and N: the
    perplexity by seed, their mean and spread (max - min), the change of the mean from the previous N, the
    median whole-document ESS over seeds and documents, and the seconds spent sampling; ``runs`` keeps every
    run's own result."""
    particles, seeds = sorted(set(particles)), list(dict.fromkeys(seeds))
    runs = [marginal_perplexity(replace(config, particles=count, seed=seed,
                                        baselines=config.baselines if not number else ()))
            for number, (count, seed) in enumerate((count, seed) for count in particles for seed in seeds)]
    first = runs[0]
    rows = []
    for sampler in samplers_of(config.sampler):
        previous = None
        for count in particles:
            ofs = [run for run in runs if run["particles"] == count]
            by_seed = [run["samplers"][sampler]["perplexity"] for run in ofs]
            ess = [document[sampler]["ess"] if config.sampler == "both" else document["ess"]
                   for run in ofs for document in run["per_document"]]
            mean = sum(by_seed) / len(by_seed)
            rows.append({"sampler": sampler, "particles": count, "perplexity_by_seed": by_seed,
                         "mean_perplexity": mean, "spread": max(by_seed) - min(by_seed),
                         "change_from_previous": None if previous is None else mean / previous - 1,
                         "median_ess": median(ess),
                         "seconds": sum(run["samplers"][sampler]["seconds"] for run in ofs)})
            previous = mean
    return {"convergence": True, "corpus": config.corpus, "split": config.split, "checkpoint": first["checkpoint"],
            "documents": first["documents"], "tokens": first["tokens"], "sampler": config.sampler,
            "particles": particles, "seeds": seeds, "rows": rows, "baselines": first["baselines"],
            "document_cache": config.document_cache, "runs": runs}


def format_convergence(result: dict) -> str:
    """The convergence table as the command prints it: per sampler and N, the perplexity by seed, mean, spread,
    change from the previous N and median ESS; then the baselines and EntityNLM / baseline at the largest N."""
    seeds = ", ".join(map(str, result["seeds"]))
    cache = result.get("document_cache")
    lines = [f"{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens; "
             f"seeds {seeds}" + (f"; every model with the document cache at lambda {cache:g}" if cache else ""),
             f"{'sampler':<8} {'particles':>9} {'perplexity by seed':<26} {'mean':>8} {'spread':>7} {'change':>7} "
             f"{'median ESS':>10} {'seconds':>8}"]
    for row in result["rows"]:
        change = "" if row["change_from_previous"] is None else f"{100 * row['change_from_previous']:+.2f}%"
        by_seed = " ".join(f"{value:.2f}" for value in row["perplexity_by_seed"])
        lines.append(f"{row['sampler'].upper():<8} {row['particles']:>9} {by_seed[:26]:<26} "
                     f"{row['mean_perplexity']:>8.2f} {row['spread']:>7.2f} {change:>7} {row['median_ess']:>10.1f} "
                     f"{row['seconds']:>8.1f}")
    largest = [row for row in result["rows"] if row["particles"] == max(result["particles"])]
    for name, perplexity in result["baselines"].items():
        ratios = ", ".join(f"{row['mean_perplexity'] / perplexity:.3f} ({row['sampler'].upper()})" for row in largest)
        lines.append(f"{name} perplexity: {perplexity:.2f}; EntityNLM / {name} at {max(result['particles'])} "
                     f"particles: {ratios}")
    return "\n".join(lines)
