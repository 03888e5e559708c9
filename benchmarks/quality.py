"""Language-model quality like the paper's Table 1, on LitBank and OntoGUM test.

EntityNLM's marginal perplexity by importance sampling and by SMC (N = 100 particles each, side by side, from
the same random state), the RNNLM and the 5-gram Kneser-Ney baselines, all on the same tokens with the same
vocabulary, trained on LitBank+OntoGUM train and selected on dev; with each sampler's ESS and PSIS k-hat.

    python benchmarks/quality.py --data-dir DATA --entitynlm runs/entitynlm/model.pt \\
        --rnnlm runs/rnnlm/model.pt --ngram runs/ngram/model.pt [--out benchmarks/results]

Prints a markdown table and writes ``quality.json`` and ``quality.md``; each corpus's run is kept as
``quality_CORPUS.json`` and not repeated (run ``--corpora litbank`` and ``--corpora ontogum`` in parallel, then
both to join them; delete those files to measure again).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

from coref.atomic import write_text_atomic
from inference import marginal_ppl

CORPORA = ("litbank", "ontogum")


def evaluate(corpus: str, args: argparse.Namespace) -> dict:
    argv = ["--checkpoint", args.entitynlm, "--corpus", corpus, "--split", "test", "--data-dir", args.data_dir,
            "--particles", str(args.particles), "--sampler", "both", "--baseline", args.rnnlm,
            "--baseline", args.ngram, "--device", args.device, "--seed", str(args.seed),
            "--batch-tokens", str(args.batch_tokens)]
    if args.proposal:
        argv += ["--proposal", args.proposal]
    for extra in args.rnnlm_extra or ():
        argv += ["--baseline", extra]
    result = marginal_ppl.run(marginal_ppl.parse_args(argv))
    for sampler in ("is", "smc"):
        rows = [row[sampler] for row in result["per_document"]]
        ess = [row["ess"] for row in rows]
        khats = [math.inf if row["psis_khat"] is None else row["psis_khat"] for row in rows]  # None: no tail fit
        result["samplers"][sampler]["ess_summary"] = {"mean": statistics.mean(ess), "median": statistics.median(ess),
                                                      "min": min(ess)}
        result["samplers"][sampler]["khat_summary"] = {"median": statistics.median(khats),
                                                       "share_above_0.7": sum(k > 0.7 for k in khats) / len(khats)}
    smc_stage = [row["smc"]["stage_ess"] for row in result["per_document"]]
    result["samplers"]["smc"]["stage_ess_median"] = statistics.median(smc_stage)
    return result


def table(results: dict[str, dict]) -> str:
    names = [f"{corpus} test" for corpus in results]
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    first = next(iter(results.values()))
    particles = first["particles"]
    extra = [name for name in first["baselines"] if name.startswith("rnnlm:")]
    rows = [("5-gram Kneser-Ney", lambda r: r["baselines"]["ngram"]),
            ("RNNLM (grid on dev, early stopping)", lambda r: r["baselines"]["rnnlm"]),
            *[(f"RNNLM ({name.split(':')[1]})", lambda r, n=name: r["baselines"][n]) for name in extra],
            (f"EntityNLM, importance sampling (N={particles})", lambda r: r["samplers"]["is"]["perplexity"]),
            (f"EntityNLM, SMC at sentence ends (N={particles})", lambda r: r["samplers"]["smc"]["perplexity"]),
            ("EntityNLM ELBO bound (IS)", lambda r: r["samplers"]["is"]["elbo_perplexity"])]
    for name, value in rows:
        lines.append(f"| {name} | " + " | ".join(f"{value(r):.2f}" for r in results.values()) + " |")
    for sampler in ("is", "smc"):
        lines.append(f"| EntityNLM {sampler.upper()} / RNNLM | " + " | ".join(
            f"{r['samplers'][sampler]['perplexity'] / r['baselines']['rnnlm']:.3f}" for r in results.values()) + " |")
    lines.append("| tokens / documents | " + " | ".join(f"{r['tokens']:,} / {r['documents']}"
                                                      for r in results.values()) + " |")
    for sampler, label in (("is", "IS"), ("smc", "SMC final stage")):
        lines.append(f"| ESS median / min (of N), {label} | " + " | ".join(
            f"{r['samplers'][sampler]['ess_summary']['median']:.1f} / {r['samplers'][sampler]['ess_summary']['min']:.1f}"
            for r in results.values()) + " |")
        lines.append(f"| PSIS k-hat median / share > 0.7, {label} | " + " | ".join(
            f"{r['samplers'][sampler]['khat_summary']['median']:.2f} / "
            f"{100 * r['samplers'][sampler]['khat_summary']['share_above_0.7']:.0f}%" for r in results.values()) + " |")
    lines.append("| SMC: median ESS at sentence ends (before resampling) | " + " | ".join(
        f"{r['samplers']['smc']['stage_ess_median']:.1f}" for r in results.values()) + " |")
    lines.append("| seconds, IS / SMC | " + " | ".join(
        f"{r['samplers']['is']['seconds']:.0f} / {r['samplers']['smc']['seconds']:.0f}" for r in results.values())
        + " |")
    lines.append(f"| proposal | " + " | ".join(r["proposal"] for r in results.values()) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--entitynlm", required=True)
    parser.add_argument("--rnnlm", required=True)
    parser.add_argument("--ngram", required=True)
    parser.add_argument("--rnnlm-extra", action="append", help="more RNNLM checkpoints to list (named by folder)")
    parser.add_argument("--proposal", choices=("forward", "bidirectional"), help="default: the checkpoint's")
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA))
    parser.add_argument("--batch-tokens", type=int, default=400_000, help="particles x padded tokens per batch")
    parser.add_argument("--particles", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    out = Path(args.out)
    results = {}
    for corpus in args.corpora:  # each corpus's result is kept, so corpora can run in parallel and then be joined
        path = out / f"quality_{corpus}.json"
        if not path.exists():
            write_text_atomic(path, json.dumps(evaluate(corpus, args), indent=2) + "\n")
        results[corpus] = json.loads(path.read_text())
    markdown = table(results)
    print(markdown)
    write_text_atomic(out / "quality.json", json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    write_text_atomic(out / "quality.md", markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
