"""What the benchmark scripts that train many runs share: resumable steps, each a ``python -m`` command."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coref.io.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]

Step = tuple[Path, list[str]]  # the file a command leaves when done, and the command (python -m ARGS)


def run_steps(steps: Sequence[Step], label: str) -> None:
    """Run, in order, the steps whose file is missing, one subprocess each on one CPU thread. A training run that
    stopped resumes (``--resume`` when its folder holds last.pt), and training's summary (its stdout) is kept
    as its file once it has finished; a failed step raises RuntimeError with the command's last line."""
    for output, command in steps:
        if output.exists():
            continue
        if command[0] == "inference.training.train" and (output.parent / "last.pt").exists():
            command = [*command, "--resume"]
        done = subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError(f"{command[0]} of {label} failed: {last}")
        if command[0] == "inference.training.train":
            write_text_atomic(output, done.stdout)
        print(f"done: {label}: {command[0]}", file=sys.stderr)


def mean_and_error(values: Sequence[float]) -> dict[str, float | int | None]:
    """The mean over seeds and its standard error (standard deviation / sqrt(seeds); None with one seed)."""
    values = [value for value in values if value is not None and math.isfinite(value)]
    if not values:
        return {"mean": None, "standard_error": None, "seeds": 0}
    error = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None
    return {"mean": float(np.mean(values)), "standard_error": error, "seeds": len(values)}
