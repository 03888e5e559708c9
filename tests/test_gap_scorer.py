"""GAP's official scorer (``../shared/tools/gap-coreference/gap_scorer.py``) as the oracle of our port,
:mod:`coref.metrics.gap`: on the real test and validation gold against many system files, and on hand-made files
for the edge cases, every figure it prints must be ours at its printed precision, and its scorecard ours
character for character.

The scorer is never imported: it runs as a subprocess with this interpreter (it is Python 3 code: ``open`` with
``encoding=``), in its own folder, so that its ``from constants import ...`` finds its constants.
"""

from __future__ import annotations

import ast
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from coref.corpora.gap import COLUMNS, GapExample, evaluate_gap, load_gap
from coref.document import Document, Mention
from coref.io.text import TokenizedText, tokenize
from coref.metrics.gap import GROUPS, GapScorerError, format_scorecard, format_system_tsv, score_gap
from tests.test_gap import ROW, scored_examples, write_gap

OFFICIAL = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "gap-coreference"

_GROUP = re.compile(r"^(?P<group>Overall|Masculine|Feminine) recall: (?P<recall>\S+) precision: (?P<precision>\S+) "
                    r"f1: (?P<f1>\S+)\n\t\ttp (?P<tp>\d+)\tfp (?P<fp>\d+)\n\t\tfn (?P<fn>\d+)\ttn (?P<tn>\d+)$", re.M)
_BIAS = re.compile(r"^Bias \(F/M\): (\S+)$", re.M)


