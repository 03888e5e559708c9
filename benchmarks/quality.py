"""Language-model quality like the paper's Table 1, on LitBank and OntoGUM test.

EntityNLM's marginal perplexity by importance sampling (N = 100 particles), the RNNLM and the 5-gram Kneser-Ney
baselines, all on the same tokens with the same vocabulary, trained on LitBank+OntoGUM train and selected on
dev; with the ESS and PSIS k-hat of the importance weights.

    python benchmarks/quality.py --data-dir DATA --entitynlm runs/entitynlm/model.pt \\
        --rnnlm runs/rnnlm/model.pt --ngram runs/ngram/model.pt [--out benchmarks/results]

Prints a markdown table and writes ``quality.json`` and ``quality.md``.
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
            "--particles", str(args.particles), "--baseline", args.rnnlm, "--baseline", args.ngram,
            "--device", args.device, "--seed", str(args.seed), "--batch-tokens", str(args.batch_tokens)]
    if args.rnnlm_same_epochs:
        argv += ["--baseline", args.rnnlm_same_epochs]
    result = marginal_ppl.run(marginal_ppl.parse_args(argv))
    result["ess_summary"] = {"mean": statistics.mean(result["ess"]), "median": statistics.median(result["ess"]),
                             "min": min(result["ess"])}
    khats = [math.inf if k is None else k for k in result["psis_khat"]]  # None: ArviZ fitted no tail (too few)
    result["khat_summary"] = {"median": statistics.median(khats),
                              "share_above_0.7": sum(k > 0.7 for k in khats) / len(khats)}
    return result


def table(results: dict[str, dict]) -> str:
    names = [f"{corpus} test" for corpus in results]
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    first = next(iter(results.values()))
    same_epochs = [name for name in first["baselines"] if name.startswith("rnnlm:")]
    rows = [("5-gram Kneser-Ney", lambda r: r["baselines"]["ngram"]),
            ("RNNLM (early stopping)", lambda r: r["baselines"]["rnnlm"]),
            *[(f"RNNLM ({name.split(':')[1]}: EntityNLM's epochs)", lambda r, n=name: r["baselines"][n])
              for name in same_epochs],
            (f"EntityNLM (IS, N={next(iter(results.values()))['particles']})", lambda r: r["perplexity"]),
            ("EntityNLM ELBO bound", lambda r: r["elbo_perplexity"])]
    for name, value in rows:
        lines.append(f"| {name} | " + " | ".join(f"{value(r):.2f}" for r in results.values()) + " |")
    lines.append("| EntityNLM vs RNNLM | " + " | ".join(
        f"{100 * (r['perplexity'] / r['baselines']['rnnlm'] - 1):+.1f}%" for r in results.values()) + " |")
    lines.append("| tokens / documents | " + " | ".join(f"{r['tokens']:,} / {r['documents']}"
                                                      for r in results.values()) + " |")
    lines.append("| ESS mean / min (of N) | " + " | ".join(
        f"{r['ess_summary']['mean']:.1f} / {r['ess_summary']['min']:.1f}" for r in results.values()) + " |")
    lines.append("| PSIS k-hat median / share > 0.7 | " + " | ".join(
        f"{r['khat_summary']['median']:.2f} / {100 * r['khat_summary']['share_above_0.7']:.0f}%"
        for r in results.values()) + " |")
    lines.append("| seconds (importance sampling) | " + " | ".join(f"{r['seconds']:.0f}" for r in results.values())
                 + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--entitynlm", required=True)
    parser.add_argument("--rnnlm", required=True)
    parser.add_argument("--ngram", required=True)
    parser.add_argument("--rnnlm-same-epochs", help="an RNNLM trained for as many epochs as EntityNLM")
    parser.add_argument("--batch-tokens", type=int, default=400_000, help="particles x padded tokens per batch")
    parser.add_argument("--particles", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()
    results = {corpus: evaluate(corpus, args) for corpus in CORPORA}
    markdown = table(results)
    print(markdown)
    out = Path(args.out)
    write_text_atomic(out / "quality.json", json.dumps({"args": vars(args), "results": results}, indent=2) + "\n")
    write_text_atomic(out / "quality.md", markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
