"""Training the language models of the registry (EntityNLM with its proposals, the RNNLM, the Dynamic Neural
Text Model) and fitting the Kneser-Ney n-gram: :func:`train_language_model` runs one from a
:class:`LanguageModelTraining` through the one loop (:mod:`inference.training.loop`), EntityNLM's proposals beside
its model as components with their own dev scores. The command, whose help says how each model is trained and
selected, is :mod:`inference.commands.train`.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from coref.corpora.anonymise import first_entity_id
from coref.corpora.preprocess import SPECIALS, PreprocessConfig, Vocabulary, apply_vocabulary
from coref.document import sentence_chunks
from generative.baselines.ngram import KneserNeyConfig, KneserNeyLM
from generative.baselines.rnnlm import RNNLMConfig
from generative.dntm import MERGES, PLACEMENTS, DNTMConfig
from generative.entitynlm.model import PROPOSAL_CONTEXTS, EntityNLMConfig, EntityProposal
from generative.layers.batch import DocumentBatch, batches_by_length, token_stream
from generative.registry import LANGUAGE_MODELS, model_kind
from inference.checks import integer, output_folder, real
from inference.data import (
    check_extra_text,
    extra_text_documents,
    extra_text_names,
    language_model_documents,
    language_model_preprocess,
    language_model_vocabulary,
)
from inference.distributed import Ranks, Share, sum_gradients
from inference.training.checkpoint import PROPOSAL_WEIGHTS, Checkpoint
from inference.training.context_encoder import load_context_encoder
from inference.training.loop import Report, Run, Trainer
from inference.training.options import check_run

PAPER_LEARNING_RATES = {"adam": 1e-3, "adagrad": 0.1}
PRECISIONS = ("fp32", "bf16")  # bf16: the forward pass under torch.autocast (weights and optimiser in float32)
MODELS = (*LANGUAGE_MODELS, "ngram")
TEXT_ALONE = ("rnnlm", "ngram")  # the models that read text without annotation (--extra-text)


@dataclass
class LanguageModelTraining:
    """The options of a language model's (or the n-gram's) training run: those of ``python -m inference.train``
    (its ``--help`` says what each means), checked on creation as the command line checks them."""

    model: str
    out: str | Path
    corpus: str = "sample"
    data_dir: str | None = None
    train_split: str = "train"
    dev_split: str = "dev"
    vocab_size: int = 10_000
    keep_singletons: bool = False
    embedding_size: int = 128
    hidden_size: int = 128
    dropout: float = 0.2
    softmax: str = "class"
    distance: str = "paper"
    update: str = "paper"
    new_entity_scale: float = 0.01
    proposals: list[str] = field(default_factory=lambda: list(PROPOSAL_CONTEXTS))
    placement: str = "both"
    merge: str = "gru_relu"
    context_size: int = 128
    context_encoder: str | None = None
    optimizer: str = "adam"
    lr: float | None = None
    clip_norm: float | None = None
    epochs: int = 10
    patience: int = 2
    batch_tokens: int = 4_000
    eval_batch_tokens: int = 32_000
    train_chunk: int = 0
    order: int = 5
    discount_fallback: bool = False
    precision: str = "fp32"
    init: str | None = None
    extra_text: str | None = None
    device: str = "auto"
    seed: int = 0
    resume: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.proposals, str):  # one proposal named in Python, as on the command line
            self.proposals = [self.proposals]
        check_run(self, CHECKS)
        if extra_text_names(self.extra_text, self.corpus) and self.model not in TEXT_ALONE:
            raise ValueError(f"--extra-text is text without annotation, which --model {self.model} cannot train on "
                             f"(for {', '.join(TEXT_ALONE)}; EntityNLM: python -m inference.refine --wake theta "
                             "--extra-text)")
        if self.init and self.model == "ngram":
            raise ValueError("--init: the n-gram is counted, not trained from weights")


CHECKS = {
    "model": MODELS, "out": output_folder, "vocab_size": integer(len(SPECIALS) + 1), "embedding_size": integer(1),
    "hidden_size": integer(1), "dropout": real(0, 1), "softmax": ("class", "full"), "distance": ("paper", "reference"),
    "update": ("paper", "reference"), "new_entity_scale": real(0), "proposals": PROPOSAL_CONTEXTS,
    "placement": PLACEMENTS, "merge": MERGES, "context_size": integer(1), "optimizer": ("adam", "adagrad"),
    "lr": real(0, include_low=False), "clip_norm": real(0, include_low=False), "epochs": integer(1),
    "patience": integer(1), "batch_tokens": integer(1), "eval_batch_tokens": integer(1), "train_chunk": integer(0),
    "order": integer(1), "precision": PRECISIONS,
}

# What a resumed run may change: how long it goes on, and where and how fast it runs; every other option
# defines the run, and resuming with another value would mix two configurations in one learning curve.
RESUMABLE_CHANGES = frozenset({"epochs", "patience", "resume", "out", "data_dir", "device", "eval_batch_tokens"})


# ---- models and objectives --------------------------------------------------------------------------------------


def model_config(options: LanguageModelTraining, vocabulary: Vocabulary) -> Any:
    """The model's config from the run's options: the shared sizes, and each model's own options."""
    sizes = dict(vocab_size=len(vocabulary), embedding_size=options.embedding_size, hidden_size=options.hidden_size,
                 dropout=options.dropout)
    if options.model == "entitynlm":
        return EntityNLMConfig(**sizes, softmax=options.softmax, distance=options.distance, update=options.update,
                               new_entity_scale=options.new_entity_scale,
                               proposal=(options.proposals or PROPOSAL_CONTEXTS)[0])
    if options.model == "rnnlm":
        return RNNLMConfig(**sizes, softmax=options.softmax)
    return DNTMConfig(**sizes, context_size=options.context_size, placement=options.placement, merge=options.merge,
                      first_entity_id=first_entity_id(vocabulary))


