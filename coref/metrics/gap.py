"""GAP's metric: a port of the official ``gap_scorer.py`` (google-research-datasets/gap-coreference), so that our
figures are the ones the published GAP results were computed with.

GAP asks, for each example, two binary questions: does name A, and does name B, corefer with the pronoun? The
scorer tallies both answers of every example as true or false positives or negatives against the gold
``A-coref`` and ``B-coref``, ``overall`` and per gender of the pronoun (``masculine``, ``feminine``), and reports
recall, precision and F1 of the positive class in percent, and the bias, feminine F1 / masculine F1.

The port keeps the official scorer's semantics where they matter to a figure:

- both files are read with Python's ``csv`` module, TAB-separated: the gold file's first row is its header and is
  skipped; every row of a system file (``ID``, ``A-coref``, ``B-coref``, no header) is read. Labels are ``true`` or
  ``false`` in any case; any other label counts as no answer. An ID given twice keeps its first row.
- an example of the gold with no system answer (absent, or its label unreadable) counts each missing answer as a
  false negative, even where the gold says FALSE.
- the gender comes from the pronoun by ``constants.PRONOUNS`` (GAP has no reflexives); a gold label that is
  neither TRUE nor FALSE counts as FALSE.
- recall, precision and F1 are in percent, computed in the official order of operations (so that they round as
  it prints them), and are 0 where a denominator is 0 (a gender with no examples scores 0 throughout); the bias
  is undefined (None, printed ``-``) unless both F1 are non-zero.

:func:`score_gap` scores gold examples (or a gold file) against decisions (or a system file);
:func:`format_scorecard` prints the scores as the official scorer does; :func:`write_system_tsv` writes
decisions in the system format the official scorer reads. ``tests/test_gap_scorer.py`` runs the official scorer
beside this port on the real GAP splits and on hand-made cases, and requires every figure it prints to agree.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from coref.io.atomic import write_text_atomic
from coref.io.conll import read_utf8
from coref.io.errors import FileLineError

# constants.PRONOUNS: the lowercased pronoun's gender.
PRONOUN_GENDER = {"she": "feminine", "her": "feminine", "hers": "feminine",
                  "he": "masculine", "his": "masculine", "him": "masculine"}
GROUPS = ("overall", "masculine", "feminine")  # the official scorecard's order
GOLD_FIELDS = ("ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref",
               "URL")  # constants.GOLD_FIELDNAMES
SYSTEM_FIELDS = ("ID", "A-coref", "B-coref")  # constants.SYSTEM_FIELDNAMES

PathLike = str | os.PathLike
Decisions = tuple[bool, bool]  # does A, does B corefer with the pronoun


class GapScorerError(FileLineError):
    """A GAP gold or system file the official scorer could not read either (it would stop with a traceback)."""


def pronoun_gender(pronoun: str) -> str:
    """``"feminine"`` or ``"masculine"``: the gender GAP's scorer gives the pronoun (any case)."""
    try:
        return PRONOUN_GENDER[pronoun.lower()]
    except KeyError:
        raise ValueError(f"{pronoun!r} is not a GAP pronoun: expected one of {', '.join(PRONOUN_GENDER)}") from None


class GoldExample(Protocol):
    """What the metric reads of a gold example (:class:`coref.corpora.gap.GapExample` has it)."""

    @property
    def id(self) -> str: ...

    @property
    def pronoun(self) -> str: ...

    @property
    def a_coref(self) -> bool: ...

    @property
    def b_coref(self) -> bool: ...


@dataclass
class Annotation:
    """The scorer's ``Annotation``: one example's gender (gold only) and its two labels; None is no answer."""

    gender: str | None = None
    a_coref: bool | None = None
    b_coref: bool | None = None


