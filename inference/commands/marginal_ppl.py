"""The marginal_ppl command: EntityNLM's marginal perplexity beside its baselines', as
:mod:`inference.evaluation.marginal_ppl` computes it (its docstring, below in ``--help``, says how).

    python -m inference.marginal_ppl                                  # bundled model, embedded sample corpus
    python -m inference.marginal_ppl --checkpoint runs/entitynlm/model.pt --corpus litbank --split test \\
        --data-dir DATA --baseline runs/rnnlm/model.pt --baseline runs/ngram/model.pt --json result.json
    python -m inference.marginal_ppl --corpus litbank --split test --data-dir DATA --particles 100,1000 --seeds 2
    python -m inference.marginal_ppl --file story.txt --json story.json      # a text of one's own
    python -m inference.marginal_ppl --text "Anna met her brother. She thanked him."

Several particle counts (``--particles 100,1000``) or seeds (``--seeds 2``: the seeds ``--seed`` onwards) print
the convergence table of :func:`inference.evaluation.marginal_ppl.convergence` instead: the estimate at each N
by each seed, its spread and its change from the previous N, so a reader sees whether a number has settled.

``--text`` or ``--file`` (a UTF-8 text file) measures that text instead of a corpus split, tokenised as the
notebook API's ``log_likelihood`` reads a string, and reported as a corpus of one document named ``text`` or after
the file; the baselines read the same tokens.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.algorithms.config import settings_for
from inference.algorithms.posterior import input_documents
from inference.checks import integer, real
from inference.commands.cli import Parser, help_text, run_command
from inference.commands.options import (
    FROM_PRESET,
    SHARED_SAMPLING_OPTIONS,
    add_corpus_split,
    add_data_dir,
    add_device_seed_json,
    add_sampling_options,
    add_threads,
    given_settings,
)
from inference.evaluation import marginal_ppl
from inference.evaluation.marginal_ppl import (
    SAMPLERS,
    MarginalConfig,
    convergence,
    format_convergence,
    format_result,
    marginal_perplexity,
)


def build_parser() -> Parser:
    """The model, the corpus, the sampler and its proposal, the baselines."""
    parser = Parser(prog="python -m inference.marginal_ppl", description=help_text(__doc__, marginal_ppl))
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    add_corpus_split(parser, corpus=None, split=None, corpus_help="corpus name, or several joined with '+' "
                     "(default: sample)")
    parser.add_argument("--split", help="the split to evaluate (default: test)")
    text = parser.add_mutually_exclusive_group()
    text.add_argument("--text", help="a text of one's own to measure instead of --corpus/--split")
    text.add_argument("--file", help="a UTF-8 text file to measure instead of --corpus/--split")
    add_data_dir(parser)
    add_sampling_options(parser)
    parser.add_argument("--particles", type=particle_counts, metavar="N[,N...]",
                        help="particles per document (paper: 100); several, comma-separated, print the "
                             "convergence table" + FROM_PRESET)
    parser.add_argument("--seeds", type=integer(1), default=1,
                        help="runs with the seeds --seed, --seed + 1, ...; more than one prints the convergence "
                             "table")
    parser.add_argument("--sampler", choices=[*SAMPLERS, "both"],
                        help="smc: sequential Monte Carlo, resampling where --resample says (settled: after any "
                             "token); is: importance sampling (the paper's, eq. 11); both: the two side by side, "
                             "each from the same random state" + FROM_PRESET)
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS,
                        help="forward: the paper's proposal (reads x_<=t); bidirectional: reads the whole text "
                             "(default: the checkpoint's, chosen on dev)")
    parser.add_argument("--proposal-temperature", type=real(0, include_low=False),
                        help="divide the proposal's R/E/L logits by this (> 1 widens it; 1 = as trained)" + FROM_PRESET)
    parser.add_argument("--baseline", action="append", metavar="CKPT",
                        help="RNNLM or n-gram checkpoint, repeatable; 'none' for no baseline "
                             "(default: the bundled baselines with the bundled model)")
    parser.add_argument("--document-cache", type=real(0, 1), metavar="LAMBDA",
                        help="mix a unigram cache of the document so far into every model's word distribution, "
                             "EntityNLM's and the baselines', with this weight (ours; 0 is none)" + FROM_PRESET)
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000,
                        help="particles x padded tokens per batch")
    add_threads(parser)
    add_device_seed_json(parser)
    return parser


# each option given changes this field of the preset's settings
LIKELIHOOD_OPTIONS = {**SHARED_SAMPLING_OPTIONS, "sampler": "sampler", "proposal": "context",
                      "proposal_temperature": "temperature", "document_cache": "document_cache", "seed": "seed",
                      "batch_tokens": "batch_tokens"}


def particle_counts(text: str) -> list[int]:
    """``--particles``: one count or several, comma-separated, each at least 1."""
    return [integer(1)(part.strip()) for part in text.split(",")]


def run(args: argparse.Namespace) -> dict:
    """The estimate the options ask for (``--baseline none``: no baseline), or, with several particle counts or
    seeds, the convergence table's."""
    baselines = [] if args.baseline == ["none"] else args.baseline
    changes = given_settings(args, LIKELIHOOD_OPTIONS)
    both = changes.get("sampler") == "both"
    if both:
        del changes["sampler"]
    settings = settings_for("likelihood", args.preset, **changes)
    particles = args.particles or [settings.sampling.particles]
    text = None if args.text is None and args.file is None else input_documents(args.text, args.file)[0]
    config = MarginalConfig(args.checkpoint, args.corpus or "sample", args.split or "test", args.data_dir, baselines,
                            args.device, settings.replace(particles=particles[0]), args.preset, both, text)
    if len(particles) == 1 and args.seeds == 1:
        return marginal_perplexity(config)
    return convergence(config, particles, range(settings.sampling.seed, settings.sampling.seed + args.seeds))


def format_any(result: dict) -> str:
    return format_convergence(result) if result.get("convergence") else format_result(result)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.text is not None or args.file is not None) and (args.corpus or args.split or args.data_dir):
        given = "--text" if args.text is not None else "--file"
        parser.error(f"argument {given}: not allowed with --corpus, --split or --data-dir (a text is measured "
                     "instead of a corpus split)")
    return run_command(run, format_any, args)
