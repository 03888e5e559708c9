"""Training the Coref-GRU readers (Dhingra et al. 2018) on bAbI-1K, LAMBADA or the WikiHop sample: the tasks'
data (:class:`ReadingData`), their reader checkpoints, and :func:`train_reader`, which trains one from a
:class:`ReaderTraining` through the one loop (:mod:`inference.training.loop`). The command, whose help says what
each option means, is :mod:`inference.commands.reading` (``python -m inference.train --model ga_cgru ...``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from coref.corpora.babi import CHAIN_RULES, TASKS, BabiExample, babi_answer_classes, babi_vocabulary, load_babi
from coref.corpora.lambada import LambadaExample, is_candidate, lambada_clusters, lambada_splits
from coref.corpora.wikihop import load_wikihop_sample
from coref.io import checkpoint as stored
from coref.io.atomic import write_text_atomic
from generative.coref_gru import (
    GatedAttentionReader,
    ReaderConfig,
    ReadingExample,
    make_reading_batch,
    matched_hidden_size,
    non_overlapping,
)
from generative.registry import TRAINABLE, models_of
from inference.checks import integer, output_folder, real
from inference.distributed import Ranks, Share, sum_gradients
from inference.training.loop import Report, Run, Trainer
from inference.training.options import check_run

RECURRENT = {"ga_gru": "gru", "ga_cgru": "cgru", "ga_gru_onehot": "gru_onehot", "bi_gru": "gru", "bi_cgru": "cgru"}
READERS = {name: (TRAINABLE[name].make, RECURRENT[name]) for name in models_of("reader")}  # (class, recurrent)
PAD = "<pad>"
WIKIHOP_CHAINS = 50  # chains per WikiHop document, the sequential one included (Appendix B)
LAMBADA_CHAINS = 15  # chains per LAMBADA passage, the sequential one included (Appendix B)
BEGIN = "@begin"  # starts every LAMBADA query (as in the reference code), so that none is empty
UNKNOWN_TYPES = 100  # per-passage ids @unk1..@unk100 of LAMBADA words unseen in training (reference code)
ROOT = Path(__file__).resolve().parents[2]
LAMBADA_PIPELINE = {  # the raw-text pipeline trained on lowercased LitBank (LAMBADA is lowercase)
    "detector": ROOT / "coref" / "resolution" / "pretrained" / "lowercase" / "mentions.pt",
    "resolver": ROOT / "coref" / "resolution" / "pretrained" / "lowercase" / "resolver.pt",
}


@dataclass(frozen=True)
class Schedule:
    """Appendix B's training settings of a task family; ``halve_every`` in updates, or in epochs when
    ``halve_per_epochs`` (LAMBADA's "halved every 2 epochs")."""

    size: int  # d: word embeddings and hidden units per direction
    batch_size: int
    lr: float
    halve_every: int
    dropout: float
    halve_per_epochs: bool = False


SCHEDULES = {
    "babi": Schedule(64, 32, 0.01, 120, 0.1),
    "lambada": Schedule(256, 64, 0.0005, 2, 0.2, halve_per_epochs=True),
    "wikihop": Schedule(64, 16, 0.0005, 2500, 0.2),
}
BUCKET_BATCHES = 10  # batches per window sorted by length (bucketed_order)
EVAL_BATCH = 256  # questions per evaluation batch
FREE_ON_RESUME = ("epochs", "patience", "device", "data_dir", "out", "json", "resume")


def parse_task(text: str) -> str:
    """``babi:N`` (N in 1..20), ``lambada`` or ``wikihop``, as given; anything else is a ValueError saying what
    is expected."""
    corpus, _, number = text.partition(":")
    if text not in ("lambada", "wikihop") and (corpus != "babi" or not number.isdigit() or int(number) not in TASKS):
        raise ValueError(f"--task {text!r}: expected babi:N with N in 1..20, lambada or wikihop")
    return text


@dataclass(frozen=True)
class ReadingData:
    """A bAbI task as the readers read it: examples of the three splits, the words, and the answers."""

    task: str  # babi:N, lambada or wikihop
    words: list[str]  # id 0 is padding; a word unseen in training reads as padding (LAMBADA: as @unkN)
    classes: list[str] | None  # the answers of a classification task; None for an extractive one
    splits: dict[str, list[ReadingExample]]
    max_chains: int  # the sequential chain plus the most coreference chains of any example
    in_context: dict[str, list[bool]] | None = None  # LAMBADA: per split, whether each answer is in the context

    @classmethod
    def of(cls, task: str, data_dir: str | None, words: list[str] | None = None,
           classes: list[str] | None = None, chains: str = "names") -> ReadingData:
        """The data of a task (:func:`parse_task`); ``words`` and ``classes`` from a checkpoint, else from the
        training split; ``chains`` is bAbI's chain rule (:data:`coref.corpora.babi.CHAIN_RULES`)."""
        if task == "wikihop":
            return cls.wikihop(data_dir, words)
        if task == "lambada":
            return cls.lambada(data_dir, words)
        return cls.babi(int(task.partition(":")[2]), data_dir, words, classes, chains)

    @classmethod
    def babi(cls, task: int, data_dir: str | None, words: list[str] | None = None,
             classes: list[str] | None = None, chains: str = "names") -> ReadingData:
        """A bAbI task's splits, with the chains of rule ``chains``."""
        loaded = {split: load_babi(task, split, data_dir, chains=chains) for split in ("train", "dev", "test")}
        if words is None:
            words = [PAD, *babi_vocabulary(loaded["train"])]
            extractive = all(example.answer_in_document for example in loaded["train"])
            classes = None if extractive else babi_answer_classes(loaded["train"])
        index = {word: number for number, word in enumerate(words)}
        answers = None if classes is None else {answer: number for number, answer in enumerate(classes)}
        splits = {split: [babi_reading_example(item, index, answers) for item in items]
                  for split, items in loaded.items()}
        max_chains = 1 + max(len(item.clusters) for items in loaded.values() for item in items)
        return cls(f"babi:{task}", words, classes, splits, max_chains)

    @classmethod
    def wikihop(cls, data_dir: str | None, words: list[str] | None = None) -> ReadingData:
        """The WikiHop sample, a demo of the reader on long multi-paragraph documents (no accuracy claims: 50
        questions): train on its 22 training records, select and test on its 28 dev records.

        Words are lowercased. A candidate is read, by attention-sum, at the last token of its occurrences in
        the document; a question where two candidates end in the same word, or the answer does not occur, is
        left out. Chains come from the bundled raw-text pipeline (:mod:`coref.resolution.pipeline`), at most
        :data:`WIKIHOP_CHAINS` per document (the paper: 50).
        """
        from coref.resolution.pipeline import bundled_pipeline  # the detector's torch model loads only for WikiHop

        loaded = load_wikihop_sample(data_dir)
        pipeline = bundled_pipeline()
        lowered = [[token.lower() for token in item.document.tokens] for item in loaded]
        if words is None:
            vocabulary = {token for tokens in lowered for token in tokens}
            vocabulary |= {token for item in loaded for token in item.query.split()}
            words = [PAD, *sorted(vocabulary)]
        index = {word: number for number, word in enumerate(words)}
        examples: dict[str, list[ReadingExample]] = {"train": [], "dev": []}
        for item, tokens in zip(loaded, lowered):
            ends = {candidate: _occurrence_ends(tokens, candidate.split()) for candidate in item.candidates}
            last_words = [candidate.split()[-1] for candidate in item.candidates]
            if not ends.get(item.answer) or len(set(last_words)) < len(last_words):
                continue
            chains = [non_overlapping(chain) for chain in pipeline.resolve(item.document).clusters()]
            clusters = [chain for chain in chains if len(chain) > 1][: WIKIHOP_CHAINS - 1]
            examples["dev" if item.id.startswith("WH_dev") else "train"].append(ReadingExample(
                [index.get(token, 0) for token in tokens], [index.get(token, 0) for token in item.query.split()],
                index.get(item.answer.split()[-1], 0), clusters,
                sorted({end for found in ends.values() for end in found})))
        return cls("wikihop", words, None, {**examples, "test": examples["dev"]}, WIKIHOP_CHAINS)


    @classmethod
    def lambada(cls, data_dir: str | None, words: list[str] | None = None) -> ReadingData:
        """LAMBADA as reading comprehension (:mod:`coref.corpora.lambada`): ``train`` and ``dev`` are 90% and 10% of the
        development set, ``test`` the test set; the paper trained on LAMBADA's novels, which are not here.

        The document is the context **and** the query sentence, so that the C-GRU reads the query's mentions of
        the context's entities (the reference code chains the query's C-GRU memory to the document's instead);
        the attention-sum chooses among the context's candidate positions only, and the query (``@begin`` +
        the last sentence without its last word) goes through the query encoder. Words are the training
        passages' (with their answers); any other word reads as ``@unkN``, numbered per passage by first
        occurrence, as the reference code does, so that the attention-sum still tells unseen words apart.
        Chains are the bundled lowercase pipeline's (:func:`lambada_chains`), at most :data:`LAMBADA_CHAINS`
        − 1 per passage, made non-overlapping. Training keeps the passages whose answer is a candidate; dev
        and test keep every passage (one whose answer is not in the context is always wrong)."""
        loaded = lambada_splits(data_dir)
        chains = lambada_chains(loaded)
        if words is None:
            vocabulary = {word for item in loaded["train"] for word in (*item.tokens, item.answer)}
            words = [PAD, BEGIN, *(f"@unk{n}" for n in range(1, UNKNOWN_TYPES + 1)), *sorted(vocabulary)]
        index = {word: number for number, word in enumerate(words)}
        splits, in_context = {}, {}
        for split, items in loaded.items():
            examples = []
            for item, found in zip(items, chains[split]):
                ids = _passage_ids([*item.tokens, item.answer], index)
                candidates = [i for i, word in enumerate(item.context) if is_candidate(word)] or [0]
                clusters = [non_overlapping(chain) for chain in found][: LAMBADA_CHAINS - 1]
                examples.append(ReadingExample(ids[:-1], [index[BEGIN], *ids[len(item.context):-1]], ids[-1],
                                               clusters, candidates))
            flags = [item.answer in {item.context[i] for i in example.candidates}
                     for item, example in zip(items, examples)]
            if split == "train":
                examples = [example for example, flag in zip(examples, flags) if flag]
                flags = [True] * len(examples)
            splits[split], in_context[split] = examples, flags
        return cls("lambada", words, None, {"train": splits["train"], "dev": splits["valid"],
                                            "test": splits["test"]}, LAMBADA_CHAINS,
                   {"dev": in_context["valid"], "test": in_context["test"]})


def babi_reading_example(item: BabiExample, index: Mapping[str, int],
                         answers: Mapping[str, int] | None) -> ReadingExample:
    """A bAbI question as a reader reads it: word ids of ``index`` (an unseen word reads as padding, 0), the
    chains of :mod:`coref.corpora.babi`, and the answer's id: its class in ``answers`` (-1 for an unseen one) for a
    classification task, else its word id (None ``answers``: an extractive task)."""
    answer = index.get(item.answer, 0) if answers is None else answers.get(item.answer, -1)
    return ReadingExample([index.get(word, 0) for word in item.document],
                          [index.get(word, 0) for word in item.question], answer, item.clusters)


def lambada_chains(splits: Mapping[str, Sequence[LambadaExample]]) -> dict[str, list[list[list[tuple[int, int]]]]]:
    """Per split, the LAMBADA passages' chains by the lowercase pipeline (LAMBADA is lowercase;
    :data:`LAMBADA_PIPELINE`), loaded once and cached in ``runs/lambada_chains/<models' hash>-<n>.json``."""
    from coref.resolution.pipeline import CorefPipeline  # the models need torch's detector only here

    files = [LAMBADA_PIPELINE["detector"], LAMBADA_PIPELINE["resolver"]]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise FileNotFoundError(f"the lowercase coreference pipeline {missing} is missing: train it as the README's "
                                "Coref-GRU section says")
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()[:12]
    pipeline, cache = CorefPipeline.load(*files), ROOT / "runs" / "lambada_chains"
    return {split: lambada_clusters(examples, pipeline, cache / f"{digest}-{len(examples)}.json")
            for split, examples in splits.items()}


def _passage_ids(words: Sequence[str], index: dict[str, int]) -> list[int]:
    """The ids of a passage's ``words``: a known word's own, an unknown one @unkN, N counting the passage's
    unknown word types in order of first occurrence (wrapping after :data:`UNKNOWN_TYPES`)."""
    unknown: dict[str, int] = {}
    return [index[word] if word in index
            else index[f"@unk{unknown.setdefault(word, len(unknown) % UNKNOWN_TYPES + 1)}"] for word in words]


def _occurrence_ends(tokens: Sequence[str], words: Sequence[str]) -> list[int]:
    """The position of the last token of every occurrence of ``words`` in ``tokens``."""
    width = len(words)
    return [start + width - 1 for start in range(len(tokens) - width + 1)
            if list(tokens[start:start + width]) == list(words)]


@dataclass
class ReaderTraining:
    """The options of a reader's training run: those of ``python -m inference.reading`` (its ``--help`` says what
    each means), checked on creation as the command line checks them; the settings left None are Appendix B's
    for the task's family (:data:`SCHEDULES`)."""

    model: str
    task: str
    out: str | Path
    data_dir: str | None = None
    chains: str = "names"
    embedding_size: int | None = None
    hidden_size: int | None = None
    dropout: float | None = None
    lr: float | None = None
    halve_every: int | None = None
    batch_size: int | None = None
    epochs: int = 60
    patience: int = 10
    device: str = "auto"
    seed: int = 0
    resume: bool = False
    halve_per_epochs: bool = field(init=False)

    def __post_init__(self) -> None:
        check_run(self, CHECKS)
        schedule = SCHEDULES.get(self.task.partition(":")[0], SCHEDULES["babi"])  # parse_task refuses a bad task
        for name, value in (("embedding_size", schedule.size), ("hidden_size", schedule.size),
                            ("dropout", schedule.dropout), ("lr", schedule.lr), ("halve_every", schedule.halve_every),
                            ("batch_size", schedule.batch_size)):
            if getattr(self, name) is None:
                setattr(self, name, value)
        self.halve_per_epochs = schedule.halve_per_epochs


CHECKS = {"model": tuple(READERS), "out": output_folder, "chains": CHAIN_RULES, "embedding_size": integer(1),
          "hidden_size": integer(2), "dropout": real(0, 1), "lr": real(0, include_low=False),
          "halve_every": integer(1), "batch_size": integer(1), "epochs": integer(1), "patience": integer(1)}


def reader_config(options: ReaderTraining, data: ReadingData) -> ReaderConfig:
    """The model's config: Appendix B's sizes, and for GRU + 1-hot the hidden size matching the C-GRU's count."""
    reader, recurrent = READERS[options.model]
    config = ReaderConfig(len(data.words), embedding_size=options.embedding_size, hidden_size=options.hidden_size,
                          layers=3 if reader is GatedAttentionReader else 1, dropout=options.dropout,
                          recurrent=recurrent, answer="candidates" if data.classes is None else "classes",
                          num_answers=None if data.classes is None else len(data.classes),
                          max_chains=data.max_chains)
    if recurrent == "gru_onehot":
        config = ReaderConfig(**{**config.to_dict(), "hidden_size": matched_hidden_size(config, reader)})
    return config


def bucketed_order(examples: Sequence[ReadingExample], size: int, rng: np.random.Generator) -> list[int]:
    """A shuffled order whose consecutive ``size`` examples have similar document lengths: the examples are
    shuffled, sorted by length within windows of ``BUCKET_BATCHES`` batches, cut into batches, and the batches
    shuffled. The reference code buckets by length too; a batch then pays for few padding steps (bAbI task 3's
    stories run from 20 to 1,333 tokens)."""
    order = rng.permutation(len(examples))
    window = size * BUCKET_BATCHES
    order = [i for start in range(0, len(order), window)
             for i in sorted(order[start:start + window], key=lambda i: len(examples[i].document))]
    chunks = [order[start:start + size] for start in range(0, len(order), size)]
    return [i for chunk in rng.permutation(len(chunks)) for i in chunks[chunk]]


def batches(examples: Sequence[ReadingExample], size: int, max_chains: int, device: torch.device,
            order: Sequence[int] | None = None) -> list:
    """Batches of ``size`` examples in ``order`` (default: by document length, for evaluation)."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].document)) if order is None else order
    order = list(order)
    return [make_reading_batch([examples[i] for i in order[start:start + size]], max_chains).to(device)
            for start in range(0, len(order), size)]


def correct(model: torch.nn.Module, batched: Sequence) -> list[bool]:
    """Per question, in batch order, whether it is answered right (a test answer that is no training class, or
    a LAMBADA answer on no candidate position, is wrong)."""
    model.eval()
    with torch.no_grad():
        return [bool(right) for batch in batched for right in (model.predict(batch) == batch.answer).tolist()]


def accuracy(model: torch.nn.Module, batched: Sequence) -> float:
    """The fraction of questions answered right."""
    right = correct(model, batched)
    return sum(right) / len(right)


def test_report(model: torch.nn.Module, data: ReadingData, device: torch.device) -> dict[str, Any]:
    """Test accuracy and, per test question in file order, whether it was answered right; for LAMBADA also the
    accuracy on the passages whose answer is in the context (the paper's Table 3 "context" column)."""
    examples = data.splits["test"]
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].document))
    right = [False] * len(examples)
    for i, flag in zip(order, correct(model, batches(examples, EVAL_BATCH, data.max_chains, device, order))):
        right[i] = flag
    report: dict[str, Any] = {"test_accuracy": sum(right) / len(right)}
    if data.in_context is not None:
        inside = [flag for flag, answerable in zip(right, data.in_context["test"]) if answerable]
        report["test_accuracy_in_context"] = sum(inside) / len(inside)
        report["test_in_context"] = data.in_context["test"]
    report["test_correct"] = right
    return report