@dataclass
class Tally:
    """The scorer's ``Scores``: counts of one group's decisions, and recall, precision and F1 in percent."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    def add(self, gold: bool | None, system: bool | None) -> None:
        """Count one decision: no system answer is a false negative whatever the gold; a gold None is FALSE."""
        if system is None:
            self.fn += 1
        elif gold and system:
            self.tp += 1
        elif system:
            self.fp += 1
        elif not gold:
            self.tn += 1
        else:
            self.fn += 1

    def recall(self) -> float:
        denominator = self.tp + self.fn
        return 100.0 * self.tp / denominator if denominator else 0.0

    def precision(self) -> float:
        denominator = self.tp + self.fp
        return 100.0 * self.tp / denominator if denominator else 0.0

    def f1(self) -> float:
        recall, precision = self.recall(), self.precision()  # F1 of the percentages, as the scorer computes it
        denominator = precision + recall
        return 2 * precision * recall / denominator if denominator else 0.0

    def as_dict(self) -> dict[str, float]:
        """The counts and the three figures, as :func:`calculate_scores` reports a group."""
        return {"tp": self.tp, "fp": self.fp, "fn": self.fn, "tn": self.tn,
                "precision": self.precision(), "recall": self.recall(), "f1": self.f1()}


@dataclass
class Annotations:
    """The annotations read from one file (or built from examples), by ID in order, and what reading them noted:
    the rows the official scorer reports (an unexpected label, an ID given again)."""

    by_id: dict[str, Annotation] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# ---- reading ------------------------------------------------------------------------------------------------


def _label(value: str, warnings: list[str], where: str) -> bool | None:
    """The scorer's ``is_true``: ``true`` or ``false`` in any case, else None (and a warning)."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    warnings.append(f"{where}: unexpected label {value!r}, read as no answer")
    return None


def read_annotations(path: PathLike, gold: bool) -> Annotations:
    """The annotations of a gold (``gold=True``: header skipped, gender from the pronoun) or system TSV file,
    read as the scorer's ``read_annotations`` reads them (``csv``, TAB-separated, blank lines skipped, the first
    row of an ID kept). A row too short to hold the labels (or the pronoun) is a :class:`GapScorerError`, as is an
    unknown gold pronoun; no annotations at all is a :class:`ValueError`, as the scorer asserts."""
    fields = GOLD_FIELDS if gold else SYSTEM_FIELDS
    needed = fields.index("B-coref") + 1  # the last column the scorer reads (after ID, Pronoun, A-coref)
    reader = csv.reader(io.StringIO(read_utf8(path), newline=""), delimiter="\t")
    rows = (row for row in reader if row != [])  # csv.DictReader skips empty rows
    if gold:
        next(rows, None)
    annotations = Annotations()
    for row in rows:
        where = f"{path}:{reader.line_num}"
        if len(row) < needed:
            raise GapScorerError(str(path), reader.line_num,
                                 f"{len(row)} TAB-separated columns, expected at least {needed} ({', '.join(fields)})")
        values = dict(zip(fields, row))
        if values["ID"] in annotations.by_id:
            annotations.warnings.append(f"{where}: ID {values['ID']!r} repeats an earlier row's, which is kept")
            continue
        gender = None
        if gold:
            try:
                gender = pronoun_gender(values["Pronoun"])
            except ValueError as error:
                raise GapScorerError(str(path), reader.line_num, str(error)) from None
        annotations.by_id[values["ID"]] = Annotation(gender, _label(values["A-coref"], annotations.warnings, where),
                                                     _label(values["B-coref"], annotations.warnings, where))
    if not annotations.by_id:
        raise ValueError(f"{path}: no {'gold' if gold else 'system'} annotations read")
    return annotations


def gold_annotations(examples: Iterable[GoldExample]) -> Annotations:
    """The gold annotations of loaded examples; each ID must come once (as :func:`coref.corpora.gap.load_gap`
    ensures), since the scorer knows an example by its ID."""
    annotations = Annotations()
    for example in examples:
        if example.id in annotations.by_id:
            raise ValueError(f"GAP example ID {example.id!r} comes twice: the scorer knows an example by its ID")
        annotations.by_id[example.id] = Annotation(pronoun_gender(example.pronoun), example.a_coref, example.b_coref)
    if not annotations.by_id:
        raise ValueError("no gold annotations: no GAP examples to score")
    return annotations


def system_annotations(gold: Annotations, decisions: Sequence[Decisions] | Mapping[str, Decisions]) -> Annotations:
    """System annotations from decisions: a sequence in the gold's order, or a mapping from ID (which may leave
    examples out: they count as missing)."""
    if isinstance(decisions, Mapping):
        pairs = decisions.items()
    elif len(decisions) != len(gold.by_id):
        raise ValueError(f"{len(gold.by_id)} GAP examples but {len(decisions)} decisions")
    else:
        pairs = zip(gold.by_id, decisions)
    annotations = Annotations({id_: Annotation(None, bool(a), bool(b)) for id_, (a, b) in pairs})
    if not annotations.by_id:
        raise ValueError("no system annotations: no decisions to score")
    return annotations