def batch_share(batch: DocumentBatch, ranks: Ranks) -> Share:
    """This rank's documents of a training batch, with the batch's tokens."""
    if ranks.world == 1:
        return Share(batch, batch.num_tokens)
    mine = ranks.shard(range(batch.size))
    return Share(batch.rows(mine) if mine else None, batch.num_tokens)


class LanguageModelFamily:
    """The language models as a family of :mod:`inference.training.loop`: the model (EntityNLM also its proposals,
    each a component with its own dev score), one optimiser for all (their parameters are disjoint), the summed
    log-likelihood per token as the loss, and the per-token dev NLL of each component as its score."""

    order = "torch-per-epoch"
    schedule = None
    initial: dict[str, float] = {}

    def __init__(self, options: LanguageModelTraining, vocabulary: Vocabulary, preprocess: PreprocessConfig,
                 train_batches: list[DocumentBatch], dev_batches: list[DocumentBatch], device: torch.device,
                 ranks: Ranks = Ranks()) -> None:
        self.name, self.kind, self.clip_norm, self.device = options.model, options.model, options.clip_norm, device
        self.bf16 = options.precision == "bf16"
        self.vocabulary, self.preprocess = vocabulary, preprocess
        self.config = model_config(options, vocabulary)
        self.modules = {"model": model_kind(options.model).build(self.config, list(vocabulary.counts))}
        if options.model == "entitynlm":
            for context in options.proposals:
                self.modules[PROPOSAL_WEIGHTS[context]] = EntityProposal(self.config, context=context)
        for module in self.modules.values():
            module.to(device)
        self.parameters = [p for module in self.modules.values() for p in module.parameters()]
        optimizer_class = {"adam": torch.optim.Adam, "adagrad": torch.optim.Adagrad}[options.optimizer]
        self.optimizer = optimizer_class(self.parameters, lr=options.lr or PAPER_LEARNING_RATES[options.optimizer])
        self.ranks = ranks
        self.train_batches = [batch_share(batch, ranks) for batch in train_batches]
        self.dev_batches = ranks.shard(list(enumerate(dev_batches)))  # whole batches, each with its own seed
        self.train_tokens = sum(batch.num_tokens for batch in train_batches)
        self.dev_tokens = sum(batch.num_tokens for batch in dev_batches)

    def start_from(self, checkpoint: Checkpoint, path: str) -> None:
        """Fine-tune: every component starts from ``checkpoint``'s weights (same model, sizes and vocabulary), and
        its dev score there is the one to beat, so the weights kept are never worse on dev than the start."""
        config = self.config.to_dict()
        if checkpoint.kind != self.kind:
            raise ValueError(f"--init {path}: a {checkpoint.kind} checkpoint, not a {self.kind} one")
        changed = sorted(key for key in {**checkpoint.config, **config}
                         if checkpoint.config.get(key) != config.get(key))
        if changed:
            raise ValueError(f"--init {path}: its settings differ from this run's ({', '.join(changed)}): pass the "
                             "options it was trained with")
        for name, module in self.modules.items():
            if name not in checkpoint.weights:
                raise ValueError(f"--init {path}: holds no {name} weights")
            module.load_state_dict(checkpoint.weights[name])
        self.initial = self.evaluate()

    def log_likelihoods(self, batch: DocumentBatch) -> dict[str, torch.Tensor]:
        """Summed log-likelihood of the batch for each component (model: joint on gold; proposal: log Q)."""
        return {name: module.log_likelihood(batch).sum() for name, module in self.modules.items()}

    def epoch_batches(self, source: torch.Generator) -> list[Share]:
        return [self.train_batches[i] for i in torch.randperm(len(self.train_batches), generator=source).tolist()]

    def step(self, batch: Share) -> tuple[dict[str, float], float]:
        """One update on the whole batch: this rank's documents' loss over the batch's tokens, the ranks'
        gradients added (:func:`inference.distributed.sum_gradients`) before clipping and the step."""
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.bf16):
            parts = self.log_likelihoods(batch.part) if batch.part is not None else {}
        self.optimizer.zero_grad()
        if parts:
            (-sum(parts.values()) / batch.size).backward()
        sum_gradients(self.parameters, self.ranks)
        if self.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.parameters, self.clip_norm)
        self.optimizer.step()
        zero = torch.zeros((), device=self.device)
        totals = self.ranks.total(torch.stack([parts.get(name, zero) for name in self.modules])).tolist()
        return {name: -value for name, value in zip(self.modules, totals)}, -sum(totals) / batch.size

    def evaluate(self) -> dict[str, float]:
        """Per-token NLL of each component on the dev batches (dev selection; the paper's objective on dev), each
        batch's new-entity noise drawn from the batch's own seed, so every epoch's score sees the same draws
        whatever the number of ranks."""
        for module in self.modules.values():
            module.train(False)
        totals = torch.zeros(len(self.modules), device=self.device)
        with torch.no_grad(), torch.random.fork_rng():
            for number, batch in self.dev_batches:
                torch.manual_seed(number)
                totals -= torch.stack(list(self.log_likelihoods(batch).values()))
        return {name: total / self.dev_tokens for name, total in zip(self.modules, self.ranks.total(totals).tolist())}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "seconds": seconds, "train_tokens_per_second": self.train_tokens / seconds,
                "train_nll": {k: v / self.train_tokens for k, v in totals.items()}, "dev_nll": scores}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> Checkpoint:
        return Checkpoint(self.kind, self.config.to_dict(), self.vocabulary, self.preprocess, weights, training)


