"""Prompted story generation with a MNEMELM story LM (Papalampidi et al. 2022, §2 and §5.2).

    python -m inference.generate --checkpoint runs/mneme/d_mneme/model.pt --entities "Sarah King" "the old dog"
    python -m inference.generate --checkpoint runs/mneme/d_mneme/model.pt --story-id ID --corpus litbank \\
        --split test --samples 5 --json samples.json

The prompt is ``<sep> e1 <sep> e2 <sep> ...`` (:func:`coref.corpora.stories.prompt_tokens`): the ``--entities`` given
(each split into words at spaces), or those of a story of a corpus split (its id as ``entitylm
train`` cut it, ``ID#k`` for piece k of a long document). A prompt word outside the model's
vocabulary reads as ``<unk>``, with a warning on stderr. Each sample is drawn by nucleus sampling (§5.2: top-p
0.8, temperature 1) with the model's full T-XL memory, from one random stream seeded by ``--seed``, and
printed to stdout as it is drawn, one line per sample, words joined by spaces; it stops at ``<eos>`` or after
``--max-tokens`` tokens. ``--json`` also writes the prompt and the samples.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from coref.io.atomic import write_text_atomic
from inference.algorithms.generate import GenerationConfig, generate_stories
from inference.checks import integer, probability, real
from inference.commands.cli import Parser, config_of, run_main
from inference.commands.options import add_corpus_split, add_data_dir, add_device, add_json, add_seed


def entity_words(text: str) -> tuple[str, ...]:
    """An option type: an entity's surface form, its words split at spaces (at least one)."""
    words = tuple(text.split())
    if not words:
        raise argparse.ArgumentTypeError(f"an entity needs at least one word, got {text!r}")
    return words


def build_parser() -> Parser:
    """The checkpoint, the prompt and the sampling."""
    parser = Parser(prog="python -m inference.generate", description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="a story LM checkpoint (OUT/model.pt of training)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--entities", nargs="+", type=entity_words, metavar="ENTITY",
                        help="the prompt's entities, e.g. \"Sarah King\" \"the old dog\"")
    source.add_argument("--story-id", help="take the prompt of this story of --corpus --split")
    add_corpus_split(parser, corpus=None, corpus_help="with --story-id: the story's corpus",
                     split_help="with --story-id: the story's split")
    add_data_dir(parser)
    parser.add_argument("--max-tokens", type=integer(1), default=200, help="stop a sample after this many tokens")
    parser.add_argument("--top-p", type=probability, default=0.8, help="nucleus sampling's p (paper 0.8)")
    parser.add_argument("--temperature", type=real(0, include_low=False), default=1.0,
                        help="softmax temperature (paper 1)")
    parser.add_argument("--samples", type=integer(1), default=1, help="stories to draw for the prompt")
    add_seed(parser, help="random seed of the samples")
    add_json(parser, help="also write the prompt and the samples here")
    add_device(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Sample the stories, streaming them to stdout; with ``--json`` write them too. Returns the exit status."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        result = generate_stories(config_of(GenerationConfig, args),
                                  write=lambda text: print(text, end="", flush=True))
        if args.json:
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        return 0

    return run_main(body)
