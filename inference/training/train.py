"""Train any language model of the registry (EntityNLM with its proposals, the RNNLM, the Dynamic Neural Text
Model) or the Kneser-Ney n-gram.

    python -m inference.train --model entitynlm --corpus litbank+ontogum --data-dir DATA --out runs/entitynlm
    python -m inference.train --model dntm --placement both --merge gru_relu --corpus ontogum --data-dir DATA \
        --out runs/dntm/both-gru_relu

The readers of Coref-GRU (``--model ga_gru|ga_cgru|ga_gru_onehot|bi_gru|bi_cgru --task babi:N``) train through
the same command with options of their own (:mod:`inference.training.coref_gru`), and so do the MNEMELM story LMs of
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
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from coref.corpora.anonymise import first_entity_id
from coref.cli import Parser, integer, output_folder, real, run_main
from coref.document import sentence_chunks
from coref.corpora.preprocess import SPECIALS, PreprocessConfig, Vocabulary, apply_vocabulary
from generative.layers.batch import DocumentBatch, batches_by_length, token_stream
from generative.dntm import MERGES, PLACEMENTS, DNTMConfig
from generative.entitynlm.model import PROPOSAL_CONTEXTS, EntityNLMConfig, EntityProposal
from generative.baselines.ngram import KneserNeyConfig, KneserNeyLM
from generative.registry import LANGUAGE_MODELS, model_kind
from generative.baselines.rnnlm import RNNLMConfig
from inference.training import coref_gru as reading
from inference.training import mneme as story_lm
from inference.training.checkpoint import PROPOSAL_WEIGHTS, Checkpoint
from inference.training.loop import Run, Trainer
from inference.commands.cli import USER_ERRORS
from inference.data import language_model_documents, language_model_preprocess, language_model_vocabulary
from inference.training.context_encoder import load_context_encoder
from inference.training.coref_gru import READERS

PAPER_LEARNING_RATES = {"adam": 1e-3, "adagrad": 0.1}


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.train", description=__doc__)
    parser.add_argument("--model", choices=(*LANGUAGE_MODELS, "ngram", *READERS, *story_lm.MODELS), required=True,
                        help="what to train (a reader of Dhingra et al.: see python -m inference.reading --help; a "
                             "MNEMELM: python -m inference.story_lm --help)")
    parser.add_argument("--corpus", default="sample", help="corpus name, or several joined with '+'")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--train-split", default="train", help="split to train on")
    parser.add_argument("--dev-split", default="dev", help="split for model selection and early stopping")
    parser.add_argument("--out", required=True, type=output_folder,
                        help="output folder: model.pt (best weights), last.pt (for --resume); a folder holding an "
                             "earlier run is refused unless --resume continues it with the same options")
    parser.add_argument("--vocab-size", type=integer(len(SPECIALS) + 1), default=10_000,
                        help="words incl. <unk> <num> <s> </s> (paper 10K)")
    parser.add_argument("--keep-singletons", action="store_true",
                        help="keep singleton entities (InScript's entity prediction needs them; the paper's "
                             "CoNLL-2012 preprocessing drops them)")
    parser.add_argument("--embedding-size", type=integer(1), default=128, help="paper grid {32, 48, 64, 128, 256}")
    parser.add_argument("--hidden-size", type=integer(1), default=128, help="paper grid {32, 48, 64, 128, 256}")
    parser.add_argument("--dropout", type=real(0, 1), default=0.2, help="paper grid {0.2, 0.5}")
    parser.add_argument("--softmax", choices=("class", "full"), default="class",
                        help="class: class-factored softmax (the paper's); full: one softmax over the vocabulary")
    parser.add_argument("--distance", choices=("paper", "reference"), default="paper",
                        help="EntityNLM's distance features: the paper's, or the reference code's")
    parser.add_argument("--update", choices=("paper", "reference"), default="paper",
                        help="EntityNLM's entity update (eq. 8): the paper's, or the reference code's")
    parser.add_argument("--new-entity-scale", type=real(0), default=0.01, help="sigma of eq. 7")
    parser.add_argument("--proposals", nargs="*", choices=PROPOSAL_CONTEXTS, default=list(PROPOSAL_CONTEXTS),
                        help="EntityNLM: the proposals trained beside the model (forward: the paper's; "
                             "bidirectional: reads the whole text); the first is the checkpoint's default; none "
                             "trains the model alone (the proposal's fit does not depend on the model)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="both",
                        help="dntm: where entities' dynamic embeddings go (none: the paper's baseline LSTM LM; "
                             "input, output, both: its models B, C, D)")
    parser.add_argument("--merge", choices=MERGES, default="gru_relu",
                        help="dntm: how a new context merges into an entity's vector (the paper's best: gru_relu)")
    parser.add_argument("--context-size", type=integer(1), default=128,
                        help="dntm: units of the context encoder and of the entity vectors")
    parser.add_argument("--context-encoder", metavar="PATH",
                        help="dntm: a context encoder from python -m inference.pretrain_context (same --corpus, "
                             "--vocab-size and --context-size): loaded and frozen, and the LM's input/output "
                             "embeddings initialised from its embeddings where their size equals it (paper §5.1)")
    parser.add_argument("--optimizer", choices=("adam", "adagrad"), default="adam", help="the paper's two")
    parser.add_argument("--lr", type=real(0, include_low=False),
                        help="learning rate (default: the paper's, Adam 1e-3, AdaGrad 0.1)")
    parser.add_argument("--clip-norm", type=real(0, include_low=False),
                        help="clip the gradient norm to this (default: no clipping, as the paper)")
    parser.add_argument("--epochs", type=integer(1), default=10, help="at most this many epochs")
    parser.add_argument("--patience", type=integer(1), default=2, help="stop after this many epochs without dev gain")
    parser.add_argument("--batch-tokens", type=integer(1), default=4_000, help="padded tokens per training batch")
    parser.add_argument("--eval-batch-tokens", type=integer(1), default=32_000,
                        help="padded tokens per dev batch (no gradients: larger batches, fewer sequential steps)")
    parser.add_argument("--train-chunk", type=integer(0), default=0,
                        help="train on pieces of whole sentences of about this many tokens (0: whole documents, "
                             "the paper); dev selection always uses whole documents")
    parser.add_argument("--order", type=integer(1), default=5, help="n-gram order")
    parser.add_argument("--discount-fallback", action="store_true",
                        help="n-gram: use KenLM's fallback discounts (0.5, 1, 1.5) where count-of-counts give none")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0, help="random seed (shuffling, initialisation, noise)")
    parser.add_argument("--resume", action="store_true", help="continue the run in OUT from OUT/last.pt")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


# What a resumed run may change: how long it goes on, and where and how fast it runs; every other option
# defines the run, and resuming with another value would mix two configurations in one learning curve.
RESUMABLE_CHANGES = frozenset({"epochs", "patience", "resume", "out", "data_dir", "device", "eval_batch_tokens"})


# ---- models and objectives --------------------------------------------------------------------------------------


def model_config(args: argparse.Namespace, vocabulary: Vocabulary) -> Any:
    """The model's config from the command line: the shared sizes, and each model's own options."""
    sizes = dict(vocab_size=len(vocabulary), embedding_size=args.embedding_size, hidden_size=args.hidden_size,
                 dropout=args.dropout)
    if args.model == "entitynlm":
        return EntityNLMConfig(**sizes, softmax=args.softmax, distance=args.distance, update=args.update,
                               new_entity_scale=args.new_entity_scale,
                               proposal=(args.proposals or PROPOSAL_CONTEXTS)[0])
    if args.model == "rnnlm":
        return RNNLMConfig(**sizes, softmax=args.softmax)
    return DNTMConfig(**sizes, context_size=args.context_size, placement=args.placement, merge=args.merge,
                      first_entity_id=first_entity_id(vocabulary))


class LanguageModelFamily:
    """The language models as a family of :mod:`inference.training.loop`: the model (EntityNLM also its proposals,
    each a component with its own dev score), one optimiser for all (their parameters are disjoint), the summed
    log-likelihood per token as the loss, and the per-token dev NLL of each component as its score."""

    order = "torch-per-epoch"
    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, args: argparse.Namespace, vocabulary: Vocabulary, preprocess: PreprocessConfig,
                 train_batches: list[DocumentBatch], dev_batches: list[DocumentBatch], device: torch.device) -> None:
        self.name, self.kind, self.clip_norm = args.model, args.model, args.clip_norm
        self.vocabulary, self.preprocess = vocabulary, preprocess
        self.config = model_config(args, vocabulary)
        self.modules = {"model": model_kind(args.model).build(self.config, list(vocabulary.counts))}
        if args.model == "entitynlm":
            for context in args.proposals:
                self.modules[PROPOSAL_WEIGHTS[context]] = EntityProposal(self.config, context=context)
        for module in self.modules.values():
            module.to(device)
        self.parameters = [p for module in self.modules.values() for p in module.parameters()]
        optimizer_class = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}[args.optimizer]
        self.optimizer = optimizer_class(self.parameters, lr=args.lr or PAPER_LEARNING_RATES[args.optimizer])
        self.train_batches, self.dev_batches = train_batches, dev_batches
        self.train_tokens = sum(batch.num_tokens for batch in train_batches)

    def log_likelihoods(self, batch: DocumentBatch) -> dict[str, torch.Tensor]:
        """Summed log-likelihood of the batch for each component (model: joint on gold; proposal: log Q)."""
        return {name: module.log_likelihood(batch).sum() for name, module in self.modules.items()}

    def epoch_batches(self, source: torch.Generator) -> list[DocumentBatch]:
        return [self.train_batches[i] for i in torch.randperm(len(self.train_batches), generator=source).tolist()]

    def step(self, batch: DocumentBatch) -> tuple[dict[str, float], float]:
        parts = self.log_likelihoods(batch)
        loss = -sum(parts.values()) / batch.num_tokens
        self.optimizer.zero_grad()
        loss.backward()
        if self.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.clip_norm)
        self.optimizer.step()
        return {name: -float(value.detach()) for name, value in parts.items()}, float(loss.detach())

    def evaluate(self) -> dict[str, float]:
        """Per-token NLL of each component on the dev batches (dev selection; the paper's objective on dev)."""
        for module in self.modules.values():
            module.train(False)
        totals: dict[str, float] = {}
        tokens = sum(batch.num_tokens for batch in self.dev_batches)
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(0)  # the new-entity noise: every epoch's dev score sees the same draws
            for batch in self.dev_batches:
                for name, value in self.log_likelihoods(batch).items():
                    totals[name] = totals.get(name, 0.0) - float(value)
        return {name: total / tokens for name, total in totals.items()}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "seconds": seconds, "train_tokens_per_second": self.train_tokens / seconds,
                "train_nll": {k: v / self.train_tokens for k, v in totals.items()}, "dev_nll": scores}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return Checkpoint(self.kind, self.config.to_dict(), self.vocabulary, self.preprocess, weights, training)


