"""A part-of-speech tagger: the Universal POS tag (UPOS) of every token of a tokenised document.

:mod:`coref.metrics.stories` needs it for attribute consistency (Papalampidi et al. 2022, §2: an entity's
attributes are the verbs and adjectives of the sentences that mention it). No well-kept library's English tagger
installs from the package registries reachable here (spaCy's ``en_core_web_sm`` and NLTK's tagger data are
downloaded from GitHub, Stanza's models from Hugging Face; none of them is on PyPI), so this is a small tagger
of our own, trained on the UPOS column of OntoGUM's CoNLL-U files (GUM's train split; the epoch is chosen on dev)
and bundled as ``coref/resolution/pretrained/pos.pt`` (``train`` with the defaults: 20 epochs, about 3 minutes on
one CPU core). Token accuracy (``benchmarks/results/pos.json``): 96.45% on dev, 96.25% on test (VERB F1 95.0, ADJ F1
89.7), 89.49% on test2 (GENTLE's out-of-domain genres); 86.4% on the 11% of test words outside its vocabulary.

Model: a BiLSTM over each sentence with a softmax over the tags at every token. A token is read as the features
of :mod:`coref.resolution.mentions` (same helpers): its lowercased word's embedding (training words seen at least
``min_count`` times, the rest ``<unk>``), its shape (capitalised, all caps, digits, punctuation, other), and its
hashed suffixes of 1, 2 and 3 letters, which carry most of what a tagger knows about an unseen word (``-ly``,
``-ed``, ``-ous``). During training a word is read as ``<unk>`` with probability ``word_dropout``, so that the
unknown word's embedding is learnt on frequent contexts too. Cross-entropy, Adam, shuffled batches of sentences
of similar length; the weights of the epoch with the best dev accuracy are kept.

A model is one checkpoint (:mod:`coref.io.checkpoint`, kind ``pos_tagger``: the config, the vocabulary, the tag
set, float16 weights and what training reported), under 2 MB. Tagging is batched over all the sentences of all the
documents given, on the CPU, without gradients.

Command line::

    python -m coref.pos train [--data-dir DIR] --out coref/resolution/pretrained/pos.pt [--epochs N] [--seed S]
    python -m coref.pos evaluate [--model M] [--split dev test test2] [--data-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from coref.corpora.registry import canonical_split
from coref.io.atomic import write_text_atomic
from coref.resolution.pos import BUNDLED, CORPUS, PosTagger, PosTaggerConfig, ontogum_tagged, tag_scores
from inference.checks import integer, output_file, real
from inference.commands.cli import Parser, run_subcommand
from inference.commands.options import add_data_dir, add_json, add_seed
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
    parser = Parser(prog="python -m coref.pos", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    data_help = "folder holding the corpora (default: $ENTITYLM_DATA)"
    defaults = PosTaggerConfig()

    train = commands.add_parser("train", help="train on OntoGUM's train split, choosing the epoch on dev",
                                description=inspect.getdoc(_train_command))
    add_data_dir(train, help=data_help)
    train.add_argument("--out", required=True, type=output_file, help="model file to write (.pt)")
    train.add_argument("--epochs", type=integer(1), default=20, help="passes over the training sentences")
    add_seed(train, 23, help="seed of the initial weights, dropout and shuffling")
    train.add_argument("--batch-tokens", type=integer(1), default=1000, help="padded tokens per batch of sentences")
    train.add_argument("--vocabulary-size", type=integer(2), default=defaults.vocabulary_size,
                       help="most word types kept (training words seen at least twice), <pad> and <unk> included")
    train.add_argument("--hidden-size", type=integer(1), default=defaults.hidden_size,
                       help="BiLSTM state size per direction")
    train.add_argument("--layers", type=integer(1), default=defaults.layers, help="BiLSTM layers")
    train.add_argument("--dropout", type=real(0, 1), default=defaults.dropout, help="dropout rate")
    train.add_argument("--word-dropout", type=real(0, 1), default=defaults.word_dropout,
                       help="chance that a training word is read as <unk>")
    train.set_defaults(run=_train_command)

    evaluate = commands.add_parser("evaluate", help="score a tagger on OntoGUM splits",
                                   description=inspect.getdoc(_evaluate_command))
    evaluate.add_argument("--model", default=str(BUNDLED), help="a model written by train")
    evaluate.add_argument("--split", nargs="+", default=["dev", "test", "test2"],
                          help="the splits to score")
    add_data_dir(evaluate, help=data_help)
    evaluate.add_argument("--batch-tokens", type=integer(1), default=4000, help="padded tokens per batch")
    add_json(evaluate, help="also write the scores as JSON here")
    evaluate.set_defaults(run=_evaluate_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

