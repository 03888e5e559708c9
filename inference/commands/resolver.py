"""The base coreference resolver: cort's mention-ranking model with latent antecedents, over gold mentions.

Martschat & Strube (2015), as digested in reference-notes §2.1. Every mention ``j`` (``1..n`` in
``Document.mentions`` order) ranks all earlier mentions and the dummy :data:`~coref.resolution.kbest.ROOT` ("new
entity"); an arc ``i -> j`` scores the sum of the weights of its hashed categorical features, and the root arc has no
features and scores 0. Decoding is cort's greedy one: every mention takes its best antecedent
(:func:`coref.resolution.kbest.greedy_tree`), and the clusters are the transitive closure, singletons dropped.

Prediction ranks bounded candidates, as coarse-to-fine rankers do (:func:`candidate_antecedents`): the
:data:`ANTECEDENT_WINDOW` (500) mentions just before each mention and, before that window, those of the
:data:`FAR_MATCHES` (5) most recent mentions with its lowercased head word or its lowercased string (dictionary
look-ups). Features are built and scored a chunk of anaphors at a time (:meth:`MentionRanker.best_antecedents`),
so time and memory grow linearly with the text: a 120K-word book resolves in well under a minute and 1 GB. No
LitBank or OntoGUM document has more than 501 mentions, so there every earlier mention is a candidate and the
predictions are exactly the greedy decoding of the full table. :meth:`MentionRanker.arc_scores` is that full
(quadratic) table, which EntityNLM's k-best lists are built from on corpus-length documents; training reads the
full table too.

Documents are the corpus after the paper's preprocessing with case and numbers kept (:func:`resolver_documents`),
so the resolver sees exactly EntityNLM's mentions and token positions. Mention heads and word classes come from
the CoNLL-U parse where a corpus ships one (OntoGUM, :func:`resolver_syntax`) and from heuristics elsewhere.

Learning is cort's latent structured perceptron: for each anaphor the best arc under cost-augmented scores
(cost 2 for a wrong "new entity", 1 for a wrong link, times ``cost_scaling``) is compared with the best arc
consistent with the gold clusters (the best-scoring coreferent antecedent, or the root for an entity's first
mention); when they differ the consistent arc's features gain 1 and the predicted arc's lose 1. Updates are
online, anaphor by anaphor in document order, with documents shuffled each epoch; the weights returned are
the average over all anaphors seen.

A model trained with ``lowercase`` (``train --lowercase``) lowercases every document before reading it, in
training and in prediction alike (its predictions keep the document's own tokens): a resolver for lowercase text
(LAMBADA), which cannot tell names by their capital. Trained on a detector's mentions, it must lowercase exactly
when the detector does (``python -m coref.mentions train --lowercase``), or training refuses.

Command line::

    python -m coref.resolver train --corpus litbank [--data-dir DIR] --out runs/resolver/litbank.pt [--lowercase]
    python -m coref.resolver predict --model M --corpus litbank --split test [--data-dir DIR] --out pred.conll
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from coref.corpora.preprocess import drop_singletons
from coref.corpora.registry import load_corpus
from coref.document import Document
from coref.io.atomic import atomic_path, write_text_atomic
from coref.io.conll import write_conll
from coref.metrics.coreference import CorefEvaluation, evaluate
from coref.metrics.score import format_table
from coref.resolution.mentions import MentionDetector, mention_scores
from coref.resolution.ranker import (
    DataDir,
    MentionRanker,
    Syntax,
    end_to_end_evaluations,
    resolver_documents,
    resolver_syntax,
    with_predicted_mentions,
)
from inference.checks import integer, output_file, real
from inference.commands.cli import Parser, run_subcommand
from inference.commands.options import add_data_dir, add_json, add_seed
from inference.training.resolution import train_ranker


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

    def predictions(self, model: MentionRanker) -> list[Document]:
        return [model.predict(document, parse) for document, parse in zip(self.documents, self.syntax)]


def _load(corpus: str, split: str, data_dir: DataDir, detector: str | None = None) -> _Split:
    """Gold mentions: EntityNLM's preprocessed documents and their parses. With a mention ``detector``: the
    documents as annotated, their mentions the detector's (labelled by the gold), no parses (raw text has
    none)."""
    if detector is None:
        documents = resolver_documents(corpus, split, data_dir)
        return _Split(documents, resolver_syntax(corpus, split, data_dir, documents), documents)
    gold = load_corpus(corpus, split, data_dir).documents
    spans = MentionDetector.load(detector).predict(gold)
    return _Split([with_predicted_mentions(*pair) for pair in zip(gold, spans)], [None] * len(gold), gold)


def _evaluations(split: _Split, predictions: Sequence[Document]) -> dict[str, CorefEvaluation]:
    """Scores against the gold as annotated and, for predicted mentions, against both keys
    (:func:`end_to_end_evaluations`)."""
    if split.gold is split.documents:
        return {"as_annotated": evaluate(split.gold, predictions)}
    return end_to_end_evaluations(split.gold, predictions)


def _train_command(args: argparse.Namespace) -> int:
    """Train on a corpus's train split (cort's latent structured perceptron), scoring dev after each epoch, and
    write the model (.pt) atomically."""
    if args.detector and MentionDetector.load(args.detector).config.lowercase != args.lowercase:
        mode = "without" if args.lowercase else "with"  # the detector's
        raise ValueError(f"{args.detector} was trained {mode} --lowercase: train the resolver on its mentions "
                         f"{mode} it too")
    train = _load(args.corpus, "train", args.data_dir, args.detector)
    dev = _load(args.corpus, "dev", args.data_dir, args.detector)
    parsed = sum(parse is not None for parse in train.syntax)
    print(f"{args.corpus}: {len(train.documents)} training documents ({parsed} parsed), {len(dev.documents)} dev "
          f"documents" + (f", mentions from {args.detector}" if args.detector else "")
          + ("; tokens lowercased" if args.lowercase else ""))
    # Trained on predicted mentions of a corpus that annotates singletons, the model writes them too.
    keep_singletons = args.detector is not None and any(
        len(drop_singletons(document.mentions)) < len(document.mentions) for document in train.gold)

    scoring = []  # seconds spent scoring dev, kept out of the training time

    def report(epoch: int, model: MentionRanker) -> None:
        started = time.perf_counter()
        model.settings["keep_singletons"] = keep_singletons
        tqdm.write(f"epoch {epoch}: dev {_summary(_evaluations(dev, dev.predictions(model))['as_annotated'])}")
        scoring.append(time.perf_counter() - started)

    started = time.perf_counter()
    model = train_ranker(
        train.documents, train.syntax, epochs=args.epochs, seed=args.seed, cost_scaling=args.cost_scaling,
        lowercase=args.lowercase, on_epoch=report,
    )
    training = time.perf_counter() - started - sum(scoring)
    model.settings.update(corpus=args.corpus, keep_singletons=keep_singletons,
                          detector=Path(args.detector).name if args.detector else None)
    model.save(args.out)
    print(f"trained in {training:.1f} s (+ {sum(scoring):.1f} s scoring dev); model saved to {args.out}")
    return 0


def _predict_command(args: argparse.Namespace) -> int:
    """Resolve a corpus split with a trained model, write the clusters as CoNLL and score them against the
    split's gold (both files written atomically)."""
    model = MentionRanker.load(args.model)
    split = _load(args.corpus, args.split, args.data_dir, args.detector)
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
    parser = Parser(prog="python -m coref.resolver", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="train on a corpus's train split, scoring dev after each epoch",
                                description=inspect.getdoc(_train_command))
    train.add_argument("--corpus", required=True, help="sample, litbank, ontogum, conll2012, or several joined by '+'")
    add_data_dir(train)
    train.add_argument("--out", required=True, type=output_file, help="model file to write (.pt)")
    train.add_argument("--epochs", type=integer(1), default=5, help="passes over the training documents (cort: 5)")
    add_seed(train, 23, help="seed of the document shuffling")
    train.add_argument("--cost-scaling", type=real(0), default=100.0,
                       help="factor of the cost of a wrong decision in cost-augmented decoding (cort: 100)")
    train.add_argument("--detector", help="train on this mention detector's mentions (python -m coref.mentions) "
                       "of the documents as annotated, without parses, instead of the gold mentions")
    train.add_argument("--lowercase", action="store_true",
                       help="lowercase every token, in training and whenever the model is used (lowercase text); "
                       "required with a --detector trained with --lowercase, refused with any other")
    train.set_defaults(run=_train_command)

    predict = commands.add_parser("predict", help="resolve a split, write CoNLL and score it against its gold",
                                  description=inspect.getdoc(_predict_command))
    predict.add_argument("--model", required=True, help="a model written by train")
    predict.add_argument("--corpus", required=True,
                         help="sample, litbank, ontogum, conll2012, or several joined by '+'")
    predict.add_argument("--split", required=True, help="the split to resolve")
    add_data_dir(predict)
    predict.add_argument("--out", required=True, type=output_file, help="CoNLL file to write")
    add_json(predict, help="also write the scores as JSON here")
    predict.add_argument("--detector", help="resolve this mention detector's mentions of the documents as "
                         "annotated (scored against both keys) instead of the gold mentions")
    predict.set_defaults(run=_predict_command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)

