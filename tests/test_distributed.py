"""Data-parallel training and sharded evaluation under ``torchrun`` (:mod:`inference.distributed`), on the CPU with
two gloo processes against one process running the same command.

- training: after a few updates on the same global batches the weights equal the one-process run's to 1e-5, for
  EntityNLM (with its two proposals; its first epoch on two ranks, the second on two ranks again after
  ``--resume``, so a resumed run continues the same run) and for a Coref-GRU reader (dropout and the new-entity
  noise off: their draws depend on how a batch is split, see docs/distributed.md);
- evaluation: ``marginal_ppl``, ``perplexity``, ``resolve`` over a folder and ``posterior --evaluate`` give the
  same figures, to the last digit, on one and on two ranks.

Every command runs as a user runs it (``python -m`` or ``torchrun --standalone --nproc-per-node 2 -m``), all of
them a few at a time before the first assertion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from coref.io import checkpoint as stored
from inference.training.checkpoint import Checkpoint

DATA = os.environ.get("ENTITYLM_DATA")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
ENTITYNLM = ("inference.train --model entitynlm --embedding-size 16 --hidden-size 16 --dropout 0 "
             "--new-entity-scale 0 --batch-tokens 600 --device cpu --seed 3")
READER = (f"inference.reading --model ga_cgru --task babi:1 --data-dir {DATA} --embedding-size 8 --hidden-size 8 "
          "--dropout 0 --batch-size 100 --epochs 1 --device cpu")
TEXTS = {"a.txt": "Anna met her brother in Paris. She thanked him for the book he had sent her.",
         "b.txt": "The old farmer sold his horse. He missed it every morning, and his wife laughed at him.",
         "c.txt": "Tom and Mary went to the market. They bought apples, and Mary carried them home."}


@dataclass(frozen=True)
class Launch:
    name: str
    ranks: int
    command: str  # a module and its arguments; {out} is the run's own folder
    after: str | None = None  # a launch that must finish first (the first half of a resumed run)


LAUNCHES = [
    Launch("entitynlm-1", 1, ENTITYNLM + " --epochs 2 --out {out}/run"),
    Launch("entitynlm-2-half", 2, ENTITYNLM + " --epochs 1 --out {out}/../entitynlm-2-resumed/run"),
    Launch("entitynlm-2-resumed", 2, ENTITYNLM + " --epochs 2 --resume --out {out}/run", after="entitynlm-2-half"),
    *(Launch(f"reader-{n}", n, READER + " --out {out}/run") for n in (1, 2)),
    *(Launch(f"marginal-{n}", n, "inference.marginal_ppl --particles 20 --batch-tokens 2000 --json {out}/r.json")
      for n in (1, 2)),
    *(Launch(f"perplexity-{n}", n, "inference.perplexity --checkpoint inference/pretrained/rnnlm.pt "
             "--batch-tokens 100 --json {out}/r.json") for n in (1, 2)),
    *(Launch(f"resolve-{n}", n, "coref.resolve --file {texts} --out {out}/r.conll --json {out}/r.json")
      for n in (1, 2)),
    *(Launch(f"posterior-{n}", n, "inference.posterior --evaluate --corpus sample --particles 20 --batch-tokens 2000 "
             "--method both --given-mentions none --sweeps 1 --json {out}/r.json") for n in (1, 2)),
]
NEEDS_DATA = {"reader-1", "reader-2"}


@dataclass(frozen=True)
class Outcome:
    out: Path
    returncode: int
    stderr: str


def launch(item: Launch, root: Path, texts: Path) -> Outcome:
    out = root / item.name
    out.mkdir(parents=True, exist_ok=True)
    module_and_arguments = item.command.format(out=out, texts=texts).split()
    argv = (TORCHRUN if item.ranks > 1 else [sys.executable]) + ["-m", *module_and_arguments]
    environment = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    completed = subprocess.run(argv, cwd=Path(__file__).resolve().parents[1], env=environment, capture_output=True,
                               text=True, timeout=600)
    return Outcome(out, completed.returncode, completed.stderr)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, Outcome]:
    """Every launch's outcome: the independent ones three at a time, a resumed run after its first half."""
    root, texts = tmp_path_factory.mktemp("distributed"), tmp_path_factory.mktemp("texts")
    for name, text in TEXTS.items():
        (texts / name).write_text(text, encoding="utf-8")
    selected = [item for item in LAUNCHES if DATA or item.name not in NEEDS_DATA]
    first = [item for item in selected if item.after is None]
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = dict(zip((item.name for item in first), pool.map(lambda item: launch(item, root, texts), first)))
    done.update({item.name: launch(item, root, texts) for item in selected if item.after is not None})
    return done


