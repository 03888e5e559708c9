"""Short training runs of every trainable family, through their commands, and the numbers they print.

The record that training code was reorganised without changing what it computes: run it before and after a
change and compare (``--compare BEFORE.json``); every loss, dev score and fitted-model fingerprint must agree.

    python benchmarks/training_parity.py --out benchmarks/results/training_parity.json
    python benchmarks/training_parity.py --out /tmp/after.json --compare benchmarks/results/training_parity.json

Each row is one command line (kept in the JSON with its numbers). The numbers are every number on the lines the
run printed that name a loss, an NLL, a perplexity, an accuracy or an F1 (per-epoch records and the summary),
in order, timings (numbers of seconds) left out; for the coreference ranker, which prints none, the SHA-256 of
the CoNLL file that
the trained model predicts for the sample's dev split.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
SMALL_LM = ["--corpus", "sample", "--epochs", "2", "--embedding-size", "16", "--hidden-size", "16",
            "--vocab-size", "300", "--batch-tokens", "400"]
RUNS = {
    "entitynlm": ["-m", "inference.train", "--model", "entitynlm", *SMALL_LM],
    "rnnlm": ["-m", "inference.train", "--model", "rnnlm", *SMALL_LM],
    "dntm": ["-m", "inference.train", "--model", "dntm", "--context-size", "16", *SMALL_LM],
    "ngram": ["-m", "inference.train", "--model", "ngram", "--corpus", "sample", "--order", "3", "--discount-fallback"],
    "context_encoder": ["-m", "inference.pretrain_context", "--corpus", "sample", "--steps", "30", "--eval-every", "10",
                        "--context-size", "16", "--vocab-size", "300", "--batch-sentences", "16"],
    "reader": ["-m", "inference.train", "--model", "ga_gru", "--task", "babi:1", "--epochs", "2",
               "--hidden-size", "16", "--embedding-size", "16", "--data-dir", "{data}"],
    "story_lm": ["-m", "inference.train", "--model", "d_mneme", "--corpus", "sample", "--epochs", "2",
                 "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "32", "--chunk", "16",
                 "--segment", "32", "--cache", "32", "--max-tokens", "200", "--vocab-size", "300"],
    "mention_detector": ["-m", "coref.mentions", "train", "--corpus", "sample", "--epochs", "2",
                         "--hidden-size", "16", "--layers", "1", "--batch-tokens", "500"],
    "tagger": ["-m", "coref.pos", "train", "--epochs", "2", "--hidden-size", "16", "--batch-tokens", "2000",
               "--data-dir", "{data}"],
    "ranker": ["-m", "coref.resolver", "train", "--corpus", "sample", "--epochs", "2"],
}
OUT_FILE = {"mention_detector": "model.pt", "tagger": "model.pt", "ranker": "model.npz",
            "context_encoder": "context.pt"}  # families whose --out is a file; the others write a folder
SCORES = re.compile(r"loss|nll|perplexity|accuracy|f1|dev|kl", re.IGNORECASE)
TIMINGS = re.compile(r"seconds|per_second|time", re.IGNORECASE)


def numbers(text: str) -> list[float]:
    """The score numbers of the printed lines: JSON records' score fields, and numbers of lines naming a score."""
    found: list[float] = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            found += [value for key, value in _flat(record) if SCORES.search(key) and not TIMINGS.search(key)]
        elif SCORES.search(line) and not TIMINGS.search(line):
            found += [float(token) for token in re.findall(r"(?<![\w.])-?\d+\.\d+(?:e-?\d+)?(?!\d|\s*s\b)", line)]
    return found


def _flat(record: dict, prefix: str = "") -> list[tuple[str, float]]:
    pairs = []
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            pairs += _flat(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            pairs.append((name, float(value)))
    return pairs


def run(family: str, data: str, folder: Path) -> dict:
    out = folder / family / OUT_FILE.get(family, "")
    command = [PY, *(part.format(data=data) for part in RUNS[family]), "--out", str(out).rstrip("/")]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "ENTITYLM_DATA": data})
    if done.returncode:
        return {"command": " ".join(["python", *command[1:]]), "error": done.stderr.strip().splitlines()[-1:],
                "numbers": []}
    row = {"command": " ".join(["python", *command[1:]]), "numbers": numbers(done.stdout + "\n" + done.stderr),
           "seconds": round(time.perf_counter() - started, 1)}
    if family == "ranker" and out.exists():
        predicted = folder / "ranker.conll"
        subprocess.run([PY, "-m", "coref.resolver", "predict", "--model", str(out), "--corpus", "sample",
                        "--split", "dev", "--out", str(predicted)], check=True, capture_output=True)
        row["prediction_sha256"] = hashlib.sha256(predicted.read_bytes()).hexdigest()
    return row


def compare(after: dict, before: dict) -> list[str]:
    """One line per family whose numbers differ (relative 1e-5) or whose fingerprint differs."""
    problems = []
    for family, old in before["runs"].items():
        new = after["runs"].get(family)
        if new is None:
            continue
        if "error" in new or "error" in old:
            problems.append(f"{family}: failed: {old.get('error') or new.get('error')}")
        elif len(new["numbers"]) != len(old["numbers"]) or not all(
                math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-7) for a, b in zip(new["numbers"], old["numbers"])):
            problems.append(f"{family}: {old['numbers']} before, {new['numbers']} after")
        if old.get("prediction_sha256") != new.get("prediction_sha256"):
            problems.append(f"{family}: the trained model predicts another CoNLL file")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--data-dir", default=os.environ.get("ENTITYLM_DATA", "../shared/data"))
    parser.add_argument("--families", nargs="*", choices=RUNS, default=list(RUNS))
    parser.add_argument("--compare", help="a JSON file this script wrote before: report every difference")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {"command": " ".join(["python", *sys.argv]), "commit": commit, "runs": {}}
    with tempfile.TemporaryDirectory() as folder:
        for family in args.families:
            result["runs"][family] = run(family, str(Path(args.data_dir).resolve()), Path(folder))
            row = result["runs"][family]
            print(f"{family:18} {row.get('seconds', 0):7.1f} s  {len(row['numbers'])} numbers  {row['numbers'][:4]}"
                  f"  {row.get('error', '')}")
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    if args.compare:
        problems = compare(result, json.loads(Path(args.compare).read_text()))
        print("\n".join(problems) or "every family: the same numbers as before")
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
