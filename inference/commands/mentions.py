"""A mention detector: which token spans of raw text are mentions, from the tokens alone.

The first step of coreference on raw text (tokens -> mentions -> clusters). Only the words are read (no parse,
no part-of-speech tags: raw text has none), so the detector runs on any tokenised :class:`~coref.document.Document`.

Model (a small span scorer in the style of Lee et al. 2017, without their antecedent part):

- each token is its lowercased word's embedding (vocabulary: training words seen at least ``min_count`` times,
  the rest ``<unk>``), plus small embeddings of its shape (capitalised, all caps, digits, punctuation, other)
  and of its hashed 3-letter suffix (``zlib.crc32``, stable across processes);
- a BiLSTM reads each sentence (sentences are padded into batches and packed; a sentence longer than
  :data:`MAX_SENTENCE_TOKENS`, 512, is read as windows of that many tokens, which bounds memory on text
  without sentence punctuation);
- with ``lowercase`` (``train --lowercase``) every token is lowercased before any of this, in training and in
  prediction alike: a detector for lowercase text (LAMBADA), whose shapes only tell words, digits and
  punctuation apart, and which reads cased text as its lowercased copy;
- every span ``(i, j)`` inside one sentence with ``j - i < max_width`` is scored by a one-hidden-layer MLP over
  ``[h_i, h_j, mean(h_i..h_j), width embedding]``. The MLP's first layer is linear, so it splits into one
  projection per part: the start and end parts are projections of the token states, and the mean's part is a
  difference of cumulative sums of projected states, which gives the whole ``(sentences, L, W)`` grid of spans
  without a Python loop over spans or tokens.

Training is binary cross-entropy over all candidate spans (gold: the document's annotated mention spans, a span
annotated twice counting once), Adam, shuffled batches of sentences of similar length. Dev mention F1 is measured
after each epoch at the best threshold, and the best epoch's weights are kept; its threshold (the probability
above which a span is a mention) is stored in the model. ``max_width`` is chosen from the training data as the
smallest width that covers ``coverage`` (99%) of the training mentions.

A model is one checkpoint (:mod:`coref.io.checkpoint`, kind ``mention_detector``: the config, the vocabulary,
float16 weights and what training reported), a few MB. Mentions are scored as exact spans (:func:`mention_scores`).

Command line::

    python -m coref.mentions train --corpus litbank [--data-dir DIR] --out runs/mentions/litbank.pt [--epochs N]
        [--lowercase]
    python -m coref.mentions evaluate --model M --corpus litbank --split dev [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from coref.corpora.registry import canonical_split, load_corpus
from coref.io.atomic import write_text_atomic
from coref.resolution.mentions import (
    MentionDetector,
    MentionDetectorConfig,
    choose_max_width,
    mention_scores,
    width_coverage,
)
from inference.checks import integer, output_file, real
from inference.commands.cli import Parser, run_subcommand
from inference.commands.options import add_data_dir, add_json, add_seed
from inference.training.resolution import train_detector


def _train_command(args: argparse.Namespace) -> int:
    """Train a mention detector on a corpus's train split, choosing the epoch and the threshold on dev, and write
    it (one torch file) atomically."""
    train = load_corpus(args.corpus, "train", args.data_dir).documents
    dev = load_corpus(args.corpus, "dev", args.data_dir).documents
    config = MentionDetectorConfig(
        vocabulary_size=args.vocabulary_size, hidden_size=args.hidden_size, layers=args.layers,
        max_width=args.max_width, coverage=args.coverage, dropout=args.dropout, lowercase=args.lowercase,
    )
    if not config.max_width:
        config = replace(config, max_width=choose_max_width(train, config.coverage))
    print(f"{args.corpus}: {len(train)} training documents, {len(dev)} dev documents; max width "
          f"{config.max_width} covers {100 * width_coverage(train, config.max_width):.2f}% of training mentions"
          + ("; tokens lowercased" if config.lowercase else ""), flush=True)
    model = train_detector(train, dev, config, epochs=args.epochs, seed=args.seed, batch_tokens=args.batch_tokens,
                           log=lambda line: tqdm.write(line, file=sys.stdout))
    model.info["corpus"] = args.corpus
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
    parser = Parser(prog="python -m coref.mentions", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    defaults = MentionDetectorConfig()

    train = commands.add_parser("train", help="train on a corpus's train split, choosing epoch and threshold on dev",
                                description=inspect.getdoc(_train_command))
    train.add_argument("--corpus", required=True, help="sample, litbank, ontogum, conll2012, or several joined by '+'")
    add_data_dir(train)
    train.add_argument("--out", required=True, type=output_file, help="model file to write (.pt)")
    train.add_argument("--epochs", type=integer(1), default=10, help="passes over the training sentences")
    add_seed(train, 23, help="seed of the initial weights and the batch shuffling")
    train.add_argument("--batch-tokens", type=integer(1), default=2000,
                       help="padded tokens per batch of sentences")
    train.add_argument("--vocabulary-size", type=integer(2), default=defaults.vocabulary_size,
                       help="most word types kept (training words seen at least twice), <pad> and <unk> included")
    train.add_argument("--hidden-size", type=integer(1), default=defaults.hidden_size,
                       help="BiLSTM state size per direction")
    train.add_argument("--layers", type=integer(1), default=defaults.layers, help="BiLSTM layers")
    train.add_argument("--dropout", type=real(0, 1), default=defaults.dropout, help="dropout rate")
    train.add_argument("--max-width", type=integer(0), default=0,
                       help="widest candidate span in tokens; 0 chooses it from the training mentions (--coverage)")
    train.add_argument("--coverage", type=real(0, math.nextafter(1.0, 2.0), include_low=False),
                       default=defaults.coverage,
                       help="share of training mentions the chosen max width must cover")
    train.add_argument("--lowercase", action="store_true",
                       help="lowercase every token, in training and whenever the model is used (lowercase text)")
    train.set_defaults(run=_train_command)

    evaluate = commands.add_parser("evaluate", help="score a detector's mentions on a corpus split",
                                   description=inspect.getdoc(_evaluate_command))
    evaluate.add_argument("--model", required=True, help="a model written by train")
    evaluate.add_argument("--corpus", required=True,
                          help="sample, litbank, ontogum, conll2012, or several joined by '+'")
    evaluate.add_argument("--split", required=True, help="the split to score")
    add_data_dir(evaluate)
    evaluate.add_argument("--batch-tokens", type=integer(1), default=4000, help="padded tokens per batch")
    add_json(evaluate, help="also write the scores as JSON here")
    evaluate.set_defaults(run=_evaluate_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

