"""What the benchmark scripts share: resumable steps, each a ``python -m`` command; and the record of what
produced a result, the options actually used (:func:`command_record`), read back from a run where it trained.

A results file records ``command`` (the command line that reproduces it) beside ``options`` (what the script's
parser reads from that command line): ``tests/test_benchmark_records.py`` checks that the two agree.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import shlex
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np

from coref.io import checkpoint as stored
from coref.io.atomic import write_text_atomic
from entitylm.__main__ import command_module

ROOT = Path(__file__).resolve().parents[1]

Step = tuple[Path, list[str]]  # the file a command leaves when done, and the command (python -m ARGS)
TRAIN = "inference.train"  # the documented training command, wherever its code lives


def run_steps(steps: Sequence[Step], label: str) -> None:
    """Run, in order, the steps whose file is missing, one subprocess each on one CPU thread. A training run that
    stopped resumes (``--resume`` when its folder holds last.pt), and training's summary (its stdout) is kept
    as its file once it has finished; a failed step raises RuntimeError with the command's last line."""
    for output, command in steps:
        if output.exists():
            continue
        if command[0] == TRAIN and (output.parent / "last.pt").exists():
            command = [*command, "--resume"]
        done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{command[0]} of {label} failed: {last}")
        if command[0] == TRAIN:
            write_text_atomic(output, done.stdout)
        print(f"done: {label}: {command[0]}", file=sys.stderr)


def mean_and_error(values: Sequence[float]) -> dict[str, float | int | None]:
    """The mean over seeds and its standard error (standard deviation / sqrt(seeds); None with one seed)."""
    values = [value for value in values if value is not None and math.isfinite(value)]
    if not values:
        return {"mean": None, "standard_error": None, "seeds": 0}
    error = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None
    return {"mean": float(np.mean(values)), "standard_error": error, "seeds": len(values)}


def flags(parser: argparse.ArgumentParser, options: dict, left_out: Collection[str] = (), every: bool = False
          ) -> list[str]:
    """The command-line arguments that make ``parser`` read ``options`` (a parsed namespace's ``vars``), ``left_out``
    (destinations) aside: a flag for each option that differs from its default, or with ``every`` for each option
    that has a value (an empty one only where it is not the default), so that the line does not hang on defaults
    that may change."""
    argv: list[str] = []
    for action in parser._actions:
        if not action.option_strings or action.dest in left_out or action.dest not in options:
            continue
        value, default = options[action.dest], action.default
        if isinstance(default, str) and action.type is not None:
            default = action.type(default)  # argparse converts a string default the same way
        same = value == default or (isinstance(default, tuple) and value == list(default))
        empty = value in ("", []) or action.nargs == 0  # a flag, or nothing to give: only where not the default
        if value is None or (same and (not every or empty)):
            continue
        flag = max(action.option_strings, key=len)
        if action.nargs == 0:
            argv.append(flag)
        elif isinstance(action, argparse._AppendAction):  # given once per value
            argv += [item for each in value for item in (flag, str(each))]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def command_record(parser: argparse.ArgumentParser, args: argparse.Namespace, **read_back: object) -> dict:
    """What produced a result: ``command``, the script's command line giving every option used, and ``options``,
    what its parser reads from it (:func:`json_ready`). ``read_back``: options whose value is the one the runs
    stored, not the one given (``train_args`` read back from the checkpoints, not a ``--collect-only`` call's)."""
    options = json_ready({**vars(args), **read_back})
    return {"command": shlex.join([*shlex.split(parser.prog), *flags(parser, options, every=True)]),
            "options": options}


def json_ready(options: dict) -> dict:
    """Options as a record keeps them: tuples as lists, and paths as strings, relative to the repository where they
    lie in it (the scripts run from its root), so that a record reads the same in any checkout."""
    def kept(value: object) -> object:
        if isinstance(value, (str, Path)) and Path(value).is_absolute() and Path(value).is_relative_to(ROOT):
            return str(Path(value).relative_to(ROOT))
        return str(value) if isinstance(value, Path) else list(value) if isinstance(value, tuple) else value

    return {name: kept(value) for name, value in options.items()}


def command_parser(entry: str) -> argparse.ArgumentParser:
    """The parser of the documented command ``python -m ENTRY``, wherever its code lives."""
    return importlib.import_module(command_module(entry)).build_parser()


def stored_options(checkpoint: Path) -> dict:
    """The options a run was trained with, as its checkpoint stores them (any checkpoint format)."""
    return dict(stored.load(checkpoint).training.get("args", {}))


def train_args(parser: argparse.ArgumentParser, runs: Sequence[dict], set_per_run: Collection[str]) -> str:
    """The ``--train-args`` every run in ``runs`` (their stored options) was trained with: the flags ``parser``
    (the training command's) needs beyond those the benchmark sets per run (``set_per_run``). Runs trained with
    different further options raise ValueError: one string cannot reproduce them."""
    found = {shlex.join(flags(parser, options, set_per_run)) for options in runs}
    if len(found) > 1:
        raise ValueError(f"the runs were trained with different options: {sorted(found)}")
    return found.pop() if found else ""
