"""What ``LanguageModel.log_likelihood(text)`` gives with no options, against the settled configuration at more
particles: the perplexity of a corpus split's first documents by each of ``--presets`` at each of
``--particles``, through the API exactly as a user calls it (the preset's every default; only ``particles`` and
``seed`` given), with the change from the smallest N to the largest and each row's seconds.

    python benchmarks/settled_default.py --data-dir DATA --corpus litbank --split test --documents 2 \\
        --particles 100 1000 --presets settled paper --threads 1

Prints a table and writes ``--out`` (JSON: the command, the options, each row).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record  # noqa: E402
from coref.corpora.registry import load_corpus  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from inference.algorithms.config import PRESETS  # noqa: E402
from inference.checks import integer, output_file  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/settled_default.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--corpus", default="litbank", help="corpus name")
    parser.add_argument("--split", default="test", help="split")
    parser.add_argument("--documents", type=integer(1), default=2, help="the split's first this many documents")
    parser.add_argument("--particles", type=integer(1), nargs="+", default=[100, 1000], help="a row for each N")
    parser.add_argument("--presets", nargs="+", choices=list(PRESETS), default=["settled", "paper"],
                        help="the presets to run")
    parser.add_argument("--seed", type=int, default=0, help="the seed of every run")
    parser.add_argument("--threads", type=integer(1), default=1, help="torch threads")
    parser.add_argument("--out", type=output_file, default="benchmarks/results/settled_default.json",
                        help="the JSON record")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        import inference.api as elm

        torch.set_num_threads(args.threads)
        documents = load_corpus(args.corpus, args.split, args.data_dir).documents[:args.documents]
        model = elm.load("entitynlm")
        rows = []
        for preset in args.presets:
            for particles in sorted(args.particles):
                started = time.perf_counter()
                result = model.log_likelihood(documents, preset, particles=particles, seed=args.seed)
                rows.append({"preset": preset, "particles": particles, "perplexity": result.perplexity,
                             "tokens": result.tokens, "ess": [row.ess for row in result],
                             "seconds": time.perf_counter() - started})
                print(f"{preset:<8} N = {particles:>5}: perplexity {result.perplexity:.2f}, "
                      f"{rows[-1]['seconds']:.1f} s", file=sys.stderr)
        first = {row["preset"]: row["perplexity"] for row in rows if row["particles"] == min(args.particles)}
        for row in rows:
            row["change_from_smallest_n"] = row["perplexity"] / first[row["preset"]] - 1
        print(f"{'preset':<8} {'N':>6} {'perplexity':>11} {'change':>8} {'ESS':>16} {'seconds':>8}")
        for row in rows:
            ess = " ".join(f"{value:.1f}" for value in row["ess"])
            print(f"{row['preset']:<8} {row['particles']:>6} {row['perplexity']:>11.2f} "
                  f"{100 * row['change_from_smallest_n']:>+7.2f}% {ess:>16} {row['seconds']:>8.1f}")
        record = {**command_record(parser, args), "machine": platform.platform(), "rows": rows}
        write_text_atomic(Path(args.out), json.dumps(record, indent=1) + "\n")
        return 0

    return run_main(body)


if __name__ == "__main__":
    sys.exit(main())
