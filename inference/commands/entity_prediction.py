"""Entity prediction on InScript (Ji et al. 2017, §5.3, Table 3): which entity does the next mention refer to?

    python -m inference.entity_prediction --checkpoint runs/inscript/model.pt --data-dir DATA --json out.json

The protocol (Modi et al. 2017, as adapted by the paper): R is given, so the positions of mention starts are
known; after the first three sentences of a story, at each of its first (at most) 30 mention starts, a
predictor sees the left context with its gold entities and names the entity of the mention: one mentioned
before, or "new". Accuracy over all such slots of the test split, and per scenario.

Predictors:

- **always-new**;
- **shallow features**: a linear (conditional-logit) classifier over the candidates (every entity mentioned so
  far, and "new") with the features of Modi et al. (2017): recency of the entity's last mention and its
  frequency so far; fitted by maximum likelihood on every mention of the training split;
- **EntityNLM**: argmax of p(E_t | R_t = 1, history) (eq. 4) in one teacher-forced run over the story's gold
  R, E, L: the history is the words and gold entities of the left context only;
- **EntityNLM, new-entity bias tuned on dev** (ours): the same, with one constant added to the new entity's
  log-probability, chosen for accuracy on the dev split. The model is trained to predict every mention, and
  most training mentions are not slots (the slots come late in a story, where fewer entities are new), so
  its "new" probability need not be calibrated for the slots.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from inference.checks import integer
from inference.commands.cli import Parser, run_command
from inference.commands.options import add_corpus_split, add_data_dir, add_device, add_json, add_seed
from inference.evaluation.entity_prediction import evaluate_entity_prediction, format_result


def build_parser() -> Parser:
    """The checkpoint, the corpus and its splits, the protocol."""
    parser = Parser(prog="python -m inference.entity_prediction", description=__doc__)
    parser.add_argument("--checkpoint", required=True,
                        help="EntityNLM trained on InScript with --keep-singletons (entitylm train)")
    add_corpus_split(parser, corpus="inscript", split_help="the split the accuracy is reported on")
    parser.add_argument("--train-split", default="train", help="fits the shallow-feature baseline")
    parser.add_argument("--dev-split", default="dev", help="tunes the new-entity bias")
    add_data_dir(parser)
    parser.add_argument("--skip-sentences", type=integer(0), default=3,
                        help="predict after this many sentences (paper 3)")
    parser.add_argument("--max-slots", type=integer(1), default=30,
                        help="at most this many slots per story (paper 30)")
    add_device(parser)
    add_seed(parser)
    add_json(parser)
    return parser


def run(args: argparse.Namespace) -> dict:
    """The accuracies the options ask for."""
    return evaluate_entity_prediction(
        args.checkpoint, corpus=args.corpus, split=args.split, train_split=args.train_split,
        dev_split=args.dev_split, data_dir=args.data_dir, skip_sentences=args.skip_sentences,
        max_slots=args.max_slots, device=args.device, seed=args.seed)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    return run_command(run, format_result, build_parser().parse_args(argv))
