"""Training the MNEMELM family (Papalampidi et al. 2022) on prompted stories: the stories as the models read them
(:class:`StoryVocabulary`, :func:`encode_story`, :func:`story_batches`), their checkpoints, and
:func:`train_story_lm`, which trains one from a :class:`StoryLMTraining` through the one loop
(:mod:`inference.training.loop`). The command, whose help describes the data, the vocabulary and the training,
is :mod:`inference.commands.story_lm` (``python -m inference.train --model d_mneme ...``).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from coref.corpora.registry import CorpusError, DataDir
from coref.corpora.stories import GOLD_CORPORA, SEP, STORY_CORPORA, PromptedStory, load_stories, prompt_tokens
from coref.io import checkpoint as stored
from coref.io.checkpoint import CheckpointError
from generative.mneme import PRESETS, MnemeBatch, MnemeConfig, MnemeExample, MnemeLM, make_batch, parameter_count
from inference.checks import integer, output_folder, real
from inference.training.loop import Report, Run, Trainer
from inference.training.options import check_run

MODELS = tuple(PRESETS)  # vanilla, s_mneme, d_mneme, d_mneme_no_mi, d_mneme_no_es
PAD, UNK, EOS = "<pad>", "<unk>", "<eos>"
SPECIALS = (PAD, SEP, UNK, EOS)  # ids 0..3; <pad> is 0, make_batch's padding id
FREE_ON_RESUME = {"epochs", "patience", "device", "data_dir", "eval_batch_tokens", "resume", "json"}


# ---- words ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoryVocabulary:
    """The word list of a story LM: the specials, then words by decreasing training count; a word's id is its
    position."""

    words: tuple[str, ...]
    _ids: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "words", tuple(self.words))
        if self.words[: len(SPECIALS)] != SPECIALS or len(set(self.words)) != len(self.words):
            raise ValueError(f"a story vocabulary starts with {SPECIALS} and lists each word once")
        object.__setattr__(self, "_ids", {word: i for i, word in enumerate(self.words)})

    @classmethod
    def build(cls, stories: Sequence[PromptedStory], size: int) -> StoryVocabulary:
        """The specials and the ``size`` most frequent words of ``stories``' texts and prompts (ties by word)."""
        counts = Counter(word for story in stories for word in (*story.tokens, *prompt_tokens(story)[0]))
        for special in SPECIALS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size]
        return cls((*SPECIALS, *(word for word, _ in ranked)))

    def __len__(self) -> int:
        return len(self.words)

    def index(self, word: str) -> int:
        """The id of ``word``, ``<unk>``'s for a word outside the vocabulary."""
        return self._ids.get(word, self._ids[UNK])

    def encode(self, words: Sequence[str]) -> list[int]:
        return [self.index(word) for word in words]

    def unknown(self, words: Sequence[str]) -> list[str]:
        """The words of ``words`` that read as ``<unk>``, each once, in order."""
        return list(dict.fromkeys(word for word in words if word not in self._ids))

    @property
    def eos_id(self) -> int:
        return self._ids[EOS]

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the word list: equal exactly when ids mean the same words."""
        return hashlib.sha256("\n".join(self.words).encode("utf-8")).hexdigest()

    def require_same(self, other: StoryVocabulary, what: str, reference: str) -> None:
        """Refuse to use ``what`` (with vocabulary ``other``) beside ``reference`` (with this one)."""
        if other.fingerprint != self.fingerprint:
            raise CheckpointError(
                f"{what} uses another vocabulary ({len(other)} words, fingerprint {other.fingerprint[:12]}) than "
                f"{reference} ({len(self)} words, {self.fingerprint[:12]}): their word ids do not mean the same "
                "words, nor are their perplexities over the same tokens")


def never_drawn(vocabulary: StoryVocabulary) -> list[int]:
    """The ids generation never draws: ``<pad>`` and ``<sep>``, which are never story tokens."""
    return [vocabulary.index(PAD), vocabulary.index(SEP)]


# ---- stories as batches -----------------------------------------------------------------------------------------


def corpus_parts(corpus: str) -> list[str]:
    """The story corpora ``corpus`` joins with '+', each checked (before any is read)."""
    parts = corpus.split("+")
    for part in parts:
        if part not in STORY_CORPORA:
            raise CorpusError(f"unknown story corpus {part!r}: choose from {', '.join(STORY_CORPORA)} "
                              "(join several with '+')")
    return parts


def dev_corpus(corpus: str) -> str:
    """The corpora of ``corpus`` whose dev split selects the model: those with gold coreference, else all."""
    gold = [part for part in corpus_parts(corpus) if part in GOLD_CORPORA]
    return "+".join(gold) if gold else corpus


def load_split(corpus: str, split: str, data_dir: DataDir, max_tokens: int) -> list[PromptedStory]:
    """One split of every corpus of ``corpus`` as prompted stories of at most ``max_tokens`` tokens."""
    return [story for part in corpus_parts(corpus)
            for story in load_stories(part, split, data_dir, max_tokens=max_tokens)]


def encode_story(story: PromptedStory, vocabulary: StoryVocabulary) -> MnemeExample:
    """A story as the model reads it: its prompt, its tokens and ``<eos>`` (no entity, no mention)."""
    prompt, owners = prompt_tokens(story)
    return MnemeExample(vocabulary.encode(prompt), owners, [*vocabulary.encode(story.tokens), vocabulary.eos_id],
                        [*story.entity_labels, ()], [*story.mention_mask, False])


def story_batches(examples: Sequence[MnemeExample], batch_tokens: int) -> list[MnemeBatch]:
    """The examples sorted by story length and cut into batches of at most ``batch_tokens`` padded story tokens
    (a longer story is a batch of its own), so that little of each batch is padding."""
    batches, current = [], []
    for example in sorted(examples, key=lambda example: len(example.story)):
        if current and len(example.story) * (len(current) + 1) > batch_tokens:
            batches.append(make_batch(current))
            current = []
        current.append(example)
    return batches + ([make_batch(current)] if current else [])


def evaluate(model: MnemeLM, batches: Sequence[MnemeBatch], device: torch.device) -> dict[str, float]:
    """Dev NLL and KL per story token (without dropout)."""
    model.eval()
    totals, tokens = {"nll": 0.0, "kl": 0.0}, 0
    with torch.no_grad():
        for batch in batches:
            loss, count = model.loss(batch.to(device)), int(batch.story_lengths.sum())
            totals = {"nll": totals["nll"] + float(loss.nll) * count, "kl": totals["kl"] + float(loss.kl) * count}
            tokens += count
    return {name: total / tokens for name, total in totals.items()}


# ---- checkpoints ------------------------------------------------------------------------------------------------


@dataclass
class StoryLMCheckpoint:
    """A trained story LM: the preset ``model``, its config and vocabulary, how its stories were cut
    (``max_tokens``), its weights (``model``; in last.pt also the optimiser's state) and the training record."""

    model: str
    config: MnemeConfig
    vocabulary: StoryVocabulary
    max_tokens: int
    weights: dict[str, Any]
    training: dict[str, Any]

    def save(self, path: Path) -> None:
        """Write atomically, in the one format of :mod:`coref.io.checkpoint`."""
        stored.Checkpoint(self.model, self.config.to_dict(), {"words": list(self.vocabulary.words)}, self.weights,
                          self.training, {"max_tokens": self.max_tokens}).save(path)

    @classmethod
    def load(cls, path: str | Path) -> StoryLMCheckpoint:
        """A story LM checkpoint (of any format version), or a one-line :class:`CheckpointError` naming the file."""
        checkpoint = stored.load(path, "entitylm story LM checkpoint", MODELS)
        try:
            story = cls(checkpoint.kind, MnemeConfig.from_dict(checkpoint.config),
                        StoryVocabulary(checkpoint.vocabulary["words"]), checkpoint.data["max_tokens"],
                        checkpoint.weights, checkpoint.training)
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(f"{path}: not an entitylm story LM checkpoint (incomplete: {error})") from error
        if story.config.vocab_size != len(story.vocabulary):
            raise CheckpointError(f"{path}: its model has {story.config.vocab_size} words, its vocabulary "
                                  f"{len(story.vocabulary)}")
        return story


def load_story_lm(path: str | Path, device: str | torch.device = "cpu") -> tuple[MnemeLM, StoryLMCheckpoint]:
    """The best weights of a story LM checkpoint (``OUT/model.pt``) in eval mode, and the checkpoint (its
    ``vocabulary``, ``max_tokens`` and ``training`` record)."""
    checkpoint = StoryLMCheckpoint.load(path)
    model = MnemeLM(checkpoint.config)
    model.load_state_dict(checkpoint.weights["model"])
    return model.to(device).eval(), checkpoint


# ---- training ---------------------------------------------------------------------------------------------------


@dataclass
class StoryLMTraining:
    """The options of a story LM's training run: those of ``python -m inference.story_lm`` (its ``--help`` says
    what each means), checked on creation as the command line checks them."""

    model: str
    corpus: str
    out: str | Path
    data_dir: str | None = None
    max_tokens: int = 1000
    vocab_size: int = 20_000
    d_model: int = MnemeConfig.d_model
    layers: int = MnemeConfig.layers
    heads: int = MnemeConfig.heads
    d_ff: int = MnemeConfig.d_ff
    dropout: float = MnemeConfig.dropout
    chunk: int = MnemeConfig.chunk
    segment: int = MnemeConfig.segment
    cache: int = MnemeConfig.cache
    base: str | None = None
    kl_weight: float | None = None
    lr: float = 1e-3
    warmup: int = 200
    clip_norm: float = 0.25
    batch_tokens: int = 2_000
    eval_batch_tokens: int = 4_000
    epochs: int = 20
    patience: int = 2
    device: str = "auto"
    seed: int = 0
    resume: bool = False

    def __post_init__(self) -> None:
        check_run(self, CHECKS)


CHECKS = {"model": MODELS, "out": output_folder, "max_tokens": integer(1), "vocab_size": integer(1),
          "d_model": integer(1), "layers": integer(1), "heads": integer(1), "d_ff": integer(1), "dropout": real(0, 1),
          "chunk": integer(1), "segment": integer(1), "cache": integer(0), "kl_weight": real(0),
          "lr": real(0, include_low=False), "warmup": integer(0), "clip_norm": real(0, include_low=False),
          "batch_tokens": integer(1), "eval_batch_tokens": integer(1), "epochs": integer(1), "patience": integer(1)}


def story_config(options: StoryLMTraining, vocab_size: int) -> MnemeConfig:
    """The preset ``--model`` with the command line's sizes (λ the preset's unless ``--kl-weight`` is given)."""
    sizes = {name: getattr(options, name) for name in ("d_model", "layers", "heads", "d_ff", "dropout", "chunk",
                                                    "segment", "cache")}
    if options.kl_weight is not None:
        sizes["kl_weight"] = options.kl_weight
    return MnemeConfig.preset(options.model, vocab_size, **sizes)


class StoryLMFamily:
    """The story LMs as a family of :mod:`inference.training.loop`: Adam with a linear warm-up, the clipped loss
    of :meth:`MnemeLM.loss` (NLL and λ·KL), the dev NLL per story token as the score."""

    order = "torch-per-epoch"
    initial: dict[str, float] = {}

    def __init__(self, options: StoryLMTraining, model: MnemeLM, vocabulary: StoryVocabulary,
                 train_batches: list[MnemeBatch], dev_batches: list[MnemeBatch], device: torch.device) -> None:
        self.name, self.options, self.vocabulary, self.device = options.model, options, vocabulary, device
        self.modules = {"model": model}
        self.optimizer = torch.optim.Adam(model.parameters(), lr=options.lr)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                          lambda step: min(1.0, (step + 1) / (options.warmup + 1)))
        self.train_batches, self.dev_batches = train_batches, dev_batches
        self.train_tokens = sum(int(batch.story_lengths.sum()) for batch in train_batches)
        self.dev_kl = math.nan

    def epoch_batches(self, source: torch.Generator) -> list[MnemeBatch]:
        return [self.train_batches[i] for i in torch.randperm(len(self.train_batches), generator=source).tolist()]

    def step(self, batch: MnemeBatch) -> tuple[dict[str, float], float]:
        model = self.modules["model"]
        loss = model.loss(batch.to(self.device))
        self.optimizer.zero_grad()
        loss.total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), self.options.clip_norm)
        self.optimizer.step()
        count = int(batch.story_lengths.sum())
        nll = float(loss.nll.detach())
        return {"nll": nll * count, "kl": float(loss.kl.detach()) * count}, nll

    def evaluate(self) -> dict[str, float]:
        scores = evaluate(self.modules["model"], self.dev_batches, self.device)
        return {"model": scores["nll"], "kl": scores["kl"]}

    def record(self, epoch: int, seconds: float, totals: dict[str, float], scores: dict[str, float]
               ) -> dict[str, Any]:
        return {"epoch": epoch, "seconds": seconds, "updates": epoch * len(self.train_batches),
                "train_tokens_per_second": self.train_tokens / seconds,
                "train_nll": totals.get("nll", 0.0) / self.train_tokens,
                "train_kl": totals.get("kl", 0.0) / self.train_tokens, "dev_nll": scores["model"],
                "dev_kl": scores["kl"], "dev_perplexity": math.exp(scores["model"])}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> StoryLMCheckpoint:
        config = self.modules["model"].config
        return StoryLMCheckpoint(self.options.model, config, self.vocabulary, self.options.max_tokens, weights,
                                 training)


