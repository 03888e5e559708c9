"""Choose the proposal temperature on dev, then evaluate it on test (EntityNLM marginal perplexity, N = 100).

    python benchmarks/proposal_temperature.py --data-dir DATA --entitynlm runs/entitynlm/model.pt \\
        [--temperatures 1.0 1.5 2.0] [--out benchmarks/results/proposal_temperature]

Each (corpus, split, temperature) is one ``python -m inference.marginal_ppl`` run whose JSON is kept in
``--out``; a run whose JSON is already there is not repeated (so an interrupted sweep resumes). The temperature
with the highest total dev log-likelihood over LitBank and OntoGUM is then evaluated on both test splits.
Prints a table and writes ``summary.json`` and ``summary.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from coref.atomic import write_text_atomic
from inference import marginal_ppl

CORPORA = ("litbank", "ontogum")


def result(corpus: str, split: str, temperature: float, args: argparse.Namespace) -> dict:
    path = Path(args.out) / f"{corpus}_{split}_{temperature}.json"
    if not path.exists():
        argv = ["--checkpoint", args.entitynlm, "--corpus", corpus, "--split", split, "--data-dir", args.data_dir,
                "--particles", "100", "--baseline", "none", "--batch-tokens", "400000",
                "--proposal-temperature", str(temperature), "--json", str(path)]
        if marginal_ppl.main(argv) != 0:
            raise SystemExit(f"marginal_ppl failed for {corpus}/{split} at temperature {temperature}")
    return json.loads(path.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--entitynlm", required=True)
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 1.5, 2.0])
    parser.add_argument("--out", default="benchmarks/results/proposal_temperature")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    dev = {t: {c: result(c, "dev", t, args) for c in CORPORA} for t in args.temperatures}
    total = {t: sum(r["log_likelihood"] for r in runs.values()) for t, runs in dev.items()}
    chosen = max(total, key=total.get)
    test = {t: {c: result(c, "test", t, args) for c in CORPORA} for t in sorted({1.0, chosen})}
    lines = ["| split | temperature | LitBank | OntoGUM | total log-likelihood |", "|---|---:|---:|---:|---:|"]
    for split, runs in (("dev", dev), ("test", test)):
        for t, by_corpus in runs.items():
            mark = " (chosen)" if t == chosen else ""
            lines.append(f"| {split} | {t}{mark} | {by_corpus['litbank']['perplexity']:.2f} | "
                         f"{by_corpus['ontogum']['perplexity']:.2f} | "
                         f"{sum(r['log_likelihood'] for r in by_corpus.values()):,.1f} |")
    table = "\n".join(lines)
    print(table)
    summary = {"chosen_temperature": chosen, "dev_total_log_likelihood": total,
               "perplexity": {split: {str(t): {c: r["perplexity"] for c, r in runs.items()} for t, runs in data.items()}
                              for split, data in (("dev", dev), ("test", test))}}
    write_text_atomic(Path(args.out) / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_text_atomic(Path(args.out) / "summary.md", table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
