"""Coreference from raw text against coreference from gold mentions, on LitBank and OntoGUM (docs/coreference.md).

    python benchmarks/coref_end_to_end.py --data-dir DATA --runs runs

Scores, with the official scorer's semantics (:mod:`coref.metrics.coreference`), per corpus and split:

- **gold mentions**: the base resolver (``RUNS/resolver/CORPUS.pt``) on EntityNLM's preprocessed gold mentions;
- **predicted mentions**: the detector ``RUNS/mentions/CORPUS.pt`` and the ranker trained on its mentions
  ``RUNS/resolve/CORPUS.pt`` (``python -m coref.resolver train --detector``), against two keys: the corpus as
  annotated (LitBank with its singletons and nested mentions) and EntityNLM's mentions of it (outermost, no
  singletons; the response filtered alike), the key of the other rows;
- **EntityNLM posterior MAP** (mentions not given, test only): the figures the posterior command measured,
  ``benchmarks/results/reported/posterior_CORPUS-test-forward.json``.

Writes ``benchmarks/results/end_to_end.json`` and ``end_to_end.md`` (each command's CoNLL and JSON go to
``RUNS/end_to_end``) and prints the table.

**Throughput** (``--throughput``; the scores are not computed then):

    python benchmarks/coref_end_to_end.py --throughput [--pieces 0 250 50] [--repeats 3]

The bundled pipeline (:func:`coref.resolution.pipeline.CorefPipeline.load`) on the CPU resolves LitBank's test
documents turned back into running text (:func:`benchmarks.tokenizer_agreement.detokenize`), whole (``--pieces 0``)
or cut between sentences into texts of about N tokens (``--pieces N``, :func:`coref.document.sentence_chunks`):
one text per call, and all texts in one call (batched through the detector). Each timing is from text to clusters,
tokenisation included and model loading not, after a warm-up call; the two ways alternate ``--repeats`` times and
each keeps its median. Prints documents and tokens (the pipeline's tokens) per second and writes
``coref_throughput.json`` to ``--results``, with the machine, its load and torch's threads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runs import command_record  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from inference.checks import integer, output_folder  # noqa: E402
from inference.commands import resolver  # noqa: E402
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
                        help="where end_to_end.json and end_to_end.md (or coref_throughput.json) go")
    parser.add_argument("--throughput", action="store_true", help="measure the bundled pipeline's documents and "
                        "tokens per second on the CPU instead (LitBank test)")
    parser.add_argument("--pieces", type=integer(0), nargs="+", default=[0, 250, 50], help="with --throughput: "
                        "texts of about N tokens cut from the documents between sentences, for each N (0: whole)")
    parser.add_argument("--repeats", type=integer(1), default=3, help="with --throughput: timings of each way, "
                        "median kept")
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
    gold = scores(["--model", str(runs / "resolver" / f"{corpus}.pt"), *data], folder, f"{corpus}-{split}-gold")
    predicted = scores(["--model", str(runs / "resolve" / f"{corpus}.pt"), "--detector",
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


# ---- throughput -------------------------------------------------------------------------------------------------


def throughput_texts(data_dir: str | None, piece_tokens: int) -> list[str]:
    """LitBank's test documents as running text: whole (``piece_tokens`` 0) or cut between sentences into pieces of
    about ``piece_tokens`` tokens."""
    from benchmarks.tokenizer_agreement import detokenize
    from coref.corpora.registry import load_corpus
    from coref.document import sentence_chunks

    documents = load_corpus("litbank", "test", data_dir).documents
    if piece_tokens:
        documents = [piece for document in documents for piece in sentence_chunks(document, piece_tokens)]
    return [detokenize(document)[0] for document in documents]


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def throughput_rows(texts: Sequence[str], pieces: int, repeats: int) -> list[dict]:
    """Documents and tokens per second of the bundled pipeline on ``texts``, one per call and all in one call,
    alternating ``repeats`` times (medians), and whether the two ways found the same clusters."""
    from coref.io.text import tokenize
    from coref.resolution.pipeline import bundled_pipeline

    pipeline = bundled_pipeline()
    tokens = sum(len(tokenize(text).tokens) for text in texts)
    pipeline.resolve(texts[0])  # warm-up
    ways: dict[str, Callable[[], list]] = {"one text per call": lambda: [pipeline.resolve(text) for text in texts],
                                          "all texts in one call": lambda: pipeline.resolve_texts(texts)}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(repeats):
        for way, run in ways.items():
            seconds[way].append(timed(run))
    alone, together = (run() for run in ways.values())
    same = [document.mentions for document in alone] == [document.mentions for document in together]
    rows = []
    for way, times in seconds.items():
        median = statistics.median(times)
        rows.append({"texts": len(texts), "piece_tokens": pieces, "tokens": tokens, "way": way,
                     "seconds": median, "seconds_each": times, "documents_per_second": len(texts) / median,
                     "tokens_per_second": tokens / median, "same_clusters": same})
    return rows


def throughput_markdown(rows: Sequence[dict]) -> str:
    lines = ["| texts | tokens per text | way | seconds | documents/s | tokens/s |", "|---:|---:|---|---:|---:|---:|"]
    lines += [f"| {row['texts']} | {row['tokens'] / row['texts']:,.0f} | {row['way']} | {row['seconds']:.2f} | "
              f"{row['documents_per_second']:,.1f} | {row['tokens_per_second']:,.0f} |" for row in rows]
    return "\n".join(lines) + "\n"


def throughput(args: argparse.Namespace) -> int:
    """Measure, print and write ``coref_throughput.json`` (the module docstring)."""
    import torch

    load_before = os.getloadavg()
    rows = [row for pieces in args.pieces for row in throughput_rows(throughput_texts(args.data_dir, pieces),
                                                                      pieces, args.repeats)]
    machine = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
               "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
               "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0]}
    write_text_atomic(Path(args.results) / "coref_throughput.json",
                      json.dumps({**command_record(build_parser(), args), "machine": machine, "rows": rows},
                                 indent=2) + "\n")
    print(f"{machine['cores']} cores, torch threads {machine['torch_threads']}, load {load_before[0]:.2f}\n")
    print(throughput_markdown(rows), end="")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.throughput:
        return run_main(lambda: throughput(args))

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
