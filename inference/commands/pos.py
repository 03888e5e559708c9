"""The pos command: train and evaluate the part-of-speech tagger of :mod:`coref.resolution.pos` (its docstring,
below in ``--help``, describes the model and its training).

Command line::

    python -m coref.pos train [--data-dir DIR] --out coref/resolution/pretrained/pos.pt [--epochs N] [--seed S]
    python -m coref.pos evaluate [--model M] [--split dev test test2] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from coref.corpora.registry import canonical_split
from coref.io.atomic import write_text_atomic
from coref.resolution import pos
from coref.resolution.pos import BUNDLED, CORPUS, PosTagger, PosTaggerConfig, ontogum_tagged, tag_scores
from inference.checks import integer, real
from inference.commands.cli import Parser, command_parser, help_text, run_subcommand
from inference.commands.options import add_command, add_data_dir, add_json, add_model_training, add_token_encoder
from inference.training.resolution import train_tagger


def _train_command(args: argparse.Namespace) -> int:
    """Train a tagger on OntoGUM's train split (gold UPOS tags of its CoNLL-U files), choosing the epoch on dev,
    and write it (one torch file) atomically."""
    train, train_tags = ontogum_tagged("train", args.data_dir)
    dev, dev_tags = ontogum_tagged("dev", args.data_dir)
    print(f"{CORPUS}: {len(train)} training documents ({sum(map(len, train_tags))} tokens), {len(dev)} dev "
          f"documents ({sum(map(len, dev_tags))} tokens)", flush=True)
    config = PosTaggerConfig(vocabulary_size=args.vocabulary_size, hidden_size=args.hidden_size, layers=args.layers,
                             dropout=args.dropout, word_dropout=args.word_dropout)
    model = train_tagger(train, train_tags, dev, dev_tags, config, epochs=args.epochs, seed=args.seed,
                         batch_tokens=args.batch_tokens, log=lambda line: tqdm.write(line, file=sys.stdout))
    model.save(args.out)
    info = model.info
    print(f"trained in {info['training_seconds']:.1f} s; best epoch {info['best_epoch']}, dev accuracy "
          f"{100 * info['dev_accuracy']:.2f}; model saved to {args.out} ({Path(args.out).stat().st_size / 1e6:.2f} MB)")
    return 0


def _evaluate_command(args: argparse.Namespace) -> int:
    """Tag OntoGUM splits with a trained tagger and print its token accuracy against their gold UPOS tags."""
    splits = [canonical_split(CORPUS, split) for split in args.split]
    model = PosTagger.load(args.model)
    results = {}
    for split in splits:
        documents, gold = ontogum_tagged(split, args.data_dir)
        started = time.perf_counter()
        predicted = model.tag(documents, batch_tokens=args.batch_tokens)
        seconds = time.perf_counter() - started
        results[split] = {**tag_scores(gold, predicted), "documents": len(documents), "tagging_seconds": seconds}
        scores = results[split]
        print(f"{CORPUS}/{split}: accuracy {100 * scores['accuracy']:.2f} over {scores['tokens']} tokens "
              f"(VERB F1 {100 * scores['per_tag']['VERB']['f1']:.2f}, ADJ F1 {100 * scores['per_tag']['ADJ']['f1']:.2f}"
              f"; {scores['tokens'] / seconds:.0f} tokens/s)")
    if args.json:
        info = {key: value for key, value in model.info.items() if key != "history"}
        result = {"model": str(args.model), "model_bytes": Path(args.model).stat().st_size, "corpus": CORPUS,
                  "config": asdict(model.config), "splits": results, "training": info}
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    parser, commands = command_parser("python -m coref.pos", help_text(__doc__, pos))
    data_help = "folder holding the corpora (default: $ENTITYLM_DATA)"
    defaults = PosTaggerConfig()

    train = add_command(commands, "train", _train_command,
                        help="train on OntoGUM's train split, choosing the epoch on dev")
    add_data_dir(train, help=data_help)
    add_model_training(train, 20, "passes over the training sentences",
                       "seed of the initial weights, dropout and shuffling")
    train.add_argument("--batch-tokens", type=integer(1), default=1000, help="padded tokens per batch of sentences")
    add_token_encoder(train, defaults)
    train.add_argument("--word-dropout", type=real(0, 1), default=defaults.word_dropout,
                       help="chance that a training word is read as <unk>")

    evaluate = add_command(commands, "evaluate", _evaluate_command, help="score a tagger on OntoGUM splits")
    evaluate.add_argument("--model", default=str(BUNDLED), help="a model written by train")
    evaluate.add_argument("--split", nargs="+", default=["dev", "test", "test2"],
                          help="the splits to score")
    add_data_dir(evaluate, help=data_help)
    evaluate.add_argument("--batch-tokens", type=integer(1), default=4000, help="padded tokens per batch")
    add_json(evaluate, help="also write the scores as JSON here")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

