"""Dhingra et al. 2018's bAbI-1K experiment (Table 1 and Table 4): every reader on every task over seeds, and
their LAMBADA experiment (Table 3): GA w/ GRU against GA w/ C-GRU, written to benchmarks/results/coref_gru.json
and coref_gru.md (``--name``: another file name, as for the grid with the paper's exact-match noun chains).

    python benchmarks/coref_gru.py --data-dir DATA --seeds 0 1 2 --jobs 2 --out runs/babi
    python benchmarks/coref_gru.py --data-dir DATA --models ga_cgru --out runs/babi_nouns --name coref_gru_nouns \
        --train-args "--epochs 30 --patience 6 --chains nouns"
    python benchmarks/coref_gru.py --data-dir DATA --tasks --lambada-seeds 0 --lambada-out runs/lambada

Each run is ``python -m inference.train --model MODEL --task babi:N --seed S`` in ``OUT/MODEL/N/seedS``, one
subprocess per run, ``--jobs`` at a time; a finished run (its train.json) is not run again and a stopped one
resumes. Per model and task, as the paper reports: **avg**, the mean test accuracy over the seeds, and **max**,
the test accuracy of the seed with the best dev accuracy; per model, both averaged over the tasks, and the
number of failed tasks (max < 0.95).

LAMBADA runs (``OUT/MODEL/seedS`` under ``--lambada-out``) report test accuracy overall and on the passages
whose answer is in the context, and per seed McNemar's exact test of GA w/ GRU against GA w/ C-GRU on the same
test questions (the two-sided binomial test of the discordant pairs).

Each task's cell records the options its runs were trained with, read back from their checkpoints
(``train_args``), and the JSON the command that reproduces it with the options it reads
(:func:`benchmarks.runs.command_record`): ``--train-args`` and ``--lambada-args`` as the runs were trained.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from scipy.stats import binomtest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import (  # noqa: E402
    ROOT,
    TRAIN,
    Step,
    command_parser,
    command_record,
    run_steps,
    stored_options,
    train_args,
)
from coref.corpora.babi import TASKS  # noqa: E402
from coref.io.atomic import write_text_atomic  # noqa: E402
from inference.checks import integer, output_folder  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402
from inference.training.coref_gru import READERS  # noqa: E402

FAILED_BELOW = 0.95  # a task whose max accuracy is below this has failed (the paper's and bAbI's convention)
LAMBADA_MODELS = ("ga_gru", "ga_cgru")  # Table 3's comparison
SET_PER_RUN = ("model", "task", "data_dir", "seed", "out", "resume")  # what --train-args does not give
READING = "inference.reading"  # `python -m inference.train --model READER` reads a reader's options with its parser


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/coref_gru.py", description=__doc__)
    parser.add_argument("--data-dir", help="folder holding babi/ (default: $ENTITYLM_DATA)")
    parser.add_argument("--models", nargs="+", choices=READERS, default=list(READERS), help="readers to run")
    parser.add_argument("--tasks", nargs="*", type=int, choices=TASKS, default=list(TASKS),
                        help="bAbI tasks (none: LAMBADA only)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one run per seed")
    parser.add_argument("--jobs", type=integer(1), default=2, help="runs at a time (one CPU core each)")
    parser.add_argument("--out", type=output_folder, default="runs/babi", help="folder of the runs")
    parser.add_argument("--results", type=output_folder, default=str(ROOT / "benchmarks" / "results"),
                        help="where NAME.json and NAME.md go")
    parser.add_argument("--name", default="coref_gru",
                        help="the results' file name, without .json or .md (e.g. coref_gru_nouns for a grid run "
                             "with --train-args '--chains nouns')")
    parser.add_argument("--collect-only", action="store_true", help="run nothing: gather the finished runs")
    parser.add_argument("--train-args", default="",
                        help="further options of `python -m inference.train` for every bAbI run")
    parser.add_argument("--lambada-seeds", nargs="*", type=int, default=[],
                        help="one LAMBADA run of GA w/ GRU and of GA w/ C-GRU per seed (default: none)")
    parser.add_argument("--lambada-out", type=output_folder, default="runs/lambada", help="folder of the LAMBADA runs")
    parser.add_argument("--lambada-args", default="",
                        help="further options of `python -m inference.train` for LAMBADA runs")
    return parser


def run_folder(out: Path, model: str, task: int, seed: int) -> Path:
    return out / model / str(task) / f"seed{seed}"


def steps(args: argparse.Namespace, model: str, task: int, seed: int) -> list[Step]:
    folder = run_folder(Path(args.out), model, task, seed)
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    return [(folder / "train.json", [TRAIN, "--model", model, "--task", f"babi:{task}", *data,
                                     "--seed", str(seed), "--out", str(folder), *args.train_args.split()])]


def lambada_steps(args: argparse.Namespace, model: str, seed: int) -> list[Step]:
    folder = Path(args.lambada_out) / model / f"seed{seed}"
    data = ["--data-dir", args.data_dir] if args.data_dir else []
    return [(folder / "train.json", [TRAIN, "--model", model, "--task", "lambada", *data,
                                     "--seed", str(seed), "--out", str(folder), *args.lambada_args.split()])]


def read_back(runs: list[dict], given: str) -> str:
    """The further training options of ``runs`` (as their checkpoints stored them), ``given`` where none ran."""
    return train_args(command_parser(READING), runs, SET_PER_RUN) if runs else given


def mcnemar(first: list[bool], second: list[bool]) -> dict[str, float | int]:
    """McNemar's exact test on paired right/wrong answers: b questions only ``first`` answers right, c only
    ``second``; p is the two-sided binomial test of b against b + c at one half."""
    b = sum(x and not y for x, y in zip(first, second))
    c = sum(y and not x for x, y in zip(first, second))
    return {"only_first": b, "only_second": c, "p": binomtest(b, b + c, 0.5).pvalue if b + c else 1.0}


def collect_lambada(args: argparse.Namespace) -> dict:
    """Per model, the test accuracies of every finished seed (every ``seedS`` folder with a test.json) and their
    means; per seed run by both models, McNemar's test of GRU against C-GRU, overall and on the in-context
    passages."""
    paths = [path for model in LAMBADA_MODELS
             for path in sorted((Path(args.lambada_out) / model).glob("seed*/test.json"))]
    tests = {model: {int(path.parent.name.removeprefix("seed")): json.loads(path.read_text())
                     for path in paths if path.parent.parent.name == model}
             for model in LAMBADA_MODELS}
    runs = [stored_options(path.parent / "model.pt") for path in paths]
    result: dict = {"train_args": read_back(runs, args.lambada_args), "models": {}, "mcnemar": {}}
    for model, runs in tests.items():
        if runs:
            result["models"][model] = {
                "seeds": len(runs),
                "overall": sum(run["test_accuracy"] for run in runs.values()) / len(runs),
                "in_context": sum(run["test_accuracy_in_context"] for run in runs.values()) / len(runs),
                "per_seed": {str(seed): {"overall": run["test_accuracy"], "in_context": run["test_accuracy_in_context"]}
                             for seed, run in runs.items()},
            }
    gru, cgru = (tests[model] for model in LAMBADA_MODELS)
    for seed in sorted(set(gru) & set(cgru)):
        inside = gru[seed]["test_in_context"]
        result["mcnemar"][str(seed)] = {
            "overall": mcnemar(gru[seed]["test_correct"], cgru[seed]["test_correct"]),
            "in_context": mcnemar(*([flag for flag, keep in zip(run["test_correct"], inside) if keep]
                                    for run in (gru[seed], cgru[seed]))),
        }
    return result


def collect(args: argparse.Namespace) -> dict:
    """Per model: per task avg, max (by dev), the seeds behind them and the options they were trained with; the
    averages and failed tasks. ``command`` reproduces them all: one results file is one set of training options."""
    result: dict = {"models": {}}
    trained_with = []
    for model in args.models:
        tasks = {}
        for task in args.tasks or TASKS:  # no tasks to run: gather them all
            folders = [run_folder(Path(args.out), model, task, seed) for seed in args.seeds]
            folders = [folder for folder in folders if (folder / "train.json").exists()]
            if folders:
                runs = [json.loads((folder / "train.json").read_text()) for folder in folders]
                options = [stored_options(folder / "model.pt") for folder in folders]
                trained_with += options
                best = max(runs, key=lambda run: run["best_dev_accuracy"])  # ties: the earlier seed
                tests = [run["test_accuracy"] for run in runs]
                tasks[str(task)] = {"avg": sum(tests) / len(tests), "max": best["test_accuracy"], "seeds": len(runs),
                                    "train_args": read_back(options, args.train_args)}
        if tasks:
            result["models"][model] = {
                "tasks": tasks,
                "avg": sum(cell["avg"] for cell in tasks.values()) / len(tasks),
                "max": sum(cell["max"] for cell in tasks.values()) / len(tasks),
                "failed_tasks": sum(cell["max"] < FAILED_BELOW for cell in tasks.values()),
                "tasks_run": len(tasks),
            }
    lambada = collect_lambada(args)
    if lambada["models"]:
        result["lambada"] = lambada
    return {**command_record(build_parser(), args, train_args=read_back(trained_with, args.train_args),
                             lambada_args=lambada["train_args"], collect_only=False), **result}


def lambada_table(lambada: dict) -> str:
    """Table 3's layout: test accuracy overall and in context per model; McNemar's p per seed."""
    lines = ["| LAMBADA test | seeds | overall | in context |", "|---|---:|---:|---:|"]
    lines += [f"| {model} | {entry['seeds']} | {entry['overall']:.4f} | {entry['in_context']:.4f} |"
              for model, entry in lambada["models"].items()]
    for seed, tests in lambada["mcnemar"].items():
        lines.append(f"| McNemar p, seed {seed} (only GRU / only C-GRU right) | | "
                     + " | ".join(f"{t['p']:.3g} ({t['only_first']} / {t['only_second']})"
                                  for t in (tests["overall"], tests["in_context"])) + " |")
    return "\n".join(lines) + "\n"


def markdown_table(result: dict) -> str:
    """Table 4's layout: one row per task, avg / max per model; then the means and the failed tasks."""
    models = list(result["models"])
    lines = ["| task | " + " | ".join(f"{model} avg | {model} max" for model in models) + " |",
             "|---|" + "---:|---:|" * len(models)]
    tasks = sorted({int(task) for entry in result["models"].values() for task in entry["tasks"]})
    for task in tasks:
        cells = []
        for model in models:
            cell = result["models"][model]["tasks"].get(str(task))
            cells += ["-", "-"] if cell is None else [f"{cell['avg']:.3f}", f"{cell['max']:.3f}"]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    common = [str(task) for task in tasks if all(str(task) in result["models"][m]["tasks"] for m in models)]
    if not common:
        return "\n".join(lines) + "\n"
    cells = [result["models"][m]["tasks"] for m in models]
    means = [f"{sum(c[t][key] for t in common) / len(common):.3f}" for c in cells for key in ("avg", "max")]
    failed = [cell for c in cells for cell in (str(sum(c[t]["max"] < FAILED_BELOW for t in common)), "")]
    seeds = [cell for c in cells for cell in (str(min(c[t]["seeds"] for t in common)), "")]
    label = "" if len(common) == len(TASKS) else f" ({len(common)} tasks every model ran)"
    lines.append(f"| mean{label} | " + " | ".join(means) + " |")
    lines.append(f"| failed (max < 0.95){label} | " + " | ".join(failed) + " |")
    lines.append("| seeds (fewest) | " + " | ".join(seeds) + " |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        jobs = [] if args.collect_only else [
            *((steps(args, model, task, seed), f"{model} babi:{task} seed {seed}")
              for seed in args.seeds for task in args.tasks for model in args.models),
            *((lambada_steps(args, model, seed), f"{model} lambada seed {seed}")
              for seed in args.lambada_seeds for model in LAMBADA_MODELS)]
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda job: run_steps(*job), jobs))
        result = collect(args)
        results = Path(args.results)
        write_text_atomic(results / f"{args.name}.json", json.dumps(result, indent=2) + "\n")
        table = (markdown_table(result) if result["models"] else "") + (
            "\n" + lambada_table(result["lambada"]) if "lambada" in result else "")
        write_text_atomic(results / f"{args.name}.md", table)
        print(table, end="")
        return 0

    return run_main(body, (ValueError, OSError, RuntimeError))


if __name__ == "__main__":
    sys.exit(main())
