"""The marginal_ppl command: EntityNLM's marginal perplexity beside its baselines', as
:mod:`inference.evaluation.marginal_ppl` computes it (its docstring, below in ``--help``, says how).

    python -m inference.marginal_ppl                                  # bundled model, embedded sample corpus
    python -m inference.marginal_ppl --checkpoint runs/entitynlm/model.pt --corpus litbank --split test \\
        --data-dir DATA --baseline runs/rnnlm/model.pt --baseline runs/ngram/model.pt --json result.json
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.checks import integer, real
from inference.commands.cli import Parser, config_of, help_text, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device_seed_json
from inference.evaluation import marginal_ppl
from inference.evaluation.marginal_ppl import SAMPLERS, MarginalConfig, format_result, marginal_perplexity


def build_parser() -> Parser:
    """The model, the corpus, the sampler and its proposal, the baselines."""
    parser = Parser(prog="python -m inference.marginal_ppl", description=help_text(__doc__, marginal_ppl))
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    add_corpus_split(parser)
    add_data_dir(parser)
    parser.add_argument("--particles", type=integer(1), default=100,
                        help="importance samples per document (paper: 100)")
    parser.add_argument("--sampler", default="smc", choices=[*SAMPLERS, "both"],
                        help="smc: sequential Monte Carlo resampling at sentence ends, an unbiased estimate with "
                             "less variance at equal compute on dev (benchmarks/samplers.py); is: importance "
                             "sampling (the paper, eq. 11); both: the two side by side, each from the same random "
                             "state")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS,
                        help="forward: the paper's proposal (reads x_<=t); bidirectional: reads the whole text "
                             "(default: the checkpoint's, chosen on dev)")
    parser.add_argument("--proposal-temperature", type=real(0, include_low=False), default=1.0,
                        help="divide the proposal's R/E/L logits by this (> 1 widens it; 1 = as trained)")
    parser.add_argument("--baseline", action="append", metavar="CKPT",
                        help="RNNLM or n-gram checkpoint, repeatable; 'none' for no baseline "
                             "(default: the bundled baselines with the bundled model)")
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000,
                        help="particles x padded tokens per batch")
    add_device_seed_json(parser)
    return parser


def run(args: argparse.Namespace) -> dict:
    """The estimate the options ask for (``--baseline none``: no baseline)."""
    baselines = [] if args.baseline == ["none"] else args.baseline
    return marginal_perplexity(config_of(MarginalConfig, args, baselines=baselines))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