# ---- the n-gram ---------------------------------------------------------------------------------------------


def train_ngram(options: LanguageModelTraining, train_docs, dev_docs, vocabulary: Vocabulary,
                preprocess: PreprocessConfig) -> dict[str, Any]:
    """Fit the Kneser-Ney n-gram by counting (no loop), score dev, and write ``OUT/model.pt``; the summary."""
    streams = [token_stream(document, vocabulary).words for document in train_docs]
    started = time.perf_counter()
    ngram = KneserNeyLM.fit(streams, len(vocabulary), vocabulary.index("<s>"), KneserNeyConfig(
        order=options.order, discount_fallback=(0.5, 1.0, 1.5) if options.discount_fallback else None))
    seconds = time.perf_counter() - started
    dev_ppl = ngram.perplexity([token_stream(document, vocabulary).words for document in dev_docs])
    summary = {"model": "ngram", "order": options.order, "fit_seconds": seconds, "dev_perplexity": dev_ppl}
    Checkpoint("ngram", {"order": options.order}, vocabulary, preprocess, {"ngram": ngram.state_dict()},
               {"args": asdict(options), **summary}).save(Path(options.out) / "model.pt")
    return summary


# ---- a run -----------------------------------------------------------------------------------------------------


def train_language_model(options: LanguageModelTraining, report: Report | None = None) -> dict[str, Any]:
    """Train (or fit, the n-gram) the model ``options`` names into ``options.out``; the run's summary (epochs,
    best dev NLL and perplexity of each component). Per-epoch records go to stderr as JSON lines."""
    out = Path(options.out)
    data = "entity" if options.model == "ngram" else model_kind(options.model).data
    preprocess = language_model_preprocess(data, options.keep_singletons)
    check_extra_text(options.extra_text, options.corpus, options.data_dir)
    if options.context_encoder and options.model != "dntm":
        raise ValueError(f"--context-encoder: only --model dntm has a context encoder, not {options.model}")
    trainer = Trainer(Run(out, options.epochs, options.seed, asdict(options), patience=options.patience,
                          resume=options.resume, resumable=RESUMABLE_CHANGES, device=options.device, report=report))
    resumed = trainer.check_out_folder(Checkpoint.load)
    initial = Checkpoint.load(options.init) if options.init else None
    if initial is not None and initial.preprocess != preprocess:
        raise ValueError(f"--init {options.init}: its text was preprocessed otherwise than this run's")
    train_docs = language_model_documents(data, options.corpus, options.train_split, options.data_dir, preprocess)
    vocabulary = (resumed or initial).vocabulary if (resumed or initial) else language_model_vocabulary(
        data, train_docs, options.vocab_size)
    train_docs = [apply_vocabulary(document, vocabulary)[0] for document in train_docs]
    for documents in extra_text_documents(options.extra_text, options.corpus, options.data_dir, preprocess,
                                          vocabulary).values():
        train_docs += documents
    dev_docs = language_model_documents(data, options.corpus, options.dev_split, options.data_dir, preprocess,
                                        vocabulary)
    if options.model == "ngram":
        return train_ngram(options, train_docs, dev_docs, vocabulary, preprocess)
    if options.train_chunk:
        train_docs = [piece for document in train_docs for piece in sentence_chunks(document, options.train_chunk)]
    device = trainer.device
    train_batches = [b.to(device) for b in batches_by_length(train_docs, vocabulary, options.batch_tokens)]
    dev_batches = [b.to(device) for b in batches_by_length(dev_docs, vocabulary, options.eval_batch_tokens)]
    family = LanguageModelFamily(options, vocabulary, preprocess, train_batches, dev_batches, device, trainer.ranks)
    if initial is not None and resumed is None:
        family.start_from(initial, options.init)
    if options.context_encoder:
        print(load_context_encoder(family.modules["model"], options.context_encoder, vocabulary), file=sys.stderr)
    state = trainer.fit(family)
    return {"model": family.kind, "epochs": state["epoch"], "best_dev_nll": state["best"],
            "best_dev_perplexity": {k: math.exp(v) for k, v in state["best"].items()},
            **({"initial_dev_nll": family.initial} if family.initial else {})}
