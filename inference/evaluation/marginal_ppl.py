"""Marginal perplexity of EntityNLM by SMC or importance sampling (paper §5.1), beside its baselines:
:func:`marginal_perplexity` of a :class:`MarginalConfig`. Its command is :mod:`inference.commands.marginal_ppl`
(``python -m inference.marginal_ppl``).

R, E and L are latent at test time: for each document N annotations are drawn from the proposal and p(x) is
estimated from their weights. Perplexity = exp(-sum_docs log p_hat(x) / tokens), over the word tokens and
sentence ends every model predicts, beside the baselines' perplexities on the same tokens with the same
vocabulary. The sampler and its proposal come from a preset (:mod:`inference.algorithms.config`). The default,
``--preset settled``, is sequential Monte Carlo resampling after any token whose ESS has fallen below half, its
proposal Q mixed with the coreference pipeline's reading (weight 0.5, temperature 4) and the model's own choice
given the word (0.8): the estimate that moves at most 0.2% from N = 100 to 1000 on LitBank and OntoGUM test.
``--preset paper`` is the paper's importance sampling from Q alone (eq. 11: the mean importance weight; printed
per document with ESS and PSIS k-hat, and in total with the ELBO perplexity, a bound). Any option given
overrides the preset's value.

``--sampler both`` runs the two in turn, each from the same random state (so each column is what a run of
that sampler alone with the same seed gives), and reports them side by side per document: for importance
sampling log p_hat(x), ESS and PSIS k-hat; for SMC log p_hat(x), the ESS of the final weights, the mean ESS
at sentence ends (before resampling there), the number of resamplings, and the PSIS k-hat of the final
stage's weights (those since the last resampling: it diagnoses that stage only). Its JSON keeps the totals
under ``samplers`` ({"is": {...}, "smc": {...}}) and each document's statistics under ``per_document[i]["is"]``
and ``["smc"]``; the single-sampler modes keep their flat keys. A k-hat JSON cannot hold (infinite when ArviZ
has too few tail weights to fit, always at N <= 20) is written as null with a ``psis_khat_note`` saying why.

A text of one's own (``--text``, ``--file``: :attr:`MarginalConfig.text`) is measured the way the notebook API's
:meth:`~inference.api.language_model.LanguageModel.log_likelihood` measures it (tokenised by
:func:`coref.io.text.plain_document`, read with the checkpoint's preprocessing, the pipeline's hints of that
text) and reported as a corpus of one document, baselines included.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median

import torch

from coref.corpora.preprocess import EOS
from coref.document import Document
from coref.resolution.pipeline import CorefPipeline
from generative.entitynlm.hints import CorefHints
from generative.entitynlm.model import EntityNLM, EntityProposal
from generative.layers.batch import DocumentBatch, token_stream
from generative.layers.document_cache import with_cache
from inference.algorithms.config import DEFAULT_PRESET, SAMPLERS, Settings, preset, settings_for
from inference.algorithms.driver import particle_batches
from inference.algorithms.hints import batch_hints, corpus_hints, hint_pipeline
from inference.algorithms.likelihood import SAMPLER_NAMES, SamplerRun, run_samplers
from inference.api.language_model import LanguageModel
from inference.data import prepared_documents
from inference.distributed import ranks
from inference.runtime import resolve_device, set_seed
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


@dataclass(frozen=True)
class MarginalConfig:
    """What a marginal perplexity is estimated of, and how: the options of ``python -m inference.marginal_ppl``.

    ``checkpoint`` None is the bundled EntityNLM; ``baselines`` None is the bundled RNNLM beside the bundled model
    (none beside another), and an empty sequence is no baseline. ``settings``: the sampler and its proposal
    (:mod:`inference.algorithms.config`; by default the settled preset's likelihood settings, named ``preset`` in
    the record), the document cache mixed into every model's word distribution alike; ``both`` runs importance
    sampling and SMC in turn, each from the same random state. ``text``: a document of one's own (a plain text
    read by :func:`coref.io.text.plain_document`) measured instead of the corpus split."""

    checkpoint: str | None = None
    corpus: str = "sample"
    split: str = "test"
    data_dir: str | None = None
    baselines: Sequence[str] | None = None
    device: str = "auto"
    settings: Settings = settings_for("likelihood")
    preset: str = DEFAULT_PRESET
    both: bool = False
    text: Document | None = None

    @classmethod
    def of(cls, preset: str = DEFAULT_PRESET, **options: object) -> MarginalConfig:
        """The config of preset ``preset`` with ``options``: this config's own fields, and changes of the settings'
        (:meth:`~inference.algorithms.config.Settings.replace`)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        own = {name: options.pop(name) for name in list(options) if name in fields}
        return cls(settings=settings_for("likelihood", preset, **options), preset=preset, **own)

    @property
    def sampler(self) -> str:
        """``is``, ``smc`` or ``both``."""
        return "both" if self.both else self.settings.sampling.sampler


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


