"""The resolve command: coreference of raw text, end to end, by :mod:`coref.resolution.pipeline` (its docstring,
below in ``--help``, says how).

    python -m coref.resolve --text "Anna met her brother in Paris. She thanked him."
    python -m coref.resolve --file story.txt --out story.conll --json story.json
    python -m coref.resolve --file chapters/ notes.txt --json all.json      # many texts, one batch
    python -m coref.resolve --text "Anna met her brother." --mentions spans.json   # cluster these spans only
    python -m coref.resolve --conll IN.conll --out OUT.conll   # a CoNLL file's tokens; its own mentions ignored
    python -m coref.resolve --conll IN.conll --mentions IN.conll --out OUT.conll   # ... or clustered as given
    python -m coref.resolve --file story.txt --replace    # the text, each mention replaced by its entity's name

Input: ``--text``; ``--file`` with one or more UTF-8 text files or folders (a folder: its ``*.txt`` files, sorted
by name), each a document named after its file, all resolved in one batch (under ``torchrun``, each process
resolves every K-th file, and the first writes them all, in order); or ``--conll``, a CoNLL file's
documents. ``--mentions FILE``: the spans to cluster instead of the detector's. For text, JSON character spans:
``[[0, 4], [9, 20]]`` (or ``{"mentions": [[0, 4], [9, 20]]}``) for one input, and for several an object keyed by
each file's name, ``{"a.txt": [[0, 4]], "b.txt": []}``; a span must cover whole tokens. For ``--conll``, a CoNLL
file with the same documents, whose bracketed spans are the given mentions. ``--singletons`` / ``--no-singletons``
keep or drop the one-mention entities (default: the model's corpus convention for detected mentions, kept for
given ones).

Output: a readable list of each document's entities on stdout (with ``--replace``, the text instead, each mention
replaced by its entity's representative name: :func:`~coref.resolution.pipeline.replaced_text`; of several files,
each after a ``==> FILE <==`` line, a CoNLL document's after its name); ``--out`` the CoNLL file, one document per input
(``-``: stdout); ``--json`` the documents' clusters with token and character offsets. With ``--conll`` each
document is written under its own header, its part as the input wrote it (``part 0`` stays ``part 0``), so the
official scorer matches it with the input's key. The JSON is written first: when the CoNLL cannot be (an entity the
format cannot express, a TAB in a name, a full disk), the one-line error says why and which file holds the clusters,
the ``--json`` file or, without one, the ``--out`` file's name with ``.json`` added (``resolved.json`` for stdout).
No entity of the pipeline has crossing mentions, so its own output always can be written.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from coref.resolution import pipeline
from coref.resolution.pipeline import (
    CorefPipeline,
    format_clusters,
    read_inputs,
    read_mentions,
    replaced_text,
    write_outputs,
)
from inference.checks import output_file
from inference.commands.cli import Parser, help_text, run_main
from inference.commands.options import add_json
from inference.distributed import ranks


def build_parser() -> Parser:
    """One of --text, --file, --conll; the given mentions and singletons; the outputs; the models."""
    parser = Parser(prog="python -m coref.resolve", description=help_text(__doc__, pipeline))
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to resolve")
    source.add_argument("--file", nargs="+", help="UTF-8 text files, or folders of .txt files, to resolve in one "
                        "batch")
    source.add_argument("--conll", help="a CoNLL file whose documents' tokens and sentences are resolved")
    parser.add_argument("--mentions", metavar="FILE", help="cluster these mentions instead of detecting them: JSON "
                        "character spans for text, a CoNLL file for --conll")
    parser.add_argument("--singletons", action=argparse.BooleanOptionalAction, help="keep (or drop) the "
                        "one-mention entities (default: the model's corpus convention; kept for given mentions)")
    parser.add_argument("--replace", action="store_true", help="print the text with each mention replaced by its "
                        "entity's representative name (its first proper name, else its longest non-pronoun mention) "
                        "instead of the list of entities")
    parser.add_argument("--out", type=output_file, help="write the CoNLL here ('-': stdout)")
    add_json(parser, help="write the clusters (token and character offsets) here")
    parser.add_argument("--detector", help="a mention detector (python -m coref.mentions; default: the bundled one)")
    parser.add_argument("--resolver", help="a mention ranker trained on that detector's mentions "
                        "(python -m coref.resolver train --detector; default: the bundled one)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Resolve the inputs (read and checked, given mentions included, before the models load) and write what was
    asked for; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.replace and args.out == "-":
        parser.error("argument --replace: not allowed with --out - (both print on stdout)")

    def resolve() -> int:
        inputs = read_inputs(args.text, args.file, args.conll)
        mentions = None if args.mentions is None else read_mentions(args.mentions, inputs)
        run = ranks()  # under torchrun, each rank resolves its share of the inputs and rank 0 writes them all
        mine = run.shard(range(len(inputs)))
        resolved = CorefPipeline.load(args.detector, args.resolver).resolve_documents(
            [inputs[i].document for i in mine], None if mentions is None else [mentions[i] for i in mine],
            args.singletons) if mine else []
        documents = run.gather(resolved)
        if not run.leader:
            return 0
        tokenizations = [found.tokenized for found in inputs]
        if args.replace:
            texts = [replaced_text(document, found) for document, found in zip(documents, tokenizations)]
            print(texts[0] if len(inputs) == 1 else
                  "\n\n".join(f"==> {document.id if found.tokenized is None else found.source} <==\n{text}"
                              for found, document, text in zip(inputs, documents, texts)))
        elif args.out != "-":
            print("\n".join(format_clusters(document, found) for document, found in zip(documents, tokenizations)))
        write_outputs(documents, tokenizations, args.out, args.json)
        return 0

    return run_main(resolve)
