"""Reading one InScript story (Modi et al. 2016) from its XML file into a :class:`Document` with entity mentions.

InScript annotates script participants as token-span labels and links them into chains (see the data's
``SOURCE.md``). EntityNLM's entity prediction (Ji et al. 2017, §5.3, Fig. 3) needs one entity per referent and
a mention per reference, so :func:`read_story` turns labels and chains into mentions by these rules:

1. Candidate mentions are the participant labels, except those named ``No_label`` (annotated as not
   referring); a ``No_label`` id listed in a chain is left out of it.
2. Every individual chain is one entity over its labels. A group chain (plural referents: a name containing
   ``group``, e.g. ``group_towels``, ``coref_group_I_passenger``, or the typo ``goup_``) is an entity too, but a
   label that is also in an individual chain stays with that one; a label in two individual chains stays with
   the first in file order, as does a label in two group chains. Labels in no chain are singleton entities.
3. Chains mostly point at a head-token label while the full NP is a separate unchained label, so a singleton
   whose span overlaps a chained label's is dropped: the chained label is the mention. Other overlaps (between
   chained labels, or between singletons) stay in the document for :mod:`coref.corpora.preprocess` to resolve.

Tokens come from the ``<token>`` elements, not from splitting the raw text, because a few tokens contain a
space (``2 1/4``); whitespace inside a token is replaced by ``_`` so that the CoNLL columns stay intact.
Positions are ``"S-T"`` (1-based sentence and token); ``to`` is inclusive and present only on multi-token spans.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from coref.document import Document, Mention

NO_LABEL = "No_label"
GROUP_CHAIN = re.compile(r"gr?oup", re.IGNORECASE)  # "goup_I_hairdresser" is one chain's typo


class InscriptError(ValueError):
    """A story file that cannot be read: malformed XML, or a label or chain that points nowhere."""


@dataclass(frozen=True)
class LabelCounts:
    """What :func:`read_story` did with the participant labels; counts of several stories add up with ``+``."""

    labels: int = 0  # participant labels in the file
    no_label_dropped: int = 0  # rule 1
    overlapping_singletons_dropped: int = 0  # rule 3
    group_labels_kept_individual: int = 0  # rule 2: in a group and an individual chain
    labels_in_two_individual_chains: int = 0  # rule 2: the first chain keeps them
    labels_in_two_group_chains: int = 0

    def __add__(self, other: LabelCounts) -> LabelCounts:
        return LabelCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class _Label:
    id: str
    start: int  # document token index
    end: int  # exclusive


def read_story(path: Path, document_id: str) -> tuple[Document, LabelCounts]:
    """The story in ``path`` as document ``document_id`` (part 0), and what happened to its labels."""
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as error:
        raise InscriptError(f"{path}: malformed XML: {error}") from error
    tokens, sentences, positions = _read_tokens(root, path)
    labels, no_label = _read_labels(root, positions, path)
    individual, group = _read_chains(root, labels, no_label, path)
    owner, counts = _assign_entities(individual, group)
    singletons = [label for label in labels.values() if label.id not in owner]
    kept = _drop_overlapping_singletons(singletons, [labels[label_id] for label_id in owner])
    entity_of = {**owner, **{label.id: len(individual) + len(group) + n for n, label in enumerate(kept)}}
    mentions = [Mention(labels[label_id].start, labels[label_id].end, entity) for label_id, entity in entity_of.items()]
    counts = LabelCounts(
        labels=len(labels) + len(no_label),
        no_label_dropped=len(no_label),
        overlapping_singletons_dropped=len(singletons) - len(kept),
        **counts,
    )
    return Document(document_id, tokens, sentences, mentions), counts


def _read_tokens(root: ET.Element, path: Path) -> tuple[list[str], list[tuple[int, int]], dict[str, int]]:
    """Tokens (inner whitespace as ``_``), sentence spans, and the token index of every ``"S-T"`` position."""
    tokens: list[str] = []
    sentences: list[tuple[int, int]] = []
    positions: dict[str, int] = {}
    for sentence in root.iterfind("text/sentences/sentence"):
        start = len(tokens)
        for token in sentence.iterfind("token"):
            positions[token.get("id", "")] = len(tokens)
            tokens.append(re.sub(r"\s+", "_", token.get("content", "").strip()))
        if len(tokens) > start:
            sentences.append((start, len(tokens)))
    if not tokens or not all(tokens):
        raise InscriptError(f"{path}: expected non-empty <token content=...> elements under text/sentences")
    return tokens, sentences, positions


def _read_labels(
    root: ET.Element, positions: dict[str, int], path: Path
) -> tuple[dict[str, _Label], set[str]]:
    """The participant labels by id, in file order, and the ids of the ``No_label`` ones (rule 1)."""
    labels: dict[str, _Label] = {}
    no_label: set[str] = set()
    for element in root.iterfind("annotations/participants/label"):
        label_id, first = element.get("id"), element.get("from")
        last = element.get("to", first)
        if label_id is None or first not in positions or last not in positions or positions[last] < positions[first]:
            raise InscriptError(f"{path}: participant <label {_attributes(element)}> has no id or a bad span")
        if element.get("name") == NO_LABEL:
            no_label.add(label_id)
        else:
            labels[label_id] = _Label(label_id, positions[first], positions[last] + 1)
    return labels, no_label


def _read_chains(
    root: ET.Element, labels: dict[str, _Label], no_label: set[str], path: Path
) -> tuple[list[list[str]], list[list[str]]]:
    """The label ids of the individual chains and of the group chains, each in file order (rule 2)."""
    individual: list[list[str]] = []
    group: list[list[str]] = []
    for element in root.iterfind("annotations/chains/chain"):
        elements = element.get("elements", "").split()
        unknown = [label_id for label_id in elements if label_id not in labels and label_id not in no_label]
        if unknown:
            raise InscriptError(f"{path}: <chain {_attributes(element)}> names unknown label ids {unknown}")
        chain = [label_id for label_id in elements if label_id in labels]
        (group if GROUP_CHAIN.search(element.get("name", "")) else individual).append(chain)
    return individual, group


def _assign_entities(individual: list[list[str]], group: list[list[str]]) -> tuple[dict[str, int], dict[str, int]]:
    """The entity of every chained label (chains numbered individual first), and the conflicts rule 2 settled."""
    owner: dict[str, int] = {}
    counts = {"labels_in_two_individual_chains": 0, "group_labels_kept_individual": 0, "labels_in_two_group_chains": 0}
    for entity, chain in enumerate(individual):
        for label_id in chain:
            counts["labels_in_two_individual_chains"] += label_id in owner
            owner.setdefault(label_id, entity)
    for entity, chain in enumerate(group, start=len(individual)):
        for label_id in chain:
            if label_id in owner:
                in_individual = owner[label_id] < len(individual)
                counts["group_labels_kept_individual" if in_individual else "labels_in_two_group_chains"] += 1
            owner.setdefault(label_id, entity)
    return owner, counts


def _drop_overlapping_singletons(singletons: list[_Label], chained: list[_Label]) -> list[_Label]:
    """The singletons whose span shares no token with a chained label's (rule 3)."""
    covered = {index for label in chained for index in range(label.start, label.end)}
    return [label for label in singletons if covered.isdisjoint(range(label.start, label.end))]


def _attributes(element: ET.Element) -> str:
    return " ".join(f'{name}="{value}"' for name, value in element.attrib.items())