def load_modules_and_batches(config: MarginalConfig, checkpoint: Checkpoint, device: torch.device,
                             max_documents: int | None = None
                             ) -> tuple[EntityNLM, EntityProposal, list[Document], list[DocumentBatch]]:
    """The checkpoint's model and proposal built for the config's proposal settings (context, temperature,
    document cache), the corpus split after its preprocessing (its first ``max_documents``; what the reader and
    preprocessing dropped is reported on stderr), and those in batches of about ``batch_tokens`` particles x
    tokens, on the device."""
    model, proposal = entitynlm_modules(checkpoint, device, run=config.settings.proposal)
    documents = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                                   checkpoint.vocabulary)[:max_documents]
    sampling = config.settings.sampling
    return model, proposal, documents, particle_batches(documents, checkpoint.vocabulary, sampling.particles,
                                                        sampling.batch_tokens, device)


def proposal_hints(config: MarginalConfig, pipeline: CorefPipeline | None, checkpoint: Checkpoint,
                   documents: Sequence[Document], batches: Sequence[DocumentBatch]) -> list[CorefHints | None] | None:
    """``pipeline``'s hints for each batch (None without a pipeline: the proposal alone)."""
    if pipeline is None:
        return None
    settings = config.settings.proposal
    hints = corpus_hints(settings, pipeline, config.corpus, config.split, config.data_dir, documents,
                         checkpoint.preprocess)
    by_key = {(document.id, document.part): document for document in documents}
    return [batch_hints(settings, batch, hints, by_key) for batch in batches]


def marginal_perplexity(config: MarginalConfig) -> dict:
    """EntityNLM's marginal perplexity of a corpus split (or of ``config.text``: :func:`text_perplexity`) by the
    config's sampler(s), beside its baselines': the result ``python -m inference.marginal_ppl`` prints and writes as
    JSON (totals, each document's statistics, the setting). Seeded by the settings' seed, so a run is
    reproducible."""
    if config.text is not None:
        return text_perplexity(config)
    settings = config.settings
    set_seed(settings.sampling.seed)
    device = resolve_device(config.device)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    baselines = loaded_baselines(config, checkpoint)
    pipeline = hint_pipeline(settings.proposal) if settings.proposal.hinted else None
    model, proposal, documents, batches = load_modules_and_batches(config, checkpoint, device)
    samplers = samplers_of(config.sampler)
    hints = proposal_hints(config, pipeline, checkpoint, documents, batches)
    runs = run_samplers(batches, model, proposal, samplers, checkpoint.vocabulary.index(EOS), settings.sampling,
                        settings.proposal, hints)
    return assembled(config, path, device, proposal.context, runs, baselines, documents, batches)


def loaded_baselines(config: MarginalConfig, checkpoint: Checkpoint) -> list[tuple[Path, Checkpoint]]:
    """The config's baseline checkpoints, loaded, each checked to share the EntityNLM checkpoint's vocabulary."""
    baselines = [(p, Checkpoint.load(p)) for p in baseline_paths(config)]
    for baseline_path, baseline in baselines:
        checkpoint.require_vocabulary(baseline.vocabulary, f"baseline {baseline_path}")
    return baselines


def text_perplexity(config: MarginalConfig) -> dict:
    """:func:`marginal_perplexity` of ``config.text``, a corpus of one document: each sampler's estimate is
    :meth:`LanguageModel.log_likelihood`'s with the config's settings (the same tokens, hints and sampler as the
    notebook API), the baselines' exact log-likelihoods of the same tokens. ``corpus`` and ``split`` are None in
    the result, ``text`` the document's name."""
    settings = config.settings
    device = resolve_device(config.device)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    baselines = loaded_baselines(config, checkpoint)
    model = LanguageModel(path, checkpoint, device)
    chosen = dataclasses.replace(preset(config.preset), likelihood=settings)
    runs = {}
    for sampler in samplers_of(config.sampler):  # each from the settings' seed, as log_likelihood draws
        start = time.perf_counter()
        likelihood = model.log_likelihood(config.text, chosen, sampler=sampler)
        key = {"document": likelihood.document, "part": config.text.part, "tokens": likelihood.tokens}
        runs[sampler] = SamplerRun(sampler, [key], [likelihood.statistics], time.perf_counter() - start)
    _, documents = model.read(config.text)
    batches = particle_batches(documents, checkpoint.vocabulary, 1, settings.sampling.batch_tokens, device)
    return assembled(config, path, device, settings.proposal.context or model.proposal, runs, baselines, documents,
                     batches)


