"""The rerank command: a base resolver's k-best lists reranked by EntityNLM, by :mod:`inference.evaluation.rerank`
(its docstring, below in ``--help``, says how).

    python -m inference.rerank --resolver runs/resolver/litbank.npz --corpus litbank --data-dir DATA \\
        --k 100 --json runs/rerank/litbank.json

With ``--detector`` the mentions are found in the raw text; scores are cached in ``--cache DIR``, by default
beside ``--json OUT``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from coref.io.atomic import write_text_atomic
from coref.resolution.rerank import GENERATORS, RerankResult
from inference.checks import integer, output_folder
from inference.commands.cli import Parser, config_of, help_text, run_main
from inference.commands.options import add_corpus_split, add_data_dir, add_device, add_json, add_seed
from inference.evaluation import rerank
from inference.evaluation.rerank import RerankConfig, format_result, rerank_corpus


def build_parser() -> Parser:
    """The models, the corpus and its splits, the k-best lists, the cache and the test."""
    parser = Parser(prog="python -m inference.rerank", description=help_text(__doc__, rerank))
    parser.add_argument("--resolver", required=True, help="resolver model written by `python -m coref.resolver train`")
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    add_corpus_split(parser, split=None, required=True,
                     corpus_help="sample, litbank, ontogum, ... (several joined with '+')")
    add_data_dir(parser)
    parser.add_argument("--detector", help="rerank on this mention detector's mentions of the raw text (the "
                        "resolver trained on them: python -m coref.resolver train --detector) instead of the gold "
                        "mentions")
    parser.add_argument("--k", type=integer(1), default=100, help="k-best list length (paper: 100)")
    parser.add_argument("--generator", choices=[*GENERATORS, "both"], default="both", help="k-best generator")
    parser.add_argument("--dev-split", default="dev", help="split the interpolation weight is chosen on")
    parser.add_argument("--test-split", default="test", help="split Table 2 is reported on")
    add_json(parser, help="also write every figure as JSON")
    parser.add_argument("--cache", metavar="DIR", type=output_folder,
                        help="folder of the EntityNLM score cache (default: OUT's folder; none without --json)")
    parser.add_argument("--chunk", type=integer(1), default=64, help="candidates scored per EntityNLM run")
    parser.add_argument("--trials", type=integer(1), default=10_000, help="approximate randomization trials")
    add_device(parser)
    add_seed(parser, help="random seed (randomization test)")
    return parser


def run(args: argparse.Namespace) -> tuple[dict, dict[str, RerankResult]]:
    """The experiment the options ask for; the score cache is beside ``--json OUT`` unless ``--cache`` says."""
    cache = args.cache or (str(Path(args.json).parent) if args.json else None)
    return rerank_corpus(config_of(RerankConfig, args, cache=cache))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        result, experiments = run(args)
        print(format_result(result, experiments))
        if args.json:
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        return 0

    return run_main(body)  # a bad resolver model file is a ValueError
