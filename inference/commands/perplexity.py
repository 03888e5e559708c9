"""Test perplexity of any language model checkpoint, in total and per token group (Kobayashi et al. 2017, Table 2
and Figures 4-6).

    python -m inference.perplexity --checkpoint runs/dntm/both-gru_relu/model.pt --corpus ontogum --split test \\
        --data-dir DATA --json result.json

The checkpoint says what it reads (:data:`generative.registry.DATA_KINDS`): EntityNLM's preprocessed text, or
the Anonymized Language Modelling data, where each coreference chain's mentions are one token ``<unkK>``. Every
target token (the words and sentence ends, as every model predicts them) falls in the paper's groups:

- ``all``;
- ``reappearing_entities``: a token of a mention of an entity mentioned before in the document;
- ``following_entities``: the token right after a mention;
- ``non_entities``: a token outside every mention.

and in the paper's breakdowns: by position in the document (Figure 4; 1-20, 21-40, ...), tokens following the
k-th occurrence of an entity (Figure 5), and entity tokens by the number of entities seen before them (Figure 6,
"antecedent candidates"). A group's perplexity is exp(- its summed log-probability / its tokens).

For an exact model (:attr:`generative.registry.ModelKind.exact`: the RNNLM, the Dynamic Neural Text Model, the
n-gram) the log-probabilities are its conditionals log p(x_t | x_<t). EntityNLM's per-word probabilities are not
defined without its latent structure: its perplexity comes from ``python -m inference.marginal_ppl``, which this
command refuses to guess.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.commands.cli import Parser, run_command
from inference.commands.options import evaluation_parser
from inference.evaluation.perplexity import format_result, perplexity_by_group


def build_parser() -> Parser:
    """The checkpoint, the corpus split and how it runs."""
    return evaluation_parser("python -m inference.perplexity", __doc__,
                             "a checkpoint of an exact model (rnnlm, dntm, ngram)")


def run(args: argparse.Namespace) -> dict:
    """The perplexities the options ask for."""
    return perplexity_by_group(args.checkpoint, corpus=args.corpus, split=args.split, data_dir=args.data_dir,
                               batch_tokens=args.batch_tokens, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
