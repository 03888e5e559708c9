"""Language-model quality like the paper's Table 1, on LitBank and OntoGUM test.

EntityNLM's marginal perplexity by importance sampling and by SMC (N = 100 particles each, side by side, from
the same random state), the RNNLM and the 5-gram Kneser-Ney baselines, all on the same tokens with the same
vocabulary, trained on LitBank+OntoGUM train and selected on dev; with each sampler's ESS and PSIS k-hat.

    python benchmarks/quality.py --data-dir DATA --entitynlm runs/entitynlm/model.pt \\
        --rnnlm runs/rnnlm/model.pt --ngram runs/ngram/model.pt [--out benchmarks/results]

Prints a markdown table and writes ``quality.json`` and ``quality.md``; each corpus's run is kept as
``quality_CORPUS.json`` and not repeated (run ``--corpora litbank`` and ``--corpora ontogum`` in parallel, then
both to join them; delete those files to measure again: one made with another checkpoint or particle count is
refused, not reused).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.io.atomic import write_text_atomic
from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.checks import integer, output_folder
from inference.commands.cli import USER_ERRORS, Parser, run_main
from inference.evaluation import marginal_ppl

CORPORA = ("litbank", "ontogum")


def evaluate(corpus: str, args: argparse.Namespace) -> dict:
    config = marginal_ppl.MarginalConfig.of(  # the paper's proposal, by IS and by SMC at sentence ends
        "paper", checkpoint=args.entitynlm, corpus=corpus, split="test", data_dir=args.data_dir,
        particles=args.particles, both=True, context=args.proposal,
        baselines=[args.rnnlm, args.ngram, *(args.rnnlm_extra or ())], batch_tokens=args.batch_tokens,
        device=args.device, seed=args.seed)
    result = marginal_ppl.marginal_perplexity(config)
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
            "{median:.1f} / {min:.1f}".format(**r["samplers"][sampler]["ess_summary"])
            for r in results.values()) + " |")
        lines.append(f"| PSIS k-hat median / share > 0.7, {label} | " + " | ".join(
            f"{r['samplers'][sampler]['khat_summary']['median']:.2f} / "
            f"{100 * r['samplers'][sampler]['khat_summary']['share_above_0.7']:.0f}%" for r in results.values()) + " |")
    lines.append("| SMC: median ESS at sentence ends (before resampling) | " + " | ".join(
        f"{r['samplers']['smc']['stage_ess_median']:.1f}" for r in results.values()) + " |")
    lines.append("| seconds, IS / SMC | " + " | ".join(
        f"{r['samplers']['is']['seconds']:.0f} / {r['samplers']['smc']['seconds']:.0f}" for r in results.values())
        + " |")
    lines.append("| proposal | " + " | ".join(r["proposal"] for r in results.values()) + " |")
    return "\n".join(lines)


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/quality.py", description=__doc__)
    parser.add_argument("--data-dir", required=True, help="folder holding the corpora (litbank/ and ontogum/)")
    parser.add_argument("--entitynlm", required=True, help="EntityNLM checkpoint")
    parser.add_argument("--rnnlm", required=True, help="RNNLM checkpoint (the grid's best)")
    parser.add_argument("--ngram", required=True, help="Kneser-Ney n-gram checkpoint")
    parser.add_argument("--rnnlm-extra", action="append", help="more RNNLM checkpoints to list (named by folder)")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS, help="default: the checkpoint's")
    parser.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA), help="test splits to run")
    parser.add_argument("--batch-tokens", type=integer(1), default=400_000, help="particles x padded tokens per batch")
    parser.add_argument("--particles", type=integer(1), default=100, help="importance samples per document")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results",
                        help="folder of quality.json, quality.md and each corpus's kept run")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def run(args: argparse.Namespace) -> int:
    """Each corpus's run (kept, or measured now), then the joint table and files."""
    out = Path(args.out)
    results = {}
    for corpus in args.corpora:  # each corpus's result is kept, so corpora can run in parallel and then be joined
        path = out / f"quality_{corpus}.json"
        expected = {"checkpoint": str(Path(args.entitynlm)), "corpus": corpus, "split": "test", "sampler": "both",
                    "particles": args.particles}
        results[corpus] = marginal_ppl.stored_result(path, expected)
        if results[corpus] is None:
            results[corpus] = evaluate(corpus, args)
            write_text_atomic(path, json.dumps(results[corpus], indent=2) + "\n")
    markdown = table(results)
    print(markdown)
    record = command_record(build_parser(), args)
    write_text_atomic(out / "quality.json", json.dumps({**record, "results": results}, indent=2) + "\n")
    write_text_atomic(out / "quality.md", markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
