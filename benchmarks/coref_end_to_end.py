"""Coreference from raw text against coreference from gold mentions, on LitBank and OntoGUM (docs/coreference.md).

    python benchmarks/coref_end_to_end.py --data-dir DATA --runs runs

Scores, with the official scorer's semantics (:mod:`coref.metrics.coreference`), per corpus and split:

- **gold mentions**: the base resolver (``RUNS/resolver/CORPUS.npz``) on EntityNLM's preprocessed gold mentions;
- **predicted mentions**: the detector ``RUNS/mentions/CORPUS.pt`` and the ranker trained on its mentions
  ``RUNS/resolve/CORPUS.npz`` (``python -m coref.resolver train --detector``), against two keys: the corpus as
  annotated (LitBank with its singletons and nested mentions) and EntityNLM's mentions of it (outermost, no
  singletons; the response filtered alike), the key of the other rows;
- **EntityNLM posterior MAP** (mentions not given, test only): the figures the posterior command measured,
  ``benchmarks/results/reported/posterior_CORPUS-test-forward.json``.

Writes ``benchmarks/results/end_to_end.json`` and ``end_to_end.md`` (each command's CoNLL and JSON go to
``RUNS/end_to_end``) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runs import command_record  # noqa: E402
from coref import resolver  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from inference.checks import output_folder  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402

CORPORA = ("litbank", "ontogum")
METRICS = ("muc", "bcub", "ceafe", "lea")
COLUMNS = ("MUC", "B3", "CEAFe", "LEA", "CoNLL", "mention")


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/coref_end_to_end.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--runs", default="runs", help="folder holding resolver/, mentions/ and resolve/")
    parser.add_argument("--splits", nargs="+", default=["dev", "test"], help="splits to score")
    parser.add_argument("--results", type=output_folder, default=str(ROOT / "benchmarks" / "results"),
                        help="where end_to_end.json and end_to_end.md go")
    return parser


def scores(arguments: list[str], folder: Path, name: str) -> dict:
    """Run ``python -m coref.resolver predict`` with these arguments and return its JSON."""
    out = folder / f"{name}.json"
    status = resolver.main(["predict", *arguments, "--out", str(folder / f"{name}.conll"), "--json", str(out)])
    if status != 0:
        raise RuntimeError(f"coref.resolution.ranker predict {' '.join(arguments)} failed with status {status}")
    return json.loads(out.read_text())


def row(system: str, key: str, result: dict) -> dict:
    return {"system": system, "key": key, **{metric: 100 * result[metric]["f1"] for metric in METRICS},
            "conll_f1": 100 * result["conll_f1"], "mention_f1": 100 * result["mentions"]["f1"]}


def corpus_rows(args: argparse.Namespace, corpus: str, split: str, folder: Path) -> tuple[list[dict], dict]:
    """The table's rows for one corpus split, and the detector's own mention scores there."""
    runs = Path(args.runs)
    data = ["--corpus", corpus, "--split", split] + (["--data-dir", args.data_dir] if args.data_dir else [])
    gold = scores(["--model", str(runs / "resolver" / f"{corpus}.npz"), *data], folder, f"{corpus}-{split}-gold")
    predicted = scores(["--model", str(runs / "resolve" / f"{corpus}.npz"), "--detector",
                        str(runs / "mentions" / f"{corpus}.pt"), *data], folder, f"{corpus}-{split}-predicted")
    rows = [row("base resolver, gold mentions", "EntityNLM's mentions", gold),
            row("detector + resolver", "EntityNLM's mentions", predicted["entitynlm_mentions"]),
            row("detector + resolver", "as annotated", predicted["as_annotated"])]
    posterior = ROOT / "benchmarks" / "results" / "reported" / f"posterior_{corpus}-{split}-forward.json"
    if posterior.is_file():
        rows.append(row("EntityNLM posterior MAP (SIR, 100 particles)", "EntityNLM's mentions",
                        json.loads(posterior.read_text())["methods"]["sir"]["scores"]))
    return [{"corpus": corpus, "split": split, **entry} for entry in rows], predicted["detected_mentions"]


def markdown(rows: Sequence[dict]) -> str:
    lines = ["| corpus | split | system | key | " + " | ".join(COLUMNS) + " |",
             "|---|---|---|---|" + "---:|" * len(COLUMNS)]
    for entry in rows:
        values = [entry[metric] for metric in METRICS] + [entry["conll_f1"], entry["mention_f1"]]
        lines.append(f"| {entry['corpus']} | {entry['split']} | {entry['system']} | {entry['key']} | "
                     + " | ".join(f"{value:.2f}" for value in values) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        results = Path(args.results)
        folder = Path(args.runs) / "end_to_end"  # each command's CoNLL and JSON
        folder.mkdir(parents=True, exist_ok=True)
        rows, detected = [], {}
        for corpus in CORPORA:
            for split in args.splits:
                found, detected[f"{corpus}/{split}"] = corpus_rows(args, corpus, split, folder)
                rows.extend(found)
        write_text_atomic(results / "end_to_end.json",
                          json.dumps({**command_record(build_parser(), args), "rows": rows,
                                      "detected_mentions": detected}, indent=2) + "\n")
        table = markdown(rows)
        write_text_atomic(results / "end_to_end.md", table)
        print(table, end="")
        return 0

    return run_main(body)


if __name__ == "__main__":
    sys.exit(main())
