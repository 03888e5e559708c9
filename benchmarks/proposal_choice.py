"""Choose EntityNLM's default proposal on dev by the quality of its importance-sampling estimate.

    python benchmarks/proposal_choice.py --data-dir DATA --entitynlm runs/entitynlm/model.pt \\
        [--refined runs/entitynlm/refined.pt] [--proposals forward bidirectional] [--temperatures 1.0 1.5] \\
        [--out benchmarks/results/proposal_choice]

Candidates: each proposal of the checkpoint (``forward``, the paper's; ``bidirectional``, reading the whole
text) at each temperature, and the refined checkpoint's proposal (``python -m inference.refine``). Each
(candidate, corpus) is one ``python -m inference.marginal_ppl`` run on the dev split with N = 100 particles,
its JSON kept in ``--out`` so that an interrupted sweep resumes (a kept JSON made with another checkpoint, proposal,
temperature or particle count is refused, not reused). The estimate log p_hat(x) is unbiased in
p(x) whatever the proposal, and its downward bias in log space shrinks as the proposal nears the posterior,
so the candidate with the highest total dev log-likelihood over LitBank and OntoGUM is chosen; the table
gives its ESS and PSIS k-hat beside. Writes ``summary.json`` and ``summary.md``, and with ``--write CKPT`` the
chosen candidate's checkpoint with the chosen proposal as its default (``config["proposal"]``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.io.atomic import write_text_atomic
from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.checks import integer, output_file, output_folder, real
from inference.commands.cli import USER_ERRORS, Parser, run_main
from inference.evaluation import marginal_ppl
from inference.training.checkpoint import Checkpoint

CORPORA = ("litbank", "ontogum")


def candidates(args: argparse.Namespace) -> dict[str, tuple[str, str, float]]:
    """name -> (checkpoint, proposal, temperature)."""
    found = {f"{proposal} T={t}": (args.entitynlm, proposal, t) for proposal in args.proposals
             for t in args.temperatures}
    if args.refined:
        found |= {f"refined {args.refined_proposal} T={t}": (args.refined, args.refined_proposal, t)
                  for t in args.temperatures}
    return found


def result(name: str, corpus: str, candidate: tuple[str, str, float], args: argparse.Namespace) -> dict:
    """One (candidate, corpus) run of ``entitylm marginal-ppl``'s computation on dev, or its JSON kept in ``--out``
    from before."""
    path = Path(args.out) / f"{corpus}_dev_{name.replace(' ', '_').replace('=', '')}.json"
    checkpoint, proposal, temperature = candidate
    stored = marginal_ppl.stored_result(path, {"checkpoint": str(Path(checkpoint)), "corpus": corpus, "split": "dev",
                                               "sampler": "is", "particles": args.particles, "proposal": proposal,
                                               "proposal_temperature": temperature})
    if stored is not None:
        return stored
    config = marginal_ppl.MarginalConfig.of(  # the paper's importance sampling, each proposal alone
        "paper", checkpoint=checkpoint, context=proposal, temperature=temperature, corpus=corpus, split="dev",
        data_dir=args.data_dir, particles=args.particles, baselines=[], batch_tokens=400_000, seed=args.seed)
    run = marginal_ppl.marginal_perplexity(config)
    write_text_atomic(path, json.dumps(run, indent=2) + "\n")
    return run


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/proposal_choice.py", description=__doc__)
    parser.add_argument("--data-dir", required=True, help="folder holding the corpora (litbank/ and ontogum/)")
    parser.add_argument("--entitynlm", required=True, help="EntityNLM checkpoint whose proposals are compared")
    parser.add_argument("--proposals", nargs="+", choices=PROPOSAL_CONTEXTS, default=list(PROPOSAL_CONTEXTS),
                        help="the checkpoint's proposals to compare")
    parser.add_argument("--refined", help="a checkpoint whose proposal `entitylm refine` refined (default: none)")
    parser.add_argument("--refined-proposal", choices=PROPOSAL_CONTEXTS, default="bidirectional",
                        help="which proposal of --refined was refined")
    parser.add_argument("--temperatures", type=real(0, include_low=False), nargs="+", default=[1.0],
                        help="proposal temperatures to try")
    parser.add_argument("--particles", type=integer(1), default=100, help="importance samples per document")
    parser.add_argument("--seed", type=int, default=0, help="random seed of every run")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results/proposal_choice",
                        help="folder of each run's JSON (kept: a rerun resumes) and the summary")
    parser.add_argument("--write", metavar="CKPT", type=output_file,
                        help="also write the chosen candidate's checkpoint here, with the chosen proposal as its "
                             "default")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def run(args: argparse.Namespace) -> int:
    """Every candidate on LitBank and OntoGUM dev; the table, the summary files and the chosen checkpoint."""
    runs = {name: {corpus: result(name, corpus, candidate, args) for corpus in CORPORA}
            for name, candidate in candidates(args).items()}
    total = {name: sum(r["log_likelihood"] for r in by_corpus.values()) for name, by_corpus in runs.items()}
    chosen = max(total, key=total.get)
    lines = [f"| proposal (dev, N = {args.particles}) | LitBank ppl | OntoGUM ppl | median ESS L / O | "
             "k-hat > 0.7 L / O | total log-likelihood |", "|---|---:|---:|---:|---:|---:|"]
    for name, by_corpus in runs.items():
        litbank, ontogum = by_corpus["litbank"], by_corpus["ontogum"]
        ess = " / ".join(f"{statistics.median(r['ess']):.1f}" for r in (litbank, ontogum))
        khat = " / ".join(f"{100 * sum(k is None or k > 0.7 for k in r['psis_khat']) / len(r['psis_khat']):.0f}%"
                          for r in (litbank, ontogum))
        mark = " (chosen)" if name == chosen else ""
        lines.append(f"| {name}{mark} | {litbank['perplexity']:.2f} | {ontogum['perplexity']:.2f} | {ess} | {khat} | "
                     f"{total[name]:,.1f} |")
    table = "\n".join(lines)
    print(table)
    summary = {**command_record(build_parser(), args), "chosen": chosen,
               "candidates": {name: list(candidate) for name, candidate in candidates(args).items()},
               "dev_total_log_likelihood": total,
               "dev_perplexity": {name: {c: r["perplexity"] for c, r in by_corpus.items()}
                                  for name, by_corpus in runs.items()},
               "dev_median_ess": {name: {c: statistics.median(r["ess"]) for c, r in by_corpus.items()}
                                  for name, by_corpus in runs.items()}}
    write_text_atomic(Path(args.out) / "summary.json", json.dumps(summary, indent=2) + "\n")
    write_text_atomic(Path(args.out) / "summary.md", table + "\n")
    if args.write:
        path, proposal, temperature = candidates(args)[chosen]
        checkpoint = Checkpoint.load(path)
        checkpoint.config["proposal"] = proposal
        checkpoint.training["proposal_choice"] = {"chosen": chosen, "temperature": temperature}
        checkpoint.save(args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
