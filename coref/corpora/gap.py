"""The GAP coreference dataset (Webster et al. 2018): loading, decisions from a resolved document, and its metric.

GAP gives a Wikipedia paragraph, an ambiguous pronoun and two names, A and B, all by character offset, and
says whether each name corefers with the pronoun (both may be FALSE). A coreference resolver answers by
clustering mentions in the tokenised paragraph; :func:`gap_decisions` reads its two answers off the clusters,
:func:`gap_scores` scores them with :mod:`coref.metrics.gap` (the port of GAP's ``gap_scorer.py``), and
:func:`evaluate_gap` does both over a split with any resolver.

The files live at ``DATA/gap/gap-{development,test,validation}.tsv`` (splits ``dev``, ``test``, ``validation``):
TAB-separated, a header row, 11 columns (``ID, Text, Pronoun, Pronoun-offset, A, A-offset, A-coref, B, B-offset,
B-coref, URL``), offsets 0-based characters into ``Text``. A row that breaks this format is a
:class:`GapError` naming ``FILE:LINE``.

Its command, :mod:`inference.commands.gap` (``python -m coref.gap``), scores the raw-text pipeline of
:mod:`coref.resolution.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from os import PathLike

from coref.corpora.registry import CorpusError, DataDir, resolve_data_dir
from coref.document import Document, Mention
from coref.io.conll import read_utf8
from coref.io.errors import FileLineError
from coref.io.progress import progress
from coref.io.text import TokenizedText
from coref.metrics.gap import PRONOUN_GENDER, pronoun_gender, score_gap, write_system_tsv

SPLIT_FILES = {"dev": "gap-development.tsv", "test": "gap-test.tsv", "validation": "gap-validation.tsv"}
SPLIT_ALIASES = {"development": "dev"}  # the file's own name
COLUMNS = ("ID", "Text", "Pronoun", "Pronoun-offset", "A", "A-offset", "A-coref", "B", "B-offset", "B-coref", "URL")


class GapError(FileLineError):
    """A GAP file that breaks the format, located by file and line."""


@dataclass(frozen=True)
class GapExample:
    """One GAP row: a text, its pronoun and the names A and B with their character offsets and gold labels."""

    id: str
    text: str
    pronoun: str
    pronoun_offset: int
    a: str
    a_offset: int
    a_coref: bool
    b: str
    b_offset: int
    b_coref: bool
    url: str

    @property
    def gender(self) -> str:
        return pronoun_gender(self.pronoun)


# ---- loading ------------------------------------------------------------------------------------------------


def load_gap(split: str, data_dir: DataDir = None) -> list[GapExample]:
    """The examples of one GAP split (``dev``, ``test`` or ``validation``) from ``DATA/gap/``, every row checked.

    ``data_dir`` defaults to ``$ENTITYLM_DATA``. An unknown split or a missing file is a :class:`CorpusError`; a
    malformed row (column count, an offset that does not point at its string, a label other than TRUE/FALSE, an
    unknown pronoun, a repeated ID) is a :class:`GapError` naming the file and line.
    """
    split = SPLIT_ALIASES.get(split, split)
    if split not in SPLIT_FILES:
        raise CorpusError(f"unknown GAP split {split!r}: choose from {', '.join(SPLIT_FILES)}")
    path = resolve_data_dir(data_dir) / "gap" / SPLIT_FILES[split]
    if not path.is_file():
        raise CorpusError(
            f"GAP file {path} does not exist: put the files of google-research-datasets/gap-coreference in "
            f"{path.parent}"
        )
    return parse_gap(read_utf8(path), str(path))


def parse_gap(text: str, path: str = "<string>") -> list[GapExample]:
    """The examples in the contents ``text`` of a GAP file (``path`` names it in errors)."""
    lines = text.splitlines()
    if not lines or tuple(lines[0].split("\t")) != COLUMNS:
        raise GapError(path, 1, f"expected the header row {' '.join(COLUMNS)} (TAB-separated)")
    examples: list[GapExample] = []
    seen: set[str] = set()
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        example = _parse_row(line, path, number)
        if example.id in seen:
            raise GapError(path, number, f"ID {example.id!r} repeats an earlier row's")
        seen.add(example.id)
        examples.append(example)
    return examples


def _parse_row(line: str, path: str, number: int) -> GapExample:
    fields = line.split("\t")
    if len(fields) != len(COLUMNS):
        raise GapError(path, number, f"{len(fields)} TAB-separated columns, expected {len(COLUMNS)}")
    row = dict(zip(COLUMNS, fields))
    text = row["Text"]

    def offset(name: str) -> int:
        value = row[f"{name}-offset"]
        if not value.isdecimal():
            raise GapError(path, number, f"{name}-offset {value!r} is not a character offset")
        start = int(value)
        if text[start : start + len(row[name])] != row[name] or not row[name]:
            found = text[start : start + len(row[name])]
            raise GapError(path, number, f"{name} {row[name]!r} is not at offset {start} of the text (found {found!r})")
        return start

    def label(name: str) -> bool:
        value = row[f"{name}-coref"]
        if value.upper() not in ("TRUE", "FALSE"):
            raise GapError(path, number, f"{name}-coref {value!r} is neither TRUE nor FALSE")
        return value.upper() == "TRUE"

    if row["Pronoun"].lower() not in PRONOUN_GENDER:
        raise GapError(path, number, f"pronoun {row['Pronoun']!r} is not one of {', '.join(PRONOUN_GENDER)}")
    return GapExample(
        row["ID"], text, row["Pronoun"], offset("Pronoun"),
        row["A"], offset("A"), label("A"), row["B"], offset("B"), label("B"), row["URL"],
    )


# ---- decisions from a resolved document ---------------------------------------------------------------------


def _token_span(tokenized: TokenizedText, start: int, end: int) -> tuple[int, int] | None:
    """The half-open span of the tokens overlapping characters ``start .. end-1``; None if there are none."""
    inside = [i for i, (s, e) in enumerate(tokenized.offsets) if s < end and start < e]
    return (inside[0], inside[-1] + 1) if inside else None


def _pronoun_mention(example: GapExample, tokenized: TokenizedText, resolved: Document) -> Mention | None:
    """The smallest mention containing the pronoun's token(s), or None."""
    span = _token_span(tokenized, example.pronoun_offset, example.pronoun_offset + len(example.pronoun))
    if span is None:
        return None
    containing = [m for m in resolved.mentions if m.start <= span[0] and span[1] <= m.end]
    return min(containing, key=lambda m: (len(m), m.start), default=None)


