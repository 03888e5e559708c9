"""The MNEMELM story LMs in a notebook (:class:`StoryLanguageModel`): story likelihoods, sampled stories
annotated and measured, memory attention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from html import escape
from numbers import Integral
from pathlib import Path

import numpy as np
import torch

from coref.corpora.stories import PromptedStory, prompt_tokens
from coref.document import Document, bracketed
from coref.io.html import document_html
from coref.io.text import tokenize as tokenize_text
from coref.metrics.stories import StoryMetrics, story_metrics
from generative.mneme import MnemeConfig, MnemeExample, MnemeLM, parameter_count
from generative.mneme import make_batch as make_story_batch
from inference.algorithms.generate import entity_story, sample_story
from inference.api.tables import cell, formatted, html_table
from inference.evaluation.entity_usage import Annotator, story_text
from inference.evaluation.mneme import Tally
from inference.training.mneme import StoryLMCheckpoint, StoryVocabulary, encode_story

# ---- story language models (MNEMELM) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoryLikelihood:
    """log p(story | its entity prompt) of a story LM: ``log_p`` (nats, exact) over ``tokens`` predicted tokens (the
    story's and ``<eos>``, as ``inference.evaluation.mneme`` counts them); ``entity_nll`` (-log p_e) and ``other_nll``
    (-log p_r): the mean NLL of the tokens inside a mention of a prompt entity and of the others, where the story
    has mentions (a :class:`coref.corpora.stories.PromptedStory`; None for a text); ``unknown``: the words of the prompt
    and the story that the model reads as ``<unk>``."""

    story: PromptedStory
    log_p: float
    tokens: int
    entity_nll: float | None
    other_nll: float | None
    mention_tokens: int
    cache_size: int
    unknown: tuple[str, ...]

    @property
    def perplexity(self) -> float:
        """exp(-log p / tokens)."""
        return float(np.exp(-self.log_p / self.tokens))

    def summary(self) -> str:
        """One line: the story's name, log p, perplexity, -log p_e and -log p_r, and the cache size."""
        return (f"{self.story.id}: log p = {self.log_p:.2f} nats over {self.tokens} tokens, perplexity "
                f"{self.perplexity:.2f}, -log p_e {formatted(self.entity_nll, '.2f')} over {self.mention_tokens} "
                f"mention tokens, -log p_r {formatted(self.other_nll, '.2f')} (cache {self.cache_size})")

    def __repr__(self) -> str:
        shown = " ".join(self.unknown[:10]) + (" ..." if len(self.unknown) > 10 else "")
        unknown = f"; {len(self.unknown)} words read as <unk>: {shown}" if self.unknown else ""
        return f"StoryLikelihood({self.summary()}{unknown})"

    def _repr_html_(self) -> str:
        names = {k: " ".join(words) for k, words in enumerate(self.story.entities)}
        return document_html(self.story.document(), title=self.summary(), entity_names=names)


@dataclass(frozen=True, eq=False)  # numpy fields
class MemoryAttention:
    """Where a memory model's last layer looks while reading a story: ``weights[c, j]`` is the attention on slot
    j (``slots[j]``: the non-entity slot, then the prompt entities) averaged over the memory heads and the tokens
    of chunk c (``chunks[c]``: its token span); each row sums to 1. ``moved[c, j]``: how far slot j's value moves
    after chunk c, ‖V_j after − V_j before‖ (eq. 4-6 of :mod:`generative.mneme`; 0 for S-MNEMELM's static
    memory)."""

    weights: np.ndarray
    moved: np.ndarray
    slots: list[str]
    chunks: list[tuple[int, int]]

    def __repr__(self) -> str:
        width = max(len(slot) for slot in self.slots)
        head = " " * width + "".join(f"{f'{start}-{end - 1}':>8}" for start, end in self.chunks)
        rows = [slot.rjust(width) + "".join(f"{weight:8.2f}" for weight in self.weights[:, j])
                for j, slot in enumerate(self.slots)]
        return "\n".join([f"MemoryAttention({len(self.chunks)} chunks x {len(self.slots)} slots; columns: the "
                          "chunks' tokens)", head, *rows])

    def _repr_html_(self) -> str:
        rows = [(slot, *(f"{w:.2f}" for w in self.weights[:, j])) for j, slot in enumerate(self.slots)]
        return html_table(("slot", *(f"{start}-{end - 1}" for start, end in self.chunks)), rows,
                           "mean memory attention of the last layer per chunk (columns: token spans)")


@dataclass(frozen=True)
class GeneratedStory:
    """A story sampled by a story LM from an entity prompt: the ``prompt`` as written (``<sep> e1 <sep> ...``,
    of ``entities``), the sampled ``words`` (``ended``: it stopped at ``<eos>``, not at the token limit),
    ``document``: its ``text`` annotated by the bundled coreference pipeline (singletons dropped, entity numbers
    the pipeline's own), and ``metrics``: :func:`coref.metrics.stories.story_metrics` against the prompt's
    entities (entities, mentions, exact and subset prompt matches, coherence, consistency). ``document`` and
    ``metrics`` are None for an empty story (``<eos>`` drawn first)."""

    model: StoryLanguageModel = field(repr=False, compare=False)
    entities: tuple[tuple[str, ...], ...]
    words: tuple[str, ...]
    ended: bool
    seed: int
    document: Document | None
    metrics: StoryMetrics | None

    @property
    def prompt(self) -> tuple[str, ...]:
        """The prompt's words, ``<sep> e1 <sep> e2 <sep> ...`` (:func:`coref.corpora.stories.prompt_tokens`)."""
        return tuple(prompt_tokens(entity_story(self.entities))[0])

    @property
    def text(self) -> str:
        """The words as the annotator reads them: joined by spaces, ``<unk>`` written ``UNK``."""
        return story_text(self.words)

    @property
    def unknown(self) -> list[str]:
        """The prompt's words outside the model's vocabulary, which it read as ``<unk>``."""
        return self.model.vocabulary.unknown(self.prompt)

    def memory_attention(self) -> MemoryAttention:
        """The memory attention of the model's last layer per chunk and slot while reading the prompt and the
        words again (``model.cross_attention``: the same computation as sampling them)."""
        if self.model.config.memory == "none":
            raise ValueError(f"memory_attention: a {self.model.kind} model has no entity memory")
        if not self.words:
            raise ValueError("memory_attention: the story has no words")
        vocabulary, chunk = self.model.vocabulary, self.model.config.chunk
        prompt, owners = prompt_tokens(entity_story(self.entities))
        batch = make_story_batch([MnemeExample(vocabulary.encode(prompt), owners, vocabulary.encode(self.words))])
        trace = self.model.module.cross_attention(batch.to(self.model.device))
        tokens = trace.attention[0, -1].mean(0).cpu().numpy()  # last layer, mean over heads: (T, Z)
        chunks = [(start, min(start + chunk, len(self.words))) for start in range(0, len(self.words), chunk)]
        values = trace.values[0]
        return MemoryAttention(np.stack([tokens[start:end].mean(0) for start, end in chunks]),
                               (values[1:] - values[:-1]).norm(dim=-1).cpu().numpy(),
                               ["non-entity", *(" ".join(entity) for entity in self.entities)], chunks)

    def summary(self) -> str:
        """One line: the model, the prompt, the seed, the number of words and how the story ended."""
        end = "ended with <eos>" if self.ended else "cut at the token limit"
        return f"{self.model.kind} from '{' '.join(self.prompt)}' (seed {self.seed}): {len(self.words)} words, {end}"

    def __repr__(self) -> str:
        lines = [f"GeneratedStory({self.summary()})"]
        if self.unknown:
            lines.append(f"prompt words read as <unk>: {' '.join(self.unknown)}")
        if self.document is not None:
            lines.append(bracketed(self.document))
            lines.append("metrics: " + ", ".join(f"{name} {cell(value)}" for name, value in self.metrics.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if self.document is None:
            return f"<p>{escape(self.summary())}</p>"
        metrics = html_table(tuple(self.metrics), [tuple(map(cell, self.metrics.values()))])
        return document_html(self.document, title=self.summary()) + metrics


@cache
def story_annotator() -> Annotator:
    """The coreference pipeline and POS tagger that annotate generated stories
    (:class:`inference.evaluation.entity_usage. Annotator`, the bundled models), loaded once per process."""
    return Annotator.load()


def _entity_words(entities: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    if isinstance(entities, str) or not isinstance(entities, Sequence):
        raise ValueError(f"entities are a list of strings (each an entity's words), not {type(entities).__name__}")
    if not all(isinstance(entity, str) and entity.split() for entity in entities):
        raise ValueError(f"every entity is a non-empty string, got {list(entities)!r}")
    return tuple(tuple(entity.split()) for entity in entities)


class StoryLanguageModel:
    """A MNEMELM story LM (Papalampidi et al. 2022: VANILLALM, S-MNEMELM, D-MNEMELM or an ablation) on a device,
    made by :func:`load`: it reads and writes stories conditioned on an entity prompt. ``kind``: the preset,
    ``module``: the :class:`generative.mneme.MnemeLM`, ``checkpoint``: its
    :class:`inference.training.mneme.StoryLMCheckpoint`."""

    def __init__(self, path: Path, module: MnemeLM, checkpoint: StoryLMCheckpoint) -> None:
        self.path, self.module, self.checkpoint, self.kind = path, module, checkpoint, checkpoint.model
        self.device = module.embedding.weight.device

    @property
    def vocabulary(self) -> StoryVocabulary:
        """The model's words (``<pad> <sep> <unk> <eos>``, then the training words)."""
        return self.checkpoint.vocabulary

    @property
    def config(self) -> MnemeConfig:
        """The model's sizes and choices (memory, chunk, segment, cache, ...)."""
        return self.checkpoint.config

    @property
    def history(self) -> list[dict]:
        """The trainer's record of each epoch: train and dev NLL and KL per story token, dev perplexity, time."""
        return self.checkpoint.training.get("state", {}).get("history", [])

    def __repr__(self) -> str:
        return (f"StoryLanguageModel(kind={self.kind!r}, checkpoint='{self.path}', vocabulary="
                f"{len(self.vocabulary)} words, device='{self.device}', parameters={parameter_count(self.module):,})")

    def log_likelihood(self, text: str | PromptedStory, entities: Sequence[str] = (),
                       cache_size: int | None = None) -> StoryLikelihood:
        """log p(story | prompt), exact: ``text`` a string (tokenised by :func:`coref.io.text.tokenize`) written for
        the prompt of ``entities`` (each entity's words, e.g. ``["Anna", "her brother"]``), or a
        :class:`coref.corpora.stories.PromptedStory` (e.g. of ``coref.corpora.stories.load_stories``), whose prompt and
        mentions give -log p_e and -log p_r too. ``cache_size``: the T-XL cache (default the model's; smaller
        simulates longer narratives, as ``inference.evaluation.mneme --cache-sizes``)."""
        if isinstance(text, PromptedStory):
            if entities:
                raise ValueError("log_likelihood: a PromptedStory has its own entities; give entities with a str")
            story = text
        elif isinstance(text, str):
            tokenized = tokenize_text(text)  # ValueError for an empty text
            story = PromptedStory("text", "text", tokenized.tokens, tokenized.sentences, _entity_words(entities), ())
        else:
            raise ValueError(f"a story is a str or a coref.corpora.stories.PromptedStory, not {type(text).__name__}")
        if cache_size is not None and (isinstance(cache_size, bool) or not isinstance(cache_size, Integral)
                                       or cache_size < 0):
            raise ValueError(f"cache_size must be an integer of at least 0, got {cache_size!r}")
        batch = make_story_batch([encode_story(story, self.vocabulary)])
        with torch.no_grad():
            log_p = self.module.token_log_probs(batch.to(self.device), cache_size).cpu()
        tally = Tally(sections=1)
        tally.add(-log_p, batch)
        metrics = tally.metrics()
        return StoryLikelihood(story, float(log_p.double().sum()), metrics["tokens"], metrics["entity_nll"],
                               metrics["other_nll"], metrics["mention_tokens"],
                               self.config.cache if cache_size is None else cache_size,
                               tuple(self.vocabulary.unknown([*prompt_tokens(story)[0], *story.tokens])))

    def perplexity(self, text: str | PromptedStory, entities: Sequence[str] = (),
                   cache_size: int | None = None) -> float:
        """exp(-log p / tokens) of a story (see :meth:`log_likelihood`)."""
        return self.log_likelihood(text, entities, cache_size).perplexity

    def generate(self, entities: Sequence[str], tokens: int = 200, seed: int = 0, top_p: float = 0.8,
                 temperature: float = 1.0) -> GeneratedStory:
        """A story written for the prompt of ``entities`` (each entity's words, e.g. ``["Sarah King", "the
        dog"]``; a word outside the vocabulary reads as ``<unk>``), sampled as ``python -m inference.generate``
        does: nucleus sampling (§5.2: ``top_p`` 0.8, ``temperature`` 1) with the full T-XL memory, from a random
        stream seeded by ``seed`` (the caller's is not used), until ``<eos>`` or ``tokens`` tokens; then
        annotated and measured as ``inference.evaluation.mneme`` measures generated stories."""
        if isinstance(tokens, bool) or not isinstance(tokens, Integral) or tokens < 1:
            raise ValueError(f"tokens must be an integer of at least 1, got {tokens!r}")
        words_of = _entity_words(entities)
        story = entity_story(words_of)
        prompt, owners = prompt_tokens(story)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        words, ended = sample_story(self.module, self.vocabulary, prompt, owners, tokens, top_p, temperature,
                                    generator, lambda word: None)
        document, metrics = None, None
        if words:
            [(document, tags)] = story_annotator().annotate([words], [f"{self.kind} sample (seed {seed})"])
            metrics = story_metrics(document, tags, story.entities)
        return GeneratedStory(self, words_of, tuple(words), ended, seed, document, metrics)

