"""The GPU check's figures: training throughput of every language-model family and of a Coref-GRU reader, and
EntityNLM's SMC throughput, on each of ``--devices``, measured in one run so that the GPU's figure is a ratio
against the CPU's.

1. Training: each family (``--families``; EntityNLM with its two proposals, the RNNLM, the Dynamic Neural Text
   Model; ``ga_cgru`` on bAbI task 1 where ``--data-dir`` holds bAbI) trains for ``--epochs`` epochs on
   ``--corpus`` through the one training loop, in float32 and, on a GPU, also with ``--precision bf16``
   (autocast). The figure is the last epoch's training tokens (questions, for the reader) per second, as the
   loop records it (the first epoch pays for warm-up).
2. SMC: the bundled EntityNLM's settled likelihood sampler (the settled preset: SMC resampling after any token,
   the proposal mixed with the coreference pipeline's hints and the model's lookahead;
   :func:`inference.algorithms.likelihood.sample_documents`) over the split's first four test documents (one
   batch) with each of ``--particles`` particle counts; the figure is token x particles per second (the mean of
   ``--repeats`` runs after one warm-up). A step's operations grow with the
   particles, so the counts show where a GPU starts to pay for its launches.

    python benchmarks/gpu_check.py --devices cpu cuda [--data-dir DATA] [--out benchmarks/results/gpu]

Prints a table and writes ``gpu_check.json`` (each row's setting, the command) to ``--out``.
``benchmarks/gpu_check.sh`` runs this after the test suite's CUDA-marked tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record  # noqa: E402
from coref.corpora.preprocess import EOS  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from generative.entitynlm.hints import CorefHints  # noqa: E402
from generative.layers.batch import DocumentBatch, make_batch  # noqa: E402
from inference.algorithms.config import Settings, settings_for  # noqa: E402
from inference.algorithms.hints import batch_hints, corpus_hints, hint_pipeline  # noqa: E402
from inference.algorithms.likelihood import sample_documents  # noqa: E402
from inference.checks import integer, output_folder  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402
from inference.data import prepared_documents  # noqa: E402
from inference.runtime import resolve_device, set_seed  # noqa: E402
from inference.training.checkpoint import entitynlm_checkpoint, entitynlm_modules  # noqa: E402
from inference.training.coref_gru import ReaderTraining, train_reader  # noqa: E402
from inference.training.train import LanguageModelTraining, train_language_model  # noqa: E402

LANGUAGE_MODELS = ("entitynlm", "rnnlm", "dntm")
READER = "ga_cgru"


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/gpu_check.py", description=__doc__)
    parser.add_argument("--devices", nargs="+", default=["cpu", "cuda"], help="the devices to measure (cpu, cuda)")
    parser.add_argument("--families", nargs="+", choices=[*LANGUAGE_MODELS, READER],
                        default=[*LANGUAGE_MODELS, READER], help="what to train (the reader needs bAbI)")
    parser.add_argument("--corpus", default="sample", help="the language models' training corpus")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; none: the "
                        "embedded sample, and no reader)")
    parser.add_argument("--epochs", type=integer(2), default=2, help="epochs of each training run")
    parser.add_argument("--hidden-size", type=integer(1), default=128, help="the language models' units")
    parser.add_argument("--particles", type=integer(1), nargs="+", default=[1000, 10000],
                        help="SMC particles: a row for each count")
    parser.add_argument("--repeats", type=integer(1), default=3, help="SMC runs timed after the warm-up")
    parser.add_argument("--book-tokens", type=integer(1),
                        help="also a book: --book-corpus's test documents joined end to end to this many tokens, its "
                             "settled log-likelihood through the API (what elm.load('entitynlm').log_likelihood(text) "
                             "runs) at --book-particles, on each device but the CPU (default: no book)")
    parser.add_argument("--book-particles", type=integer(1), default=1000, help="the book's particles")
    parser.add_argument("--book-corpus", default="litbank", help="the corpus the book is joined from")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results/gpu",
                        help="folder of gpu_check.json")
    return parser


def synchronised(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def training_rows(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """Each family's last-epoch training throughput on ``device`` (float32, and bf16 on a GPU; the reader only
    where ``--data-dir`` holds bAbI, in float32)."""
    precisions = ("fp32", "bf16") if device.type == "cuda" else ("fp32",)
    return [training_row(args, family, precision, device) for family in args.families
            if family != READER or args.data_dir
            for precision in (precisions if family != READER else ("fp32",))]


def training_row(args: argparse.Namespace, family: str, precision: str, device: torch.device) -> dict:
    """One family trained for ``--epochs`` epochs: its last epoch's throughput, as the loop records it."""
    records: list[dict] = []
    with tempfile.TemporaryDirectory() as out:
        if family == READER:
            train_reader(ReaderTraining(READER, "babi:1", out, data_dir=args.data_dir, epochs=args.epochs,
                                        patience=args.epochs, device=str(device)), report=records.append)
            per_second, unit = records[-1]["train_questions_per_second"], "questions/s"
        else:
            train_language_model(LanguageModelTraining(
                family, out, corpus=args.corpus, data_dir=args.data_dir, hidden_size=args.hidden_size,
                embedding_size=args.hidden_size, epochs=args.epochs, patience=args.epochs, device=str(device),
                precision=precision), report=records.append)
            per_second, unit = records[-1]["train_tokens_per_second"], "tokens/s"
    return {"job": "train", "family": family, "precision": precision, "device": str(device),
            "per_second": per_second, "unit": unit, "seconds": records[-1]["seconds"]}