@dataclass(frozen=True)
class OfficialRun:
    """What one run of ``gap_scorer.py`` printed."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def messages(self) -> list[str]:
        """The lines it printed before its scorecard (unexpected labels, repeated IDs, missing output)."""
        return self.stdout[: self.stdout.index("Overall recall:")].splitlines()

    @property
    def scorecard(self) -> str:
        return self.stdout[self.stdout.index("Overall recall:"):]


def require_official() -> None:
    if not (OFFICIAL / "gap_scorer.py").is_file() or not (OFFICIAL / "constants.py").is_file():
        pytest.skip(f"GAP's official scorer unavailable: {OFFICIAL}/gap_scorer.py and constants.py do not exist "
                    "(../shared/tools/gap-coreference)")


def run_official(gold: Path, system: Path) -> OfficialRun:
    """Run the official scorer on a gold and a system file."""
    require_official()
    done = subprocess.run([sys.executable, "gap_scorer.py", "--gold_tsv", str(gold), "--system_tsv", str(system)],
                          cwd=OFFICIAL, capture_output=True, text=True, timeout=300)
    return OfficialRun(done.returncode, done.stdout, done.stderr)


def assert_agrees(ours: dict, official: OfficialRun) -> None:
    """Every figure the scorer printed is ours at its printed precision; so is every message it printed."""
    assert official.returncode == 0, official.stderr
    printed = {match["group"].lower(): match for match in _GROUP.finditer(official.stdout)}
    assert set(printed) == set(GROUPS)
    for group in GROUPS:
        for count in ("tp", "fp", "fn", "tn"):
            assert ours[group][count] == int(printed[group][count]), (group, count)
        for figure in ("recall", "precision", "f1"):
            assert f"{ours[group][figure]:.1f}" == printed[group][figure], (group, figure)
    bias = _BIAS.search(official.stdout)[1]
    assert bias == ("-" if ours["bias"] is None else f"{ours['bias']:.2f}")
    assert format_scorecard(ours) + "\n" == official.scorecard

    missing = [line.removeprefix("Missing output for ") for line in official.messages
               if line.startswith("Missing output for ")]
    assert set(missing) == set(ours["missing"])
    assert [id_ for i, id_ in enumerate(missing) if id_ not in missing[:i]] == ours["missing"]  # in the gold's order
    assert [line for line in official.messages if not line.startswith("Missing output for ")] == \
        [official_message(warning) for warning in ours["warnings"]]


def official_message(warning: str) -> str:
    """The line the scorer prints for one of our reading warnings."""
    label = re.search(r": unexpected label (.*), read as no answer$", warning)
    if label:
        return f"Unexpected label! {ast.literal_eval(label[1])}"
    repeat = re.search(r": ID (.*) repeats an earlier row's, which is kept$", warning)
    assert repeat, warning
    return f"Multiple annotations for {ast.literal_eval(repeat[1])}"


# ---- the real gold --------------------------------------------------------------------------------------------


def _flip(label: bool, rng: random.Random, rate: float) -> bool:
    return label ^ (rng.random() < rate)


# System decisions by example ID, from the gold examples and a seeded random generator.
SYSTEMS: dict[str, Callable[[list[GapExample], random.Random], dict[str, tuple[bool, bool]]]] = {
    "all true": lambda gold, rng: {e.id: (True, True) for e in gold},
    "all false": lambda gold, rng: {e.id: (False, False) for e in gold},
    "random": lambda gold, rng: {e.id: (rng.random() < 0.5, rng.random() < 0.5) for e in gold},
    "random, sparse": lambda gold, rng: {e.id: (rng.random() < 0.1, rng.random() < 0.1) for e in gold},
    "the gold": lambda gold, rng: {e.id: (e.a_coref, e.b_coref) for e in gold},
    "the gold, 15% flipped": lambda gold, rng: {e.id: (_flip(e.a_coref, rng, 0.15), _flip(e.b_coref, rng, 0.15))
                                                for e in gold},
    "the gold, feminine A-coref flipped": lambda gold, rng: {  # a bias far from 1
        e.id: (_flip(e.a_coref, rng, 0.5 if e.gender == "feminine" else 0.0), e.b_coref) for e in gold},
    "random, 10% of examples missing": lambda gold, rng: {e.id: (rng.random() < 0.4, rng.random() < 0.4)
                                                          for e in gold if rng.random() >= 0.1},
}


@pytest.fixture(scope="module", params=["test", "validation"])
def real_gold(request, data_dir: Path):
    path = data_dir / "gap" / f"gap-{request.param}.tsv"
    if not path.is_file():
        pytest.skip(f"GAP unavailable: {path} does not exist")
    return path, load_gap(request.param, data_dir)


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_real_gold_scores_as_the_official_scorer(real_gold, system: str, tmp_path: Path) -> None:
    path, examples = real_gold
    decisions = SYSTEMS[system](examples, random.Random(26))
    system_file = tmp_path / "system.tsv"
    system_file.write_text(format_system_tsv(decisions, decisions.values()), encoding="utf-8")
    ours = score_gap(examples, decisions)
    assert score_gap(path, system_file) == ours  # the files read as the loaded examples and the decisions
    assert_agrees(ours, run_official(path, system_file))
    if len(decisions) == len(examples):  # decisions in the gold's order, as evaluate_gap passes them
        assert score_gap(examples, [decisions[e.id] for e in examples]) == ours


# ---- hand-made files ------------------------------------------------------------------------------------------


def gold_file(folder: Path, rows: list[tuple[str, str, str, str]], text: str = "A text.") -> Path:
    """A gold file of (ID, pronoun, A-coref, B-coref) rows (the scorer reads no other column)."""
    lines = ["\t".join(COLUMNS)]
    lines += ["\t".join([id_, text, pronoun, "0", "A", "0", a, "B", "0", b, "http://x"]) for id_, pronoun, a, b in rows]
    path = folder / "gold.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def system_file(folder: Path, text: str) -> Path:
    path = folder / "system.tsv"
    path.write_bytes(text.encode("utf-8"))
    return path


def agree_on(gold: Path, system: Path) -> dict:
    ours = score_gap(gold, system)
    assert_agrees(ours, run_official(gold, system))
    return ours


MIXED = [("m1", "he", "TRUE", "FALSE"), ("m2", "His", "FALSE", "TRUE"), ("m3", "him", "FALSE", "FALSE"),
         ("f1", "She", "TRUE", "FALSE"), ("f2", "her", "FALSE", "TRUE"), ("f3", "HERS", "FALSE", "FALSE")]


def test_only_masculine_examples_leave_feminine_at_zero_and_no_bias(tmp_path: Path) -> None:
    gold = gold_file(tmp_path, MIXED[:3])
    ours = agree_on(gold, system_file(tmp_path, "m1\tTRUE\tFALSE\nm2\tTRUE\tTRUE\nm3\tFALSE\tFALSE\n"))
    assert ours["feminine"] == {"tp": 0, "fp": 0, "fn": 0, "tn": 0, "precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert ours["masculine"]["f1"] == pytest.approx(80.0) and ours["bias"] is None


def test_no_positive_anywhere_divides_by_nothing(tmp_path: Path) -> None:
    gold = gold_file(tmp_path, [(id_, pronoun, "FALSE", "FALSE") for id_, pronoun, _, _ in MIXED])
    ours = agree_on(gold, system_file(tmp_path, "".join(f"{id_}\tFALSE\tFALSE\n" for id_, *_ in MIXED)))
    assert ours["overall"]["tn"] == 12 and ours["overall"]["f1"] == 0.0 and ours["bias"] is None


def test_a_zero_masculine_f1_leaves_no_bias(tmp_path: Path) -> None:
    system = "m1\tFALSE\tTRUE\nm2\tTRUE\tFALSE\nm3\tFALSE\tFALSE\nf1\tTRUE\tFALSE\nf2\tFALSE\tFALSE\nf3\tTRUE\tTRUE\n"
    ours = agree_on(gold_file(tmp_path, MIXED), system_file(tmp_path, system))
    assert ours["masculine"]["f1"] == 0.0 and ours["feminine"]["f1"] > 0 and ours["bias"] is None


def test_missing_and_unreadable_answers_are_false_negatives(tmp_path: Path) -> None:
    """m1 and f3 have no row, m2's A label is unreadable: each missing answer is a false negative, even where the
    gold says FALSE (f3)."""
    system = "m2\tmaybe\tTRUE\nm3\tfalse\tFalse\nf1\tTrue\tFALSE\nf2\tFALSE\ttrue\n"
    ours = agree_on(gold_file(tmp_path, MIXED), system_file(tmp_path, system))
    assert ours["missing"] == ["m1", "m2", "f3"]
    assert (ours["feminine"]["tp"], ours["feminine"]["fn"], ours["feminine"]["tn"]) == (2, 2, 2)


def test_repeats_blank_lines_crlf_a_header_and_unknown_ids(tmp_path: Path) -> None:
    """The first row of a repeated ID counts; blank lines are skipped; a system header is read as an example
    (its labels unexpected) that the gold does not have, like any unknown ID; CRLF line ends are read."""
    system = ("ID\tA-coref\tB-coref\r\n\r\nm1\tTRUE\tFALSE\r\nm1\tFALSE\tTRUE\r\nm2\tFALSE\tTRUE\r\nm3\tFALSE\tFALSE"
              "\r\nf1\tTRUE\tTRUE\r\n\r\nf2\tFALSE\tTRUE\r\nf3\tFALSE\tFALSE\r\nnot-in-gold\tTRUE\tTRUE\r\n")
    ours = agree_on(gold_file(tmp_path, MIXED), system_file(tmp_path, system))
    assert ours["overall"] == {"tp": 4, "fp": 1, "fn": 0, "tn": 7, "precision": 80.0, "recall": 100.0,
                               "f1": pytest.approx(800 / 9)}
    assert len(ours["warnings"]) == 3 and ours["missing"] == []


def test_gold_oddities_as_the_scorer_reads_them(tmp_path: Path) -> None:
    """An unexpected gold label counts as FALSE; a repeated gold ID keeps its first row; a quoted text field
    may hold a TAB (the csv module's reading, not a split on TABs)."""
    gold = gold_file(tmp_path, [*MIXED, ("m1", "she", "TRUE", "TRUE"), ("x", "he", "unsure", "TRUE")],
                     text='"A quoted\ttext" goes on')
    system = "".join(f"{id_}\tTRUE\tTRUE\n" for id_ in ("m1", "m2", "m3", "f1", "f2", "f3", "x"))
    ours = agree_on(gold, system_file(tmp_path, system))
    assert ours["masculine"]["fp"] == 5 and len(ours["warnings"]) == 2


def test_figures_round_as_the_scorer_computes_them(tmp_path: Path) -> None:
    """Masculine recall 100.0 * 23 / 80 is exactly 28.75 (printed 28.8), where 100 * (23 / 80) is 28.749...;
    feminine F1 from the percentages (tp 1, fp 4, fn 26) is 6.250...01 (printed 6.3), from the fractions 6.25."""
    decisions = {"he": [(True, True)] * 23 + [(True, False)] * 57,  # (gold, system) for each decision
                 "she": [(True, True)] + [(False, True)] * 4 + [(True, False)] * 26 + [(False, False)]}
    gold_rows, system = [], ""
    for pronoun, pairs in decisions.items():
        for i in range(0, len(pairs), 2):
            (gold_a, system_a), (gold_b, system_b) = pairs[i: i + 2]
            id_ = f"{pronoun}-{i}"
            gold_rows.append((id_, pronoun, str(gold_a).upper(), str(gold_b).upper()))
            system += f"{id_}\t{system_a}\t{system_b}\n"
    ours = agree_on(gold_file(tmp_path, gold_rows), system_file(tmp_path, system))
    assert f"{ours['masculine']['recall']:.1f}" == "28.8" and f"{ours['feminine']['f1']:.1f}" == "6.3"


@pytest.mark.parametrize(
    "gold_rows, system, error, message, official_error",
    [
        (MIXED, "", ValueError, r"system\.tsv: no system annotations read", "No system annotations read!"),
        (MIXED, "\n\n", ValueError, r"system\.tsv: no system annotations read", "No system annotations read!"),
        ([], "m1\tTRUE\tTRUE\n", ValueError, r"gold\.tsv: no gold annotations read", "No gold annotations read!"),
        (MIXED, "m1\tTRUE\nm2\tTRUE\tTRUE\n", GapScorerError,
         r"system\.tsv:1: 2 TAB-separated columns, expected at least 3", "AttributeError"),
        ([("m1", "they", "TRUE", "FALSE")], "m1\tTRUE\tTRUE\n", GapScorerError,
         r"gold\.tsv:2: 'they' is not a GAP pronoun", "AssertionError"),
    ],
)
def test_files_the_scorer_cannot_score_are_errors(tmp_path: Path, gold_rows, system: str, error: type[Exception],
                                                  message: str, official_error: str) -> None:
    """Where the scorer stops (an assertion, or a traceback on a short row), the port raises one clear error."""
    gold, system_path = gold_file(tmp_path, gold_rows), system_file(tmp_path, system)
    with pytest.raises(error, match=message):
        score_gap(gold, system_path)
    official = run_official(gold, system_path)
    assert official.returncode != 0 and official_error in official.stderr


def test_decisions_need_examples_and_one_pair_each() -> None:
    with pytest.raises(ValueError, match="no gold annotations: no GAP examples to score"):
        score_gap([], [])
    with pytest.raises(ValueError, match="no system annotations: no decisions to score"):
        score_gap(scored_examples(), {})
    with pytest.raises(ValueError, match="GAP example ID 'x-0' comes twice"):
        score_gap(scored_examples() * 2, [(True, True)] * 8)


# ---- the system files we write --------------------------------------------------------------------------------


def example_row(e: GapExample) -> list[str]:
    """The row of a GAP file that loads as ``e``."""
    return [e.id, e.text, e.pronoun, str(e.pronoun_offset), e.a, str(e.a_offset), str(e.a_coref).upper(), e.b,
            str(e.b_offset), str(e.b_coref).upper(), e.url]


def test_evaluate_gap_writes_the_system_file_the_scorer_reads(tmp_path: Path) -> None:
    """evaluate_gap(..., system_out=) with the toy resolver of tests/test_gap.py: the official scorer reads its
    file and prints the figures evaluate_gap returned."""
    examples = scored_examples()
    gold = write_gap(tmp_path, [example_row(e) for e in examples], "gap-test.tsv")
    assert load_gap("test", tmp_path) == examples

    def resolve(text: str) -> tuple[Document, TokenizedText]:
        """Every token a mention of its own entity, the pronoun in the first token's."""
        tokenized = tokenize(text)
        pronouns = ("he", "his", "she", "her")
        entities = [0 if token.lower() in pronouns else i for i, token in enumerate(tokenized.tokens)]
        return Document("x", tokenized.tokens, tokenized.sentences,
                        [Mention(i, i + 1, entity) for i, entity in enumerate(entities)]), tokenized

    out = tmp_path / "system.tsv"
    scores = evaluate_gap(examples, resolve, system_out=out)
    assert len(out.read_text().splitlines()) == len(examples)
    assert_agrees(scores, run_official(gold, out))


def test_the_gap_command_writes_the_system_file_the_scorer_reads(tmp_path: Path, capsys) -> None:
    """python -m coref.gap --system-out with the bundled pipeline: the official scorer prints the figures of its
    --json."""
    from inference.commands import gap

    masculine = ["ex-2", "Tomas met Pavel and he left.", "he", "20", "Tomas", "0", "TRUE", "Pavel", "10", "FALSE",
                 "http://en.wikipedia.org/wiki/Y"]
    gold = write_gap(tmp_path, [ROW, masculine], "gap-test.tsv")
    out, system = tmp_path / "gap.json", tmp_path / "system.tsv"
    assert gap.main(["--split", "test", "--data-dir", str(tmp_path), "--json", str(out),
                     "--system-out", str(system)]) == 0
    capsys.readouterr()
    scores = json.loads(out.read_text())
    assert [line.split("\t")[0] for line in system.read_text().splitlines()] == ["ex-1", "ex-2"]
    assert_agrees(scores, run_official(gold, system))
