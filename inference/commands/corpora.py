"""Named coreference corpora and their splits: loading, counting, and fetching the public ones.

A corpus is a name and a split:

- ``sample`` (train, dev, test): ten short stories written for this project and shipped inside the package
  (``coref/corpora/data/SAMPLE.md``), so that every command runs without downloading anything;
- ``litbank`` (train, dev, test): LitBank (Bamman et al. 2020), the openings of 100 novels, singletons
  annotated, split 80/10/10 by our fixed protocol table ``coref/corpora/data/litbank_splits.tsv``;
- ``ontogum`` (train, dev, test, test2): OntoGUM (Zhu et al. 2021), GUM in the OntoNotes scheme, with GUM's
  own splits and the out-of-domain GENTLE documents as test2; sentence boundaries come from the CoNLL-U files;
- ``conll2012`` (train, dev, test): the CoNLL-2012 shared task data, which is licensed (LDC): bring your own;
- ``inscript`` (train, dev, test): InScript (Modi et al. 2016), 910 crowdsourced script stories, split 637/91/182
  by the JSON table that came with it; its labels and chains become mentions as :mod:`coref.corpora.inscript` says.

Every corpus but ``sample`` lives under a data directory (``--data-dir`` or ``ENTITYLM_DATA``), in the layout
that ``python -m coref.corpora download`` writes::

    DATA/litbank/splits.tsv   DATA/litbank/conll/NAME.conll
    DATA/ontogum/splits.tsv   DATA/ontogum/conll/NAME.conll   DATA/ontogum/conllu/NAME.conllu
    DATA/conll2012/train/ development/ test/   (*_conll files at any depth; *_gold_conll preferred)
    DATA/inscript/splits/modi_split_637_91_182.json   DATA/inscript/corpus/SCENARIO/STORY.xml   (copied by hand)

``"litbank+ontogum"`` names the concatenation of several corpora. Files are read leniently by default: a
malformed mention is dropped and reported in :attr:`Corpus.problems`, so that one annotation error does not
stop a whole-corpus run; ``strict=True`` makes it an error instead.

Command line::

    python -m coref.corpora stats --corpus NAME [--split S] [--data-dir D] [--json OUT] [--strict] [--preprocess]
    python -m coref.corpora download litbank|ontogum --to DIR [--mirror URL]
"""

from __future__ import annotations

import argparse
import inspect
import json
from collections.abc import Sequence
from pathlib import Path

from coref.corpora.registry import DOWNLOADERS, RAW_GITHUB, SPLITS, corpus_summary
from coref.io.atomic import write_text_atomic
from inference.checks import output_folder
from inference.commands.cli import Parser, run_subcommand
from inference.commands.options import add_data_dir, add_json


def stats(args: argparse.Namespace) -> int:
    """Count documents, sentences, tokens, mentions and entities of each split as the files hold them (before
    preprocessing), and list every problem the lenient reader worked around as FILE:LINE: reason."""
    result, text = corpus_summary(args.corpus, args.split, args.data_dir, strict=args.strict,
                                  preprocess=args.preprocess)
    print(text)
    if args.json:
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def download(args: argparse.Namespace) -> int:
    """Fetch a public corpus (pinned commits, over HTTPS) into the layout the loader expects; files are written
    atomically, so a re-run resumes an interrupted download."""
    table = DOWNLOADERS[args.corpus](Path(args.to), args.mirror)
    sizes = ", ".join(f"{split} {len(documents)}" for split, documents in table.items())
    print(f"{args.corpus}: documents {sizes} in {Path(args.to) / args.corpus}; load with --data-dir {args.to}")
    return 0


def build_parser() -> Parser:
    """``stats`` and ``download``."""
    parser = Parser(prog="python -m coref.corpora", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    stats_parser = commands.add_parser("stats", help="count documents, sentences, tokens, mentions and entities "
                                       "per split", description=inspect.getdoc(stats))
    stats_parser.add_argument("--corpus", required=True, help=f"{', '.join(SPLITS)}, or several joined with '+'")
    stats_parser.add_argument("--split", help="one split (default: all the corpus has)")
    add_data_dir(stats_parser)
    add_json(stats_parser, help="also write the numbers as JSON to OUT")
    stats_parser.add_argument("--strict", action="store_true",
                              help="make every problem (malformed mention) an error")
    stats_parser.add_argument("--preprocess", action="store_true",
                              help="also report what the paper's preprocessing removes from each split")
    stats_parser.set_defaults(run=stats)

    download_parser = commands.add_parser("download", help="fetch a public corpus into the layout the loader "
                                          "expects", description=inspect.getdoc(download))
    download_parser.add_argument("corpus", choices=sorted(DOWNLOADERS), help="the corpus to fetch")
    download_parser.add_argument("--to", required=True, metavar="DIR", type=output_folder,
                                 help="data directory to create or complete")
    download_parser.add_argument("--mirror", default=RAW_GITHUB, metavar="URL",
                                 help="replaces the GitHub prefix of every URL (file:// works)")
    download_parser.set_defaults(run=download)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (2 and one line on stderr for bad input)."""
    return run_subcommand(build_parser(), argv)
