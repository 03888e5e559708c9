"""A resolver for GAP's question: which of two names, if either, an ambiguous pronoun refers to.

GAP (Webster et al. 2018) asks, for a Wikipedia paragraph, a pronoun and two person names A and B, whether each
name corefers with the pronoun. Both names are usually of the pronoun's gender, so agreement decides little;
what decides is where the names stand (subject of the sentence, the pronoun's parallel, the page's topic, which
is named most), and the clusters of a general resolver catch only some of it. This classifier reads those
cues, and the raw-text pipeline's own clusters, as a vector per name (:func:`name_features`), and chooses one of
three answers, A, B or neither, as GAP's examples have at most one coreferent name:

- the pipeline's answer (:func:`coref.corpora.gap.gap_decisions`), whether the pronoun's entity holds a mention
  with the name's last word, and the size of the name's entity;
- position: before or after the pronoun, distance in tokens and sentences, whether the name is the first nominal
  of its sentence (no noun or pronoun before it: the subject, as far as part-of-speech tags tell), and that
  conjoined with the pronoun's case (he/she, his, him; "her" by the next word's tag) and position, GAP's
  syntactic-parallelism cue;
- what surrounds the name: a possessive "'s", a preposition or "by" before it, "and" or a comma after it,
  parentheses; how often its first and last words occur (the page's topic recurs), whether it is in the first
  sentence; the proper nouns, pronouns and same-gender pronouns between it and the pronoun; whether it is the
  nearer of the two names;
- the gender of its first name (gender-guesser's lexicon, as the mention ranker reads it): matching, clashing or
  unknown; and features of the pronoun shared by both names (its case, whether it opens its sentence or is the
  first nominal, its token position, whether the pipeline found a mention on it).

The model is a small ensemble (:class:`GapResolverConfig`: five one-hidden-layer MLPs whose probabilities are
averaged). Each member scores a name from its own features, the other name's and the pronoun's (the same
network for A and B, so the order of the names carries no weight of its own), and "neither" from the two names'
sum and absolute difference. It is trained on GAP's development set, full batch (Adam, weight decay), with the
validation set reported after every epoch; the test set is only scored. Gender enters only as the pipeline's
clusters and the first name's agreement with the pronoun; every other feature reads the pronoun's case, not its
gender, so that the two genders are read alike (GAP's bias figure).

Trained by :func:`inference.training.resolution.train_gap_resolver`; the command is :mod:`inference.commands.gap`
(``python -m coref.gap``). The bundled model, ``coref/resolution/pretrained/gap.pt``, reads the bundled pipeline's
clusters; one trained on another pipeline's records which in its checkpoint.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from coref.corpora.gap import GapExample, _name_mentions, _pronoun_mention, _token_span, gap_decisions
from coref.document import Document
from coref.io.checkpoint import Checkpoint, CheckpointError, load
from coref.io.text import TokenizedText, tokenize
from coref.resolution.ranker import FEMININE, MASCULINE, UNKNOWN, _first_name_gender

KIND = "gap_resolver"
BUNDLED = Path(__file__).parent / "pretrained" / "gap.pt"
NOMINAL_TAGS = frozenset({"NOUN", "PROPN", "PRON"})
SUBJECT, POSSESSIVE, OBJECT = range(3)  # the pronoun's case
CASES = {"he": SUBJECT, "she": SUBJECT, "his": POSSESSIVE, "hers": POSSESSIVE, "him": OBJECT}
GENDERED = {MASCULINE: frozenset({"he", "his", "him"}), FEMININE: frozenset({"she", "her", "hers"})}
ANSWERS = ("A", "B", "neither")
NAME_FEATURES = 39  # the length of name_features' vectors
SHARED_FEATURES = 7  # and of pronoun_features'


class GapResolverError(CheckpointError):
    """A file that is not a saved :class:`GapResolver`; the message names it."""


@dataclass(frozen=True)
class GapResolverConfig:
    """The ensemble's shape: ``members`` MLPs of ``hidden`` units, ``dropout`` in training."""

    hidden: int = 32
    members: int = 5
    dropout: float = 0.2


@dataclass(frozen=True)
class GapReading:
    """What the classifier reads of one example: the pipeline's tokens and clusters, and the tokens' tags."""

    example: GapExample
    tokenized: TokenizedText
    resolved: Document
    tags: Sequence[str]


def _one_hot(value: int, size: int) -> list[float]:
    vector = [0.0] * size
    vector[max(0, min(value, size - 1))] = 1.0
    return vector


def _first_nominal(tags: Sequence[str], sentence_start: int, token: int) -> bool:
    """Whether no noun, proper noun or pronoun precedes ``token`` in its sentence (a subject, roughly)."""
    return all(tag not in NOMINAL_TAGS for tag in tags[sentence_start:token])


