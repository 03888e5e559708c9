"""How well :func:`coref.quotations.find_quotations` finds LitBank's annotated quotations (Sims and Bamman 2020).

For each document of a LitBank split, the rules run on the quotation layer's pre-tokenised text (one sentence a
line, no paragraph breaks, no spacing: the hardest reading for straight quotes) and the quotations found outside
any other (``depth`` 0) are compared with the annotated spans: precision, recall and F1 of exactly matching spans,
and of quoted tokens (a token inside a found and an annotated quotation is a match). Choices were made on dev;
test is scored once.

    python benchmarks/quotations.py --data-dir DATA [--splits dev test] [--out benchmarks/results]

Prints a markdown table and writes ``quotations.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.corpora.litbank_quotations import load_litbank_quotations
from coref.corpora.registry import resolve_data_dir
from coref.io.atomic import write_text_atomic
from coref.quotations import find_quotations, span_scores
from inference.checks import output_folder
from inference.commands.cli import Parser, run_main


def evaluate(split: str, data_dir: Path) -> dict:
    """Pooled scores of one split, and each document's."""
    pairs, documents = [], {}
    for document in load_litbank_quotations(split, data_dir):
        predicted = [(q.start, q.end) for q in find_quotations(document.tokens, document.sentences) if q.depth == 0]
        gold = [(q.start, q.end) for q in document.quotations]
        pairs.append((gold, predicted))
        one = span_scores([(gold, predicted)])
        documents[document.id] = {key: one[key] for key in ("exact_gold", "exact_predicted", "exact_matched")}
    return {**span_scores(pairs), "documents": documents}


def table(results: dict) -> str:
    lines = ["| split | quotations | found | exact P | exact R | exact F1 | token P | token R | token F1 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for split, r in results.items():
        lines.append(f"| {split} | {r['exact_gold']} | {r['exact_predicted']} | "
                     + " | ".join(f"{100 * r[f'{kind}_{m}']:.1f}" for kind in ("exact", "token")
                                  for m in ("precision", "recall", "f1")) + " |")
    return "\n".join(lines)


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/quotations.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding litbank/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--splits", nargs="+", choices=("train", "dev", "test"), default=["dev", "test"],
                        help="LitBank splits to score")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results", help="folder of quotations.json")
    return parser


def run(args: argparse.Namespace) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    results = {split: evaluate(split, data_dir) for split in args.splits}
    print(table(results))
    report = {**command_record(build_parser(), args), "results": results}
    write_text_atomic(Path(args.out) / "quotations.json", json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
