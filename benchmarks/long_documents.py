"""Time and peak memory against a document's length: the library's main jobs on one long text.

For each length (tokens of our tokeniser; default 2K, 8K, 32K and 128K) and each operation, a fresh process
makes the text and runs the operation once, so its peak resident set size is that operation's alone:

- ``resolve``: coreference of raw text by the bundled pipeline (:func:`coref.resolution.pipeline.resolve`);
- ``log_likelihood``: EntityNLM's marginal log-likelihood by SMC (:meth:`inference.api.LanguageModel.log_likelihood`,
  ``--particles`` particles, 100 by default as the issue asks; ``--checkpoint`` another EntityNLM than the bundled
  one, e.g. one with the copy of each entity's words, and ``--document-cache`` the cache);
- ``posterior``: EntityNLM's posterior over the coreference structure (:meth:`~inference.api.LanguageModel.posterior`
  with its defaults, 500 particles, SMC), and its sparse antecedent marginals;
- ``given_mentions``: the posterior as a resolver, ``python -m inference.posterior --file ... --given-mentions
  pipeline`` (:func:`inference.evaluation.posterior_resolver.analyse_on_pipeline_mentions`, all of it from the
  models' loading to the folder written): the pipeline reads the text, EntityNLM samples the entities of its
  mentions (``--particles``, ``--sweeps``, the proposal mixed with the pipeline at ``--hint-weight`` and
  ``--hint-temperature``), and the local link conditionals around the MAP are scored on pieces of
  ``--link-piece`` tokens.

The long text is the user's ``--file`` (its first N tokens, repeated from its start when it is shorter), or a
corpus split's documents joined end to end (:func:`coref.corpora.registry.joined_text`; LitBank's test split by default,
the embedded sample corpus with ``--corpus sample``). Nothing is downloaded.

Beside EntityNLM's times stands the arithmetic floor of a step: the floating-point operations every particle
does at every token (:func:`step_flops`: the word's context, the class-factored softmax of the observed word,
the length head's entity part, the update's gate) at ``--gflops`` per core, so "x bound" says how far a step is
from its arithmetic, and beside those the aten operations and host syncs of a step (counted on the text's first
``--count-tokens`` tokens after the timed run). A log-log plot of time and memory against length shows the
growth: a slope of 1 is linear.

    python benchmarks/long_documents.py --data-dir DATA [--lengths 2000 8000 32000 128000]
        [--operations resolve log_likelihood posterior] [--max-tokens posterior=32000] [--file NOVEL.txt]

Prints a table and writes ``long_documents.json`` (every row with the exact command that made it) to ``--out``
and the plot to ``--plot``; ``--update`` measures some rows again and keeps the others. Timings on shared
machines vary by 20-40%: the machine's load is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.io.atomic import write_text_atomic
from generative.entitynlm.model import EntityNLM
from generative.layers.softmax import ClassFactoredSoftmax
from inference.checks import integer, output_file, output_folder, real
from inference.commands.cli import Parser, run_main
from inference.training.checkpoint import entitynlm_checkpoint

OPERATIONS = ("resolve", "log_likelihood", "posterior", "given_mentions")
DEFAULT_LENGTHS = (2_000, 8_000, 32_000, 128_000)
COUNT_TOKENS = 1_000  # tokens on which a likelihood's operations and syncs per step are counted
RESULTS, DOCS_PLOT = "benchmarks/results", "docs/img/long_documents.png"  # the default run writes the docs' figure


# ---- the long text --------------------------------------------------------------------------------------------


def long_text(tokens: int, file: str | None, corpus: str, split: str, data_dir: str | None) -> str:
    """A text of exactly ``tokens`` tokens of :func:`coref.io.text.tokenize`: the first ones of ``file`` (repeated
    from its start as often as needed), or of a corpus split's documents joined end to end."""
    from coref.corpora.registry import joined_text
    from coref.io.conll import read_utf8
    from coref.io.text import tokenize

    if file is None:
        return joined_text(corpus, split, data_dir, tokens)
    source = read_utf8(file)
    tokenized = tokenize(source)
    copies = -(-tokens // len(tokenized.tokens))
    text = "\n\n".join([source.strip()] * copies)
    offsets = tokenize(text).offsets if copies > 1 else tokenized.offsets
    return text[: offsets[tokens - 1][1]] + "\n"


# ---- one measurement, in its own process ------------------------------------------------------------------------


def measure(operation: str, text: str, particles: int, seed: int, resample: str = "sentence",
            hint_weight: float = 0.0, hint_temperature: float = 1.0, lookahead: float = 0.0,
            checkpoint: str = "entitynlm", document_cache: float = 0.0, sweeps: int = 1,
            link_piece: int | None = None, count_tokens: int = 0) -> dict:
    """Run ``operation`` once on ``text`` in this process: its seconds and what it found. ``checkpoint``: the
    EntityNLM the likelihood and the posteriors read (the bundled one by default); ``document_cache``: the
    likelihood's cache weight lambda (0: none); ``sweeps`` and ``link_piece``: the given-mentions resolver's;
    ``count_tokens``: the likelihood's aten operations and host syncs per token step, counted afterwards on the
    text's first that many tokens (:func:`inference.algorithms.syncs.step_counts`; a step's operations do not
    depend on where it is, and counting every step of a book would take longer than the book)."""
    started = time.perf_counter()
    if operation == "resolve":
        from coref.resolution.pipeline import resolve

        document = resolve(text)
        found = {"mentions": len(document.mentions), "entities": len({m.entity for m in document.mentions})}
    elif operation == "given_mentions":
        import tempfile

        from inference.algorithms.config import settings_for
        from inference.algorithms.posterior import PosteriorConfig
        from inference.algorithms.resolver import LINK_PIECE
        from inference.evaluation.posterior_resolver import analyse_on_pipeline_mentions

        with tempfile.TemporaryDirectory() as folder:
            settings = settings_for("posterior", particles=particles, sweeps=sweeps, hint_weight=hint_weight,
                                    hint_temperature=hint_temperature, seed=seed)
            config = PosteriorConfig(text=text, out=f"{folder}/out", settings=settings,
                                     checkpoint=None if checkpoint == "entitynlm" else checkpoint)
            result = analyse_on_pipeline_mentions(config, piece_tokens=link_piece or LINK_PIECE)
        (row,), (structure,) = result["summary"], result["maps"]
        found = {"steps": None, "mentions": row["mentions"], "entities": len({m.entity for m in structure.mentions}),
                 "ess": row["ess"], "log_likelihood": row["log_marginal"]}
    else:
        import inference.api as elm

        model = elm.load(checkpoint)
        started = time.perf_counter()  # the checkpoint's loading is not the operation
        if operation == "log_likelihood":
            options = {"particles": particles, "seed": seed, "resample": resample, "hint_weight": hint_weight,
                       "hint_temperature": hint_temperature, "lookahead": lookahead,
                       "document_cache": document_cache}
            result = model.log_likelihood(text, **options)
            found = {"steps": result.tokens, "log_likelihood": result.log_p, "perplexity": result.perplexity,
                     "ess": result.ess}
        else:
            posterior = model.posterior(text, "paper", seed=seed)
            antecedents = posterior.antecedents()
            found = {"steps": None, "particles": posterior.particles, "log_likelihood": posterior.log_marginal,
                     "ess": posterior.ess, "spans": len(posterior.pairwise.spans),
                     "likely_mentions": len(antecedents), "map_mentions": len(posterior.map.mentions)}
        found.update(step_bound(model, particles if operation == "log_likelihood" else posterior.particles, text))
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if operation == "log_likelihood" and count_tokens:
        found.update(step_operations(model, first_tokens(text, count_tokens), options))
    return {"seconds": seconds, "peak_rss_mb": peak_mb, **found}


def first_tokens(text: str, tokens: int) -> str:
    """The start of ``text`` up to its ``tokens``-th token (all of it when shorter)."""
    from coref.io.text import tokenize

    offsets = tokenize(text).offsets
    return text[: offsets[min(tokens, len(offsets)) - 1][1]]


def step_operations(model, text: str, options: dict) -> dict:
    """The aten operations and host syncs per token step of ``model.log_likelihood(text, **options)``."""
    from inference.algorithms.syncs import step_counts

    counts = step_counts(lambda: model.log_likelihood(text, **options))
    return {"ops_per_step": round(counts.ops, 1), "syncs_per_step": round(counts.syncs, 3)}


def step_flops(model: EntityNLM, particles: int) -> int:
    """Floating-point operations (2 per multiply-add) of one sampler step that every particle does whatever it
    chose: the word's context W_e e (eq. 6), the class softmax and the observed word's class (padded to the
    largest), the length head's entity part of model and proposal (eq. 5) and the update's gate (eq. 8). Products
    of the LSTM state alone are shared by the particles and left out; so is eq. 4's entity scoring, done only for
    the particles that start a mention at the step (its cost grows with their entities). A floor, not the work."""
    hidden, lengths = model.config.hidden_size, model.config.max_mention_length
    softmax = model.softmax
    if isinstance(softmax, ClassFactoredSoftmax):
        outputs = softmax.word_classes.num_classes + softmax.word_classes.members.shape[1]
    else:
        outputs = softmax.vocab_size
    per_particle = 2 * hidden * hidden + 2 * hidden * outputs + 2 * (2 * hidden * lengths) + 2 * (2 * hidden)
    return particles * per_particle


def step_bound(model, particles: int, text: str) -> dict:
    """The token steps EntityNLM reads in ``text`` and the MFLOP of one step with ``particles`` particles."""
    (prepared,) = model.read(text)[1]
    steps = len(prepared.tokens) + len(prepared.sentences)  # the words and one </s> per sentence
    return {"steps": steps, "step_mflop": step_flops(model.modules(model.proposal)[0], particles) / 1e6}


def worker(args: argparse.Namespace) -> int:
    """``--worker OPERATION``: one measurement, printed as one JSON line (read by the parent)."""
    import torch

    torch.set_num_threads(args.threads)
    text = long_text(args.lengths[0], args.file, args.corpus, args.split, args.data_dir)
    print(json.dumps(measure(args.worker, text, args.particles, args.seed, args.resample, args.hint_weight,
                             args.hint_temperature, args.lookahead, args.checkpoint, args.document_cache,
                             args.sweeps, args.link_piece, args.count_tokens)))
    return 0


def worker_command(args: argparse.Namespace, operation: str, tokens: int) -> list[str]:
    """The command line of one measurement (it is also what the results file records for the row)."""
    command = [sys.executable, __file__, "--worker", operation, "--lengths", str(tokens),
               "--particles", str(args.particles), "--threads", str(args.threads), "--seed", str(args.seed),
               "--resample", args.resample, "--hint-weight", str(args.hint_weight),
               "--hint-temperature", str(args.hint_temperature), "--lookahead", str(args.lookahead),
               "--checkpoint", args.checkpoint, "--document-cache", str(args.document_cache),
               "--sweeps", str(args.sweeps), "--count-tokens", str(args.count_tokens)]
    command += ["--link-piece", str(args.link_piece)] if args.link_piece else []
    if args.file:
        command += ["--file", args.file]
    else:
        command += ["--corpus", args.corpus, "--split", args.split]
        command += ["--data-dir", args.data_dir] if args.data_dir else []
    return command


# ---- the table and the plot ------------------------------------------------------------------------------------


def slopes(rows: list[dict], operation: str) -> dict:
    """The log-log slopes of time and peak memory against length for ``operation`` (1: linear growth), fitted
    over its lengths; memory net of a 2K-token run's (the process's fixed cost: interpreter, torch, the models)."""
    done = sorted((row for row in rows if row["operation"] == operation), key=lambda row: row["tokens"])
    if len(done) < 2:
        return {}
    tokens = np.log([row["tokens"] for row in done])
    base = min(row["peak_rss_mb"] for row in done) * 0.999
    memory = [row["peak_rss_mb"] - base for row in done[1:]]
    result = {"time": float(np.polyfit(tokens, np.log([row["seconds"] for row in done]), 1)[0])}
    if len(memory) >= 2:
        result["memory_above_smallest"] = float(np.polyfit(tokens[1:], np.log(memory), 1)[0])
    return result


def format_table(rows: list[dict], gflops: float) -> str:
    lines = [f"{'operation':<15} {'tokens':>7} {'steps':>7} {'seconds':>8} {'ms/step':>8} {'bound ms':>9} "
             f"{'x bound':>8} {'ops':>6} {'syncs':>6} {'peak MB':>8}  found"]
    for row in rows:
        steps = row.get("steps")
        per_step = 1000 * row["seconds"] / steps if steps else None
        bound = row["step_mflop"] / gflops if "step_mflop" in row else None  # MFLOP / (GFLOP/s) = ms
        found = ", ".join(f"{key} {row[key]:.4g}" if isinstance(row[key], float) else f"{key} {row[key]}"
                          for key in ("mentions", "entities", "perplexity", "ess", "spans", "likely_mentions")
                          if key in row)
        lines.append(
            f"{row['operation']:<15} {row['tokens']:>7} {steps or '':>7} {row['seconds']:>8.1f} "
            f"{'' if per_step is None else f'{per_step:.2f}':>8} {'' if bound is None else f'{bound:.2f}':>9} "
            f"{'' if bound is None else f'{per_step / bound:.1f}':>8} {row.get('ops_per_step', ''):>6} "
            f"{row.get('syncs_per_step', ''):>6} {row['peak_rss_mb']:>8.0f}  {found}")
    return "\n".join(lines)


def plot(rows: list[dict], path: str) -> None:
    """Log-log time and peak memory against tokens, one line per operation, with a slope-1 guide."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4))
    time_axes, memory_axes = figure.subplots(1, 2)
    for operation in OPERATIONS:
        done = sorted((row for row in rows if row["operation"] == operation), key=lambda row: row["tokens"])
        if not done:
            continue
        tokens = [row["tokens"] for row in done]
        fitted = slopes(rows, operation)
        label = f"{operation} (slope {fitted['time']:.2f})" if fitted else operation
        time_axes.loglog(tokens, [row["seconds"] for row in done], "o-", label=label)
        memory_axes.loglog(tokens, [row["peak_rss_mb"] for row in done], "o-", label=operation)
    if rows:
        low, high = min(row["tokens"] for row in rows), max(row["tokens"] for row in rows)
        anchor = min(row["seconds"] for row in rows if row["tokens"] == low)
        time_axes.loglog([low, high], [anchor, anchor * high / low], "k:", label="linear (slope 1)")
    time_axes.set(xlabel="tokens", ylabel="seconds", title="time")
    memory_axes.set(xlabel="tokens", ylabel="peak resident memory (MB)", title="peak memory (whole process)")
    for axes in (time_axes, memory_axes):
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# ---- the command ------------------------------------------------------------------------------------------------


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/long_documents.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--file", help="a long UTF-8 text (a novel) to cut the lengths from, instead of a corpus")
    parser.add_argument("--corpus", default="litbank", help="the corpus whose documents are joined end to end")
    parser.add_argument("--split", default="test", help="its split")
    parser.add_argument("--lengths", type=integer(1), nargs="+", default=list(DEFAULT_LENGTHS),
                        help="text lengths in tokens")
    parser.add_argument("--operations", nargs="+", choices=OPERATIONS, default=list(OPERATIONS),
                        help="what to measure")
    parser.add_argument("--max-tokens", nargs="*", default=[], metavar="OPERATION=TOKENS",
                        help="skip an operation's lengths above TOKENS (e.g. posterior=32000)")
    parser.add_argument("--particles", type=integer(1), default=100, help="particles of log_likelihood")
    parser.add_argument("--resample", choices=["sentence", "token"], default="sentence",
                        help="log_likelihood: where SMC may resample (as marginal_ppl's --resample)")
    parser.add_argument("--hint-weight", type=real(0, 1), default=0.0,
                        help="log_likelihood, given_mentions: the proposal's mixture weight on the bundled "
                             "pipeline's hints")
    parser.add_argument("--hint-temperature", type=real(0, include_low=False), default=1.0,
                        help="log_likelihood, given_mentions: the pipeline ranker's softmax temperature")
    parser.add_argument("--sweeps", type=integer(1), default=1,
                        help="given_mentions: passes of SIR (particle Gibbs when more than 1)")
    parser.add_argument("--link-piece", type=integer(1), metavar="TOKENS",
                        help="given_mentions: the local conditionals' pieces (default: the command's)")
    parser.add_argument("--lookahead", type=real(0, 1), default=0.0,
                        help="log_likelihood: the proposal's share of the model's choice given the word")
    parser.add_argument("--checkpoint", default="entitynlm",
                        help="the EntityNLM of log_likelihood and posterior: 'entitynlm' (bundled) or a checkpoint")
    parser.add_argument("--document-cache", type=real(0, 1), default=0.0, metavar="LAMBDA",
                        help="log_likelihood: lambda of the unigram cache of the text so far (as marginal_ppl's "
                             "--document-cache; 0: none)")
    parser.add_argument("--count-tokens", type=integer(0), default=COUNT_TOKENS, metavar="TOKENS",
                        help="log_likelihood: count the aten operations and host syncs per token step on the text's "
                             "first TOKENS tokens, after the timed run (0: do not count)")
    parser.add_argument("--threads", type=integer(1), default=2, help="torch threads of each measurement")
    parser.add_argument("--gflops", type=real(0, include_low=False), default=40.0,
                        help="the arithmetic rate (GFLOP/s) the step bound assumes: one core's float32 rate")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the samplers")
    parser.add_argument("--out", type=output_folder, default=RESULTS,
                        help="folder of long_documents.json")
    parser.add_argument("--plot", type=output_file,
                        help=f"the log-log plot (PNG) (default: {DOCS_PLOT}, the docs' figure, with the default "
                             "--out; OUT/long_documents.png with another, so a measurement elsewhere leaves the "
                             "docs' figure alone)")
    parser.add_argument("--update", action="store_true",
                        help="keep the rows of an earlier long_documents.json that this run does not measure again")
    parser.add_argument("--worker", choices=OPERATIONS, help=argparse.SUPPRESS)  # one measurement (internal)
    return parser


def caps(pairs: list[str]) -> dict[str, int]:
    """``OPERATION=TOKENS`` pairs as a dict, or ValueError naming the bad one."""
    result = {}
    for pair in pairs:
        operation, _, tokens = pair.partition("=")
        if operation not in OPERATIONS or not tokens.isdigit():
            raise ValueError(f"--max-tokens {pair!r}: expected OPERATION=TOKENS with OPERATION in {OPERATIONS}")
        result[operation] = int(tokens)
    return result


def measured_rows(args: argparse.Namespace) -> list[dict]:
    """Every (operation, length) asked for, each in a fresh process, as it finishes (printed as a table row)."""
    limits = caps(args.max_tokens)
    rows = []
    for operation in args.operations:
        for tokens in sorted(args.lengths):
            if tokens > limits.get(operation, tokens):
                continue
            command = worker_command(args, operation, tokens)
            load = os.getloadavg()[0]
            child = subprocess.run(command, capture_output=True, text=True)
            if child.returncode != 0:
                raise RuntimeError(f"{operation} on {tokens} tokens failed: "
                                   f"{(child.stderr.strip().splitlines() or ['no message'])[-1]}")
            row = {"operation": operation, "tokens": tokens, **json.loads(child.stdout.strip().splitlines()[-1]),
                   "load_before": load, "command": shlex.join(command)}
            rows.append(row)
            print(format_table([row], args.gflops).splitlines()[-1], flush=True)
    return rows


def run(args: argparse.Namespace) -> int:
    """Measure, print the table, and write the JSON and the plot; with ``--update``, the rows of an earlier
    ``long_documents.json`` that were not measured again are kept (each row records its own command)."""
    if args.checkpoint != "entitynlm" and {"log_likelihood", "posterior", "given_mentions"} & set(args.operations):
        entitynlm_checkpoint(args.checkpoint)  # a missing file or another model's: one line, before any worker
    path = Path(args.out) / "long_documents.json"
    record = command_record(build_parser(), args)
    rows, commands = measured_rows(args), [record["command"]]
    if args.update and path.is_file():
        earlier = json.loads(path.read_text(encoding="utf-8"))
        again = {(row["operation"], row["tokens"]) for row in rows}
        kept = [row for row in earlier["rows"] if (row["operation"], row["tokens"]) not in again]
        rows = sorted(kept + rows, key=lambda row: (OPERATIONS.index(row["operation"]), row["tokens"]))
        commands = earlier["commands"] + commands
    table = format_table(rows, args.gflops)
    print("\n" + table)
    fitted = {operation: slopes(rows, operation) for operation in OPERATIONS}
    for operation, slope in fitted.items():
        if slope:
            print(f"{operation}: log-log slope of time {slope['time']:.2f}"
                  + (f", of memory above the smallest run {slope['memory_above_smallest']:.2f}"
                     if "memory_above_smallest" in slope else ""))
    Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
    plot(rows, args.plot)
    result = {**record, "machine": platform.platform(), "cores": os.cpu_count(), "gflops_assumed": args.gflops,
              "commands": commands, "rows": rows, "slopes": fitted, "table": table}
    write_text_atomic(path, json.dumps(result, indent=2) + "\n")
    print(f"wrote {path} and {args.plot}")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, ``--plot`` defaulting to the docs' figure with the default ``--out``, else beside the JSON."""
    args = build_parser().parse_args(argv)
    if args.plot is None:
        args.plot = DOCS_PLOT if args.out == RESULTS else str(Path(args.out) / "long_documents.png")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    return run_main(lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())