def load_stored(path: Path) -> stored.Checkpoint:
    """A reader checkpoint (of any format version); a one-line error naming the file for anything else."""
    return stored.load(path, "entitylm reader checkpoint", READERS)


def load(path: Path) -> dict[str, Any]:
    """A reader checkpoint (of any format version) as a dict: ``model`` (its kind), ``task``, ``chains``,
    ``config``, ``words``, ``classes``, ``weights`` and ``training``; a one-line error naming the file."""
    return as_dict(load_stored(path))


def as_dict(checkpoint: stored.Checkpoint) -> dict[str, Any]:
    """A reader checkpoint as the dict :func:`load` gives."""
    return {"model": checkpoint.kind, **checkpoint.data, "config": checkpoint.config, **checkpoint.vocabulary,
            "weights": checkpoint.weights, "training": checkpoint.training}


def load_reader(path: str | Path, device: str | torch.device = "cpu") -> tuple[GatedAttentionReader, dict[str, Any]]:
    """The best weights of a reader checkpoint (``OUT/model.pt``) in eval mode, and the checkpoint (its
    ``task``, ``chains``, ``words``, ``classes`` and ``training`` summary): :func:`checkpoint_data` gives the
    data it reads."""
    checkpoint = load(Path(path))
    model = READERS[checkpoint["model"]][0](ReaderConfig.from_dict(checkpoint["config"]))
    model.load_state_dict(checkpoint["weights"]["model"])
    return model.to(device).eval(), checkpoint


