"""Which estimator of log p(x) has the lower variance at equal compute: importance sampling or SMC?

Each document of a corpus split is estimated by importance sampling (the paper's eq. 11) and by SMC (resampling
at sentence ends when the ESS falls below half; :mod:`inference.algorithms.smc`) with the same proposal and the same N
particles, R times each (seeds ``--seed`` to ``--seed + R - 1``), through ``inference.evaluation.marginal_ppl``'s own
code. Per sampler it reports:

- the across-seed standard deviation of each document's log p_hat(x), averaged over documents (the headline);
- the mean log p_hat(x) per document: both samplers estimate p(x) without bias, so log p_hat(x) is biased low
  by about half its variance, and at equal compute the higher mean is the better estimator;
- the perplexity (of each seed's total, averaged over seeds) and the perplexity of the seeds pooled (each
  document's R estimates of p(x) averaged: an estimate with N x R particles);
- the seconds spent sampling (all seeds; diagnostics not counted) and the mean variance x seconds per run:
  variance falls as 1 / compute, so that product is the cost of a given precision;
- the ESS of the final weights, SMC's mean ESS at sentence ends and its resamplings, and the PSIS k-hat
  (for SMC, of the final stage's weights).

    python benchmarks/samplers.py --corpus litbank --split dev --data-dir DATA [--checkpoint CKPT] \\
        [--particles 100] [--seeds 5] [--max-documents 10] [--out benchmarks/results]

Prints a markdown table and writes ``samplers.json`` and ``samplers.md`` to ``--out``. The samplers alternate
which goes first from seed to seed, so first-call costs fall on both; timings on shared machines vary by 20-40%
between runs, which is why both samplers are timed in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.corpora.preprocess import EOS
from coref.io.atomic import write_text_atomic
from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.checks import integer, output_folder, real
from inference.commands.cli import USER_ERRORS, Parser, config_of, run_main
from inference.evaluation import marginal_ppl
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import entitynlm_checkpoint

SAMPLERS = marginal_ppl.SAMPLERS


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/samplers.py", description=__doc__)
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--corpus", default="litbank", help="corpus name, or several joined with '+'")
    parser.add_argument("--split", default="dev", help="the split to estimate")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--particles", type=integer(1), default=100, help="N, the same for both samplers")
    parser.add_argument("--seeds", type=integer(2), default=5,
                        help="R, runs of each sampler on each document (the benchmark measures their spread)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--max-documents", type=integer(1), help="only the split's first documents (default: all)")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS, help="default: the checkpoint's")
    parser.add_argument("--proposal-temperature", type=real(0, include_low=False), default=1.0,
                        help="divide the proposal's R/E/L logits by this")
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000, help="particles x padded tokens per batch")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results",
                        help="folder of samplers.json and samplers.md")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def run_seeds(args: argparse.Namespace) -> tuple[dict, dict[str, list[marginal_ppl.SamplerRun]]]:
    """Both samplers on every document, once per seed: the setting, and each sampler's runs (one per seed)."""
    device = resolve_device(args.device)
    path, checkpoint = entitynlm_checkpoint(args.checkpoint)
    config = config_of(marginal_ppl.MarginalConfig, args)
    model, proposal, documents, batches = marginal_ppl.load_modules_and_batches(config, checkpoint, device,
                                                                                args.max_documents)
    eos = checkpoint.vocabulary.index(EOS)
    runs: dict[str, list[marginal_ppl.SamplerRun]] = {sampler: [] for sampler in SAMPLERS}
    for seed in range(args.seed, args.seed + args.seeds):
        set_seed(seed)
        order = SAMPLERS if seed % 2 == 0 else SAMPLERS[::-1]  # each sampler's state is the seed's, either way
        for sampler, sampler_run in marginal_ppl.run_samplers(batches, model, proposal, args.particles, order,
                                                              eos).items():
            runs[sampler].append(sampler_run)
        print(f"seed {seed}: " + ", ".join(f"{s} {runs[s][-1].seconds:.1f} s" for s in SAMPLERS), file=sys.stderr)
    keys = runs[SAMPLERS[0]][0].keys
    setting = {"checkpoint": str(path), "corpus": args.corpus, "split": args.split, "device": str(device),
               "machine": platform.platform(), "torch_threads": torch.get_num_threads(),
               "particles": args.particles, "seeds": list(range(args.seed, args.seed + args.seeds)),
               "proposal_temperature": args.proposal_temperature, "documents": len(keys),
               "tokens": sum(key["tokens"] for key in keys)}
    return setting, runs


def khat_summary(khats: list[float | None]) -> dict:
    """Median and share above 0.7 of the k-hats ArviZ could fit, and how many it could not (None)."""
    fitted = [k for k in khats if k is not None]
    return {"median": float(np.median(fitted)) if fitted else None,
            "share_above_0.7": sum(k > 0.7 for k in fitted) / len(fitted) if fitted else None,
            "not_fitted": len(khats) - len(fitted)}


