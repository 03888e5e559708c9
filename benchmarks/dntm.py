"""Kobayashi et al. 2017's experiments on our data: the baseline and every placement x merge function of the
Dynamic Neural Text Model, over seeds; Table 2/3 (perplexity per token group), Table 4 (entity cloze, mean
quantile) and Figures 4-6, written to benchmarks/results/dntm.json (one entry per corpus), dntm_CORPUS.md and
dntm_CORPUS_*.png.

    python benchmarks/dntm.py --corpus ontogum --data-dir DATA --seeds 0 1 2 --jobs 2 --out runs/dntm

Every run goes through the documented commands (``python -m inference.train``, ``inference.perplexity``,
``inference.entity_cloze``), one subprocess each, ``--jobs`` at a time; a step whose output exists is not run
again, so the script resumes where it stopped. A variant's figure is the mean over its seeds with the standard
error (standard deviation / sqrt(seeds)), as the paper reports. Each variant records the training options its
runs stored in their checkpoints (``train_args``), and the JSON the command that reproduces it with the options
it reads (:func:`benchmarks.runs.command_record`): ``--train-args`` as the runs were trained, not as this call says.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import (  # noqa: E402
    ROOT,
    TRAIN,
    Step,
    command_parser,
    command_record,
    mean_and_error,
    run_steps,
    stored_options,
    train_args,
)
from coref.io.atomic import atomic_path, write_text_atomic  # noqa: E402
from generative.dntm import MERGES, PLACEMENTS  # noqa: E402
from inference.checks import integer, output_folder  # noqa: E402
from inference.commands.cli import Parser, run_main  # noqa: E402
from inference.evaluation.perplexity import GROUPS  # noqa: E402
from inference.training.checkpoint import Checkpoint  # noqa: E402

VARIANTS = ("baseline", *(f"{placement}/{merge}" for placement in PLACEMENTS if placement != "none"
                          for merge in MERGES))
SET_PER_RUN = ("model", "placement", "merge", "corpus", "data_dir", "seed", "out", "resume")  # not --train-args
FIGURES = {"position": "Figure 4: perplexity of all tokens by position in the document",
           "following_occurrence": "Figure 5: perplexity of tokens following the k-th occurrence of an entity",
           "antecedent_entities": "Figure 6: perplexity of entity tokens by the number of entities seen before"}


X_LABELS = {"position": "t-th token of the document", "following_occurrence": "t-th occurrence of the entity",
            "antecedent_entities": "entities seen before"}


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/dntm.py", description=__doc__)
    parser.add_argument("--corpus", default="ontogum", help="corpus of the anonymised data")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="baseline, or PLACEMENT/MERGE")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="one run per seed and variant")
    parser.add_argument("--jobs", type=integer(1), default=2, help="runs at a time (one CPU core each)")
    parser.add_argument("--out", type=output_folder, default="runs/dntm", help="folder of the runs")
    parser.add_argument("--results", type=output_folder, default=str(ROOT / "benchmarks" / "results"),
                        help="where dntm.json and the figures go")
    parser.add_argument("--pretrained-runs", type=output_folder,
                        help="also collect the runs in this folder (trained with --context-encoder) as "
                             "VARIANT+pretrained")
    parser.add_argument("--collect-only", action="store_true",
                        help="run nothing: gather the runs that exist into the table, JSON and figures")
    parser.add_argument("--train-args", default="--epochs 8 --patience 2 --hidden-size 128 --embedding-size 128 "
                        "--context-size 128", help="further options of `python -m inference.train`, the same for every "
                        "run (the default: the documented runs')")
    return parser


def run_folder(out: Path, corpus: str, variant: str, seed: int) -> Path:
    return out / corpus / variant.replace("/", "-") / f"seed{seed}"


def variant_options(variant: str) -> list[str]:
    placement, merge = ("none", "gru_relu") if variant == "baseline" else variant.split("/")
    return ["--placement", placement, "--merge", merge]


def steps(args: argparse.Namespace, variant: str, seed: int) -> list[Step]:
    """The commands of one run, each with the file it leaves when done."""
    folder = run_folder(Path(args.out), args.corpus, variant, seed)
    data = ["--corpus", args.corpus] + (["--data-dir", args.data_dir] if args.data_dir else [])
    model = folder / "model.pt"  # written by training, read by the evaluations
    return [
        (folder / "train.json", [TRAIN, "--model", "dntm", *variant_options(variant), *data,
                                 "--seed", str(seed), "--out", str(folder), *args.train_args.split()]),
        (folder / "perplexity.json", ["inference.perplexity", "--checkpoint", str(model), *data,
                                      "--json", str(folder / "perplexity.json")]),
        (folder / "cloze.json", ["inference.entity_cloze", "--checkpoint", str(model), *data,
                                 "--json", str(folder / "cloze.json")]),
    ]


def execute(args: argparse.Namespace, variant: str, seed: int) -> None:
    """Run the steps of one (variant, seed) whose outputs are missing (:func:`benchmarks.runs.run_steps`)."""
    run_steps(steps(args, variant, seed), f"{variant} seed {seed}")


def parameter_count(checkpoint: Path) -> int:
    """The number of trained parameters of a run's model (the paper's Table 3 lists them; a frozen pretrained
    context encoder counts too)."""
    return sum(tensor.numel() for name, tensor in Checkpoint.load(checkpoint).weights["model"].items()
               if tensor.is_floating_point())


def collect(args: argparse.Namespace) -> dict:
    """Per variant: each group's perplexity and the mean quantile, mean and standard error over the seeds, and the
    training options its runs stored. ``train_args`` and ``command`` are those of the runs under ``--out``."""
    result = {"corpus": args.corpus, "variants": {}}
    sources = [(Path(args.out), "")] + ([(Path(args.pretrained_runs), "+pretrained")] if args.pretrained_runs else [])
    trained_with = []
    for (out, suffix), variant in ((source, variant) for source in sources for variant in args.variants):
        folders = [run_folder(out, args.corpus, variant, seed) for seed in args.seeds]
        folders = [folder for folder in folders if (folder / "perplexity.json").exists()
                   and (folder / "cloze.json").exists()]
        if not folders:
            continue
        runs = [(json.loads((folder / "perplexity.json").read_text()), json.loads((folder / "cloze.json").read_text()))
                for folder in folders]
        options = [stored_options(folder / "model.pt") for folder in folders]
        entry = {"train_args": train_args(command_parser(TRAIN), options, SET_PER_RUN)}
        trained_with += [] if suffix else options
        entry |= {group: mean_and_error([p["groups"][group]["perplexity"] for p, _ in runs]) for group in GROUPS}
        entry["mean_quantile"] = mean_and_error([c["mean_quantile"] for _, c in runs])
        entry["parameters"] = parameter_count(folders[0] / "model.pt")
        entry["figures"] = {figure: {bucket: mean_and_error([p["groups"][figure][bucket]["perplexity"]
                                                              for p, _ in runs])
                                     for bucket in runs[0][0]["groups"][figure]}
                            for figure in FIGURES}
        result["variants"][variant + suffix] = entry
    # the command that reproduces the table: every step run (not --collect-only), as the runs were trained
    read_back = train_args(command_parser(TRAIN), trained_with, SET_PER_RUN) if trained_with else args.train_args
    return {**command_record(build_parser(), args, train_args=read_back, collect_only=False), **result}


def plot(result: dict, folder: Path, compared: Sequence[str] = ("baseline", "both/gru_relu")) -> list[Path]:
    """Figures 4-6: the baseline against the paper's best variant, bucket by bucket."""
    from matplotlib.figure import Figure

    written = []
    for figure, title in FIGURES.items():
        chart = Figure(figsize=(6, 3.5))
        axes = chart.subplots()
        for variant in compared:
            if variant in result["variants"]:
                cells = result["variants"][variant]["figures"][figure]
                axes.plot(list(cells), [cell["mean"] if cell["mean"] is not None else np.nan
                                        for cell in cells.values()], marker="o", label=variant)
        axes.set_title(f"{title} ({result['corpus']})", fontsize=8)
        axes.set_ylabel("perplexity")
        axes.set_xlabel(X_LABELS[figure])
        axes.legend()
        chart.tight_layout()
        path = folder / f"dntm_{result['corpus']}_{figure}.png"
        with atomic_path(path) as temporary:
            chart.savefig(temporary, format="png", dpi=100)
        written.append(path)
    return written


