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

- the vocabulary is the one ``inference.training.train --model dntm`` builds for the same ``--corpus`` and ``--vocab-size``:
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
:func:`load_context_encoder` puts it into a DNTM (``inference.training.train --context-encoder``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from coref.corpora.anonymise import (
    ANONYMISED_PREPROCESS,
    MAX_CHAINS,
    anonymised_corpus,
    anonymised_vocabulary,
    first_entity_id,
)
from coref.cli import Parser, integer, output_file, real, run_main
from coref.io.conll import read_utf8
from coref.corpora.registry import SPLITS, CorpusError, corpus_names, load_corpus, resolve_data_dir
from coref.document import Document
from coref.corpora.preprocess import EOS, SPECIALS, Vocabulary, preprocess_documents
from generative.dntm import ContextEncoder, DynamicNeuralTextModel, sample_negatives
from coref.io import checkpoint as stored
from coref.io.checkpoint import CheckpointError
from inference.commands.cli import USER_ERRORS
from inference.training.loop import Run, Trainer

KIND = "context_encoder"  # its kind of checkpoint (coref.io.checkpoint)
LAMBADA_TEXTS = ("lambada", "lambada-dev")
LAMBADA_DEV = Path("lambada") / "lambada_development_plain_text.txt"
LAMBADA_TRAIN = Path("lambada") / "train-novels"
SENTENCE_ENDS = frozenset({".", "!", "?", "...", "…"})
CLOSING_QUOTES = frozenset({"''", "”", "'", ")"})  # not '"', which may open the next sentence
LAMBADA_QUOTES = {"``": '"', "''": '"'}  # PTB quotes as OntoGUM writes them
NEGATIVE_POWER = 0.75


# ---- text -------------------------------------------------------------------------------------------------------


def split_sentences(tokens: Sequence[str]) -> list[tuple[int, int]]:
    """Half-open sentence spans of a tokenised passage: a sentence ends after ``.``, ``!``, ``?`` (and the closing
    quotes right after it) and at the passage's end."""
    spans, start, position = [], 0, 0
    while position < len(tokens):
        position += 1
        if tokens[position - 1] in SENTENCE_ENDS:
            while position < len(tokens) and tokens[position] in CLOSING_QUOTES:
                position += 1
            spans.append((start, position))
            start = position
    if start < len(tokens):
        spans.append((start, len(tokens)))
    return spans


def read_passages(path: Path, name: str) -> list[Document]:
    """A plain text file of whitespace-tokenised passages, one per line (LAMBADA's format), as documents with
    sentences; blank lines are skipped. Not UTF-8 or a control character is ``FILE:LINE: reason``."""
    documents = []
    for number, line in enumerate(read_utf8(path).split("\n"), start=1):
        bad = next((c for c in line if ord(c) < 32 and c not in "\t\r"), None)
        if bad is not None:
            raise CorpusError(f"{path}:{number}: control character U+{ord(bad):04X}: not plain text")
        tokens = line.split()
        if tokens:
            sentences = split_sentences(tokens)  # on the PTB quotes, which say whether they open or close
            tokens = [LAMBADA_QUOTES.get(token, token) for token in tokens]
            documents.append(Document(f"{name}:{path.name}:{number}", tokens, sentences))
    return documents


def lambada_documents(name: str, data_dir: str | None) -> list[Document]:
    """LAMBADA's training novels (``lambada``) or development passages (``lambada-dev``), never its test ones."""
    root = resolve_data_dir(data_dir)
    if name == "lambada-dev":
        if not (root / LAMBADA_DEV).is_file():
            raise CorpusError(f"--extra-text lambada-dev: {root / LAMBADA_DEV} does not exist")
        return read_passages(root / LAMBADA_DEV, name)
    files = sorted((root / LAMBADA_TRAIN).rglob("*.txt")) if (root / LAMBADA_TRAIN).is_dir() else []
    if not files:
        raise CorpusError(
            f"--extra-text lambada: no training novels in {root / LAMBADA_TRAIN} (*.txt, from the official LAMBADA "
            "release); the development and test passages are evaluation data: pass lambada-dev to use the "
            "development passages anyway")
    return [document for path in files for document in read_passages(path, name)]


def extra_text_names(text: str | None, corpus: str) -> list[str]:
    """The names of ``--extra-text``: corpora of :mod:`coref.corpora.registry` (their training split) or LAMBADA's texts;
    each once, and none already in ``--corpus``."""
    names = [name.strip() for name in (text or "").split(",") if name.strip()]
    for name in names:
        if name not in SPLITS and name not in LAMBADA_TEXTS:
            raise ValueError(f"--extra-text {name}: unknown text: choose from {', '.join([*SPLITS, *LAMBADA_TEXTS])}")
        if name in corpus_names(corpus):
            raise ValueError(f"--extra-text {name}: its training split is already the --corpus text")
    if len(set(names)) < len(names):
        raise ValueError(f"--extra-text {text}: a text is named twice")
    return names


def text_documents(name: str, data_dir: str | None) -> list[Document]:
    """The documents of one pretraining text, preprocessed as the anonymised data is but not anonymised."""
    if name in LAMBADA_TEXTS:
        documents = lambada_documents(name, data_dir)
    else:
        documents = list(load_corpus(name, "train", data_dir).documents)
    return preprocess_documents(documents, ANONYMISED_PREPROCESS)[0]



def encode_sentences(documents: Sequence[Document], vocabulary: Vocabulary,
                     max_tokens: int) -> tuple[list[list[int]], dict[str, int]]:
    """Every sentence of at most ``max_tokens`` words as the context encoder reads it, its word ids then ``</s>``,
    and counts of what was kept and dropped."""
    end = vocabulary.index(EOS)
    rows, dropped, unknown = [], 0, 0
    for document in documents:
        for start, stop in document.sentences:
            words = document.tokens[start:stop]
            if len(words) > max_tokens:
                dropped += 1
                continue
            ids = vocabulary.encode(words)
            unknown += sum(word not in vocabulary for word in words)
            rows.append([*ids, end])
    words = sum(len(row) - 1 for row in rows)
    return rows, {"documents": len(documents), "sentences": len(rows), "sentences_dropped": dropped,
                  "words": words, "unknown_words": unknown}


def pad(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Sentences as (N, L) ids padded with 0, and their (N,) lengths."""
    lengths = torch.tensor([len(row) for row in rows], dtype=torch.long)
    tokens = torch.zeros(len(rows), int(lengths.max()), dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return tokens, lengths


def batch_indices(count: int, size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless batches of ``size`` sentence indices (all of them when fewer), a new shuffle after every pass."""
    size, order, position = min(size, count), torch.randperm(count, generator=generator), 0
    while True:
        if position + size > count:
            order, position = torch.randperm(count, generator=generator), 0
        yield order[position : position + size]
        position += size


@torch.no_grad()
def held_out_loss(encoder: ContextEncoder, tokens: torch.Tensor, lengths: torch.Tensor, negatives: torch.Tensor,
                  chunk: int = 512) -> float:
    """The completion loss per target token of the held-out sentences (fixed ``negatives``)."""
    encoder.eval()
    total = 0.0
    for start in range(0, len(lengths), chunk):
        part = lengths[start : start + chunk]
        width = int(part.max())
        loss = encoder.completion_loss(tokens[start : start + chunk, :width], part.to(tokens.device),
                                       negatives[start : start + chunk, :width])
        total += float(loss) * int(part.sum())
    encoder.train()
    return total / int(lengths.sum())


# ---- the checkpoint ----------------------------------------------------------------------------------------------


def save_checkpoint(path: str | Path, encoder_state: dict[str, torch.Tensor], vocabulary: Vocabulary,
                    args: argparse.Namespace, **record: Any) -> None:
    """Write the pretrained encoder atomically, a ``context_encoder`` checkpoint of :mod:`coref.io.checkpoint`
    (``record``: text, history, best, steps)."""
    stored.Checkpoint(KIND, {"size": args.context_size}, vocabulary.to_dict(), {"model": encoder_state},
                      {"args": vars(args), **record}).save(path)


def read_context_encoder(path: str | Path) -> dict[str, Any]:
    """A context encoder's checkpoint (of any format version) as a dict: ``size``, ``vocabulary`` (a
    :class:`Vocabulary`), ``state_dict``, ``options`` and the training record (``text``, ``history``, ``best``,
    ``steps``); a one-line :class:`CheckpointError` naming the file for anything else."""
    checkpoint = stored.load(path, "entitylm context encoder", {KIND})
    try:
        payload = {**checkpoint.training, "options": checkpoint.training["args"],
                   "size": int(checkpoint.config["size"]), "vocabulary": Vocabulary.from_dict(checkpoint.vocabulary),
                   "state_dict": checkpoint.weights["model"]}
        encoder = ContextEncoder(len(payload["vocabulary"]), payload["size"])
        encoder.load_state_dict(payload["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{path}: not a usable context encoder ({type(error).__name__}: "
                              f"{str(error).splitlines()[0] if str(error) else ''})") from error
    return payload


def load_context_encoder(model: DynamicNeuralTextModel, path: str | Path, vocabulary: Vocabulary) -> str:
    """Put a pretrained context encoder into ``model`` as the paper does (§5.1, footnote 7), and say what was done.

    Its weights replace the model's context encoder, whose ``<unkK>`` rows get ``<unk>``'s embedding, and the
    encoder is frozen; the LM's input embeddings (when ``embedding_size`` equals the encoder's size) and output
    embeddings (when ``hidden_size`` does) start from the pretrained embeddings, entity tokens from ``<unk>``'s.
    The baseline (placement "none") has no encoder: only its embeddings are initialised. A checkpoint of another
    vocabulary (word by word) or size than ``model`` is a one-line :class:`CheckpointError`.
    """
    payload = read_context_encoder(path)
    saved, size, config = payload["vocabulary"], payload["size"], model.config
    if saved.words != vocabulary.words:
        where = next((i for i, (a, b) in enumerate(zip(saved.words, vocabulary.words)) if a != b),
                     min(len(saved), len(vocabulary)))
        raise CheckpointError(
            f"{path}: pretrained on another vocabulary ({len(saved)} words) than this run's ({len(vocabulary)}; "
            f"they first differ at id {where}): pretrain with the same --corpus and --vocab-size")
    if size != config.context_size:
        raise CheckpointError(f"{path}: a context encoder of size {size}, but --context-size is {config.context_size}")
    unk, first = vocabulary.unk_id, first_entity_id(vocabulary)
    device = model.output.weight.device
    embeddings = payload["state_dict"]["embedding.weight"].float().to(device)
    done = []
    if model.context_encoder is not None:
        state = dict(payload["state_dict"])
        state["embedding.weight"] = embeddings.clone()
        state["embedding.weight"][first : first + config.max_entities] = embeddings[unk]
        model.context_encoder.load_state_dict(state)
        model.freeze_context_encoder()
        done.append("context encoder loaded and frozen")
    layers = [layer for layer, units in (("input", config.embedding_size), ("output", config.hidden_size))
              if units == size]
    model.initialise_word_embeddings(embeddings, unk, layers)
    done.append(f"{' and '.join(layers)} embeddings initialised" if layers else
                f"LM embeddings not initialised (--embedding-size and --hidden-size differ from its size {size})")
    best = payload.get("best") or {}
    trained = f"step {best['step']}, held-out loss {best['held_out_loss']:.4f}" if "step" in best else "untrained"
    return f"{path} ({trained}): {'; '.join(done)}"


# ---- command line ------------------------------------------------------------------------------------------------


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.pretrain_context", description=__doc__)
    parser.add_argument("--corpus", required=True,
                        help="the corpus the DNTM will be trained on (its training split is text and vocabulary)")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--out", required=True, type=output_file, help="the checkpoint to write (atomically)")
    parser.add_argument("--extra-text", metavar="NAMES",
                        help="more text, comma-separated: corpora of coref.corpora.registry (their training split), lambada "
                             "(LAMBADA's training novels) or lambada-dev (its development passages)")
    parser.add_argument("--vocab-size", type=integer(len(SPECIALS) + MAX_CHAINS + 1), default=10_000,
                        help="as inference.training.train's --vocab-size (the anonymised vocabulary, paper 10K)")
    parser.add_argument("--context-size", type=integer(1), default=128,
                        help="embeddings, BiLSTM units per direction and context vectors (inference.training.train's)")
    parser.add_argument("--steps", type=integer(1), default=50_000, help="updates (paper 50,000)")
    parser.add_argument("--batch-sentences", type=integer(1), default=128, help="sentences per update (paper 128)")
    parser.add_argument("--negatives", type=integer(1), default=5, help="negative samples per target (paper 5)")
    parser.add_argument("--max-sentence-tokens", type=integer(1), default=32,
                        help="longer sentences are dropped (paper 32)")
    parser.add_argument("--lr", type=real(0, include_low=False), default=1e-3, help="Adam's learning rate")
    parser.add_argument("--held-out", type=real(0, 0.5, include_low=False), default=0.02,
                        help="fraction of the sentences (at least one) scored to keep the best weights")
    parser.add_argument("--eval-every", type=integer(1), default=500, help="score the held-out sentences this often")
    parser.add_argument("--seed", type=int, default=0, help="random seed (held-out choice, batches, negatives, init)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    return parser


class ContextEncoderFamily:
    """The context encoder as a family of :mod:`inference.training.loop`, trained in steps: an "epoch" of the loop
    is the ``--eval-every`` steps between two scores of the held-out sentences (the last one shorter). Batches
    of sentences come endlessly from the run's torch stream (:func:`batch_indices`), a new shuffle after every
    pass; the negatives from a generator of their own (``seed + 2``); Adam; the held-out completion loss with
    fixed negatives selects (the untrained encoder's loss is the one to beat)."""

    order = "torch-stream"
    schedule = None

    def __init__(self, args: argparse.Namespace, encoder: ContextEncoder, vocabulary: Vocabulary,
                 rows: list[list[int]], text: dict[str, Any], trainer: Trainer) -> None:
        self.name, self.args, self.vocabulary, self.text = "context encoder", args, vocabulary, text
        self.device = trainer.device
        self.modules = {"model": encoder}
        self.optimizer = torch.optim.Adam(encoder.parameters(), lr=args.lr)
        shuffle = trainer.stream(self.order)
        order = torch.randperm(len(rows), generator=shuffle).tolist()
        self.held = min(max(1, round(args.held_out * len(rows))), len(rows) - 1)
        held_tokens, self.held_lengths = pad([rows[i] for i in order[:self.held]])
        train_tokens, self.train_lengths = pad([rows[i] for i in order[self.held:]])
        self.counts = torch.bincount(train_tokens[torch.arange(train_tokens.shape[1]) < self.train_lengths[:, None]],
                                     minlength=len(vocabulary))
        held_negatives = sample_negatives(self.counts, (*held_tokens.shape, args.negatives), NEGATIVE_POWER,
                                          torch.Generator().manual_seed(args.seed + 1))
        self.held_tokens, self.held_negatives = held_tokens.to(self.device), held_negatives.to(self.device)
        self.train_tokens = train_tokens.to(self.device)
        self.initial = {"model": self.held_out_loss()}
        self.history: list[dict[str, Any]] = [{"step": 0, "held_out_loss": self.initial["model"]}]
        self.batches = batch_indices(len(self.train_lengths), args.batch_sentences, shuffle)
        self.draws = torch.Generator().manual_seed(args.seed + 2)
        self.steps = self.sentences = 0
        self.seconds = 0.0

    def held_out_loss(self) -> float:
        return held_out_loss(self.modules["model"], self.held_tokens, self.held_lengths, self.held_negatives)

    def epoch_batches(self, source: torch.Generator) -> Iterator[torch.Tensor]:
        """The next ``--eval-every`` batches (fewer before the last step): :attr:`batches` draws from ``source``."""
        for _ in range(min(self.args.eval_every, self.args.steps - self.steps)):
            yield next(self.batches)

    def step(self, index: torch.Tensor) -> tuple[dict[str, Any], None]:
        lengths = self.train_lengths[index]
        tokens = self.train_tokens[index.to(self.device), : int(lengths.max())]
        negatives = sample_negatives(self.counts, (*tokens.shape, self.args.negatives), NEGATIVE_POWER,
                                     self.draws).to(self.device)
        loss = self.modules["model"].completion_loss(tokens, lengths.to(self.device), negatives)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.steps += 1
        self.sentences += len(index)
        return {"loss": loss.detach(), "steps": 1}, None

    def evaluate(self) -> dict[str, float]:
        score = self.held_out_loss()
        if not math.isfinite(score):
            raise FloatingPointError(f"the held-out loss is {score} at step {self.steps}: lower --lr")
        return {"model": score}

    def record(self, epoch: int, seconds: float, totals: dict[str, Any], scores: dict[str, float]
               ) -> dict[str, Any]:
        self.seconds += seconds
        record = {"step": self.steps, "train_loss": float(totals["loss"]) / totals["steps"],
                  "held_out_loss": scores["model"], "sentences_per_second": self.sentences / self.seconds}
        self.history.append(record)
        return record

    def best(self) -> dict[str, Any]:
        """The step and held-out loss of the weights kept (the first of the lowest)."""
        best = min(self.history, key=lambda record: record["held_out_loss"])
        return {"step": best["step"], "held_out_loss": best["held_out_loss"]}

    def checkpoint(self, weights: dict[str, Any], training: dict[str, Any]) -> stored.Checkpoint:
        record = {"args": training["args"], "text": self.text, "history": self.history, "best": self.best(),
                  "steps": self.steps}
        return stored.Checkpoint(KIND, {"size": self.args.context_size}, self.vocabulary.to_dict(), weights, record)


def run(args: argparse.Namespace) -> dict[str, Any]:
    trainer = Trainer(Run(Path(args.out), math.ceil(args.steps / args.eval_every), args.seed, vars(args),
                          device=args.device, single_file=True))
    extra = extra_text_names(args.extra_text, args.corpus)
    train = anonymised_corpus(args.corpus, "train", args.data_dir)
    vocabulary = anonymised_vocabulary(train.documents, args.vocab_size)
    sources = {f"{args.corpus}/train": preprocess_documents(train.corpus.documents, ANONYMISED_PREPROCESS)[0]}
    for name in extra:
        sources[name if name in LAMBADA_TEXTS else f"{name}/train"] = text_documents(name, args.data_dir)
    rows: list[list[int]] = []
    text = {}
    for source, documents in sources.items():
        encoded, text[source] = encode_sentences(documents, vocabulary, args.max_sentence_tokens)
        rows += encoded
    if len(rows) < 2:
        raise ValueError(f"--corpus {args.corpus}: {len(rows)} sentence(s) of at most {args.max_sentence_tokens} "
                         "tokens: too little text to train and hold out")
    for source, stats in text.items():
        print(f"{source}: {stats['sentences']:,} sentences ({stats['sentences_dropped']:,} of more than "
              f"{args.max_sentence_tokens} tokens dropped), {stats['words']:,} words, "
              f"{stats['unknown_words'] / max(stats['words'], 1):.1%} <unk>", file=sys.stderr)
    encoder = ContextEncoder(len(vocabulary), args.context_size).to(trainer.device)
    family = ContextEncoderFamily(args, encoder, vocabulary, rows, text, trainer)
    trainer.fit(family)
    return {"out": args.out, "vocabulary": len(vocabulary), "size": args.context_size, "text": text,
            "sentences": {"train": len(family.train_lengths), "held_out": family.held}, "steps": args.steps,
            "initial_held_out_loss": family.initial["model"], "best": family.best(), "final": family.history[-1],
            "sentences_per_second": family.sentences / family.seconds}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        print(json.dumps(run(args), indent=2))
        return 0

    return run_main(body, USER_ERRORS)


if __name__ == "__main__":
    sys.exit(main())