def _name_mentions(name_span: tuple[int, int] | None, resolved: Document, pronoun: Mention) -> list[Mention]:
    """The mentions that stand for a name: those within its tokens, else the smallest one containing them.

    Mentions that merely cross the name's boundary are not it; nor is the pronoun's own mention, which a
    containing mention ("[John and his wife]") can be.
    """
    if name_span is None:
        return []
    start, end = name_span
    candidates = [m for m in resolved.mentions if m != pronoun]
    within = [m for m in candidates if start <= m.start and m.end <= end]
    if within:
        return within
    containing = [m for m in candidates if m.start <= start and end <= m.end]
    return [min(containing, key=lambda m: (len(m), m.start))] if containing else []


def gap_decisions(example: GapExample, tokenized: TokenizedText, resolved: Document) -> tuple[bool, bool]:
    """Whether A and whether B corefers with the pronoun, by the entity labels of ``resolved``'s mentions.

    ``resolved`` must have ``tokenized``'s tokens. The pronoun's mention is the smallest one containing its
    token; a name corefers when one of the mentions that stand for it (:func:`_name_mentions`) has that
    mention's entity. With no mention on the pronoun, neither does.
    """
    if resolved.tokens != tokenized.tokens:
        raise ValueError(f"GAP example {example.id}: the resolved document's tokens are not the tokenised text's")
    pronoun = _pronoun_mention(example, tokenized, resolved)
    if pronoun is None:
        return (False, False)

    def corefers(name: str, offset: int) -> bool:
        mentions = _name_mentions(_token_span(tokenized, offset, offset + len(name)), resolved, pronoun)
        return any(m.entity == pronoun.entity for m in mentions)

    return (corefers(example.a, example.a_offset), corefers(example.b, example.b_offset))


# ---- the metric ---------------------------------------------------------------------------------------------


def gap_scores(examples: Sequence[GapExample], decisions: Sequence[tuple[bool, bool]]) -> dict:
    """GAP's metric of the (A, B) decisions, one pair per example in order: :func:`coref.metrics.gap.score_gap`,
    the official scorer's figures in percent (``overall``, ``masculine``, ``feminine``: counts, precision, recall,
    F1; ``bias``: feminine F1 / masculine F1, None where either is 0; ``missing``, ``warnings``: empty here)."""
    return score_gap(examples, decisions)


def evaluate_gap(examples: Sequence[GapExample], resolve: Callable[[str], tuple[Document, TokenizedText]],
                 system_out: str | PathLike[str] | None = None) -> dict:
    """Resolve every example's text with ``resolve`` and score the decisions: :func:`gap_scores`, plus how many
    examples there were and on how many the pronoun got no mention (both names then count as not coreferent).
    ``system_out`` also writes the decisions there as the official scorer's system file
    (:func:`coref.metrics.gap.write_system_tsv`)."""
    decisions = []
    unresolved = 0
    for example in progress(examples, desc="GAP", unit="example"):
        resolved, tokenized = resolve(example.text)
        unresolved += _pronoun_mention(example, tokenized, resolved) is None
        decisions.append(gap_decisions(example, tokenized, resolved))
    return scored_decisions(examples, decisions, unresolved, system_out)


def scored_decisions(examples: Sequence[GapExample], decisions: Sequence[tuple[bool, bool]],
                     pronoun_without_mention: int = 0, system_out: str | PathLike[str] | None = None) -> dict:
    """:func:`gap_scores` of ``decisions`` (one per example, in order) with the counts :func:`format_scores`
    prints; ``system_out`` also writes them as the official scorer's system file."""
    if system_out is not None:
        write_system_tsv(system_out, [example.id for example in examples], decisions)
    return {**gap_scores(examples, decisions), "examples": len(examples),
            "pronoun_without_mention": pronoun_without_mention}


def format_scores(scores: dict) -> str:
    """The scores of :func:`evaluate_gap` as a table in percent (rounded as the official scorer prints them),
    then the bias and the counts."""
    lines = [f"{'':<10}{'precision':>10}{'recall':>8}{'F1':>8}"]
    for group in ("masculine", "feminine", "overall"):
        score = scores[group]
        lines.append(f"{group:<10}{score['precision']:>10.1f}{score['recall']:>8.1f}{score['f1']:>8.1f}")
    bias = "-" if scores["bias"] is None else f"{scores['bias']:.2f}"
    lines.append(f"bias (F/M): {bias}; {scores['examples']} examples, the pronoun unmentioned in "
                 f"{scores['pronoun_without_mention']}")
    return "\n".join(lines)
