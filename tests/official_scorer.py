"""The official CoNLL coreference scorer (Perl, ``../shared/tools``) as a test oracle: run it, read its figures.

Never part of the package: tests compare :mod:`coref.metrics.coreference` with it on the same files. Each metric runs in
its own ``perl scorer.pl METRIC KEY RESPONSE none`` process, because the scorer's count of repeated response
mentions (it refuses more than 10) is never reset between metrics within one process.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1].parent / "shared" / "tools"
MASTER = TOOLS / "reference-coreference-scorers"  # v8.01: MUC, B3, CEAFm, CEAFe, BLANC
LEA_BRANCH = TOOLS / "reference-coreference-scorers-lea"  # the same, plus LEA

OFFICIAL_METRICS = ("muc", "bcub", "ceafm", "ceafe", "blanc", "lea")

_COUNTS = (r"Recall: \((?P<rn>[^ ]+) / (?P<rd>[^ ]+)\).*?Precision: \((?P<pn>[^ ]+) / (?P<pd>[^ ]+)\)"
           r".*?F1: (?P<f>[^%]+)%")


@dataclass(frozen=True)
class Counts:
    """A line of the scorer's totals: recall and precision as numerators and denominators, F1 as printed
    (a percentage truncated to 2 decimals)."""

    recall_num: float
    recall_den: float
    precision_num: float
    precision_den: float
    printed_f1: float

    @property
    def recall(self) -> float:
        return self.recall_num / self.recall_den if self.recall_den else 0.0

    @property
    def precision(self) -> float:
        return self.precision_num / self.precision_den if self.precision_den else 0.0


@dataclass(frozen=True)
class OfficialScore:
    """What ``scorer.pl METRIC`` prints: mention identification and the metric's totals (for BLANC: its
    coreference-link and non-coreference-link halves, and the combined figure as ``coreference``)."""

    mentions: Counts
    coreference: Counts
    coreference_links: Counts | None = None
    non_coreference_links: Counts | None = None


def require_official_scorer() -> None:
    """Skip (with the reason) where the official scorer or Perl is absent."""
    if shutil.which("perl") is None:
        pytest.skip("perl is not installed: the official scorer cannot run")
    for folder in (MASTER, LEA_BRANCH):
        if not (folder / "scorer.pl").is_file():
            pytest.skip(f"official scorer unavailable: {folder}/scorer.pl does not exist (../shared/tools)")


def _counts(line: str) -> Counts:
    match = re.search(_COUNTS, line)
    if match is None:
        raise AssertionError(f"unexpected scorer output line: {line!r}")
    return Counts(*(float(match[name]) for name in ("rn", "rd", "pn", "pd")), float(match["f"]) / 100)


def official_score(metric: str, key: Path, response: Path) -> OfficialScore:
    """Run the official scorer for one metric on a key and a response file (all documents)."""
    folder = LEA_BRANCH if metric == "lea" else MASTER
    done = subprocess.run(
        ["perl", "scorer.pl", metric, str(key), str(response), "none"],
        cwd=folder, capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        raise AssertionError(f"scorer.pl {metric} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    totals = done.stdout.split("====== TOTALS =======", 1)[1].splitlines()
    line = {text.split(":", 1)[0]: text for text in totals if ":" in text}
    mentions = _counts(line["Identification of Mentions"])
    if metric != "blanc":
        return OfficialScore(mentions, _counts(line["Coreference"]))
    return OfficialScore(
        mentions, _counts(line["BLANC"]), _counts(line["Coreference links"]), _counts(line["Non-coreference links"])
    )


def official_scores(key: Path, response: Path) -> dict[str, OfficialScore]:
    """Every metric of the official scorer (LEA from its LEA branch) on a key and a response file."""
    return {metric: official_score(metric, key, response) for metric in OFFICIAL_METRICS}
