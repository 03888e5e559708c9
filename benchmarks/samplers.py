"""Which estimator of log p(x) has the lower variance at equal compute: importance sampling or SMC, and which SMC?

Each document of a corpus split is estimated by each of ``--variants`` with the same proposal and the same N
particles, R times each (seeds ``--seed`` to ``--seed + R - 1``), through ``inference.evaluation.marginal_ppl``'s own
code. The variants (:data:`VARIANTS`): ``is``, importance sampling (the paper's eq. 11); ``smc``, resampling at
sentence ends when the ESS falls below half (:mod:`inference.algorithms.smc`); ``smc-token``, after any token;
``smc-token-hints``, that with the proposal mixed with the coreference pipeline's reading (``--hint-weight``,
``--hint-temperature``; :mod:`generative.entitynlm.hints`); ``smc-token-hints-lookahead``, that also mixed with
the model's own choice of R, E and L given the word (``--lookahead``; :mod:`generative.entitynlm.lookahead`). Per
variant it reports:

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
        [--particles 100] [--seeds 5] [--max-documents 10] [--variants is smc smc-token] [--out benchmarks/results]

Prints a markdown table and writes ``samplers.json`` and ``samplers.md`` to ``--out``. The variants alternate
their order from seed to seed, so first-call costs fall on all; timings on shared machines vary by 20-40%
between runs, which is why all variants are timed in the same run.
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
from inference.algorithms.config import ProposalConfig, SamplingConfig
from inference.algorithms.hints import hint_pipeline
from inference.algorithms.likelihood import SamplerRun, run_samplers
from inference.checks import integer, output_folder, real
from inference.commands.cli import USER_ERRORS, Parser, run_main
from inference.evaluation import marginal_ppl
from inference.runtime import resolve_device
from inference.training.checkpoint import entitynlm_checkpoint

VARIANTS = {  # name -> (sampler, resampling points, with the pipeline's hints, with the lookahead)
    "is": ("is", "sentence", False, False), "smc": ("smc", "sentence", False, False),
    "smc-token": ("smc", "token", False, False), "smc-token-hints": ("smc", "token", True, False),
    "smc-token-hints-lookahead": ("smc", "token", True, True),
}
NAMES = {"is": "IS", "smc": "SMC", "smc-token": "SMC token", "smc-token-hints": "SMC token + hints",
         "smc-token-hints-lookahead": "SMC token + hints + lookahead"}


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
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["is", "smc"],
                        help="the estimators to compare (at least two)")
    parser.add_argument("--hint-weight", type=real(0, 1), default=0.5,
                        help="smc-token-hints: the proposal's mixture weight on the pipeline's hints")
    parser.add_argument("--hint-temperature", type=real(0, include_low=False), default=1.0,
                        help="smc-token-hints: the pipeline ranker's softmax temperature")
    parser.add_argument("--lookahead", type=real(0, 1), default=0.8,
                        help="smc-token-hints-lookahead: the share of the model's choice given the word")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results",
                        help="folder of samplers.json and samplers.md")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.variants = list(dict.fromkeys(args.variants))
    if len(args.variants) < 2:
        parser.error("--variants: name at least two estimators to compare")
    return args


def run_seeds(args: argparse.Namespace) -> tuple[dict, dict[str, list[SamplerRun]]]:
    """Every variant on every document, once per seed: the setting, and each variant's runs (one per seed)."""
    device = resolve_device(args.device)
    path, checkpoint = entitynlm_checkpoint(args.checkpoint)
    config = marginal_ppl.MarginalConfig.of(  # the modules and the hints each variant shares
        "paper", checkpoint=args.checkpoint, corpus=args.corpus, split=args.split, data_dir=args.data_dir,
        device=args.device, particles=args.particles, batch_tokens=args.batch_tokens, context=args.proposal,
        temperature=args.proposal_temperature, hint_weight=args.hint_weight, hint_temperature=args.hint_temperature)
    hinted = any(VARIANTS[name][2] for name in args.variants)
    pipeline = hint_pipeline(config.settings.proposal) if hinted else None
    model, proposal, documents, batches = marginal_ppl.load_modules_and_batches(config, checkpoint, device,
                                                                                args.max_documents)
    hints = marginal_ppl.proposal_hints(config, pipeline, checkpoint, documents, batches)
    eos = checkpoint.vocabulary.index(EOS)
    runs: dict[str, list[SamplerRun]] = {name: [] for name in args.variants}
    for seed in range(args.seed, args.seed + args.seeds):
        order = args.variants if seed % 2 == 0 else args.variants[::-1]
        for name in order:  # each variant draws from the seed's (per batch), whatever ran before it
            sampler, resample, with_hints, with_lookahead = VARIANTS[name]
            sampling = SamplingConfig(sampler, args.particles, resample if sampler == "smc" else "sentence",
                                      seed=seed, batch_tokens=args.batch_tokens)
            options = ProposalConfig(hint_weight=args.hint_weight, hint_temperature=args.hint_temperature,
                                     lookahead=args.lookahead if with_lookahead else 0.0)
            run = run_samplers(batches, model, proposal, (sampler,), eos, sampling, options,
                               hints if with_hints else None)
            runs[name].append(run[sampler])
        print(f"seed {seed}: " + ", ".join(f"{name} {runs[name][-1].seconds:.1f} s" for name in args.variants),
              file=sys.stderr)
    keys = runs[args.variants[0]][0].keys
    setting = {"checkpoint": str(path), "corpus": args.corpus, "split": args.split, "device": str(device),
               "machine": platform.platform(), "torch_threads": torch.get_num_threads(),
               "particles": args.particles, "seeds": list(range(args.seed, args.seed + args.seeds)),
               "proposal_temperature": args.proposal_temperature, "documents": len(keys),
               "tokens": sum(key["tokens"] for key in keys), "variants": args.variants}
    if hinted:
        setting.update(hint_weight=args.hint_weight, hint_temperature=args.hint_temperature)
    if any(VARIANTS[name][3] for name in args.variants):
        setting.update(lookahead=args.lookahead)
    return setting, runs


