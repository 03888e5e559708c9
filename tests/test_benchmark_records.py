"""Results files say what produced them: the command recorded beside the numbers is one the benchmark's own
parser reads back to the options recorded beside it (:func:`benchmarks.runs.command_record`), and training
options are read back from the runs' checkpoints, not from the call that gathered them (issue 25, item 7: a
table gathered with ``--collect-only`` once recorded the default ``--epochs 5`` of runs trained for 8)."""

from __future__ import annotations

import importlib
import json
import shlex
from pathlib import Path

import pytest

from benchmarks import dntm
from benchmarks.runs import TRAIN, command_parser, command_record, json_ready, train_args

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _records() -> list[tuple[str, dict]]:
    """Every record of a results file: a ``command`` with its ``options``, at the top or one level down."""
    found = []
    for path in sorted(RESULTS.rglob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        for record in [data, *data.values()] if isinstance(data, dict) else []:
            if isinstance(record, dict) and {"command", "options"} <= record.keys():
                found.append((str(path.relative_to(RESULTS)), record))
    return found


def _read_back(command: str) -> dict:
    """The options the benchmark named in ``command`` reads from it, as a record keeps them."""
    words = shlex.split(command)
    assert words[0] == "python" and words[1].startswith("benchmarks/"), command
    script = importlib.import_module(f"benchmarks.{Path(words[1]).stem}")
    return json_ready(vars(script.build_parser().parse_args(words[2:])))


@pytest.mark.parametrize(("name", "record"), _records(), ids=[name for name, _ in _records()])
def test_every_recorded_command_reads_back_to_the_options_beside_it(name, record, monkeypatch):
    monkeypatch.chdir(ROOT)  # the scripts run from the repository's root, and records name paths from there
    assert str(ROOT) not in record["command"], "a path inside this checkout, which reads back only here"
    assert _read_back(record["command"]) == record["options"]


def test_the_results_of_many_runs_record_their_command():
    assert {"dntm.json", "coref_gru.json", "coref_gru_nouns.json"} <= {name for name, _ in _records()}
    (dntm_record,) = [record for name, record in _records() if name == "dntm.json"]
    assert "--epochs 8 " in dntm_record["options"]["train_args"]  # as the runs were trained


def test_a_command_record_gives_every_option_and_round_trips(monkeypatch):
    monkeypatch.chdir(ROOT)
    parser = dntm.build_parser()
    args = parser.parse_args(["--corpus", "sample", "--seeds", "3", "--out", "runs/x", "--collect-only"])
    record = command_record(parser, args, train_args="--epochs 8")
    assert record["options"]["results"] == "benchmarks/results"  # the same in any checkout
    assert "--jobs 2" in record["command"] and "--collect-only" in record["command"]  # defaults spelt out
    assert _read_back(record["command"]) == record["options"] == {**json_ready(vars(args)), "train_args": "--epochs 8",
                                                                  "results": "benchmarks/results"}


def test_train_args_are_read_back_from_the_runs():
    """The further options of training runs, from what their checkpoints stored (``training["args"]``): only
    what differs from the training command's defaults, and what the benchmark sets per run left out."""
    parser = command_parser(TRAIN)
    base = ["--model", "dntm", "--placement", "both", "--corpus", "sample", "--out", "runs/x"]
    runs = [vars(parser.parse_args([*base, "--seed", str(seed), "--epochs", "8", "--hidden-size", "16"]))
            for seed in (0, 1)]
    assert train_args(parser, runs, dntm.SET_PER_RUN) == "--hidden-size 16 --epochs 8"
    assert train_args(parser, [], dntm.SET_PER_RUN) == ""
    other = vars(parser.parse_args([*base, "--epochs", "5", "--hidden-size", "16"]))
    with pytest.raises(ValueError, match="different options"):
        train_args(parser, [*runs, other], dntm.SET_PER_RUN)


SCRIPTS = {  # every benchmark that writes a results file, with the options it requires
    "cache_baseline": [], "coref_end_to_end": [], "coref_gru": [], "dntm": [], "long_documents": [],
    "lowercase_pipeline": [], "samplers": [], "tokenizer_agreement": [], "litbank_cv": [], "quotations": [],
    "speed": ["--data-dir", "DATA"],
    "proposal_choice": ["--data-dir", "DATA", "--entitynlm", "E"],
    "quality": ["--data-dir", "DATA", "--entitynlm", "E", "--rnnlm", "R", "--ngram", "N"],
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_records_a_command_its_parser_reads_back(script, monkeypatch):
    monkeypatch.chdir(ROOT)
    parser = importlib.import_module(f"benchmarks.{script}").build_parser()
    record = command_record(parser, parser.parse_args(SCRIPTS[script]))
    assert record["command"].startswith(f"python benchmarks/{script}.py")
    assert _read_back(record["command"]) == record["options"]
    assert "command_record(build_parser(), args" in (ROOT / "benchmarks" / f"{script}.py").read_text()
