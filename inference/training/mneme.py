"""Training the MNEMELM family (Papalampidi et al. 2022) on prompted stories, through ``python -m inference.train``.

    python -m inference.train --model d_mneme --corpus litbank+ontogum+inscript+lambada --data-dir DATA \\
        --out runs/mneme/d_mneme

``inference.training.train`` hands these ``--model`` values to this module's parser (``python -m inference.story_lm`` is
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

import argparse
import hashlib
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from coref.io.atomic import write_text_atomic
from coref.cli import Parser, integer, output_file, output_folder, real, run_main
from coref.corpora.registry import CorpusError, DataDir
from coref.corpora.stories import GOLD_CORPORA, SEP, STORY_CORPORA, PromptedStory, load_stories, prompt_tokens
from generative.mneme import PRESETS, MnemeBatch, MnemeConfig, MnemeExample, MnemeLM, make_batch, parameter_count
from coref.io import checkpoint as stored
from coref.io.checkpoint import CheckpointError
from inference.commands.cli import USER_ERRORS
from inference.training.loop import Run, Trainer

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


def story_config(args: argparse.Namespace, vocab_size: int) -> MnemeConfig:
    """The preset ``--model`` with the command line's sizes (λ the preset's unless ``--kl-weight`` is given)."""
    sizes = {name: getattr(args, name) for name in ("d_model", "layers", "heads", "d_ff", "dropout", "chunk",
                                                    "segment", "cache")}
    if args.kl_weight is not None:
        sizes["kl_weight"] = args.kl_weight
    return MnemeConfig.preset(args.model, vocab_size, **sizes)


class StoryLMFamily:
    """The story LMs as a family of :mod:`inference.training.loop`: Adam with a linear warm-up, the clipped loss
    of :meth:`MnemeLM.loss` (NLL and λ·KL), the dev NLL per story token as the score."""

    order = "torch-per-epoch"
    initial: dict[str, float] = {}

    def __init__(self, args: argparse.Namespace, model: MnemeLM, vocabulary: StoryVocabulary,
                 train_batches: list[MnemeBatch], dev_batches: list[MnemeBatch], device: torch.device) -> None:
        self.name, self.args, self.vocabulary, self.device = args.model, args, vocabulary, device
        self.modules = {"model": model}
        self.optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer,
                                                          lambda step: min(1.0, (step + 1) / (args.warmup + 1)))
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
        torch.nn.utils.clip_grad_norm_(model.parameters(), self.args.clip_norm)
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
        return StoryLMCheckpoint(self.args.model, config, self.vocabulary, self.args.max_tokens, weights, training)


def train_story_lm(args: argparse.Namespace) -> int:
    """The training loop of the module docstring (:mod:`inference.training.loop`); prints the summary as JSON."""
    out = Path(args.out)
    corpus_parts(args.corpus)
    trainer = Trainer(Run(out, args.epochs, args.seed, vars(args), patience=args.patience, resume=args.resume,
                          resumable=FREE_ON_RESUME, device=args.device))
    resumed = trainer.check_out_folder(StoryLMCheckpoint.load)
    # a base that is not a story LM checkpoint fails before the corpora are read
    base, base_checkpoint = load_story_lm(args.base) if args.base and not resumed else (None, None)
    train = load_split(args.corpus, "train", args.data_dir, args.max_tokens)
    dev = load_split(dev_corpus(args.corpus), "dev", args.data_dir, args.max_tokens)
    if resumed:
        vocabulary = resumed.vocabulary
    elif base_checkpoint:
        vocabulary = base_checkpoint.vocabulary
    else:
        vocabulary = StoryVocabulary.build(train, args.vocab_size)
    model = MnemeLM(resumed.config if resumed else story_config(args, len(vocabulary)))
    if base is not None:
        try:
            model.start_from(base)
        except ValueError as error:
            raise ValueError(f"{args.base}: {error}") from None
    model = model.to(trainer.device)
    train_batches = story_batches([encode_story(story, vocabulary) for story in train], args.batch_tokens)
    dev_batches = story_batches([encode_story(story, vocabulary) for story in dev], args.eval_batch_tokens)
    family = StoryLMFamily(args, model, vocabulary, train_batches, dev_batches, trainer.device)
    state = trainer.fit(family)
    best = state["best"]["model"]
    summary = {"model": args.model, "corpus": args.corpus, "epochs": state["epoch"],
               "updates": state["epoch"] * len(train_batches), "best_dev_nll": best,
               "best_dev_perplexity": math.exp(best), "parameters": parameter_count(model),
               "vocabulary": len(vocabulary), "train_stories": len(train), "train_tokens": family.train_tokens,
               "dev_stories": len(dev)}
    if args.json:
        write_text_atomic(args.json, json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


def build_parser() -> Parser:
    defaults = MnemeConfig(vocab_size=1)
    parser = Parser(prog="python -m inference.train", description=__doc__)
    parser.add_argument("--model", choices=MODELS, required=True, help="the MNEMELM variant to train")
    parser.add_argument("--corpus", required=True,
                        help=f"story corpora ({', '.join(STORY_CORPORA)}), several joined with '+'")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--out", required=True, type=output_folder,
                        help="output folder: model.pt (best weights), last.pt (for --resume)")
    parser.add_argument("--json", type=output_file, help="also write the summary here")
    parser.add_argument("--max-tokens", type=integer(1), default=1000,
                        help="cut documents into stories of at most this many tokens, at sentence boundaries")
    parser.add_argument("--vocab-size", type=integer(1), default=20_000,
                        help="the most frequent training words kept (besides <pad> <sep> <unk> <eos>)")
    parser.add_argument("--d-model", type=integer(1), default=defaults.d_model, help="model width")
    parser.add_argument("--layers", type=integer(1), default=defaults.layers, help="decoder layers")
    parser.add_argument("--heads", type=integer(1), default=defaults.heads, help="self-attention heads")
    parser.add_argument("--d-ff", type=integer(1), default=defaults.d_ff, help="hidden units of each MLP")
    parser.add_argument("--dropout", type=real(0, 1), default=defaults.dropout, help="dropout rate")
    parser.add_argument("--chunk", type=integer(1), default=defaults.chunk,
                        help="tokens between memory updates (paper 64)")
    parser.add_argument("--segment", type=integer(1), default=defaults.segment,
                        help="T-XL segment length, a multiple of --chunk (paper 512)")
    parser.add_argument("--cache", type=integer(0), default=defaults.cache,
                        help="T-XL memory: past positions kept before each segment (paper 500)")
    parser.add_argument("--base",
                        help="a trained VANILLALM (OUT/model.pt) of the same sizes to start from: its vocabulary (not "
                             "--vocab-size) and weights, the memory's parts new (the paper's pretrained base LM, §3)")
    parser.add_argument("--kl-weight", type=real(0),
                        help="lambda of the entity-attention KL (default: the preset's; 0 for vanilla and w/o ES)")
    parser.add_argument("--lr", type=real(0, include_low=False), default=1e-3, help="Adam's learning rate")
    parser.add_argument("--warmup", type=integer(0), default=200,
                        help="updates of linear learning-rate warm-up (then constant)")
    parser.add_argument("--clip-norm", type=real(0, include_low=False), default=0.25,
                        help="clip the gradient norm to this (Transformer-XL's 0.25)")
    parser.add_argument("--batch-tokens", type=integer(1), default=2_000,
                        help="padded story tokens per training batch")
    parser.add_argument("--eval-batch-tokens", type=integer(1), default=4_000,
                        help="padded story tokens per dev batch")
    parser.add_argument("--epochs", type=integer(1), default=20, help="at most this many epochs")
    parser.add_argument("--patience", type=integer(1), default=2,
                        help="stop after this many epochs without a dev NLL gain")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0, help="random seed (initialisation, dropout, batch order)")
    parser.add_argument("--resume", action="store_true", help="continue the run in OUT from OUT/last.pt")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: train_story_lm(args), USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
