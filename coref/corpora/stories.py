"""Stories with entity prompts and per-token entity labels, for D-MNEMELM (Papalampidi et al. 2022).

D-MNEMELM conditions a language model on an **entity prompt**, the story's entities each written as the tokens
of a mention and separated by a special token (§2), initialises memory slot j from the prompt tokens of entity
j (§3 "Memory initialization"), and regularises its memory attention towards each token's gold entities: "every
token in the context (i.e. in the same sentence) of an entity mention" carries that entity, several when the
sentence mentions several (§3 "Regularization of cross-attention scores"). Its -log p_e metric averages over the
tokens that are "(part of) an entity mention" (§4.2). A :class:`PromptedStory` holds exactly that: the story's
tokens and sentences, the prompt entities, and their mentions; :attr:`PromptedStory.entity_labels` and
:attr:`PromptedStory.mention_mask` derive the per-token targets, :func:`prompt_tokens` the prompt.

The paper finds entities with a coreference tool (Lee et al. 2018) and writes each as its first mention (§4.3,
App. A.2). Here the entities come from **gold** coreference, by these rules (:class:`PromptRules`):

1. **Entities** are the gold clusters of at least ``min_mentions`` mentions (default 2: Lee et al.'s tool
   outputs no singletons, OntoGUM annotates none, while LitBank and InScript do; ``min_mentions=1`` keeps them).
2. **Cap**: at most ``max_entities`` (default 20; the paper's WikiPlots prompts have about 10 entities), the
   most-mentioned first (ties: earlier first mention), so that the prompt stays short. Prompt entities are then
   ordered by first mention, and only their mentions are kept: labels and mention mask concern prompt entities.
3. **Surface form**: the tokens of the entity's first mention; with ``skip_pronouns`` (the default) its first
   mention that is not a pronoun (every token in :data:`coref.resolution.ranker.PRONOUNS`), because a memory slot
   initialised from "he" says nothing about who he is, and a prompt of coreference chains would name the
   entity. An entity mentioned only by pronouns (a first-person narrator) keeps its first mention, as "I" in
   the paper's Fig. 1(a), which shows that the paper itself kept pronominal first mentions:
   ``skip_pronouns=False`` does the same. The surface form is cut to its first ``max_surface_tokens`` tokens
   (default 20): LitBank mentions run up to 129 tokens (an NP with its relative clause), one such would
   dwarf the rest of the prompt.

Nested mentions stay as annotated ("[his [dog]]" labels the sentence with both entities). **Long documents**
(LitBank ~2,100 tokens, OntoGUM ~1,000; the paper's stories are at most 1,000) may be cut with ``max_tokens``
into consecutive pieces at sentence boundaries by :func:`coref.document.sentence_chunks`: each piece (id
``ID#k``) is a story of its own whose prompt lists the entities mentioned in it, chosen by the rules above
within the piece. No mention crosses a cut; a piece exceeds ``max_tokens`` only where a sentence (or a mention
across sentences) leaves no cut.

Corpora (:func:`load_stories`): ``litbank``, ``ontogum``, ``inscript`` and ``sample`` through
:func:`coref.corpora.registry.load_corpus` (gold coreference), and ``lambada``, whose passages have no gold coreference:
they are stories with an empty prompt and no mentions, LM training text only. LAMBADA's splits are those of
:func:`coref.corpora.lambada.lambada_splits`: ``train`` (90% of the development set), ``dev`` (its other 10%, "valid")
and ``test``; each story is the whole passage, its last word included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean

from coref.corpora.lambada import lambada_splits, sentence_spans
from coref.corpora.registry import CorpusError, DataDir, load_corpus
from coref.document import Document, Mention, sentence_chunks
from coref.resolution.ranker import PRONOUNS

SEP = "<sep>"
MAX_ENTITIES = 20
MIN_MENTIONS = 2
MAX_SURFACE_TOKENS = 20
GOLD_CORPORA = ("sample", "litbank", "ontogum", "inscript")
LAMBADA_SPLITS = {"train": "train", "dev": "valid", "test": "test"}  # our split -> lambada_splits' key
STORY_CORPORA = (*GOLD_CORPORA, "lambada")


@dataclass(frozen=True)
class PromptedStory:
    """A story, its prompt entities (surface tokens, ordered by first mention) and their mentions.

    ``mentions`` are (start, end exclusive, entity index into ``entities``) in text order; ``sentences`` are
    half-open spans tiling ``tokens``.
    """

    id: str
    corpus: str
    tokens: tuple[str, ...]
    sentences: tuple[tuple[int, int], ...]
    entities: tuple[tuple[str, ...], ...]
    mentions: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        ends = [0] + [end for _, end in self.sentences]
        if [start for start, _ in self.sentences] != ends[:-1] or ends[-1] != len(self.tokens) or not self.tokens:
            raise ValueError(f"story {self.id!r}: sentences {self.sentences} do not tile its {len(self.tokens)} tokens")
        for start, end, entity in self.mentions:
            if not (0 <= start < end <= len(self.tokens) and 0 <= entity < len(self.entities)):
                raise ValueError(f"story {self.id!r}: mention {(start, end, entity)} is out of range")
        if any(not surface for surface in self.entities):
            raise ValueError(f"story {self.id!r}: an entity has no prompt tokens")

    @property
    def entity_labels(self) -> tuple[frozenset[int], ...]:
        """Per token, the entities mentioned in its sentence (§3: the target of the attention regulariser).

        A mention labels every sentence it overlaps; a sentence without mentions gives the empty set.
        """
        sentence_of = [n for n, (start, end) in enumerate(self.sentences) for _ in range(start, end)]
        labels: list[set[int]] = [set() for _ in self.sentences]
        for start, end, entity in self.mentions:
            for sentence in range(sentence_of[start], sentence_of[end - 1] + 1):
                labels[sentence].add(entity)
        return tuple(frozenset(labels[sentence]) for sentence in sentence_of)

    @property
    def mention_mask(self) -> tuple[bool, ...]:
        """Per token, whether it is (part of) a mention of a prompt entity: the tokens of -log p_e (§4.2)."""
        mask = [False] * len(self.tokens)
        for start, end, _ in self.mentions:
            mask[start:end] = [True] * (end - start)
        return tuple(mask)

    def document(self) -> Document:
        """The story as a Document whose mentions are those of the prompt entities (entity k: prompt entity k)."""
        return Document(self.id, self.tokens, self.sentences, [Mention(*mention) for mention in self.mentions])


def prompt_tokens(story: PromptedStory, sep: str = SEP) -> tuple[list[str], list[int]]:
    """The entity prompt ``sep e1 sep e2 sep ... eN sep`` and, per prompt token, its entity index (-1 for ``sep``).

    Every entity lies between two separators, as §3 ("tokens allocated within two special separator tokens")
    and Fig. 1(a) write it, and the story follows the final separator; a story without entities (LAMBADA) has
    the prompt ``[sep]``. Memory slot j is the mean of the LM's outputs at the tokens with index j.
    """
    tokens, owners = [sep], [-1]
    for index, surface in enumerate(story.entities):
        tokens.extend(surface)
        owners.extend([index] * len(surface))
        tokens.append(sep)
        owners.append(-1)
    return tokens, owners


def is_pronoun(words: Sequence[str]) -> bool:
    """Whether a mention consists of pronouns only ("he", "I", "you yourself")."""
    return all(word.lower() in PRONOUNS for word in words)


@dataclass(frozen=True)
class PromptRules:
    """Rules 1-3 of the module docstring: which entities a prompt lists and how each is written."""

    max_entities: int = MAX_ENTITIES
    min_mentions: int = MIN_MENTIONS
    skip_pronouns: bool = True
    max_surface_tokens: int = MAX_SURFACE_TOKENS


def prompted_story(document: Document, corpus: str, rules: PromptRules = PromptRules()) -> PromptedStory:
    """The whole ``document`` as a story whose prompt follows rules 1-3 of the module docstring."""
    clusters: dict[int, list[Mention]] = {}
    for mention in dict.fromkeys(document.mentions):  # sorted by position; exact duplicates once
        clusters.setdefault(mention.entity, []).append(mention)
    eligible = [label for label, mentions in clusters.items() if len(mentions) >= rules.min_mentions]
    by_frequency = sorted(eligible, key=lambda label: (-len(clusters[label]), clusters[label][0]))
    kept = sorted(by_frequency[: rules.max_entities], key=lambda label: clusters[label][0])
    index = {label: n for n, label in enumerate(kept)}
    entities = []
    for label in kept:
        named = [m for m in clusters[label] if not is_pronoun(document.tokens[m.start : m.end])]
        first = (named if rules.skip_pronouns and named else clusters[label])[0]
        entities.append(document.tokens[first.start : min(first.end, first.start + rules.max_surface_tokens)])
    mentions = [(m.start, m.end, index[m.entity]) for m in dict.fromkeys(document.mentions) if m.entity in index]
    return PromptedStory(
        document.id, corpus, document.tokens, document.sentences, tuple(entities), tuple(sorted(mentions))
    )


def stories_from_document(
    document: Document, corpus: str, *, max_tokens: int | None = None, rules: PromptRules = PromptRules()
) -> list[PromptedStory]:
    """``document`` as one story, or with ``max_tokens`` as one story per sentence-boundary piece, each with the
    prompt of the entities mentioned in that piece."""
    pieces = [document] if max_tokens is None else sentence_chunks(document, max_tokens)
    return [prompted_story(piece, corpus, rules) for piece in pieces]


def load_stories(
    corpus: str,
    split: str,
    data_dir: DataDir = None,
    *,
    max_tokens: int | None = None,
    rules: PromptRules = PromptRules(),
) -> list[PromptedStory]:
    """One split of a corpus as prompted stories, documents in corpus order (see the module docstring).

    ``corpus`` is one of :data:`STORY_CORPORA`; ``data_dir`` defaults to ``$ENTITYLM_DATA`` (``sample`` needs
    none). An unknown corpus or split is a :class:`coref.corpora.registry.CorpusError` naming the choices.
    """
    if corpus == "lambada":
        if split not in LAMBADA_SPLITS:
            raise CorpusError(f"unknown split {split!r} of corpus 'lambada': choose from {', '.join(LAMBADA_SPLITS)}")
        source = "test" if split == "test" else "dev"  # train and valid both come from the development file
        passages = [
            (example.line, example.tokens + (example.answer,))
            for example in lambada_splits(data_dir)[LAMBADA_SPLITS[split]]
        ]
        documents = [Document(f"lambada-{source}-{line}", words, sentence_spans(words)) for line, words in passages]
    elif corpus in GOLD_CORPORA:
        documents = list(load_corpus(corpus, split, data_dir).documents)
    else:
        raise CorpusError(f"unknown story corpus {corpus!r}: choose from {', '.join(STORY_CORPORA)}")
    return [
        story
        for document in documents
        for story in stories_from_document(document, corpus, max_tokens=max_tokens, rules=rules)
    ]


def story_stats(stories: Sequence[PromptedStory]) -> dict[str, float]:
    """Sizes of a list of stories: count, mean tokens, mean prompt entities and prompt tokens, and the share of
    story tokens with an entity label and inside a mention (what the regulariser and -log p_e see)."""
    tokens = sum(len(story.tokens) for story in stories)
    return {
        "stories": len(stories),
        "mean_tokens": mean(len(story.tokens) for story in stories),
        "max_tokens": max(len(story.tokens) for story in stories),
        "mean_entities": mean(len(story.entities) for story in stories),
        "mean_prompt_tokens": mean(len(prompt_tokens(story)[0]) for story in stories),
        "labelled_share": sum(bool(labels) for story in stories for labels in story.entity_labels) / tokens,
        "mention_share": sum(sum(story.mention_mask) for story in stories) / tokens,
    }