def succeeded(outcomes: dict[str, Outcome], name: str) -> Path:
    outcome = outcomes[name]
    assert outcome.returncode == 0, outcome.stderr[-3000:]
    return outcome.out


def weights_difference(one: Path, other: Path) -> float:
    a, b = stored.load(one), stored.load(other)  # any family's checkpoint
    assert a.weights.keys() == b.weights.keys()
    return max(float((a.weights[part][name].double() - b.weights[part][name].double()).abs().max())
               for part in a.weights for name in a.weights[part])


def test_entitynlm_on_two_ranks_makes_the_one_process_updates_and_resumes_the_same_run(outcomes):
    """Epoch 1 on two ranks, then --resume for epoch 2 on two ranks, against two epochs in one process."""
    succeeded(outcomes, "entitynlm-2-half")
    two, one = succeeded(outcomes, "entitynlm-2-resumed"), succeeded(outcomes, "entitynlm-1")
    assert "resumed from" in outcomes["entitynlm-2-resumed"].stderr
    for name in ("model.pt", "last.pt"):
        assert weights_difference(one / "run" / name, two / "run" / name) < 1e-5
    last = Checkpoint.load(two / "run" / "last.pt")
    assert len(last.training["resume"]["rng_by_rank"]) == 2 and last.training["state"]["epoch"] == 2
    history = [Checkpoint.load(out / "run" / "last.pt").training["state"]["history"] for out in (one, two)]
    assert [record["epoch"] for record in history[1]] == [1, 2]
    for single, double in zip(*history):
        for figure in ("dev_nll", "train_nll"):
            for component, value in single[figure].items():
                assert double[figure][component] == pytest.approx(value, rel=1e-6)


@pytest.mark.skipif(not DATA, reason="real corpora unavailable: set ENTITYLM_DATA to the folder holding babi/")
def test_a_reader_on_two_ranks_makes_the_one_process_updates(outcomes):
    one, two = succeeded(outcomes, "reader-1"), succeeded(outcomes, "reader-2")
    assert weights_difference(one / "run" / "last.pt", two / "run" / "last.pt") < 1e-5
    reports = [json.loads((out / "run" / "test.json").read_text()) for out in (one, two)]
    assert reports[0]["test_correct"] == reports[1]["test_correct"]


@pytest.mark.parametrize("command", ["marginal", "perplexity", "resolve", "posterior"])
def test_sharded_evaluation_gives_the_one_process_figures(outcomes, command):
    one, two = succeeded(outcomes, f"{command}-1"), succeeded(outcomes, f"{command}-2")
    results = [json.loads((out / "r.json").read_text()) for out in (one, two)]
    for result in results:  # the seconds are the only thing that may differ
        result.pop("seconds", None)
        for method in result.get("methods", {}).values():
            method.pop("seconds")
        for sampler in result.get("samplers", {}).values():
            sampler.pop("seconds")
    assert results[0] == results[1]
    if command == "resolve":
        assert (one / "r.conll").read_text() == (two / "r.conll").read_text()
        assert len(results[0]["documents"]) == len(TEXTS)


def test_only_rank_zero_reports(outcomes):
    one, two = outcomes["marginal-1"].stderr, outcomes["marginal-2"].stderr
    assert two.count("preprocessing") == one.count("preprocessing") > 0


def test_one_process_has_no_process_group():
    from inference.distributed import Ranks, ranks

    run = ranks()
    assert run == Ranks(0, 1) and run.leader and run.shard(list("abcde")) == list("abcde")
    assert Ranks(1, 2).shard(list("abcde")) == ["b", "d"]
    assert run.total(torch.tensor([1.5])).dtype == torch.float64
