"""The gap command: the raw-text pipeline of :mod:`coref.resolution.pipeline` scored on GAP, as
:mod:`coref.corpora.gap` does it (its docstring, below in ``--help``, says how), in the snippet-context setting:
the URL unused.

Command line::

    python -m coref.gap --split test --data-dir DATA [--detector M --resolver R] [--json OUT] [--system-out FILE]

``--system-out`` writes the decisions as the official scorer's system file: ``python gap_scorer.py --gold_tsv
DATA/gap/gap-test.tsv --system_tsv FILE`` then prints the same figures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from coref.corpora import gap
from coref.corpora.gap import evaluate_gap, format_scores, load_gap
from coref.document import Document
from coref.io.atomic import write_text_atomic
from coref.io.text import TokenizedText, tokenize
from coref.resolution.pipeline import CorefPipeline
from inference.checks import integer, output_file
from inference.commands.cli import Parser, help_text, run_main
from inference.commands.options import add_data_dir, add_json


def build_parser() -> Parser:
    """The split, the models, --limit, --json and --system-out."""
    parser = Parser(prog="python -m coref.gap", description=help_text(__doc__, gap))
    parser.add_argument("--split", default="test", help="dev, test or validation")
    add_data_dir(parser, help="folder holding gap/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--detector", help="mention detector (default: the bundled one)")
    parser.add_argument("--resolver", help="mention ranker trained on that detector's mentions (default: bundled)")
    parser.add_argument("--limit", type=integer(1), help="score only the first N examples (a quick look)")
    add_json(parser, help="also write the scores as JSON here")
    parser.add_argument("--system-out", metavar="FILE", type=output_file,
                        help="also write the decisions here as gap_scorer.py's system TSV (ID, A-coref, B-coref)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Score the pipeline on a GAP split; returns the exit status."""
    args = build_parser().parse_args(argv)

    def score() -> int:
        examples = load_gap(args.split, args.data_dir)[: args.limit]
        pipeline = CorefPipeline.load(args.detector, args.resolver)

        def resolve(text: str) -> tuple[Document, TokenizedText]:
            tokenized = tokenize(text)
            return pipeline.resolve(tokenized), tokenized

        scores = {"split": args.split, **evaluate_gap(examples, resolve, args.system_out)}
        print(format_scores(scores))
        if args.json:
            write_text_atomic(args.json, json.dumps(scores, indent=2) + "\n")
        return 0

    return run_main(score)