def smc_rows(args: argparse.Namespace, device: torch.device) -> list[dict]:
    """The bundled EntityNLM's settled likelihood sampler over the split's first four test documents, in one
    batch, on ``device``: a row for each of ``--particles``."""
    settings = settings_for("likelihood")
    _, checkpoint = entitynlm_checkpoint(None)
    model, proposal = entitynlm_modules(checkpoint, device, run=settings.proposal)
    documents = prepared_documents(args.corpus, "test", args.data_dir, checkpoint.preprocess, checkpoint.vocabulary,
                                   quiet=True)[:4]
    batch = make_batch(documents, checkpoint.vocabulary).to(device)
    hints = corpus_hints(settings.proposal, hint_pipeline(settings.proposal), args.corpus, "test", args.data_dir,
                         documents, checkpoint.preprocess)
    hint = batch_hints(settings.proposal, batch, hints, {document.key: document for document in documents})
    eos = checkpoint.vocabulary.index(EOS)
    return [smc_row(model, proposal, batch, eos, dataclasses.replace(settings, sampling=dataclasses.replace(
        settings.sampling, particles=particles)), hint, args.repeats, device) for particles in args.particles]


def smc_row(model: nn.Module, proposal: nn.Module, batch: DocumentBatch, eos: int, settings: Settings,
            hints: CorefHints | None, repeats: int, device: torch.device) -> dict:
    """One particle count's throughput: the mean of ``repeats`` runs after one warm-up."""
    particles = settings.sampling.particles

    def run() -> None:
        sample_documents(batch, model, proposal, eos, settings.sampling, settings.proposal.lookahead, hints)

    set_seed(0)
    run()  # warm-up
    seconds = []
    for _ in range(repeats):
        started = synchronised(device)
        run()
        seconds.append(synchronised(device) - started)
    mean = sum(seconds) / len(seconds)
    return {"job": "smc", "family": "entitynlm", "precision": "fp32", "device": str(device),
            "per_second": batch.num_tokens * particles / mean, "unit": "token-particles/s", "seconds": mean,
            "documents": batch.size, "tokens": batch.num_tokens, "particles": particles,
            "sampler": settings.describe()}


def book_row(args: argparse.Namespace, device: torch.device) -> dict:
    """The settled log-likelihood of a book-length text on ``device``, timed from the text to the estimate (the
    pipeline's reading of it and the hints included; the model's loading not)."""
    from coref.corpora.registry import joined_text
    from inference.api import load

    text = joined_text(args.book_corpus, "test", args.data_dir, args.book_tokens)
    model = load("entitynlm", device=str(device))
    started = synchronised(device)
    result = model.log_likelihood(text, particles=args.book_particles)
    seconds = synchronised(device) - started
    return {"job": "book", "family": "entitynlm", "precision": "fp32", "device": str(device),
            "per_second": result.tokens * args.book_particles / seconds, "unit": "token-particles/s",
            "seconds": seconds, "tokens": result.tokens, "particles": args.book_particles,
            "perplexity": result.perplexity, "ess": result.ess}


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row with its throughput over the CPU's for the same job, family, particles and precision fp32."""
    def key(row: dict) -> tuple:
        return row["job"], row["family"], row.get("particles")

    cpu = {key(row): row["per_second"] for row in rows if row["device"] == "cpu" and row["precision"] == "fp32"}
    return [{**row, "x_cpu": row["per_second"] / cpu[key(row)] if key(row) in cpu else None} for row in rows]


def table(rows: list[dict]) -> str:
    lines = [f"{'job':<6} {'family':<10} {'particles':>9} {'device':<8} {'precision':<9} {'per second':>14} "
             f"{'unit':<18} {'x CPU':>7}"]
    for row in rows:
        ratio = "" if row["x_cpu"] is None else f"{row['x_cpu']:.2f}"
        lines.append(f"{row['job']:<6} {row['family']:<10} {row.get('particles', ''):>9} {row['device']:<8} "
                     f"{row['precision']:<9} {row['per_second']:>14.1f} {row['unit']:<18} {ratio:>7}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        devices = [resolve_device(name) for name in args.devices]  # a missing GPU is one line, before any work
        rows = []
        for device in devices:
            rows += training_rows(args, device)
            rows += smc_rows(args, device)
            if args.book_tokens and device.type != "cpu":
                rows.append(book_row(args, device))
        rows = with_ratios(rows)
        print(table(rows))
        machine = {"platform": platform.platform(), "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
                   "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
        write_text_atomic(Path(args.out) / "gpu_check.json",
                          json.dumps({**command_record(parser, args), "machine": machine, "rows": rows}, indent=2)
                          + "\n")
        return 0

    return run_main(body)


if __name__ == "__main__":
    sys.exit(main())