# ---- scoring ------------------------------------------------------------------------------------------------


def calculate_scores(gold: Annotations, system: Annotations) -> dict:
    """The scorer's ``calculate_scores`` and its scorecard's figures: for each group of :data:`GROUPS` the counts,
    precision, recall and F1 (percent); ``bias`` (None unless both F1 are non-zero); ``missing``, the gold IDs
    lacking a system answer; ``warnings``, what reading both noted."""
    tallies = {group: Tally() for group in GROUPS}
    missing = []
    for id_, gold_annotation in gold.by_id.items():
        answer = system.by_id.get(id_, Annotation())
        if answer.a_coref is None or answer.b_coref is None:
            missing.append(id_)
        for tally in (tallies["overall"], tallies[gold_annotation.gender]):
            tally.add(gold_annotation.a_coref, answer.a_coref)
            tally.add(gold_annotation.b_coref, answer.b_coref)
    scores: dict = {group: tally.as_dict() for group, tally in tallies.items()}
    feminine, masculine = scores["feminine"]["f1"], scores["masculine"]["f1"]
    scores["bias"] = feminine / masculine if feminine and masculine else None
    scores["missing"] = missing
    scores["warnings"] = gold.warnings + system.warnings
    return scores


def score_gap(gold: Sequence[GoldExample] | PathLike,
              system: Sequence[Decisions] | Mapping[str, Decisions] | PathLike) -> dict:
    """GAP's scores of ``system`` against ``gold``, as the official ``gap_scorer.py`` computes them (percent).

    ``gold`` is a gold TSV file or the loaded examples (:func:`coref.corpora.gap.load_gap`); ``system`` a system
    TSV file (:data:`SYSTEM_FIELDS`, no header), a mapping from example ID to the (A, B) decisions, or those
    decisions in the gold's order. Returns what :func:`calculate_scores` does.
    """
    gold_read = read_annotations(gold, gold=True) if isinstance(gold, (str, os.PathLike)) else gold_annotations(gold)
    if isinstance(system, (str, os.PathLike)):
        system_read = read_annotations(system, gold=False)
    else:
        system_read = system_annotations(gold_read, system)
    return calculate_scores(gold_read, system_read)


def format_scorecard(scores: dict) -> str:
    """The scorer's ``make_scorecard`` of :func:`score_gap`'s scores, character for character (what it prints
    after its warnings, less print's final newline)."""
    lines = []
    for group in GROUPS:
        score = scores[group]
        lines.append(f"{group.capitalize()} recall: {score['recall']:.1f} precision: {score['precision']:.1f} "
                     f"f1: {score['f1']:.1f}")
        lines.append(f"\t\ttp {score['tp']:d}\tfp {score['fp']:d}")
        lines.append(f"\t\tfn {score['fn']:d}\ttn {score['tn']:d}")
    bias = "-" if scores["bias"] is None else f"{scores['bias']:.2f}"
    lines.append(f"Bias (F/M): {bias}\n")
    return "\n".join(lines)


# ---- writing ------------------------------------------------------------------------------------------------


def format_system_tsv(ids: Iterable[str], decisions: Iterable[Decisions]) -> str:
    """Decisions as a system file the official scorer reads: ``ID<TAB>A-coref<TAB>B-coref`` rows of TRUE/FALSE,
    no header (the scorer reads every row of a system file)."""
    label = {True: "TRUE", False: "FALSE"}
    return "".join(f"{id_}\t{label[bool(a)]}\t{label[bool(b)]}\n" for id_, (a, b) in zip(ids, decisions, strict=True))


def write_system_tsv(path: PathLike, ids: Iterable[str], decisions: Iterable[Decisions]) -> None:
    """Write :func:`format_system_tsv` to ``path`` atomically: then ``python gap_scorer.py --gold_tsv GOLD
    --system_tsv path`` scores the same decisions."""
    write_text_atomic(path, format_system_tsv(ids, decisions))