def checkpoint_chains(checkpoint: dict[str, Any]) -> str:
    """The bAbI chain rule a reader checkpoint was trained with (checkpoints from before ``--chains``: ``names``)."""
    return checkpoint.get("chains", "names")


def checkpoint_data(checkpoint: dict[str, Any], data_dir: str | None) -> ReadingData:
    """The data a reader checkpoint reads: its task, with its chain rule, words and classes."""
    return ReadingData.of(checkpoint["task"], data_dir, checkpoint["words"], checkpoint["classes"],
                          checkpoint_chains(checkpoint))


class ReaderFamily:
    """The Coref-GRU readers as a family of :mod:`inference.training.loop`: Adam whose rate halves every
    ``--halve-every`` updates (or epochs), the mean negative log-likelihood of the answers as the loss, the dev
    accuracy (higher is better) as the score; batches drawn in the bucketed order of :func:`bucketed_order`."""

    order = "numpy-per-epoch"
    initial: dict[str, float] = {}

    def __init__(self, options: ReaderTraining, model: GatedAttentionReader, data: ReadingData,
                 config: ReaderConfig, device: torch.device, ranks: Ranks = Ranks()) -> None:
        self.name, self.options, self.data, self.config = f"{options.model} {data.task}", options, data, config
        self.device, self.ranks = device, ranks
        self.modules = {"model": model}
        self.optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
        self.train = data.splits["train"]
        per_epoch = math.ceil(len(self.train) / options.batch_size) if options.halve_per_epochs else 1
        halve_every = options.halve_every * per_epoch
        self.schedule = torch.optim.lr_scheduler.StepLR(self.optimizer, halve_every, gamma=0.5)
        self.dev = batches(data.splits["dev"], EVAL_BATCH, data.max_chains, device)

    def epoch_batches(self, source: np.random.Generator) -> list[Share]:
        """The epoch's batches in the bucketed order; under torchrun, each rank's share of every batch."""
        order, size = bucketed_order(self.train, self.options.batch_size, source), self.options.batch_size
        return [self._share(order[start:start + size]) for start in range(0, len(order), size)]

    def _share(self, batch: Sequence[int]) -> Share:
        """This rank's questions of the batch ``batch`` (example indices), with the batch's size."""
        mine = self.ranks.shard(batch)
        part = make_reading_batch([self.train[i] for i in mine], self.data.max_chains).to(self.device) if mine else None
        return Share(part, len(batch))

    def step(self, batch: Share) -> tuple[dict[str, float], float]:
        """One update on the whole batch: the answers' summed NLL over the batch's questions, the ranks' gradients
        added (:func:`inference.distributed.sum_gradients`)."""
        model = self.modules["model"]
        nll = -model.log_likelihood(batch.part).sum() if batch.part is not None else torch.zeros((), device=self.device)
        self.optimizer.zero_grad()
        if batch.part is not None:
            (nll / batch.size).backward()
        sum_gradients(list(model.parameters()), self.ranks)
        self.optimizer.step()
        total = float(self.ranks.total(nll))
        return {"nll": total}, total / batch.size

    def evaluate(self) -> dict[str, float]:
        """Dev accuracy, each rank answering its share of the dev batches."""
        right = correct(self.modules["model"], self.ranks.shard(self.dev))
        counts = self.ranks.total(torch.tensor([sum(right), len(right)], device=self.device))
        return {"model": float(counts[0] / counts[1])}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "seconds": seconds, "train_questions_per_second": len(self.train) / seconds,
                "train_nll": totals.get("nll", 0.0) / len(self.train), "dev_accuracy": scores["model"]}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> stored.Checkpoint:
        return stored.Checkpoint(self.options.model, self.config.to_dict(),
                                 {"words": self.data.words, "classes": self.data.classes}, weights, training,
                                 {"task": self.data.task, "chains": self.options.chains})


