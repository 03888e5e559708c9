"""Pretrain the Dynamic Neural Text Model's context encoder on sentence completion (Kobayashi et al. 2017, §5.1).

    python -m inference.pretrain_context --corpus ontogum --data-dir DATA --out runs/context/ontogum.pt \
        [--extra-text inscript,lambada] [--steps 50000 --batch-sentences 128 --negatives 5 --context-size 128]
    python -m inference.train --model dntm --corpus ontogum --data-dir DATA --out runs/dntm/pretrained \
        --context-encoder runs/context/ontogum.pt

The paper pretrains the word embeddings and the context encoder (the BiLSTM and W_hd of eq. 6-8) on a large
corpus, predicting every word of a sentence from the words around it with negative sampling (context2vec with
one shared embedding set, footnote 7: sentences of at most 32 tokens, batches of 128, 5 negatives, 50,000
iterations), then freezes the encoder while training the language model and initialises the LM's input and
output word embeddings with the pretrained ones, every ``<unkK>`` with ``<unk>``'s vector. Here:

- the vocabulary is the one ``entitylm train --model dntm`` builds for the same ``--corpus`` and
  ``--vocab-size``:
  :func:`coref.corpora.anonymise.anonymised_vocabulary` of the anonymised TRAINING documents, so that word ids agree;
- the text is the training split of ``--corpus`` with its original words (:data:`ANONYMISED_PREPROCESS`, NOT
  anonymised, so the words of mentions are seen), plus ``--extra-text``: the training split of other corpora of
  :mod:`coref.corpora.registry` (``inscript``, ``litbank``, ...), ``lambada`` (LAMBADA's training novels,
  ``DATA/lambada/train-novels/**/*.txt``, which the official release has and the shared data lacks) or
  ``lambada-dev`` (LAMBADA's 4,869 development passages: in no test split, but do not use them when reporting
  LAMBADA development results); each passage is cut into sentences after ``.``, ``!``, ``?``;
- sentences of more than ``--max-sentence-tokens`` words are dropped; each sentence is its words and ``</s>``,
  as the DNTM's encoder reads it (:func:`generative.dntm.sentence_batch`), words outside the vocabulary
  ``<unk>``;
- the loss is :meth:`generative.dntm.ContextEncoder.completion_loss` at every token, the negatives drawn from
  the pretraining text's unigram counts over the vocabulary raised to 0.75 (:func:`generative.dntm.sample_negatives`;
  the counts of the text, not of the anonymised vocabulary, so that ``<unkK>`` and ``<s>``, which the text never
  holds, are never drawn); Adam; ``--held-out`` of the sentences (2%) are scored every ``--eval-every`` steps
  with fixed negatives, and the weights of the best score are kept.

``--out`` is written atomically at every evaluation (a stopped run leaves its best weights so far): a
``context_encoder`` checkpoint of :mod:`coref.io.checkpoint` (config ``size``; training record ``args``,
``text``, ``history``, ``best``, ``steps``).
:func:`load_context_encoder` puts it into a DNTM (``entitylm train --context-encoder``).
"""

from __future__ import annotations

from collections.abc import Sequence

from inference.commands.cli import Parser, config_of, json_text, run_command
from inference.commands.options import add_data_dir, add_device, add_extra_text, add_seed, config_options
from inference.training.context_encoder import CHECKS, ContextEncoderTraining, pretrain_context_encoder


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.pretrain_context", description=__doc__)
    add = config_options(parser, ContextEncoderTraining, CHECKS)
    parser.add_argument("--corpus", required=True,
                        help="the corpus the DNTM will be trained on (its training split is text and vocabulary)")
    add_data_dir(parser)
    add("out", required=True, help="the checkpoint to write (atomically)")
    add_extra_text(parser)
    add("vocab_size", help="as entitylm train's --vocab-size (the anonymised vocabulary, paper 10K)")
    add("context_size", help="embeddings, BiLSTM units per direction and context vectors (entitylm train's)")
    add("steps", help="updates (paper 50,000)")
    add("batch_sentences", help="sentences per update (paper 128)")
    add("negatives", help="negative samples per target (paper 5)")
    add("max_sentence_tokens", help="longer sentences are dropped (paper 32)")
    add("lr", help="Adam's learning rate")
    add("held_out", help="fraction of the sentences (at least one) scored to keep the best weights")
    add("eval_every", help="score the held-out sentences this often")
    add_seed(parser, help="random seed (held-out choice, batches, negatives, init)")
    add_device(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Pretrain the encoder; print the summary as JSON. Returns the exit status."""
    return run_command(lambda args: pretrain_context_encoder(config_of(ContextEncoderTraining, args)), json_text,
                       build_parser().parse_args(argv))
