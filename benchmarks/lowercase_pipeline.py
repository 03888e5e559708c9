"""Coreference of lowercase text (LAMBADA's kind): a lowercase-trained pipeline against the bundled cased one.

    python benchmarks/lowercase_pipeline.py --data-dir DATA \
        --detector runs/mentions/litbank_lower.pt --resolver runs/resolver/litbank_lower.npz

The lowercase pipeline is trained like the bundled one with ``--lowercase`` (both models then lowercase whatever
they read)::

    python -m coref.mentions train --corpus litbank --data-dir DATA --epochs 22 --lowercase \
        --out runs/mentions/litbank_lower.pt
    python -m coref.resolver train --corpus litbank --data-dir DATA --detector runs/mentions/litbank_lower.pt \
        --lowercase --out runs/resolver/litbank_lower.npz

LitBank's split (test by default) is resolved from its tokens and sentences, by three systems: the lowercase
pipeline on the lowercased text; the bundled (cased) pipeline on the lowercased text, which is what it loses on
lowercase input; the bundled pipeline on the text as written, for reference (``end_to_end.md``'s rows). Each is
scored with the official scorer's semantics against the two keys of ``end_to_end.md`` (the corpus as annotated,
and EntityNLM's mentions of it), whose tokens keep their case: scores compare spans only.

Writes ``lowercase_pipeline.json`` and ``lowercase_pipeline.md`` to ``--results`` and prints the table.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.coref_end_to_end import row  # noqa: E402
from benchmarks.runs import command_record  # noqa: E402
from coref.corpora.registry import canonical_split, load_corpus  # noqa: E402
from coref.document import Document  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from coref.resolution.pipeline import BUNDLED, CorefPipeline  # noqa: E402
from coref.resolution.ranker import end_to_end_evaluations, lowercased  # noqa: E402
from inference.checks import output_folder  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402

CORPUS = "litbank"
KEYS = {"as_annotated": "as annotated", "entitynlm_mentions": "EntityNLM's mentions"}
COLUMNS = ("mention P", "mention R", "mention F1", "MUC", "B3", "CEAFe", "CoNLL")


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/lowercase_pipeline.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--split", default="test", help="the LitBank split to resolve")
    parser.add_argument("--detector", default="runs/mentions/litbank_lower.pt",
                        help="the lowercase mention detector (python -m coref.mentions train --lowercase)")
    parser.add_argument("--resolver", default="runs/resolver/litbank_lower.npz",
                        help="the lowercase ranker trained on its mentions (python -m coref.resolver train "
                        "--lowercase --detector)")
    parser.add_argument("--results", type=output_folder, default=str(ROOT / "benchmarks" / "results"),
                        help="where lowercase_pipeline.json and lowercase_pipeline.md go")
    return parser


def system_rows(system: str, pipeline: CorefPipeline, gold: Sequence[Document], lowercase_text: bool) -> list[dict]:
    """The rows (one per key) of ``pipeline`` resolving the tokens of ``gold``, lowercased first with
    ``lowercase_text``, with mention precision and recall beside :func:`benchmarks.coref_end_to_end.row`'s F1s;
    ``seconds``: resolving and scoring."""
    started = time.perf_counter()
    documents = [lowercased(document) for document in gold] if lowercase_text else gold
    evaluations = end_to_end_evaluations(gold, pipeline.resolve_documents(documents))
    seconds = time.perf_counter() - started
    rows = []
    for key, evaluation in evaluations.items():
        result = evaluation.to_json()
        rows.append({**row(system, KEYS[key], result), "text": "lowercased" if lowercase_text else "as written",
                     "mention_precision": 100 * result["mentions"]["precision"],
                     "mention_recall": 100 * result["mentions"]["recall"], "seconds": seconds})
    return rows


def markdown(rows: Sequence[dict], split: str) -> str:
    lines = [f"| system | text (LitBank {split}) | key | " + " | ".join(COLUMNS) + " |",
             "|---|---|---|" + "---:|" * len(COLUMNS)]
    for entry in rows:
        values = [entry[name] for name in ("mention_precision", "mention_recall", "mention_f1", "muc", "bcub",
                                           "ceafe", "conll_f1")]
        lines.append(f"| {entry['system']} | {entry['text']} | {entry['key']} | "
                     + " | ".join(f"{value:.2f}" for value in values) + " |")
    return "\n".join(lines) + "\n"


def provenance(pipeline: CorefPipeline, detector: str | Path, resolver: str | Path) -> dict:
    """What the models' files say of their training (paths relative to the repository where they lie in it)."""
    info = {key: value for key, value in pipeline.detector.info.items() if key != "history"}
    return {"detector": {"path": os.path.relpath(detector, ROOT), "lowercase": pipeline.detector.config.lowercase,
                         "threshold": pipeline.detector.config.threshold, **info},
            "resolver": {"path": os.path.relpath(resolver, ROOT), "lowercase": pipeline.ranker.lowercase,
                         **pipeline.ranker.settings}}


def describe_models(models: dict) -> str:
    """One line per model: its file and how it was trained."""
    detector, resolver = models["detector"], models["resolver"]
    case = {True: "lowercase", False: "cased"}
    return (f"- `{detector['path']}`: {case[detector['lowercase']]} detector, best epoch {detector['best_epoch']} "
            f"of {detector['epochs']}, dev mention F1 {100 * detector['dev_f1']:.2f}, trained in "
            f"{detector['training_seconds']:.0f} s\n"
            f"- `{resolver['path']}`: {case[resolver['lowercase']]} ranker, {resolver['epochs']} epochs on the "
            f"mentions of `{resolver['detector']}`\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        lower = CorefPipeline.load(args.detector, args.resolver)
        bundled = CorefPipeline.load()
        split = canonical_split(CORPUS, args.split)
        gold = load_corpus(CORPUS, split, args.data_dir).documents
        rows = [*system_rows("lowercase pipeline", lower, gold, lowercase_text=True),
                *system_rows("bundled (cased) pipeline", bundled, gold, lowercase_text=True),
                *system_rows("bundled (cased) pipeline", bundled, gold, lowercase_text=False)]
        record = command_record(build_parser(), args)
        command = record["command"]
        result = {"corpus": CORPUS, "split": split, **record, "rows": rows,
                  "models": {"lowercase": provenance(lower, args.detector, args.resolver),
                             "bundled": provenance(bundled, BUNDLED["detector"], BUNDLED["resolver"])}}
        results = Path(args.results)
        write_text_atomic(results / "lowercase_pipeline.json", json.dumps(result, indent=2) + "\n")
        table = markdown(rows, split)
        models = "".join(describe_models(models) for models in result["models"].values())
        write_text_atomic(results / "lowercase_pipeline.md", f"{table}\n`{command}`\n\n{models}")
        print(table, end="")
        return 0

    return run_main(body)


if __name__ == "__main__":
    sys.exit(main())
