"""Entity cloze by sentence likelihood, scored by the Mean Quantile (Kobayashi et al. 2017, §5.2.3, Table 4).

    python -m inference.entity_cloze --checkpoint runs/dntm/both-gru_relu/model.pt --corpus ontogum \\
        --split test --data-dir DATA --json result.json

On the Anonymized Language Modelling data, every sentence that mentions an entity already mentioned in an earlier
sentence is a cloze: its first such mention is the slot, the entities mentioned before the sentence are the
candidates, the true one e+ and the others E-. The model scores each candidate by the likelihood of the sentence
with the slot filled by that candidate, given the document before it; the Mean Quantile (eq. 11) is, averaged
over clozes, the fraction of E- scored below e+:

    MQ = |{e- in E- : p(e-) < p(e+)}| / |E-|

A cloze with no other candidate is left out (its quantile is undefined), as are ties' halves: a tie counts as
not below. All filled sentences of all clozes run as rows of a few large batches. Each row reads the whole
document before its sentence (the softmax runs on the sentence alone), so a split's clozes cost (candidates x
prefix length) LSTM steps each; ``--max-clozes`` scores a seeded random sample of them (the JSON says how many
of how many).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, run_command
from inference.commands.options import evaluation_parser
from inference.evaluation.entity_cloze import entity_cloze, format_result


def build_parser() -> Parser:
    """The checkpoint, the corpus split, how many clozes and how it runs."""
    parser = evaluation_parser("python -m inference.entity_cloze", __doc__,
                               "a checkpoint of a model of the anonymised data (dntm)")
    parser.add_argument("--max-clozes", type=integer(1), default=200,
                        help="score a random sample of this many clozes (seeded by --seed); all if fewer")
    return parser


def run(args: argparse.Namespace) -> dict:
    """The Mean Quantile the options ask for."""
    return entity_cloze(args.checkpoint, corpus=args.corpus, split=args.split, data_dir=args.data_dir,
                        max_clozes=args.max_clozes, batch_tokens=args.batch_tokens, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
