"""Prompted story generation with a MNEMELM story LM (Papalampidi et al. 2022, §2 and §5.2): :func:`generate_stories`
of a :class:`GenerationConfig`, whose command is :mod:`inference.commands.generate` (``python -m
inference.generate``).

The prompt is ``<sep> e1 <sep> e2 <sep> ...`` (:func:`coref.corpora.stories.prompt_tokens`): the entities given
(each a tuple of words), or those of a story of a corpus split (its id as ``python -m inference.train`` cut it,
``ID#k`` for piece k of a long document). A prompt word outside the model's vocabulary reads as ``<unk>``, with a
warning on stderr. Each sample is drawn by nucleus sampling (§5.2: top-p 0.8, temperature 1) with the model's full
T-XL memory, from one random stream seeded by the config's seed, and handed word by word to a writer as it is
drawn, one line per sample; it stops at ``<eos>`` or after ``max_tokens`` tokens.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from coref.corpora.stories import PromptedStory, prompt_tokens
from generative.mneme import MnemeLM
from inference.runtime import resolve_device
from inference.training.mneme import EOS, StoryVocabulary, corpus_parts, load_split, load_story_lm, never_drawn


@dataclass(frozen=True)
class GenerationConfig:
    """The options of ``python -m inference.generate``: the story LM ``checkpoint``; the prompt's ``entities``
    (each its words) or the ``story_id`` of a story of ``corpus`` and ``split``; ``samples`` stories of at most
    ``max_tokens`` tokens drawn with ``top_p`` and ``temperature`` from ``seed``."""

    checkpoint: str
    entities: Sequence[tuple[str, ...]] | None = None
    story_id: str | None = None
    corpus: str | None = None
    split: str = "test"
    data_dir: str | None = None
    max_tokens: int = 200
    top_p: float = 0.8
    temperature: float = 1.0
    samples: int = 1
    seed: int = 0
    device: str = "auto"


def entity_story(entities: Sequence[tuple[str, ...]]) -> PromptedStory:
    """The entities written one after another as a story in which each is a mention of itself: what
    :func:`coref.corpora.stories.prompt_tokens` makes a prompt of."""
    tokens = tuple(word for entity in entities for word in entity)
    starts = [sum(len(entity) for entity in entities[:index]) for index in range(len(entities))]
    mentions = tuple((start, start + len(entity), index) for index, (start, entity) in enumerate(zip(starts, entities)))
    return PromptedStory("prompt", "prompt", tokens, ((0, len(tokens)),), tuple(entities), mentions)


def corpus_story(corpus: str, split: str, story_id: str, data_dir: str | None, max_tokens: int) -> PromptedStory:
    """The story ``story_id`` of a corpus split, cut into stories as the model's training data was."""
    stories = load_split(corpus, split, data_dir, max_tokens)
    for story in stories:
        if story.id == story_id:
            return story
    examples = ", ".join(story.id for story in stories[:3])
    raise ValueError(f"--story-id {story_id!r}: no such story in {corpus} {split} (ids like {examples})")


def sample_story(model: MnemeLM, vocabulary: StoryVocabulary, prompt: Sequence[str], owners: Sequence[int],
                 max_tokens: int, top_p: float, temperature: float, generator: torch.Generator,
                 write: Callable[[str], None]) -> tuple[list[str], bool]:
    """One story after ``prompt`` (words, and their entity indices, -1 for ``<sep>``), each word handed to
    ``write`` as it is drawn: its words and whether it ended with ``<eos>``."""
    words = []
    for token in model.generate([vocabulary.encode(prompt)], [owners], max_tokens, top_p=top_p,
                                temperature=temperature, generator=generator, banned=never_drawn(vocabulary)):
        word = vocabulary.words[int(token[0])]
        if word == EOS:
            return words, True
        write(word if not words else f" {word}")
        words.append(word)
    return words, False


def generate_stories(config: GenerationConfig, write: Callable[[str], None]) -> dict[str, Any]:
    """Sample the stories, each handed to ``write`` as it is drawn (a word at a time, a line break after each
    story): the prompt, the settings and the samples, as ``python -m inference.generate --json`` writes them."""
    if config.story_id is not None:
        if config.corpus is None:
            raise ValueError("--story-id: name the story's --corpus (and --split)")
        corpus_parts(config.corpus)
    device = resolve_device(config.device)
    model, checkpoint = load_story_lm(config.checkpoint, device)
    story = (entity_story(config.entities) if config.entities else
             corpus_story(config.corpus, config.split, config.story_id, config.data_dir, checkpoint.max_tokens))
    prompt, owners = prompt_tokens(story)
    unknown = checkpoint.vocabulary.unknown(prompt)
    if unknown:
        print(f"warning: prompt words outside the vocabulary read as <unk>: {' '.join(unknown)}", file=sys.stderr)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    samples: list[dict[str, Any]] = []
    for _ in range(config.samples):
        words, ended = sample_story(model, checkpoint.vocabulary, prompt, owners, config.max_tokens, config.top_p,
                                    config.temperature, generator, write)
        write("\n")
        samples.append({"text": " ".join(words), "tokens": len(words), "ended_with_eos": ended})
    return {"checkpoint": config.checkpoint, "model": checkpoint.model, "story_id": config.story_id,
            "entities": [" ".join(entity) for entity in story.entities], "prompt": " ".join(prompt),
            "unknown_prompt_words": unknown, "max_tokens": config.max_tokens, "top_p": config.top_p,
            "temperature": config.temperature, "seed": config.seed, "samples": samples}
