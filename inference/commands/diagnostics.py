"""Where EntityNLM wins and loses against the RNNLM, token by token: the terms behind the perplexities.

    python -m inference.diagnostics                                   # bundled models, embedded sample corpus
    python -m inference.diagnostics --checkpoint runs/entitynlm/model.pt --baseline runs/rnnlm/model.pt \\
        --corpus litbank --split dev --data-dir DATA --particles 100 --json diagnostics.json
    python -m inference.diagnostics --corpus ontogum --split test --documents 6 --particles 20   # a quick look

Every figure is a negative log-probability in nats per token (and, in the second table, its perplexity),
summed over a group of tokens of the stream every model predicts: all tokens; the tokens inside gold mentions;
the words outside mentions; the sentence ends ``</s>``. The last three partition the first. Columns:

- RNNLM: -log p_RNN(x_t | x_<t).
- word|gold: -log p(x_t | gold z, x_<t), EntityNLM's word distribution (eq. 6) given the gold structure;
  Delta = word|gold - RNNLM (negative: EntityNLM predicts those words better).
- latent|gold: -log p(R_t, E_t, L_t | ...) of the gold structure (eq. 3-5), charged to the token where each
  choice is made (R wherever a mention may start, also outside mentions; E and L at mention starts).
- joint|gold = word|gold + latent|gold: -log p(x, gold z) / tokens, EntityNLM's training objective.
- marginal: -log p_hat(x) / tokens, the importance-sampling estimate of eq. 11 (``resample="never"``), on all
  tokens only (p_hat(x) is a per-document quantity).
- E_w word, E_w latent: the same word and latent terms for the sampled structures, averaged with the
  self-normalised importance weights: the posterior-expected word and structure costs.

Then ``log p_hat(x) = E_w[log p(x, z)] + remainder``: the remainder (reported in nats per token) estimates the
posterior entropy H[p(z | x)], what the marginal gains by summing over structures instead of committing to one.
Since p(x) >= p(x, gold z) always, a document whose log p_hat(x) is below its gold joint has an estimate that
is too low (too few particles or a poor proposal), not a model that is too weak: the command counts them.

The particles are rescored with :meth:`EntityNLM.token_log_probs`, which redraws each new entity's embedding
noise (eq. 7), so a particle's rescored log p(x, z) differs slightly from the one its weight was computed with;
the weighted mean absolute difference is reported (``noise_gap``, nats per document; 0 when the model's
``new_entity_scale`` is 0). The gold terms draw their own noise too, as in training. The E_w columns are
only as good as the weights: with a mean ESS near 1 they describe a single particle.

Below the tables, token by token: the ``--top`` tokens where word|gold - RNNLM is most negative (EntityNLM wins)
and most positive (it loses), with the words before them and their group, and the word types with the largest
summed difference each way. The JSON (``--json``) holds all of it, each group's summed nats, and each
document's sums, log p_hat(x), remainder, ESS and noise gap; values JSON cannot hold are written as null.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, config_of, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device, add_json, add_seed
from inference.evaluation.diagnostics import DiagnosticsConfig, diagnose, format_result


def build_parser() -> Parser:
    """The models, the corpus, the sampling and how much is listed."""
    parser = Parser(prog="python -m inference.diagnostics", description=__doc__)
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--proposal", choices=("forward", "bidirectional"),
                        help="the checkpoint's proposal to sample with (default: the one it names)")
    parser.add_argument("--baseline", metavar="CKPT",
                        help="RNNLM checkpoint to compare with, or 'none' (default: the bundled RNNLM with the "
                             "bundled model, none with --checkpoint)")
    add_corpus_split(parser, split_help="the split to diagnose")
    add_data_dir(parser)
    parser.add_argument("--documents", type=integer(1), metavar="N",
                        help="only the first N documents of the split (a quick look; default: all)")
    parser.add_argument("--particles", type=integer(1), default=100,
                        help="importance samples per document (paper: 100)")
    parser.add_argument("--batch-tokens", type=integer(1), default=20_000, help="particles x padded tokens per batch")
    parser.add_argument("--top", type=integer(0), default=10,
                        help="list this many tokens and word types where EntityNLM's word|gold differs most from "
                             "the RNNLM, each way (0: none)")
    add_device(parser)
    add_seed(parser)
    add_json(parser)
    return parser


def run(args: argparse.Namespace) -> dict:
    """The diagnosis the options ask for."""
    return diagnose(config_of(DiagnosticsConfig, args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
