"""The mneme_eval command: language-modelling and generation metrics of MNEMELM story LMs, as
:mod:`inference.evaluation.mneme` computes them (its docstring, below in ``--help``, says what each key holds).

    python -m inference.mneme_eval --checkpoints runs/mneme/vanilla/model.pt runs/mneme/d_mneme/model.pt \\
        --corpus litbank+ontogum+inscript --split test --cache-sizes 500 100 50 10 --samples 5 \\
        --out benchmarks/results/mneme.json --plots benchmarks/results/
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coref.io.atomic import write_text_atomic
from inference.checks import integer, output_file, output_folder, probability, real
from inference.commands.cli import Parser, config_of, help_text, run_main
from inference.commands.options import add_corpus_split, add_data_dir, add_device, add_seed
from inference.evaluation import mneme
from inference.evaluation.mneme import (
    GENERATION,
    KEY,
    StoryEvaluationConfig,
    evaluate_story_models,
    format_table,
    format_usage_table,
    plot,
)


def build_parser() -> Parser:
    """The checkpoints, the stories, the language-modelling and the generation metrics."""
    parser = Parser(prog="python -m inference.mneme_eval", description=help_text(__doc__, mneme))
    parser.add_argument("--checkpoints", nargs="+", required=True,
                        help="story LM checkpoints (OUT/model.pt of python -m inference.train), one per model")
    add_corpus_split(parser, corpus="litbank+ontogum+inscript",
                     corpus_help="story corpora with gold coreference, several joined with '+'")
    add_data_dir(parser)
    parser.add_argument("--max-tokens", type=integer(1), default=1000,
                        help="cut documents into stories of at most this many tokens, as in training")
    parser.add_argument("--cache-sizes", nargs="+", type=integer(0), default=[500, 100, 50, 10],
                        help="T-XL memory sizes to evaluate at (the largest is the full context)")
    parser.add_argument("--sections", type=integer(1), default=10, help="L: equal sections per story (Figure 4)")
    parser.add_argument("--batch-tokens", type=integer(1), default=4_000, help="padded story tokens per batch")
    parser.add_argument("--out", type=output_file,
                        help="JSON results file: the keys language_modelling and generation are written, "
                        "the others kept")
    parser.add_argument("--plots", type=output_folder, help="folder for mneme_figure3.png and mneme_figure4.png")
    parser.add_argument("--skip-lm", action="store_true", help="only the generation metrics (with --samples)")
    generation = parser.add_argument_group("generation metrics (Table 2)")
    generation.add_argument("--samples", type=integer(0), default=0,
                            help="stories drawn per prompt and model (paper 5; 0: no generation metrics)")
    generation.add_argument("--prompts", type=integer(1),
                            help="use this many prompted stories of the split, evenly spread (default: all)")
    generation.add_argument("--top-p", type=probability, default=0.8, help="nucleus sampling's p (paper 0.8)")
    generation.add_argument("--temperature", type=real(0, include_low=False), default=1.0,
                            help="softmax temperature (paper 1)")
    add_seed(generation, help="random seed of the samples (the same per model)")
    generation.add_argument("--generation-batch", type=integer(1), default=32, help="stories sampled at a time")
    generation.add_argument("--detector", help="the annotator's mention detector (default: the bundled one)")
    generation.add_argument("--resolver", help="the annotator's mention ranker (default: the bundled one)")
    generation.add_argument("--pos-model", help="the annotator's part-of-speech tagger (default: the bundled one)")
    add_device(parser)
    return parser


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Evaluate every checkpoint; write the results file (``--out``, its other keys kept) and the figures
    (``--plots``); this run's entries."""
    entries, results = evaluate_story_models(config_of(StoryEvaluationConfig, args))
    if args.out:
        write_text_atomic(args.out, json.dumps(results, indent=2) + "\n")
    if args.plots and KEY in entries:
        for path in plot(entries[KEY], Path(args.plots)):
            print(f"wrote {path}", file=sys.stderr)
    return entries


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns its exit status."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        entries = run(args)
        tables = {KEY: format_table, GENERATION: format_usage_table}
        print("\n\n".join(tables[key](entry) for key, entry in entries.items()))
        return 0

    return run_main(body)
