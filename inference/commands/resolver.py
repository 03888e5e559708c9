"""The resolver command: train the mention ranker of :mod:`coref.resolution.ranker` (its docstring, below in
``--help``, describes the model and its training) and resolve a corpus split with it.

Command line::

    python -m coref.resolver train --corpus litbank [--data-dir DIR] --out runs/resolver/litbank.pt [--lowercase]
        [--detector D [--held-out-fold F/K]]
    python -m coref.resolver predict --model M --corpus litbank --split test [--data-dir DIR] --out pred.conll
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from coref.corpora.folds import Fold
from coref.corpora.preprocess import drop_singletons
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.io.atomic import atomic_path, write_text_atomic
from coref.io.conll import write_conll
from coref.metrics.coreference import CorefEvaluation, evaluate
from coref.metrics.score import format_table
from coref.resolution import ranker
from coref.resolution.mentions import MentionDetector, mention_scores
from coref.resolution.ranker import (
    DataDir,
    MentionRanker,
    Syntax,
    end_to_end_evaluations,
    resolver_documents,
    resolver_syntax,
    unsure_singletons_dropped,
    with_predicted_mentions,
)
from inference.checks import output_file, real
from inference.commands.cli import Parser, command_parser, help_text, run_subcommand
from inference.commands.options import (
    add_command,
    add_held_out_fold,
    add_json,
    add_model_split,
    add_model_training,
    add_training_corpus,
)
from inference.training.resolution import train_ranker

SINGLETON_SHARE = 0.01  # the share of training mentions that are singletons from which a corpus annotates them


def _summary(evaluation: CorefEvaluation) -> str:
    return (
        f"CoNLL F1 {100 * evaluation.conll_f1:.2f} (MUC {100 * evaluation.muc.f1:.2f}, "
        f"B3 {100 * evaluation.bcub.f1:.2f}, CEAFe {100 * evaluation.ceafe.f1:.2f})"
    )


@dataclass(frozen=True)
class _Split:
    """A split as the resolver reads it: its documents (with the mentions it ranks), their parses, and the gold
    the predictions are scored against (the documents themselves, unless mentions are predicted)."""

    documents: list[Document]
    syntax: list[Syntax | None]
    gold: list[Document]
    probabilities: list[dict[tuple[int, int], float]] | None = None  # the detector's, of predicted mentions

    def predictions(self, model: MentionRanker) -> list[Document]:
        sure = self.probabilities or [{}] * len(self.documents)
        return [unsure_singletons_dropped(model.predict(document, parse), found, model.singleton_threshold)
                for document, parse, found in zip(self.documents, self.syntax, sure)]


def _load(corpus: str, split: str, data_dir: DataDir, detector: str | None = None,
          threshold: float | None = None, held_out: Fold | None = None) -> _Split:
    """Gold mentions: EntityNLM's preprocessed documents and their parses. With a mention ``detector``: the
    documents as annotated, their mentions the detector's at ``threshold`` (default: its own; labelled by the
    gold), no parses (raw text has none). Without the documents of the ``held_out`` fold."""
    if detector is None:
        documents = resolver_documents(corpus, split, data_dir)
        documents = held_out.outside(documents) if held_out else documents
        return _Split(documents, resolver_syntax(corpus, split, data_dir, documents), documents)
    gold = load_corpus(corpus, split, data_dir).documents
    gold = held_out.outside(gold) if held_out else gold
    probabilities = MentionDetector.load(detector).span_probabilities(gold, threshold=threshold)
    return _Split([with_predicted_mentions(document, sorted(found)) for document, found in zip(gold, probabilities)],
                  [None] * len(gold), gold, probabilities)


def _evaluations(split: _Split, predictions: Sequence[Document]) -> dict[str, CorefEvaluation]:
    """Scores against the gold as annotated and, for predicted mentions, against both keys
    (:func:`end_to_end_evaluations`)."""
    if split.gold is split.documents:
        return {"as_annotated": evaluate(split.gold, predictions)}
    return end_to_end_evaluations(split.gold, predictions)


def _train_command(args: argparse.Namespace) -> int:
    """Train on a corpus's train split (cort's latent structured perceptron), scoring dev after each epoch, and
    write the model (.pt) atomically."""
    detector = MentionDetector.load(args.detector) if args.detector else None
    if detector and detector.config.lowercase != args.lowercase:
        mode = "without" if args.lowercase else "with"  # the detector's
        raise ValueError(f"{args.detector} was trained {mode} --lowercase: train the resolver on its mentions "
                         f"{mode} it too")
    if args.mention_threshold is not None and not args.detector:
        raise ValueError("--mention-threshold needs a --detector whose mentions the ranker is trained on")
    if args.held_out_fold and detector:
        fold = detector.info.get("held_out_fold")
        if fold != str(args.held_out_fold):
            trained = f"fold {fold}" if fold else "no fold"
            raise ValueError(f"{args.detector} was trained with {trained} held out, not {args.held_out_fold}: "
                             "train the resolver of a fold on the mentions of that fold's detector")
    train = _load(args.corpus, "train", args.data_dir, args.detector, args.mention_threshold, args.held_out_fold)
    dev = _load(args.corpus, "dev", args.data_dir, args.detector, args.mention_threshold)
    parsed = sum(parse is not None for parse in train.syntax)
    print(f"{args.corpus}: {len(train.documents)} training documents ({parsed} parsed"
          + (f"; fold {args.held_out_fold} held out" if args.held_out_fold else "") + f"), {len(dev.documents)} dev "
          f"documents" + (f", mentions from {args.detector}" if args.detector else "")
          + ("; tokens lowercased" if args.lowercase else ""))
    # Trained on predicted mentions of a corpus that annotates singletons, the model writes them too. A corpus
    # annotates them when they are at least 1% of its mentions: OntoGUM's 7 in 23,320 are slips, not a convention.
    mentions = sum(len(document.mentions) for document in train.gold)
    singletons = mentions - sum(len(drop_singletons(document.mentions)) for document in train.gold)
    keep_singletons = args.detector is not None and singletons >= SINGLETON_SHARE * mentions

    scoring = []  # seconds spent scoring dev, kept out of the training time

    def report(epoch: int, model: MentionRanker) -> None:
        started = time.perf_counter()
        model.settings.update(keep_singletons=keep_singletons, singleton_threshold=args.singleton_threshold)
        tqdm.write(f"epoch {epoch}: dev {_summary(_evaluations(dev, dev.predictions(model))['as_annotated'])}")
        scoring.append(time.perf_counter() - started)

    started = time.perf_counter()
    model = train_ranker(
        train.documents, train.syntax, epochs=args.epochs, seed=args.seed, cost_scaling=args.cost_scaling,
        lowercase=args.lowercase, on_epoch=report,
    )
    training = time.perf_counter() - started - sum(scoring)
    model.settings.update(corpus=args.corpus, keep_singletons=keep_singletons, mention_threshold=args.mention_threshold,
                          singleton_threshold=args.singleton_threshold,
                          detector=Path(args.detector).name if args.detector else None,
                          held_out_fold=str(args.held_out_fold) if args.held_out_fold else None)
    model.save(args.out)
    print(f"trained in {training:.1f} s (+ {sum(scoring):.1f} s scoring dev); model saved to {args.out}")
    return 0


def _predict_command(args: argparse.Namespace) -> int:
    """Resolve a corpus split with a trained model, write the clusters as CoNLL and score them against the
    split's gold (both files written atomically)."""
    model = MentionRanker.load(args.model)
    split = _load(args.corpus, args.split, args.data_dir, args.detector, model.mention_threshold)
    predictions = split.predictions(model)
    with atomic_path(args.out) as partial:
        write_conll(predictions, partial)
    evaluations = _evaluations(split, predictions)
    for key, evaluation in evaluations.items():
        print(f"key: {key.replace('_', ' ')}" if len(evaluations) > 1 else "", format_table(evaluation), sep="\n")
    if args.json:
        result = {key: evaluation.to_json() for key, evaluation in evaluations.items()}
        if args.detector:
            result["detected_mentions"] = mention_scores(split.gold, [[m.span for m in d.mentions]
                                                                      for d in split.documents])
        write_text_atomic(args.json, json.dumps(result if args.detector else result["as_annotated"], indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    parser, commands = command_parser("python -m coref.resolver", help_text(__doc__, ranker))

    train = add_command(commands, "train", _train_command,
                        help="train on a corpus's train split, scoring dev after each epoch")
    add_training_corpus(train)
    add_held_out_fold(train)
    add_model_training(train, 5, "passes over the training documents (cort: 5)", "seed of the document shuffling")
    train.add_argument("--cost-scaling", type=real(0), default=100.0,
                       help="factor of the cost of a wrong decision in cost-augmented decoding (cort: 100)")
    train.add_argument("--detector", help="train on this mention detector's mentions (python -m coref.mentions) "
                       "of the documents as annotated, without parses, instead of the gold mentions")
    train.add_argument("--mention-threshold", type=real(0, 1, include_low=False), metavar="P",
                       help="with --detector: train on (and, in use, take) every span the detector gives at least this "
                       "probability, a lower threshold than its own (tuned for mention F1) showing the ranker more "
                       "candidates; on a corpus without singletons those it links to nothing are dropped")
    train.add_argument("--singleton-threshold", type=real(0, 1, include_low=False), metavar="P",
                       help="with --detector, on a corpus with singletons: the probability a mention the ranker links "
                       "to nothing needs to be kept (default: every one kept)")
    train.add_argument("--lowercase", action="store_true",
                       help="lowercase every token, in training and whenever the model is used (lowercase text); "
                       "required with a --detector trained with --lowercase, refused with any other")

    predict = add_command(commands, "predict", _predict_command,
                          help="resolve a split, write CoNLL and score it against its gold")
    add_model_split(predict, "the split to resolve")
    predict.add_argument("--out", required=True, type=output_file, help="CoNLL file to write")
    add_json(predict, help="also write the scores as JSON here")
    predict.add_argument("--detector", help="resolve this mention detector's mentions of the documents as "
                         "annotated (scored against both keys) instead of the gold mentions")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

