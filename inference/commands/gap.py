"""The gap command: GAP scored in the snippet-context setting (the URL unused), by the GAP resolver of
:mod:`coref.resolution.gap_resolver` over the raw-text pipeline of :mod:`coref.resolution.pipeline`, or by the
pipeline's clusters alone (``--pipeline-only``, read as :mod:`coref.corpora.gap` says). The resolver's docstring,
below in ``--help``, says how it decides.

Command line::

    python -m coref.gap --split test --data-dir DATA [--detector M --resolver R] [--json OUT] [--system-out FILE]
    python -m coref.gap --split test --data-dir DATA --pipeline-only         # the clusters alone
    python -m coref.gap --train runs/gap.pt --data-dir DATA --split validation  # train on dev, then score

``--train`` trains a GAP resolver on GAP's development set over the given (or bundled) pipeline, printing the
validation set's F1 as it goes, writes it, and scores ``--split`` with it.

``--system-out`` writes the decisions as the official scorer's system file: ``python gap_scorer.py --gold_tsv
DATA/gap/gap-test.tsv --system_tsv FILE`` then prints the same figures.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from coref.corpora.gap import evaluate_gap, format_scores, load_gap, scored_decisions
from coref.document import Document
from coref.io.atomic import write_text_atomic
from coref.io.text import TokenizedText, tokenize
from coref.resolution import gap_resolver
from coref.resolution.gap_resolver import GapResolver, pronouns_without_mention, read_examples
from coref.resolution.pipeline import CorefPipeline
from coref.resolution.pos import PosTagger
from inference.checks import integer, output_file
from inference.commands.cli import Parser, help_text, run_main
from inference.commands.options import add_data_dir, add_json
from inference.training.resolution import train_gap_resolver


def build_parser() -> Parser:
    """The split, the models, --limit, --json and --system-out; --train and its options."""
    parser = Parser(prog="python -m coref.gap", description=help_text(__doc__, gap_resolver))
    parser.add_argument("--split", default="test", help="dev, test or validation")
    add_data_dir(parser, help="folder holding gap/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--detector", help="mention detector (default: the bundled one)")
    parser.add_argument("--resolver", help="mention ranker trained on that detector's mentions (default: bundled)")
    parser.add_argument("--classifier", help="GAP resolver over the pipeline (default: the bundled one)")
    parser.add_argument("--pipeline-only", action="store_true",
                        help="score the pipeline's clusters alone, without the GAP resolver")
    parser.add_argument("--train", metavar="OUT", type=output_file,
                        help="train a GAP resolver on GAP's dev set, write it here, then score --split with it")
    parser.add_argument("--epochs", type=integer(1), default=200, help="with --train: full-batch epochs (default: 200)")
    parser.add_argument("--seed", type=int, default=0, help="with --train: the seed (default: 0)")
    parser.add_argument("--limit", type=integer(1), help="score only the first N examples (a quick look)")
    add_json(parser, help="also write the scores as JSON here")
    parser.add_argument("--system-out", metavar="FILE", type=output_file,
                        help="also write the decisions here as gap_scorer.py's system TSV (ID, A-coref, B-coref)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Score the pipeline on a GAP split; returns the exit status."""
    args = build_parser().parse_args(argv)

    def score() -> int:
        if args.pipeline_only and (args.train or args.classifier):
            raise ValueError("--pipeline-only scores the pipeline alone: drop --train and --classifier")
        # the given resolver is read before anything else, so a bad file fails at once
        given = None if args.pipeline_only or args.train else GapResolver.load(args.classifier)
        examples = load_gap(args.split, args.data_dir)[: args.limit]
        pipeline = CorefPipeline.load(args.detector, args.resolver)
        if args.pipeline_only:
            def resolve(text: str) -> tuple[Document, TokenizedText]:
                tokenized = tokenize(text)
                return pipeline.resolve(tokenized), tokenized

            scores = {"split": args.split, **evaluate_gap(examples, resolve, args.system_out)}
        else:
            tagger = PosTagger.load()
            model = _trained(args, pipeline, tagger) if args.train else given
            readings = read_examples(examples, pipeline, tagger)
            scores = {"split": args.split, **scored_decisions(examples, model.decide(readings),
                                                              pronouns_without_mention(readings), args.system_out)}
        print(format_scores(scores))
        if args.json:
            write_text_atomic(args.json, json.dumps(scores, indent=2) + "\n")
        return 0

    return run_main(score)


def _trained(args: argparse.Namespace, pipeline: CorefPipeline, tagger: PosTagger) -> GapResolver:
    """Train a GAP resolver on dev, with validation's F1 logged, and write it to ``args.train``."""
    train = read_examples(load_gap("dev", args.data_dir), pipeline, tagger)
    validation = read_examples(load_gap("validation", args.data_dir), pipeline, tagger)
    model = train_gap_resolver(train, validation, epochs=args.epochs, seed=args.seed, log=print)
    model.info.update(detector=str(args.detector or "bundled"), resolver=str(args.resolver or "bundled"))
    model.save(args.train)
    print(f"trained in {model.info['training_seconds']:.1f} s; saved to {args.train}")
    return model