def sampler_summary(runs: list[marginal_ppl.SamplerRun], tokens: int) -> dict:
    """One sampler's figures over its R runs (seeds) of D documents."""
    log_p = np.array([[row["log_likelihood"] for row in run.statistics] for run in runs])  # (R, D)
    sd = log_p.std(axis=0, ddof=1)
    seconds = sum(run.seconds for run in runs)
    statistics = [row for run in runs for row in run.statistics]
    summary = {
        "mean_sd_log_p": float(sd.mean()),
        "mean_variance_log_p": float((sd**2).mean()),
        "mean_log_p": float(log_p.mean()),
        "perplexity": math.exp(-log_p.sum(axis=1).mean() / tokens),
        "pooled_perplexity": math.exp(-(np.logaddexp.reduce(log_p, axis=0) - math.log(len(runs))).sum() / tokens),
        "seconds": seconds,
        "variance_x_seconds_per_run": float((sd**2).mean()) * seconds / len(runs),
        "mean_ess": float(np.mean([row["ess"] for row in statistics])),
        "psis_khat": khat_summary([row["psis_khat"] for row in statistics]),
        "per_document": {"sd_log_p": sd.tolist(), "log_p": log_p.T.tolist()},
    }
    if "stage_ess" in statistics[0]:
        summary["mean_stage_ess"] = float(np.mean([row["stage_ess"] for row in statistics]))
        summary["mean_resamplings"] = float(np.mean([row["resamplings"] for row in statistics]))
    return summary


def verdict(summaries: dict[str, dict]) -> dict:
    """Which sampler has the lower variance at equal particles, and at equal seconds (variance x seconds)."""
    def lower(measure: str) -> str:
        return min(summaries, key=lambda sampler: summaries[sampler][measure])

    return {"lower_variance_at_equal_particles": lower("mean_sd_log_p"),
            "lower_variance_x_seconds": lower("variance_x_seconds_per_run"),
            "higher_mean_log_p": max(summaries, key=lambda sampler: summaries[sampler]["mean_log_p"]),
            "sd_ratio_is_over_smc": summaries["is"]["mean_sd_log_p"] / summaries["smc"]["mean_sd_log_p"],
            "seconds_ratio_smc_over_is": summaries["smc"]["seconds"] / summaries["is"]["seconds"]}


def number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def markdown(setting: dict, summaries: dict[str, dict], decision: dict) -> str:
    """The results table, the setting above it and the verdict below it."""
    rows = [
        ("sd of log p_hat(x) across seeds, mean over documents (nats)", "mean_sd_log_p", ".3f"),
        ("mean log p_hat(x) per document (higher is better)", "mean_log_p", ".2f"),
        ("perplexity (mean over seeds of each seed's total)", "perplexity", ".2f"),
        ("perplexity, seeds pooled (N x R particles)", "pooled_perplexity", ".2f"),
        ("seconds sampling, all seeds", "seconds", ".1f"),
        ("variance x seconds per run (lower is better)", "variance_x_seconds_per_run", ".3g"),
        ("ESS of the final weights, mean (of N)", "mean_ess", ".1f"),
        ("ESS at sentence ends, mean (SMC)", "mean_stage_ess", ".1f"),
        ("resamplings per document (SMC)", "mean_resamplings", ".1f"),
    ]
    lines = ["| measure | IS | SMC |", "|---|---:|---:|"]
    lines += [f"| {name} | {number(summaries['is'].get(key), spec)} | {number(summaries['smc'].get(key), spec)} |"
              for name, key, spec in rows]
    khats = {s: summaries[s]["psis_khat"] for s in SAMPLERS}
    lines.append("| PSIS k-hat median / share > 0.7 / not fitted (SMC: final stage) | "
                 + " | ".join(f"{number(k['median'], '.2f')} / {number(k['share_above_0.7'], '.0%')} / "
                              f"{k['not_fitted']}" for k in khats.values()) + " |")
    header = (f"{setting['corpus']}/{setting['split']}: {setting['documents']} documents, {setting['tokens']:,} "
              f"tokens, N = {setting['particles']} particles, R = {len(setting['seeds'])} seeds, "
              f"{setting['device']} (torch threads: {setting['torch_threads']}), checkpoint {setting['checkpoint']}")
    name = {"is": "IS", "smc": "SMC"}
    equal_particles = decision["lower_variance_at_equal_particles"]
    equal_seconds = decision["lower_variance_x_seconds"]
    footer = [
        f"Lower variance at equal particles: **{name[equal_particles]}** (sd of log p_hat(x): IS "
        f"{summaries['is']['mean_sd_log_p']:.3f}, SMC {summaries['smc']['mean_sd_log_p']:.3f} nats; "
        f"IS / SMC = {decision['sd_ratio_is_over_smc']:.2f}).",
        f"Lower variance at equal seconds (variance x seconds): **{name[equal_seconds]}** "
        f"(SMC took {decision['seconds_ratio_smc_over_is']:.2f}x IS's seconds).",
        f"Higher mean log p_hat(x): **{name[decision['higher_mean_log_p']]}**.",
    ]
    if decision["higher_mean_log_p"] != equal_particles:
        footer.append("The spread and the mean disagree: a sampler whose log p_hat(x) is both steadier and lower is "
                      "steadily missing the rare large weights (ESS near 1), so its spread understates its error.")
    return "\n".join([header, "", *lines, "", *footer])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def run(args: argparse.Namespace) -> int:
    """Both samplers over every seed; the table, samplers.json and samplers.md."""
    setting, runs = run_seeds(args)
    summaries = {sampler: sampler_summary(runs[sampler], setting["tokens"]) for sampler in SAMPLERS}
    decision = verdict(summaries)
    result = {**command_record(build_parser(), args), **setting,
              "document_keys": runs[SAMPLERS[0]][0].keys, "samplers": summaries, "verdict": decision}
    text = markdown(setting, summaries, decision)
    print(text)
    out = Path(args.out)
    write_text_atomic(out / "samplers.json", json.dumps(result, indent=2, allow_nan=False) + "\n")
    write_text_atomic(out / "samplers.md", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