# ---- the n-gram ---------------------------------------------------------------------------------------------


def train_ngram(args: argparse.Namespace, train_docs, dev_docs, vocabulary: Vocabulary, preprocess) -> dict:
    streams = [token_stream(document, vocabulary).words for document in train_docs]
    started = time.perf_counter()
    ngram = KneserNeyLM.fit(streams, len(vocabulary), vocabulary.index("<s>"), KneserNeyConfig(
        order=args.order, discount_fallback=(0.5, 1.0, 1.5) if args.discount_fallback else None))
    seconds = time.perf_counter() - started
    dev_ppl = ngram.perplexity([token_stream(document, vocabulary).words for document in dev_docs])
    summary = {"model": "ngram", "order": args.order, "fit_seconds": seconds, "dev_perplexity": dev_ppl}
    Checkpoint("ngram", {"order": args.order}, vocabulary, preprocess, {"ngram": ngram.state_dict()},
               {"args": vars(args), **summary}).save(Path(args.out) / "model.pt")
    return summary


# ---- the loop ----------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if reading_model(argv) in READERS:  # a reader of Dhingra et al.: its own options and defaults
        return reading.main(argv)
    if reading_model(argv) in story_lm.MODELS:  # a MNEMELM story LM: its own options and defaults
        return story_lm.main(argv)
    args = parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def reading_model(argv: Sequence[str]) -> str | None:
    """The value of ``--model`` in ``argv`` (``--model X`` or ``--model=X``), None without one."""
    for position, argument in enumerate(argv):
        if argument == "--model" and position + 1 < len(argv):
            return argv[position + 1]
        if argument.startswith("--model="):
            return argument.partition("=")[2]
    return None


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    data = "entity" if args.model == "ngram" else model_kind(args.model).data
    preprocess = language_model_preprocess(data, args.keep_singletons)
    if args.context_encoder and args.model != "dntm":
        raise ValueError(f"--context-encoder: only --model dntm has a context encoder, not {args.model}")
    trainer = Trainer(Run(out, args.epochs, args.seed, vars(args), patience=args.patience, resume=args.resume,
                          resumable=RESUMABLE_CHANGES, device=args.device))
    resumed = trainer.check_out_folder(Checkpoint.load)
    train_docs = language_model_documents(data, args.corpus, args.train_split, args.data_dir, preprocess)
    vocabulary = resumed.vocabulary if resumed else language_model_vocabulary(data, train_docs, args.vocab_size)
    train_docs = [apply_vocabulary(document, vocabulary)[0] for document in train_docs]
    dev_docs = language_model_documents(data, args.corpus, args.dev_split, args.data_dir, preprocess, vocabulary)
    if args.model == "ngram":
        print(json.dumps(train_ngram(args, train_docs, dev_docs, vocabulary, preprocess), indent=2))
        return 0
    if args.train_chunk:
        train_docs = [piece for document in train_docs for piece in sentence_chunks(document, args.train_chunk)]
    device = trainer.device
    train_batches = [b.to(device) for b in batches_by_length(train_docs, vocabulary, args.batch_tokens)]
    dev_batches = [b.to(device) for b in batches_by_length(dev_docs, vocabulary, args.eval_batch_tokens)]
    family = LanguageModelFamily(args, vocabulary, preprocess, train_batches, dev_batches, device)
    if args.context_encoder:
        print(load_context_encoder(family.modules["model"], args.context_encoder, vocabulary), file=sys.stderr)
    state = trainer.fit(family)
    summary = {"model": family.kind, "epochs": state["epoch"], "best_dev_nll": state["best"],
               "best_dev_perplexity": {k: math.exp(v) for k, v in state["best"].items()}}
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
