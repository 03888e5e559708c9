"""Train any language model of the registry (EntityNLM with its proposals, the RNNLM, the Dynamic Neural Text
Model) or the Kneser-Ney n-gram.

    python -m inference.train --model entitynlm --corpus litbank+ontogum --data-dir DATA --out runs/entitynlm
    python -m inference.train --model dntm --placement both --merge gru_relu --corpus ontogum --data-dir DATA \
        --out runs/dntm/both-gru_relu

:func:`train_language_model` trains one from a :class:`LanguageModelTraining` (the options of ``python -m
inference.train``, :mod:`inference.commands.train`) through the one loop (:mod:`inference.training.loop`). The
readers of Coref-GRU (``--model ga_gru|ga_cgru|ga_gru_onehot|bi_gru|bi_cgru --task babi:N``) train through the
same command with options of their own (:mod:`inference.training.coref_gru`), and so do the MNEMELM story LMs of
Papalampidi et al. (``--model vanilla|s_mneme|d_mneme|d_mneme_no_mi|d_mneme_no_es``, :mod:`inference.training.mneme`).

Each model reads the data its registry entry names (:data:`generative.registry.DATA_KINDS`): EntityNLM and the
RNNLM the paper's preprocessing of annotated text, the Dynamic Neural Text Model the Anonymized Language
Modelling data (:mod:`coref.corpora.anonymise`, each chain's mentions one token ``<unkK>``).

EntityNLM's model is fitted by maximum likelihood on the gold R, E, L and words (paper eq. 9), its proposal by
supervised maximum likelihood on the same annotation (the parameters are disjoint, so one optimiser serves both
and each keeps the weights of its own best dev score); ``python -m inference.refine`` can then fit a proposal
to the model's posterior on text alone. Dev selection and early stopping use the per-token dev NLL (the joint
for EntityNLM, as in paper §5.1). ``OUT/model.pt`` holds the best weights, ``OUT/last.pt`` the state to
``--resume`` from; both are written atomically after every epoch. A folder that holds an earlier run is refused
unless ``--resume`` continues it with the same options (only ``--epochs``, ``--patience``, ``--device``,
``--data-dir`` and ``--eval-batch-tokens`` may change), so a model.pt never sits beside another run's last.pt.

``--init CHECKPOINT`` fine-tunes a trained model (its weights and vocabulary; its dev score is the one to beat).
``--extra-text`` adds text without annotation to the training text of the models that read text alone (the RNNLM,
the n-gram), the vocabulary staying the corpus's; EntityNLM trains on such text by wake-theta, ``python -m
inference.refine --wake theta --extra-text``, where its structures are drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from inference.commands import reading, story_lm
from inference.commands.cli import Parser, config_of, json_text, run_command
from inference.commands.options import add_data_dir, add_extra_text, add_run_options, add_stopping, config_options
from inference.training.coref_gru import READERS
from inference.training.mneme import MODELS as STORY_MODELS
from inference.training.train import CHECKS, MODELS, LanguageModelTraining, train_language_model


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.train", description=__doc__)
    add = config_options(parser, LanguageModelTraining, CHECKS)
    parser.add_argument("--model", choices=(*MODELS, *READERS, *STORY_MODELS), required=True,
                        help="what to train (a reader of Dhingra et al.: see python -m inference.reading --help; a "
                             "MNEMELM: python -m inference.story_lm --help)")
    add("corpus", help="corpus name, or several joined with '+'")
    add_data_dir(parser)
    add("train_split", help="split to train on")
    add("dev_split", help="split for model selection and early stopping")
    add("out", required=True,
        help="output folder: model.pt (best weights), last.pt (for --resume); a folder holding an "
             "earlier run is refused unless --resume continues it with the same options")
    add("vocab_size", help="words incl. <unk> <num> <s> </s> (paper 10K)")
    parser.add_argument("--keep-singletons", action="store_true",
                        help="keep singleton entities (InScript's entity prediction needs them; the paper's "
                             "CoNLL-2012 preprocessing drops them)")
    add("embedding_size", help="paper grid {32, 48, 64, 128, 256}")
    add("hidden_size", help="paper grid {32, 48, 64, 128, 256}")
    add("dropout", help="paper grid {0.2, 0.5}")
    add("softmax", help="class: class-factored softmax (the paper's); full: one softmax over the vocabulary")
    add("distance", help="EntityNLM's distance features: the paper's, or the reference code's")
    add("update", help="EntityNLM's entity update (eq. 8): the paper's, or the reference code's")
    add("new_entity_scale", help="sigma of eq. 7")
    add("proposals", nargs="*",
        default=LanguageModelTraining("rnnlm", ".").proposals,
        help="EntityNLM: the proposals trained beside the model (forward: the paper's; "
             "bidirectional: reads the whole text); the first is the checkpoint's default; none "
             "trains the model alone (the proposal's fit does not depend on the model)")
    add("placement",
        help="dntm: where entities' dynamic embeddings go (none: the paper's baseline LSTM LM; "
             "input, output, both: its models B, C, D)")
    add("merge", help="dntm: how a new context merges into an entity's vector (the paper's best: gru_relu)")
    add("context_size", help="dntm: units of the context encoder and of the entity vectors")
    parser.add_argument("--context-encoder", metavar="PATH",
                        help="dntm: a context encoder from python -m inference.pretrain_context (same --corpus, "
                             "--vocab-size and --context-size): loaded and frozen, and the LM's input/output "
                             "embeddings initialised from its embeddings where their size equals it (paper §5.1)")
    add("optimizer", help="the paper's two")
    add("lr", help="learning rate (default: the paper's, Adam 1e-3, AdaGrad 0.1)")
    add("clip_norm", help="clip the gradient norm to this (default: no clipping, as the paper)")
    add_stopping(add, "stop after this many epochs without dev gain")
    add("batch_tokens", help="padded tokens per training batch")
    add("eval_batch_tokens", help="padded tokens per dev batch (no gradients: larger batches, fewer sequential steps)")
    add("init", metavar="CHECKPOINT",
        help="fine-tune: start from this checkpoint's weights and vocabulary (a model of the same kind and settings, "
             "trained on text preprocessed alike); the weights kept are never worse on dev than the start")
    add_extra_text(parser, ", added to the training text without its annotation, for rnnlm and ngram; the "
                           "vocabulary stays the corpus's")
    add("train_chunk",
        help="train on pieces of whole sentences of about this many tokens (0: whole documents, "
             "the paper); dev selection always uses whole documents")
    add("order", help="n-gram order")
    add("precision", help="bf16: the training forward pass under torch.autocast in bfloat16 (for a GPU; the "
                          "weights, the optimiser and dev scoring stay float32)")
    parser.add_argument("--discount-fallback", action="store_true",
                        help="n-gram: use KenLM's fallback discounts (0.5, 1, 1.5) where count-of-counts give none")
    add_run_options(parser, "random seed (shuffling, initialisation, noise)")
    return parser


def model_named(argv: Sequence[str]) -> str | None:
    """The value of ``--model`` in ``argv`` (``--model X`` or ``--model=X``), None without one."""
    for position, argument in enumerate(argv):
        if argument == "--model" and position + 1 < len(argv):
            return argv[position + 1]
        if argument.startswith("--model="):
            return argument.partition("=")[2]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Train the model ``--model`` names (a reader or a story LM with its own command's options); print the
    summary as JSON. Returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if model_named(argv) in READERS:  # a reader of Dhingra et al.: its own options and defaults
        return reading.main(argv)
    if model_named(argv) in STORY_MODELS:  # a MNEMELM story LM: its own options and defaults
        return story_lm.main(argv)
    return run_command(lambda args: train_language_model(config_of(LanguageModelTraining, args)), json_text,
                       build_parser().parse_args(argv))