def train_story_lm(options: StoryLMTraining, report: Report | None = None) -> dict[str, Any]:
    """Train the story LM ``options`` names into ``options.out`` (:mod:`inference.training.loop`); the summary."""
    out = Path(options.out)
    corpus_parts(options.corpus)
    trainer = Trainer(Run(out, options.epochs, options.seed, asdict(options), patience=options.patience,
                          resume=options.resume, resumable=FREE_ON_RESUME, device=options.device, report=report))
    resumed = trainer.check_out_folder(StoryLMCheckpoint.load)
    # a base that is not a story LM checkpoint fails before the corpora are read
    base, base_checkpoint = load_story_lm(options.base) if options.base and not resumed else (None, None)
    train = load_split(options.corpus, "train", options.data_dir, options.max_tokens)
    dev = load_split(dev_corpus(options.corpus), "dev", options.data_dir, options.max_tokens)
    if resumed:
        vocabulary = resumed.vocabulary
    elif base_checkpoint:
        vocabulary = base_checkpoint.vocabulary
    else:
        vocabulary = StoryVocabulary.build(train, options.vocab_size)
    model = MnemeLM(resumed.config if resumed else story_config(options, len(vocabulary)))
    if base is not None:
        try:
            model.start_from(base)
        except ValueError as error:
            raise ValueError(f"{options.base}: {error}") from None
    model = model.to(trainer.device)
    train_batches = story_batches([encode_story(story, vocabulary) for story in train], options.batch_tokens)
    dev_batches = story_batches([encode_story(story, vocabulary) for story in dev], options.eval_batch_tokens)
    family = StoryLMFamily(options, model, vocabulary, train_batches, dev_batches, trainer.device)
    state = trainer.fit(family)
    best = state["best"]["model"]
    summary = {"model": options.model, "corpus": options.corpus, "epochs": state["epoch"],
               "updates": state["epoch"] * len(train_batches), "best_dev_nll": best,
               "best_dev_perplexity": math.exp(best), "parameters": parameter_count(model),
               "vocabulary": len(vocabulary), "train_stories": len(train), "train_tokens": family.train_tokens,
               "dev_stories": len(dev)}
    return summary