def pronoun_case(pronoun: str, next_tag: str) -> int:
    """SUBJECT, POSSESSIVE or OBJECT: "her" is possessive before a noun, adjective or number, else an object."""
    word = pronoun.lower()
    if word in CASES:
        return CASES[word]
    return POSSESSIVE if next_tag in ("NOUN", "ADJ", "PROPN", "NUM") else OBJECT


def _sentence_of(tokenized: TokenizedText) -> np.ndarray:
    sentence = np.zeros(len(tokenized.tokens), dtype=np.int64)
    for number, (start, end) in enumerate(tokenized.sentences):
        sentence[start:end] = number
    return sentence


def _pronoun_position(reading: GapReading, sentence: np.ndarray) -> tuple[int, int, int]:
    """The pronoun's token, the first token of its sentence (``sentence``: each token's), and its case."""
    example, tokenized, tags = reading.example, reading.tokenized, reading.tags
    p = _token_span(tokenized, example.pronoun_offset, example.pronoun_offset + len(example.pronoun))[0]
    case = pronoun_case(example.pronoun, tags[p + 1] if p + 1 < len(tags) else "PUNCT")
    return p, tokenized.sentences[sentence[p]][0], case


def pronoun_features(reading: GapReading) -> list[float]:
    """The pronoun's case (one-hot), whether it is its sentence's first nominal or first token, the log of its
    position, and whether the pipeline found no mention on it."""
    example, tokenized, tags = reading.example, reading.tokenized, reading.tags
    p, start, case = _pronoun_position(reading, _sentence_of(tokenized))
    return [*_one_hot(case, 3), float(_first_nominal(tags, start, p)), float(p == start), math.log1p(p),
            float(_pronoun_mention(example, tokenized, reading.resolved) is None)]


def name_features(reading: GapReading) -> tuple[list[float], list[float]]:
    """The feature vectors of names A and B (see the module docstring), in that order."""
    example, tokenized, resolved, tags = reading.example, reading.tokenized, reading.resolved, reading.tags
    tokens = [token.lower() for token in tokenized.tokens]
    sentence = _sentence_of(tokenized)
    p, pronoun_start, case = _pronoun_position(reading, sentence)
    pronoun_first = _first_nominal(tags, pronoun_start, p)
    gender = MASCULINE if example.gender == "masculine" else FEMININE
    pronoun = _pronoun_mention(example, tokenized, resolved)
    entities: dict[int, list] = {}
    for mention in resolved.mentions:
        entities.setdefault(mention.entity, []).append(mention)
    decisions = gap_decisions(example, tokenized, resolved)
    spans = [_token_span(tokenized, offset, offset + len(name))
             for name, offset in ((example.a, example.a_offset), (example.b, example.b_offset))]

    def distance(span: tuple[int, int]) -> int:
        return p - span[1] if span[1] <= p else span[0] - p

    vectors = []
    for k, (name, (start, end)) in enumerate(zip((example.a, example.b), spans)):
        words = name.split()
        first_word, last_word = words[0].lower(), words[-1].lower()
        before = end <= p
        low, high = (end, p) if before else (p + 1, start)
        sentence_start = tokenized.sentences[sentence[start]][0]
        first = _first_nominal(tags, sentence_start, start)
        name_gender = _first_name_gender(words[0])
        pronoun_entity = entities[pronoun.entity] if pronoun is not None else []
        in_pronoun_entity = any(m != pronoun and last_word in tokens[m.start:m.end] for m in pronoun_entity)
        stand_ins = _name_mentions((start, end), resolved, pronoun) if pronoun is not None else []
        entity_size = max((len(entities[mention.entity]) for mention in stand_ins), default=0)
        previous_tag, previous = (tags[start - 1], tokens[start - 1]) if start else ("START", "")
        following = tokens[end] if end < len(tokens) else ""
        vectors.append([
            float(decisions[k]), float(in_pronoun_entity), math.log1p(entity_size),
            float(before), math.log1p(distance((start, end))), *_one_hot(sentence[p] - sentence[start] + 2, 7),
            float(first), float(first and pronoun_first), float(first and pronoun_first and case == SUBJECT),
            *(float(first and case == c) for c in (SUBJECT, POSSESSIVE, OBJECT)),
            float(following == "'s"), float(previous_tag == "ADP"), float(previous == "by"),
            float(following in ("and", ",")), float(previous == "and"),
            float(tokens[:start].count("(") > tokens[:start].count(")")),
            math.log1p(tokens.count(last_word)), math.log1p(tokens.count(first_word)), float(sentence[start] == 0),
            float(last_word in tokens[: tokenized.sentences[0][1]]),
            math.log1p(sum(tag == "PROPN" for tag in tags[low:high])),
            math.log1p(sum(token in GENDERED[MASCULINE] | GENDERED[FEMININE] for token in tokens[low:high])),
            math.log1p(sum(token in GENDERED[gender] for token in tokens[low:high])),
            float(distance((start, end)) < distance(spans[1 - k])),
            float(name_gender == gender), float(name_gender not in (UNKNOWN, gender)), float(name_gender == UNKNOWN),
            float(sentence[start] == sentence[p] and before), float(len(words) > 1),
            float(previous_tag == "VERB"), float(start == sentence_start),
        ])
    return vectors[0], vectors[1]


