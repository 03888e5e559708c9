"""Entity usage, long-range coherence and attribute consistency of stories (Papalampidi et al. 2022, Table 2).

A story is a :class:`~coref.document.Document` annotated by a coreference system (the paper compares human and
generated stories annotated by the same one; here :mod:`coref.resolution.pipeline`), the UPOS tag of each of its tokens
(:mod:`coref.resolution.pos`), and, optionally, the gold entities of its prompt, each a tuple of tokens. Per story, with
Z the number of entities and L the number of sections:

- ``entities``: Z, the number of distinct entities (clusters) as annotated (a resolver that drops singletons,
  like the OntoNotes-style bundled one, counts only entities mentioned twice or more);
- ``mentions``: mean mentions per entity, |M| / Z over the distinct mentions M;
- ``exact`` / ``subset``: how many prompt entities the story mentions (§4.2: "the number of gold entities that
  are mentioned with the same surface form and at least partially"), see :func:`prompt_matches`;
- ``coherence``: C, the mean maximum section span of the 3 protagonists (§2, Appendices A.1 and A.2), see
  :func:`coherence`;
- ``consistency``: V = (1/Z) Σ_i V_i × 100 (percent, as in Table 2), the mean share of unique attributes (§2),
  see :func:`attribute_consistency`; an entity whose sentences hold no attribute has no V_i and is not counted in
  Z here;
- ``normalised_consistency``: U = (C / (L Z)) Σ_i V_i = (C / L) V (§2), in the same percent as V.

A value is None where it is undefined (no entity, no prompt, no attribute); :func:`corpus_metrics` averages each
value over the stories that define it, as Table 2 averages over stories.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from statistics import fmean
from typing import Any, TypedDict

from coref.document import Document

SECTIONS = 10  # L (Appendix A.2)
PROTAGONISTS = 3  # the entities C is measured on (Appendix A.2)
ATTRIBUTE_TAGS = frozenset({"VERB", "ADJ"})  # UPOS of attributes; auxiliaries and copulas (AUX) are not
NOMINAL_TAGS = frozenset({"NOUN", "PROPN"})  # UPOS of the words a subset match may share
AVERAGED = ("entities", "mentions", "prompt_entities", "exact", "subset", "coherence", "consistency",
            "normalised_consistency")


class StoryMetrics(TypedDict):
    """The metrics of one story (see the module docstring); None where undefined."""

    sections: int  # L
    entities: int  # Z
    mentions: float | None  # mean mentions per entity; None without entities
    prompt_entities: int | None  # number of gold prompt entities; None without a prompt
    exact: int | None  # prompt entities mentioned with the same surface form
    subset: int | None  # prompt entities mentioned at least partially
    coherence: float | None  # C, in sections (0 .. L - 1); None without entities
    consistency: float | None  # V, percent; None if no entity has an attribute
    normalised_consistency: float | None  # U, percent; None if C or V is


def section_of(position: int, length: int, sections: int = SECTIONS) -> int:
    """The section (0 .. ``sections`` - 1) of token ``position`` when ``length`` tokens are cut into ``sections``
    equal parts: s(t) = ⌊L t / n⌋."""
    return sections * position // length


def protagonists(document: Document, count: int = PROTAGONISTS) -> list[int]:
    """The ``count`` entities with the most (distinct) mentions, ties broken by earlier first mention (fewer if
    the story has fewer entities)."""
    mentions = Counter(mention.entity for mention in set(document.mentions))
    return sorted(document.entities(), key=lambda entity: -mentions[entity])[:count]  # stable: by first mention


def coherence(document: Document, sections: int = SECTIONS, count: int = PROTAGONISTS) -> float | None:
    """C: the mean over the protagonists i (:func:`protagonists`) of C_i = s_{l_i} − s_{f_i}, the sections of
    the first tokens of i's last and first mentions (:func:`section_of`); 0 .. L − 1.

    The paper's §2 averages over "all entities that participate", its Appendix A.2 over the top 3 "protagonists";
    we follow the appendix (``count`` = 3), averaging over fewer when the story has fewer entities. None without
    entities.
    """
    chosen = protagonists(document, count)
    if not chosen:
        return None
    starts: dict[int, list[int]] = {}
    for mention in document.mentions:
        starts.setdefault(mention.entity, []).append(mention.start)
    size = len(document.tokens)
    return fmean(section_of(max(starts[i]), size, sections) - section_of(min(starts[i]), size, sections)
                 for i in chosen)


def attribute_consistency(document: Document, pos_tags: Sequence[str]) -> dict[int, float | None]:
    """V_i of every entity i (§2), as a fraction; None for an entity whose sentences hold no attribute.

    V_i = (|∪_{j: i∈E_j} A_j| − |∪_{j: i∈E_j} A_j ∩ ∪_{j: i∉E_j} A_j|) / |∪_{j: i∈E_j} A_j|, where j runs
    over the N sentences, E_j are the entities mentioned in sentence j (a mention is in the sentence of its first
    token) and A_j is the set of attributes of sentence j: the lowercased word forms of its tokens tagged VERB or
    ADJ (no lemmatiser here, so "open" and "opened" are two attributes). In words: the share of i's attributes
    that no sentence without i has.
    """
    _check_tags(document, pos_tags)
    attributes = [
        {document.tokens[t].lower() for t in range(start, end) if pos_tags[t] in ATTRIBUTE_TAGS}
        for start, end in document.sentences
    ]
    sentences_with = Counter(word for sentence in attributes for word in sentence)  # sentences holding each
    sentence_of = document.sentence_of()
    mentioned_in: dict[int, set[int]] = {}
    for mention in document.mentions:
        mentioned_in.setdefault(mention.entity, set()).add(sentence_of[mention.start])
    result: dict[int, float | None] = {}
    for entity in document.entities():
        inside = Counter(word for j in mentioned_in[entity] for word in attributes[j])
        # an attribute of i is shared with a sentence without i iff it is in more sentences than i's own hold it
        unique = sum(1 for word, count in inside.items() if sentences_with[word] == count)
        result[entity] = unique / len(inside) if inside else None
    return result


def prompt_matches(document: Document, pos_tags: Sequence[str], prompt_entities: Sequence[Sequence[str]]
                   ) -> tuple[int, int]:
    """How many prompt entities the story mentions exactly, and at least partially (§4.2).

    Case is ignored. A prompt entity is an **exact** match if some mention's tokens are its tokens. It is a
    **subset** match if it is an exact match, or if some mention holds a noun or proper noun (UPOS NOUN or PROPN)
    that is one of its tokens: "Amanda Pierce" is matched by "Amanda" and "the guy she likes" by "the guy", but
    "his father" is not matched by "his car" (a shared pronoun or article is no match). So subset >= exact.
    """
    _check_tags(document, pos_tags)
    words = [token.lower() for token in document.tokens]
    surfaces = {tuple(words[mention.start:mention.end]) for mention in document.mentions}
    nominals = {words[t] for mention in document.mentions for t in range(mention.start, mention.end)
                if pos_tags[t] in NOMINAL_TAGS}
    exact = subset = 0
    for entity in prompt_entities:
        if not entity:
            raise ValueError(f"document {document.id!r}: a prompt entity has no tokens")
        tokens = tuple(token.lower() for token in entity)
        exact += tokens in surfaces
        subset += tokens in surfaces or not nominals.isdisjoint(tokens)
    return exact, subset


def story_metrics(document: Document, pos_tags: Sequence[str], prompt_entities: Sequence[Sequence[str]] | None = None,
                  sections: int = SECTIONS, protagonists: int = PROTAGONISTS) -> StoryMetrics:
    """All the metrics of one story (see the module docstring): ``pos_tags`` holds the UPOS tag of each token,
    ``prompt_entities`` the gold entities of its prompt (token tuples; None: no prompt)."""
    if sections < 1 or protagonists < 1:
        raise ValueError(f"sections and protagonists must be at least 1, got {sections} and {protagonists}")
    entities = len(document.entities())
    matches = prompt_matches(document, pos_tags, prompt_entities) if prompt_entities is not None else (None, None)
    span = coherence(document, sections, protagonists)
    shares = [v for v in attribute_consistency(document, pos_tags).values() if v is not None]
    consistency = 100 * fmean(shares) if shares else None
    return StoryMetrics(
        sections=sections,
        entities=entities,
        mentions=len(set(document.mentions)) / entities if entities else None,
        prompt_entities=len(prompt_entities) if prompt_entities is not None else None,
        exact=matches[0],
        subset=matches[1],
        coherence=span,
        consistency=consistency,
        normalised_consistency=span / sections * consistency if span is not None and consistency is not None
        else None,
    )


def corpus_metrics(stories: Sequence[StoryMetrics]) -> dict[str, Any]:
    """The mean of each metric over the stories that define it (None if none does), as Table 2 reports them.

    Also: ``stories``; ``defined``, how many stories each mean is over; and ``normalised_consistency_of_means``,
    (C̄ / L) V̄ from the corpus means. Table 2's U column is exactly that (Human, WikiPlots: 5.65 / 10 × 86.70 =
    48.99; all eight rows agree within rounding), rather than the mean of per-story U (``normalised_consistency``),
    so both are given.
    """
    sections = {story["sections"] for story in stories}
    if len(sections) > 1:
        raise ValueError(f"stories measured with different numbers of sections: {sorted(sections)}")
    result: dict[str, Any] = {"stories": len(stories), "sections": sections.pop() if sections else SECTIONS}
    defined = {key: [story[key] for story in stories if story[key] is not None] for key in AVERAGED}
    result.update({key: fmean(values) if values else None for key, values in defined.items()})
    result["defined"] = {key: len(values) for key, values in defined.items()}
    c, v = result["coherence"], result["consistency"]
    result["normalised_consistency_of_means"] = c / result["sections"] * v if c is not None and v is not None else None
    return result


def _check_tags(document: Document, pos_tags: Sequence[str]) -> None:
    if len(pos_tags) != len(document.tokens):
        raise ValueError(f"document {document.id!r}: {len(document.tokens)} tokens but {len(pos_tags)} POS tags")
