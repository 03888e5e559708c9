"""Training the MNEMELM family (Papalampidi et al. 2022) on prompted stories, through ``python -m inference.train``.

    python -m inference.train --model d_mneme --corpus litbank+ontogum+inscript+lambada --data-dir DATA \\
        --out runs/mneme/d_mneme

``entitylm train`` hands these ``--model`` values to this module's parser (``python -m inference.story_lm`` is
the same command): ``vanilla`` (VANILLALM), ``s_mneme``, ``d_mneme`` and the ablations ``d_mneme_no_mi`` and
``d_mneme_no_es``, the presets of :mod:`generative.mneme`, whose docstring describes the model.

**Data** (:mod:`coref.corpora.stories`). The ``train`` split of every corpus of ``--corpus`` (joined with '+'), cut at
sentence boundaries into stories of at most ``--max-tokens`` tokens (default 1000: the paper's stories are at
most 1000 tokens, §4.1), each with the prompt of its entities (their first non-pronoun mentions between
``<sep>`` tokens, §2); a LAMBADA passage has no gold coreference and so the prompt ``<sep>``: LM text only.
Model selection uses the ``dev`` splits of the corpora with gold coreference (LAMBADA's only when there is no
other), since prompted stories are what the paper evaluates. Every story ends with ``<eos>``, a predicted token
like any other, so that generation (:mod:`inference.algorithms.generate`) can stop.

**Vocabulary**: the ``--vocab-size`` most frequent words of the training stories and their prompts (ties by the
word), after ``<pad> <sep> <unk> <eos>`` (ids 0-3); any other word reads as ``<unk>``. Case is kept: the models
are word-level and capitalisation is what tells a name from a word ("Will", "will") and starts a sentence,
which matters for the entity mentions that -log p_e measures and for generated text; on these corpora it
costs about one point of dev out-of-vocabulary rate (4.9% cased, 3.9% lowercased, at 20K words).

**Training**: the objective of §3, ``MnemeLM.loss(batch).total`` (NLL + λ KL per story token, λ the preset's
unless ``--kl-weight`` says otherwise), by Adam with a linear warm-up over ``--warmup`` updates and then a
constant learning rate (the number of updates is set by early stopping, which a decaying schedule would need
in advance). The default 1e-3, not Transformer-XL's 2.5e-4 (a 300M-parameter model), trained these ~8M-parameter
models fastest in a short test (vanilla, one InScript epoch: dev NLL 5.62 at 2.5e-4, 5.20 at 5e-4, 5.04 at
1e-3, 4.97 at 2e-3). The gradient norm clipped to ``--clip-norm`` (Transformer-XL's 0.25). Batches hold stories of
similar length, at most ``--batch-tokens`` padded story tokens each (a story longer than that is a batch of its
own), in an order shuffled per epoch. The dev NLL per token picks the epoch; the run stops after
``--patience`` epochs without a gain. ``OUT/model.pt`` holds the best weights, ``OUT/last.pt`` the state
``--resume`` continues from; both are written atomically after every epoch and hold the vocabulary and the
model's config. Each epoch's train and dev NLL and KL go to stderr as a JSON line; the summary to stdout.

**A base LM** (``--base VANILLA/model.pt``): as the paper adds its memory to a pretrained LM, a run can start
from a trained VANILLALM of the same sizes: its vocabulary (``--vocab-size`` is then not used) and every weight
the two models share (:meth:`generative.mneme.MnemeLM.start_from`); the memory's parts are new.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from coref.corpora.stories import STORY_CORPORA
from coref.io.atomic import write_text_atomic
from inference.checks import output_file
from inference.commands.cli import USER_ERRORS, Parser, config_of, run_main
from inference.commands.options import add_data_dir, add_run_options, add_stopping, config_options
from inference.training.mneme import CHECKS, StoryLMTraining, train_story_lm


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.train", description=__doc__)
    add = config_options(parser, StoryLMTraining, CHECKS)
    add("model", required=True, help="the MNEMELM variant to train")
    parser.add_argument("--corpus", required=True,
                        help=f"story corpora ({', '.join(STORY_CORPORA)}), several joined with '+'")
    add_data_dir(parser)
    add("out", required=True, help="output folder: model.pt (best weights), last.pt (for --resume)")
    parser.add_argument("--json", type=output_file, help="also write the summary here")
    add("max_tokens", help="cut documents into stories of at most this many tokens, at sentence boundaries")
    add("vocab_size", help="the most frequent training words kept (besides <pad> <sep> <unk> <eos>)")
    add("d_model", help="model width")
    add("layers", help="decoder layers")
    add("heads", help="self-attention heads")
    add("d_ff", help="hidden units of each MLP")
    add("dropout", help="dropout rate")
    add("chunk", help="tokens between memory updates (paper 64)")
    add("segment", help="T-XL segment length, a multiple of --chunk (paper 512)")
    add("cache", help="T-XL memory: past positions kept before each segment (paper 500)")
    parser.add_argument("--base",
                        help="a trained VANILLALM (OUT/model.pt) of the same sizes to start from: its vocabulary (not "
                             "--vocab-size) and weights, the memory's parts new (the paper's pretrained base LM, §3)")
    add("kl_weight", help="lambda of the entity-attention KL (default: the preset's; 0 for vanilla and w/o ES)")
    add("lr", help="Adam's learning rate")
    add("warmup", help="updates of linear learning-rate warm-up (then constant)")
    add("clip_norm", help="clip the gradient norm to this (Transformer-XL's 0.25)")
    add("batch_tokens", help="padded story tokens per training batch")
    add("eval_batch_tokens", help="padded story tokens per dev batch")
    add_stopping(add, "stop after this many epochs without a dev NLL gain")
    add_run_options(parser, "random seed (initialisation, dropout, batch order)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Train the story LM; print the summary as JSON (and with ``--json`` write it). Returns the exit status."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        summary = train_story_lm(config_of(StoryLMTraining, args))
        if args.json:
            write_text_atomic(args.json, json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary, indent=2))
        return 0

    return run_main(body, USER_ERRORS)
