"""The mentions command: train and evaluate the mention detector of :mod:`coref.resolution.mentions` (its
docstring, below in ``--help``, describes the model and its training).

Command line::

    python -m coref.mentions train --corpus litbank [--data-dir DIR] --out runs/mentions/litbank.pt [--epochs N]
        [--lowercase] [--held-out-fold F/K]
    python -m coref.mentions evaluate --model M --corpus litbank --split dev [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from coref.corpora.registry import canonical_split, load_corpus
from coref.io.atomic import write_text_atomic
from coref.resolution import mentions
from coref.resolution.mentions import (
    MentionDetector,
    MentionDetectorConfig,
    choose_max_width,
    mention_scores,
    width_coverage,
)
from inference.checks import integer, real
from inference.commands.cli import Parser, command_parser, help_text, run_subcommand
from inference.commands.options import (
    add_command,
    add_held_out_fold,
    add_json,
    add_model_split,
    add_model_training,
    add_token_encoder,
    add_training_corpus,
)
from inference.training.resolution import train_detector


def _train_command(args: argparse.Namespace) -> int:
    """Train a mention detector on a corpus's train split, choosing the epoch and the threshold on dev, and write
    it (one torch file) atomically."""
    train = load_corpus(args.corpus, "train", args.data_dir).documents
    if args.held_out_fold:
        train = args.held_out_fold.outside(train)
    dev = load_corpus(args.corpus, "dev", args.data_dir).documents
    config = MentionDetectorConfig(
        vocabulary_size=args.vocabulary_size, hidden_size=args.hidden_size, layers=args.layers,
        max_width=args.max_width, coverage=args.coverage, dropout=args.dropout, lowercase=args.lowercase,
    )
    if not config.max_width:
        config = replace(config, max_width=choose_max_width(train, config.coverage))
    print(f"{args.corpus}: {len(train)} training documents"
          + (f" (fold {args.held_out_fold} held out)" if args.held_out_fold else "")
          + f", {len(dev)} dev documents; max width "
          f"{config.max_width} covers {100 * width_coverage(train, config.max_width):.2f}% of training mentions"
          + ("; tokens lowercased" if config.lowercase else ""), flush=True)
    model = train_detector(train, dev, config, epochs=args.epochs, seed=args.seed, batch_tokens=args.batch_tokens,
                           log=lambda line: tqdm.write(line, file=sys.stdout))
    model.info["corpus"] = args.corpus
    model.info["held_out_fold"] = str(args.held_out_fold) if args.held_out_fold else None
    model.save(args.out)
    info = model.info
    print(f"trained in {info['training_seconds']:.1f} s; best epoch {info['best_epoch']}, dev mention F1 "
          f"{100 * info['dev_f1']:.2f} at threshold {model.config.threshold:.3f}; model saved to {args.out} "
          f"({Path(args.out).stat().st_size / 1e6:.2f} MB)")
    return 0


def _evaluate_command(args: argparse.Namespace) -> int:
    """Detect the mentions of a corpus split with a trained detector and print precision, recall and F1 against
    the split's annotated mentions (exact spans)."""
    split = canonical_split(args.corpus, args.split)
    model = MentionDetector.load(args.model)
    documents = load_corpus(args.corpus, split, args.data_dir).documents
    scores = mention_scores(documents, model.predict(documents, batch_tokens=args.batch_tokens))
    print(f"{args.corpus}/{split}: mention precision {100 * scores['precision']:.2f}, recall "
          f"{100 * scores['recall']:.2f}, F1 {100 * scores['f1']:.2f} ({scores['correct']} of {scores['gold']} gold "
          f"mentions found, {scores['predicted']} predicted)")
    if args.json:
        info = {key: value for key, value in model.info.items() if key != "history"}
        result = {"model": str(args.model), "corpus": args.corpus, "split": split, **scores,
                  "max_width": model.config.max_width, "threshold": model.config.threshold,
                  "lowercase": model.config.lowercase,
                  "model_bytes": Path(args.model).stat().st_size, "training": info}
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    parser, commands = command_parser("python -m coref.mentions", help_text(__doc__, mentions))
    defaults = MentionDetectorConfig()

    train = add_command(commands, "train", _train_command,
                        help="train on a corpus's train split, choosing epoch and threshold on dev")
    add_training_corpus(train)
    add_held_out_fold(train)
    add_model_training(train, 10, "passes over the training sentences",
                       "seed of the initial weights and the batch shuffling")
    train.add_argument("--batch-tokens", type=integer(1), default=2000,
                       help="padded tokens per batch of sentences")
    add_token_encoder(train, defaults)
    train.add_argument("--max-width", type=integer(0), default=0,
                       help="widest candidate span in tokens; 0 chooses it from the training mentions (--coverage)")
    train.add_argument("--coverage", type=real(0, math.nextafter(1.0, 2.0), include_low=False),
                       default=defaults.coverage,
                       help="share of training mentions the chosen max width must cover")
    train.add_argument("--lowercase", action="store_true",
                       help="lowercase every token, in training and whenever the model is used (lowercase text)")

    evaluate = add_command(commands, "evaluate", _evaluate_command,
                           help="score a detector's mentions on a corpus split")
    add_model_split(evaluate, "the split to score")
    evaluate.add_argument("--batch-tokens", type=integer(1), default=4000, help="padded tokens per batch")
    add_json(evaluate, help="also write the scores as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

