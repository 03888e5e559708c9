"""LitBank's 10-fold cross-validation (Bamman et al. 2020), end to end: the raw-text pipeline trained and scored
on each fold, the protocol behind the paper's 68.1 CoNLL F1 (docs/coreference.md).

    python benchmarks/litbank_cv.py --data-dir DATA --runs runs/litbank_cv --epochs 22

LitBank's 100 documents, sorted by id, are cut into 10 folds of 10. Fold k tests on folds k, chooses on fold
k + 1 (the detector's epoch and threshold) and trains on the other 80 documents: the mention detector
(:func:`inference.training.resolution.train_detector`), then the mention ranker on its mentions of the training
documents at ``--mention-threshold`` (:func:`inference.training.resolution.train_ranker`, singletons kept, as
LitBank annotates them, from ``--singleton-threshold``): the bundled pipeline's recipe (docs/coreference.md). The
test documents are resolved as raw text is (:meth:`coref.resolution.pipeline.CorefPipeline.resolve_documents`).
Each test fold is scored against the corpus as annotated (nested mentions and singletons), with the official
scorer's semantics. Reported: the CoNLL F1 over all 100 test documents at once (micro), and the mean and spread
of the ten folds' figures (the paper's average).

Every fold's models and scores are written under ``--runs`` as they finish, so a stopped run resumes where it
was. Writes ``litbank_cv.json`` to ``--results`` with the command that made it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.runs import command_record  # noqa: E402
from coref.corpora.registry import load_corpus  # noqa: E402
from coref.document import Document, Mention  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from coref.metrics.coreference import evaluate  # noqa: E402
from coref.resolution.mentions import MentionDetectorConfig, mention_scores  # noqa: E402
from coref.resolution.pipeline import CorefPipeline  # noqa: E402
from coref.resolution.ranker import with_predicted_mentions  # noqa: E402
from inference.checks import integer, output_folder, real  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402
from inference.training.resolution import train_detector, train_ranker  # noqa: E402

FOLDS = 10


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/litbank_cv.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding litbank/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--runs", type=output_folder, default="runs/litbank_cv", help="each fold's models and scores")
    parser.add_argument("--results", type=output_folder, default="benchmarks/results", help="where the JSON goes")
    parser.add_argument("--epochs", type=integer(1), default=22, help="the detector's epochs (default: 22)")
    parser.add_argument("--mention-threshold", type=real(0, 1, include_low=False), default=0.15,
                        help="the ranker's --mention-threshold (default: 0.15, the bundled ranker's)")
    parser.add_argument("--singleton-threshold", type=real(0, 1, include_low=False), default=0.5,
                        help="the ranker's --singleton-threshold (default: 0.5, the bundled ranker's)")
    parser.add_argument("--folds", type=integer(1), nargs="+", help="run only these folds (1-10), e.g. to share "
                        "the work between processes; the summary needs all ten")
    return parser


def litbank_folds(data_dir: str | None) -> list[list[Document]]:
    """LitBank's documents, all splits, sorted by id, in 10 folds of consecutive documents."""
    documents = sorted((document for split in ("train", "dev", "test")
                        for document in load_corpus("litbank", split, data_dir).documents), key=lambda d: d.id)
    size = len(documents) // FOLDS
    return [documents[k * size:(k + 1) * size] for k in range(FOLDS)]


def run_fold(k: int, folds: Sequence[Sequence[Document]], epochs: int, thresholds: tuple[float, float],
             folder: Path) -> dict:
    """Train fold ``k`` (0-based) and score its test documents; the record, also written to ``folder``."""
    test, dev = folds[k], folds[(k + 1) % FOLDS]
    train = [document for j, fold in enumerate(folds) if j not in (k, (k + 1) % FOLDS) for document in fold]
    started = time.perf_counter()
    detector = train_detector(train, dev, MentionDetectorConfig(), epochs=epochs, seed=23, progress=False)
    detector.save(folder / "mentions.pt")
    train_spans = detector.predict(train, threshold=thresholds[0])
    ranker = train_ranker([with_predicted_mentions(*pair) for pair in zip(train, train_spans)], progress=False)
    ranker.settings.update(keep_singletons=True, mention_threshold=thresholds[0], singleton_threshold=thresholds[1])
    ranker.save(folder / "resolver.pt")
    seconds = time.perf_counter() - started
    predictions = CorefPipeline(detector, ranker).resolve_documents(test)
    spans = detector.predict(test)  # at the detector's own threshold: its mention F1
    scores = evaluate(test, predictions)
    record = {"fold": k + 1, "test": [document.id for document in test], "dev": [document.id for document in dev],
              "training_seconds": round(seconds, 1), "conll_f1": 100 * scores.conll_f1,
              "mention_f1": 100 * mention_scores(test, spans)["f1"],
              "metrics": {name: 100 * getattr(scores, name).f1 for name in ("muc", "bcub", "ceafe", "lea")},
              "predictions": [[[m.start, m.end, m.entity] for m in p.mentions] for p in predictions]}
    write_text_atomic(folder / "scores.json", json.dumps(record) + "\n")
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        torch.set_num_threads(1)
        folds = litbank_folds(args.data_dir)
        records = []
        for k in range(FOLDS):
            folder = Path(args.runs) / f"fold{k + 1}"
            done = folder / "scores.json"
            if done.exists():
                records.append(json.loads(done.read_text()))
            elif args.folds is None or k + 1 in args.folds:
                folder.mkdir(parents=True, exist_ok=True)
                records.append(run_fold(k, folds, args.epochs, (args.mention_threshold, args.singleton_threshold),
                                        folder))
            print(f"fold {k + 1}: " + (f"CoNLL F1 {records[-1]['conll_f1']:.2f}, mention F1 "
                                       f"{records[-1]['mention_f1']:.2f}" if records and records[-1]["fold"] == k + 1
                                       else "not run"), flush=True)
        if len(records) < FOLDS:
            return 0
        documents = [document for fold in folds for document in fold]
        responses = [document.replace(mentions=[]) for document in documents]
        by_id = {document.id: number for number, document in enumerate(documents)}
        for record in records:
            for name, mentions in zip(record["test"], record["predictions"]):
                responses[by_id[name]] = documents[by_id[name]].replace(mentions=[Mention(*m) for m in mentions])
        micro = evaluate(documents, responses)
        folds_f1 = [record["conll_f1"] for record in records]
        summary = {
            **command_record(build_parser(), args),
            "task": "LitBank 10-fold cross-validation, raw text -> clusters, key as annotated (singletons, nested)",
            "hardware": "1 CPU thread per fold",
            "micro_conll_f1": 100 * micro.conll_f1,
            "mean_fold_conll_f1": statistics.mean(folds_f1),
            "stdev_fold_conll_f1": statistics.stdev(folds_f1),
            "folds": [{key: value for key, value in record.items() if key != "predictions"} for record in records],
        }
        write_text_atomic(Path(args.results) / "litbank_cv.json", json.dumps(summary, indent=2) + "\n")
        print(f"LitBank 10-fold CV: CoNLL F1 {summary['micro_conll_f1']:.2f} over all documents, fold mean "
              f"{summary['mean_fold_conll_f1']:.2f} +- {summary['stdev_fold_conll_f1']:.2f}")
        return 0

    return run_main(body)


if __name__ == "__main__":
    sys.exit(main())