def read_examples(examples: Sequence[GapExample], pipeline: Any, tagger: Any) -> list[GapReading]:
    """Resolve every example's text with ``pipeline`` (a :class:`coref.resolution.pipeline.CorefPipeline`, all
    texts in one batch) and tag it with ``tagger`` (:class:`coref.resolution.pos.PosTagger`)."""
    tokenized = [tokenize(example.text) for example in examples]
    documents = [Document(example.id, found.tokens, found.sentences) for example, found in zip(examples, tokenized)]
    resolved = pipeline.resolve_documents(documents)
    tags = tagger.tag(documents)
    return [GapReading(*parts) for parts in zip(examples, tokenized, resolved, tags)]


def feature_tensors(readings: Sequence[GapReading]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Names A's and B's features and the pronoun's, one row per example."""
    pairs = [name_features(reading) for reading in readings]
    shared = [pronoun_features(reading) for reading in readings]
    return (torch.tensor([a for a, _ in pairs], dtype=torch.float32).reshape(-1, NAME_FEATURES),
            torch.tensor([b for _, b in pairs], dtype=torch.float32).reshape(-1, NAME_FEATURES),
            torch.tensor(shared, dtype=torch.float32).reshape(-1, SHARED_FEATURES))


def gold_answers(examples: Sequence[GapExample]) -> torch.Tensor:
    """The index in :data:`ANSWERS` of every example's gold answer."""
    return torch.tensor([0 if example.a_coref else 1 if example.b_coref else 2 for example in examples])


class _Member(nn.Module):
    """One MLP of the ensemble: a name's score from (its features, the other's, the pronoun's); "neither"'s from
    (the sum, the absolute difference, the pronoun's)."""

    def __init__(self, config: GapResolverConfig) -> None:
        super().__init__()
        inputs = 2 * NAME_FEATURES + SHARED_FEATURES
        self.name = nn.Sequential(nn.Linear(inputs, config.hidden), nn.ReLU(), nn.Dropout(config.dropout),
                                  nn.Linear(config.hidden, 1))
        self.neither = nn.Sequential(nn.Linear(inputs, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1))

    def forward(self, a: torch.Tensor, b: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.name(torch.cat([a, b, shared], 1)), self.name(torch.cat([b, a, shared], 1)),
                          self.neither(torch.cat([a + b, (a - b).abs(), shared], 1))], 1)


class GapResolver(nn.Module):
    """The ensemble: :meth:`forward` gives each member's logits over :data:`ANSWERS`; :meth:`probabilities`
    their average."""

    def __init__(self, config: GapResolverConfig = GapResolverConfig(), info: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.config = config
        self.members = nn.ModuleList(_Member(config) for _ in range(config.members))
        self.info = dict(info or {})

    def forward(self, a: torch.Tensor, b: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        """Logits of shape ``(members, examples, 3)``."""
        return torch.stack([member(a, b, shared) for member in self.members])

    @torch.no_grad()
    def probabilities(self, a: torch.Tensor, b: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
        """The members' average probability of each answer, ``(examples, 3)``."""
        self.eval()
        return self(a, b, shared).softmax(-1).mean(0)

    def decide(self, readings: Sequence[GapReading]) -> list[tuple[bool, bool]]:
        """(A corefers, B corefers) for every reading: the most probable answer."""
        return self.decisions(feature_tensors(readings)) if readings else []

    def decisions(self, features: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> list[tuple[bool, bool]]:
        """:meth:`decide` from :func:`feature_tensors` already computed (training scores validation so)."""
        answers = self.probabilities(*features).argmax(-1).tolist()
        return [(answer == 0, answer == 1) for answer in answers]

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(KIND, asdict(self.config), {}, {"model": self.state_dict()}, dict(self.info))

    def save(self, path: str | os.PathLike) -> None:
        """Write the model atomically (:mod:`coref.io.checkpoint`)."""
        self.checkpoint().save(path)

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> GapResolver:
        """A model :meth:`save` wrote (default: the bundled one)."""
        path = BUNDLED if path is None else path
        checkpoint = load(path, "GAP resolver", {KIND}, GapResolverError)
        try:
            model = cls(GapResolverConfig(**checkpoint.config), checkpoint.training)
            model.load_state_dict(checkpoint.weights["model"])
        except (KeyError, TypeError, RuntimeError) as error:
            raise GapResolverError(f"{path}: incomplete GAP resolver ({type(error).__name__}: {error})") from error
        return model.eval()


def pronouns_without_mention(readings: Sequence[GapReading]) -> int:
    """On how many readings the pipeline found no mention on the pronoun."""
    return sum(_pronoun_mention(reading.example, reading.tokenized, reading.resolved) is None for reading in readings)