def train_reader(options: ReaderTraining, report: Report | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train the reader ``options`` names into ``options.out`` (:mod:`inference.training.loop`), then score the
    best weights on test: the run's summary and the test report, both also in ``OUT/test.json``."""
    task = parse_task(options.task)
    out = Path(options.out)
    trainer = Trainer(Run(out, options.epochs, options.seed, asdict(options), patience=options.patience,
                          higher_is_better=True, stop_at=1.0, resume=options.resume, resumable=FREE_ON_RESUME,
                          device=options.device, report=report))
    resumed = trainer.check_out_folder(load_stored)
    if resumed:
        data = checkpoint_data(as_dict(resumed), options.data_dir)
    else:
        data = ReadingData.of(task, options.data_dir, chains=options.chains)
    config = ReaderConfig.from_dict(resumed.config) if resumed else reader_config(options, data)
    model = READERS[options.model][0](config).to(trainer.device)
    family = ReaderFamily(options, model, data, config, trainer.device, trainer.ranks)
    state = trainer.fit(family)
    model.load_state_dict(trainer.best["model"])
    report = test_report(model, data, trainer.device)
    summary = {"model": options.model, "task": task, "epochs": state["epoch"],
               "best_dev_accuracy": state["best"]["model"],
               **{key: value for key, value in report.items() if "accuracy" in key},
               "parameters": sum(p.numel() for p in model.parameters()),
               "answer": config.answer, "hidden_size": config.hidden_size}
    if trainer.ranks.leader:
        family.checkpoint(trainer.best, {"args": asdict(options), "state": state, **summary}).save(out / "model.pt")
        write_text_atomic(out / "test.json", json.dumps({**summary, **report}) + "\n")
    return summary, report