def _cell(cell: dict, digits: int) -> str:
    """``mean ± standard error`` (the error left out with one seed), or ``-`` without runs."""
    if cell["mean"] is None:
        return "-"
    error = f" ± {cell['standard_error']:.{digits}f}" if cell["standard_error"] is not None else ""
    return f"{cell['mean']:.{digits}f}{error}"


def format_table(result: dict) -> str:
    """Table 2/3 with Table 4's mean quantile: one row per variant."""
    lines = [f"{'variant':<24}" + "".join(f"{group:>24}" for group in GROUPS) + f"{'MQ':>18}"]
    for variant, entry in result["variants"].items():
        cells = [_cell(entry[group], 2) for group in GROUPS] + [_cell(entry["mean_quantile"], 3)]
        lines.append(f"{variant:<24}" + "".join(f"{cell:>24}" for cell in cells[:-1]) + f"{cells[-1]:>18}")
    return "\n".join(lines)


def markdown_table(result: dict) -> str:
    """The same table in Markdown, with the number of seeds behind each row (as docs/dntm.md shows it)."""
    header = ["variant", *GROUPS, "mean quantile", "seeds", "parameters"]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * (len(header) - 1) + "|"]
    for variant, entry in result["variants"].items():
        cells = [_cell(entry[group], 2) for group in GROUPS] + [_cell(entry["mean_quantile"], 3)]
        parameters = "-" if entry["parameters"] is None else f"{entry['parameters'] / 1e6:.2f}M"
        lines.append(f"| {variant} | " + " | ".join(cells) + f" | {entry['all']['seeds']} | {parameters} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        jobs = [] if args.collect_only else [(variant, seed) for seed in args.seeds for variant in args.variants]
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda job: execute(args, *job), jobs))
        result = collect(args)
        results = Path(args.results)
        kept = json.loads((results / "dntm.json").read_text()) if (results / "dntm.json").exists() else {}
        write_text_atomic(results / "dntm.json", json.dumps({**kept, args.corpus: result}, indent=2) + "\n")
        write_text_atomic(results / f"dntm_{args.corpus}.md", markdown_table(result))
        plot(result, results)
        print(format_table(result))
        return 0

    return run_main(body, (ValueError, OSError, RuntimeError))


if __name__ == "__main__":
    sys.exit(main())