def khat_summary(khats: list[float | None]) -> dict:
    """Median and share above 0.7 of the k-hats ArviZ could fit, and how many it could not (None)."""
    fitted = [k for k in khats if k is not None]
    return {"median": float(np.median(fitted)) if fitted else None,
            "share_above_0.7": sum(k > 0.7 for k in fitted) / len(fitted) if fitted else None,
            "not_fitted": len(khats) - len(fitted)}


def sampler_summary(runs: list[SamplerRun], tokens: int) -> dict:
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
    """Which variant has the lower variance at equal particles, and at equal seconds (variance x seconds), and
    the higher mean log p_hat(x); with IS and SMC both run, their sd and seconds ratios."""
    def lower(measure: str) -> str:
        return min(summaries, key=lambda variant: summaries[variant][measure])

    decision = {"lower_variance_at_equal_particles": lower("mean_sd_log_p"),
                "lower_variance_x_seconds": lower("variance_x_seconds_per_run"),
                "higher_mean_log_p": max(summaries, key=lambda variant: summaries[variant]["mean_log_p"])}
    if {"is", "smc"} <= set(summaries):
        decision.update(sd_ratio_is_over_smc=summaries["is"]["mean_sd_log_p"] / summaries["smc"]["mean_sd_log_p"],
                        seconds_ratio_smc_over_is=summaries["smc"]["seconds"] / summaries["is"]["seconds"])
    return decision


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
    variants = list(summaries)
    lines = ["| measure | " + " | ".join(NAMES[v] for v in variants) + " |", "|---|" + "---:|" * len(variants)]
    lines += [f"| {name} | " + " | ".join(number(summaries[v].get(key), spec) for v in variants) + " |"
              for name, key, spec in rows]
    khats = {v: summaries[v]["psis_khat"] for v in variants}
    lines.append("| PSIS k-hat median / share > 0.7 / not fitted (SMC: final stage) | "
                 + " | ".join(f"{number(k['median'], '.2f')} / {number(k['share_above_0.7'], '.0%')} / "
                              f"{k['not_fitted']}" for k in khats.values()) + " |")
    header = (f"{setting['corpus']}/{setting['split']}: {setting['documents']} documents, {setting['tokens']:,} "
              f"tokens, N = {setting['particles']} particles, R = {len(setting['seeds'])} seeds, "
              f"{setting['device']} (torch threads: {setting['torch_threads']}), checkpoint {setting['checkpoint']}")
    if "hint_weight" in setting:
        header += f"; hints: weight {setting['hint_weight']}, temperature {setting['hint_temperature']}"
    if "lookahead" in setting:
        header += f"; lookahead {setting['lookahead']}"
    sds = ", ".join(f"{NAMES[v]} {summaries[v]['mean_sd_log_p']:.3f}" for v in variants)
    costs = ", ".join(f"{NAMES[v]} {summaries[v]['variance_x_seconds_per_run']:.3g}" for v in variants)
    footer = [
        f"Lower variance at equal particles: **{NAMES[decision['lower_variance_at_equal_particles']]}** (sd of "
        f"log p_hat(x): {sds} nats).",
        f"Lower variance at equal seconds (variance x seconds): **{NAMES[decision['lower_variance_x_seconds']]}** "
        f"({costs}).",
        f"Higher mean log p_hat(x): **{NAMES[decision['higher_mean_log_p']]}**.",
    ]
    if decision["higher_mean_log_p"] != decision["lower_variance_at_equal_particles"]:
        footer.append("The spread and the mean disagree: an estimator whose log p_hat(x) is both steadier and lower "
                      "is steadily missing the rare large weights (ESS near 1), so its spread understates its error.")
    return "\n".join([header, "", *lines, "", *footer])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def run(args: argparse.Namespace) -> int:
    """Every variant over every seed; the table, samplers.json and samplers.md."""
    setting, runs = run_seeds(args)
    summaries = {variant: sampler_summary(runs[variant], setting["tokens"]) for variant in args.variants}
    decision = verdict(summaries)
    result = {**command_record(build_parser(), args), **setting,
              "document_keys": runs[args.variants[0]][0].keys, "samplers": summaries, "verdict": decision}
    text = markdown(setting, summaries, decision)
    print(text)
    out = Path(args.out)
    write_text_atomic(out / "samplers.json", json.dumps(result, indent=2, allow_nan=False) + "\n")
    write_text_atomic(out / "samplers.md", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
