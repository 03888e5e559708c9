"""Prompted story generation with a MNEMELM story LM (Papalampidi et al. 2022, §2 and §5.2).

    python -m inference.generate --checkpoint runs/mneme/d_mneme/model.pt --entities "Sarah King" "the old dog"
    python -m inference.generate --checkpoint runs/mneme/d_mneme/model.pt --story-id ID --corpus litbank \\
        --split test --samples 5 --json samples.json

The prompt is ``<sep> e1 <sep> e2 <sep> ...`` (:func:`coref.corpora.stories.prompt_tokens`): the ``--entities`` given
(each split into words at spaces), or those of a story of a corpus split (its id as ``python -m
inference.training.train`` cut it, ``ID#k`` for piece k of a long document). A prompt word outside the model's
vocabulary reads as ``<unk>``, with a warning on stderr. Each sample is drawn by nucleus sampling (§5.2: top-p
0.8, temperature 1) with the model's full T-XL memory, from one random stream seeded by ``--seed``, and
printed to stdout as it is drawn, one line per sample, words joined by spaces; it stops at ``<eos>`` or after
``--max-tokens`` tokens. ``--json`` also writes the prompt and the samples.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

from coref.io.atomic import write_text_atomic
from coref.cli import Parser, integer, output_file, real, run_main
from coref.corpora.stories import PromptedStory, prompt_tokens
from generative.mneme import MnemeLM
from inference.commands.cli import USER_ERRORS
from inference.runtime import resolve_device
from inference.training.mneme import EOS, StoryVocabulary, corpus_parts, load_split, load_story_lm, never_drawn


def probability(text: str) -> float:
    """An option type: a number in (0, 1]."""
    value = real(0, include_low=False)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def entity_words(text: str) -> tuple[str, ...]:
    """An option type: an entity's surface form, its words split at spaces (at least one)."""
    words = tuple(text.split())
    if not words:
        raise argparse.ArgumentTypeError(f"an entity needs at least one word, got {text!r}")
    return words


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


def run(args: argparse.Namespace) -> int:
    """Sample the stories, streaming them to stdout; with ``--json`` write them too."""
    if args.story_id is not None:
        if args.corpus is None:
            raise ValueError("--story-id: name the story's --corpus (and --split)")
        corpus_parts(args.corpus)
    device = resolve_device(args.device)
    model, checkpoint = load_story_lm(args.checkpoint, device)
    story = (entity_story(args.entities) if args.entities else
             corpus_story(args.corpus, args.split, args.story_id, args.data_dir, checkpoint.max_tokens))
    prompt, owners = prompt_tokens(story)
    unknown = checkpoint.vocabulary.unknown(prompt)
    if unknown:
        print(f"warning: prompt words outside the vocabulary read as <unk>: {' '.join(unknown)}", file=sys.stderr)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    samples: list[dict[str, Any]] = []
    for _ in range(args.samples):
        words, ended = sample_story(model, checkpoint.vocabulary, prompt, owners, args.max_tokens, args.top_p,
                                    args.temperature, generator, lambda text: print(text, end="", flush=True))
        print(flush=True)
        samples.append({"text": " ".join(words), "tokens": len(words), "ended_with_eos": ended})
    if args.json:
        result = {"checkpoint": args.checkpoint, "model": checkpoint.model, "story_id": args.story_id,
                  "entities": [" ".join(entity) for entity in story.entities], "prompt": " ".join(prompt),
                  "unknown_prompt_words": unknown, "max_tokens": args.max_tokens, "top_p": args.top_p,
                  "temperature": args.temperature, "seed": args.seed, "samples": samples}
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    return 0


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.generate", description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="a story LM checkpoint (OUT/model.pt of training)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--entities", nargs="+", type=entity_words, metavar="ENTITY",
                        help="the prompt's entities, e.g. \"Sarah King\" \"the old dog\"")
    source.add_argument("--story-id", help="take the prompt of this story of --corpus --split")
    parser.add_argument("--corpus", help="with --story-id: the story's corpus")
    parser.add_argument("--split", default="test", help="with --story-id: the story's split")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--max-tokens", type=integer(1), default=200, help="stop a sample after this many tokens")
    parser.add_argument("--top-p", type=probability, default=0.8, help="nucleus sampling's p (paper 0.8)")
    parser.add_argument("--temperature", type=real(0, include_low=False), default=1.0,
                        help="softmax temperature (paper 1)")
    parser.add_argument("--samples", type=integer(1), default=1, help="stories to draw for the prompt")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the samples")
    parser.add_argument("--json", type=output_file, help="also write the prompt and the samples here")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
