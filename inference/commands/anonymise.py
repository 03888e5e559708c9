"""Anonymised language modelling data (Kobayashi et al. 2017, §4 and Table 1), from a coreference corpus.

The paper turns OntoNotes into a language modelling task in which entities are unknown words: every
coreference chain of a document gets an identifier ``<unk1>``, ``<unk2>``, ... in order of first appearance,
every mention of the chain is replaced by that ONE token, sentences are marked with ``<bos>``/``<eos>``, the
vocabulary is the 10K most frequent words, and only documents with at most 50 chains are used. Here:

- :data:`ANONYMISED_PREPROCESS` prepares a document (:mod:`coref.corpora.preprocess`): lowercase, ``<num>``, outermost
  mentions of any length, no singletons, and punctuation KEPT (the paper's Figure 3 keeps it);
- :func:`anonymise` replaces each mention by its chain's identifier, with a one-token mention labelled K in
  its place, so that EntityNLM's batching (``E`` numbered by first mention) gives exactly K at that token;
  :func:`source_spans` says which original tokens each anonymised token stands for and :func:`restore` puts
  the mention words back;
- :func:`anonymised_corpus` loads a split and drops, and counts, the documents with more than
  :data:`MAX_CHAINS` chains; :func:`anonymised_vocabulary` always holds the 50 identifiers, at fixed ids;
- :func:`table1` gives the paper's Table 1 rows. The sentence marks are the project's ``<s>`` and ``</s>``,
  which :mod:`generative.layers.batch` puts around every sentence, so they are not tokens of the documents here.

Command line::

    python -m coref.anonymise stats --corpus NAME [--data-dir D] [--json OUT]
"""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Sequence

from coref.corpora.anonymise import anonymised_corpus, dropped_lines, format_table, stats_json
from coref.corpora.registry import available_splits
from coref.io.atomic import write_text_atomic
from inference.commands.cli import Parser, run_subcommand
from inference.commands.options import add_data_dir, add_json


def stats(args: argparse.Namespace) -> int:
    """Print the paper's Table 1 (documents, average sentences, chains, chains mentioned more than once, mentions
    per chain) with one column per split of the anonymised corpus, the documents dropped for more than 50 chains,
    and what preprocessing changed."""
    splits = [anonymised_corpus(args.corpus, split, args.data_dir) for split in available_splits(args.corpus)]
    print(format_table(args.corpus, splits))
    print("\n".join(dropped_lines(split) for split in splits))
    if args.json:
        write_text_atomic(args.json, json.dumps(stats_json(args.corpus, splits), indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    """``stats``."""
    parser = Parser(prog="python -m coref.anonymise", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    stats_parser = commands.add_parser("stats", help="the paper's Table 1 for each split of an anonymised corpus",
                                       description=inspect.getdoc(stats))
    stats_parser.add_argument("--corpus", required=True, help="a corpus of coref.corpora.registry (ontogum, litbank, "
                              "sample, ...), or several joined with '+'")
    add_data_dir(stats_parser)
    add_json(stats_parser, help="also write the numbers as JSON to OUT")
    stats_parser.set_defaults(run=stats)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)