def assembled(config: MarginalConfig, path: Path, device: torch.device, proposal: str, runs: dict[str, SamplerRun],
              baselines: list[tuple[Path, Checkpoint]], documents: list[Document], batches: list[DocumentBatch]
              ) -> dict:
    """The result of ``runs`` (each sampler's) and the baselines' perplexities of the same ``documents``."""
    settings = config.settings
    samplers = samplers_of(config.sampler)
    first = runs[samplers[0]]
    tokens = sum(key["tokens"] for key in first.keys)
    text = config.text is not None
    result = {
        "corpus": None if text else config.corpus, "split": None if text else config.split,
        **({"text": config.text.id} if text else {}), "checkpoint": str(path), "device": str(device),
        "documents": len(first.keys), "tokens": tokens, "preset": config.preset,
        "particles": settings.sampling.particles, "proposal": proposal,
        "proposal_temperature": settings.proposal.temperature, "sampler": config.sampler,
        "resample": settings.sampling.resample, "ess_threshold": settings.sampling.ess_threshold,
        "hint_weight": settings.proposal.hint_weight, "hint_temperature": settings.proposal.hint_temperature,
        "lookahead": settings.proposal.lookahead, "document_cache": settings.proposal.document_cache,
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
        total = baseline_log_likelihood(baseline, documents, batches, device, settings.proposal.document_cache)
        result["baselines"][name] = math.exp(-total / tokens)
    return result


def document_count(count: int) -> str:
    return f"{count} document" + ("" if count == 1 else "s")


def source(result: dict) -> str:
    """What a result measured: its text's name, or ``corpus/split``."""
    return result.get("text") or f"{result['corpus']}/{result['split']}"


# Each sampler's table columns: (header, statistic, width, format). ESS is that of the final weights.
COLUMNS = {
    "is": (("log p_hat(x)", "log_likelihood", 13, ".2f"), ("ESS", "ess", 7, ".1f"), ("k-hat", "psis_khat", 8, ".2f")),
    "smc": (("log p_hat(x)", "log_likelihood", 13, ".2f"), ("ESS", "ess", 7, ".1f"), ("ESS</s>", "stage_ess", 8, ".1f"),
            ("resampl.", "resamplings", 8, "d"), ("k-hat", "psis_khat", 8, ".2f")),
}
LEGEND = {
    "is": "IS:  importance sampling (eq. 11). ESS: of its weights, of N. k-hat: their PSIS Pareto k (> 0.7: "
          "unreliable).",
    "smc": "SMC: resampling at {where}. ESS: of its final weights. ESS</s>: its mean ESS at sentence ends, "
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
             f"{'SMC':^{widths['smc']}}".rstrip(),
             f"{'document':<30} {'tokens':>7} {headers('is')} | {headers('smc')}"]
    lines += [f"{row['document'][:30]:<30} {row['tokens']:>7} {cells(row['is'], 'is')} | {cells(row['smc'], 'smc')}"
              for row in result["per_document"]]
    return lines


def legend(result: dict) -> list[str]:
    """What the columns mean, under a table with SMC in it (the IS-only table is the paper's), and what n/a is."""
    samplers = samplers_of(result["sampler"])
    rows = result["per_document"]
    statistics = [row[sampler] for row in rows for sampler in samplers] if result["sampler"] == "both" else rows
    where = "sentence ends" if result.get("resample") == "sentence" else "any token"
    notes = [LEGEND[sampler].format(where=where) for sampler in samplers] if "smc" in samplers else []
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
        f"\n{source(result)}: {document_count(result['documents'])}, {result['tokens']} tokens, "
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
    runs = [marginal_perplexity(replace(config, settings=config.settings.replace(particles=count, seed=seed),
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
    return {"convergence": True, "corpus": first["corpus"], "split": first["split"],
            **({"text": first["text"]} if "text" in first else {}), "checkpoint": first["checkpoint"],
            "documents": first["documents"], "tokens": first["tokens"], "sampler": config.sampler,
            "particles": particles, "seeds": seeds, "rows": rows, "baselines": first["baselines"],
            "document_cache": config.settings.proposal.document_cache, "runs": runs}


def format_convergence(result: dict) -> str:
    """The convergence table as the command prints it: per sampler and N, the perplexity by seed, mean, spread,
    change from the previous N and median ESS; then the baselines and EntityNLM / baseline at the largest N."""
    seeds = ", ".join(map(str, result["seeds"]))
    cache = result.get("document_cache")
    lines = [f"{source(result)}: {document_count(result['documents'])}, {result['tokens']} tokens; "
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
