"""The Coref-GRU readers (Dhingra et al. 2018) in a notebook (:class:`Reader`): answers with their probabilities,
the C-GRU's attention over relation types per token, layer and direction, and the same questions without the
coreference chains.

A question is given as the library represents it: a :class:`coref.corpora.babi.BabiExample`
(``coref.corpora.babi.load_babi``), a bAbI story in the file format (a string, its last question asked;
:func:`coref.corpora.babi.parse_babi`), or a :class:`generative.coref_gru.ReadingExample` of word ids
(:meth:`Reader.examples`: a task's split as ``entitylm train`` reads it, LAMBADA and WikiHop included). Answers
are those of the trained model's ``answer_logits``, accuracies those of :func:`inference.training.coref_gru.accuracy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import torch
from matplotlib.figure import Figure

from coref.corpora.babi import BabiExample, parse_babi
from generative.coref_gru import GatedAttentionReader, ReaderConfig, ReadingExample, make_reading_batch, parameter_count
from inference.api.tables import html_table
from inference.training.coref_gru import (
    EVAL_BATCH,
    ReadingData,
    accuracy,
    babi_reading_example,
    batches,
    checkpoint_chains,
    checkpoint_data,
)

DIRECTIONS = ("forward", "backward")
Story = ReadingExample | BabiExample | str


@dataclass(frozen=True)
class Question:
    """A question as a reader reads it (``example``: word ids and chains) and as words: the story's ``tokens``,
    the ``question``, and the right ``answer`` (None: not one the reader can give)."""

    example: ReadingExample
    tokens: tuple[str, ...]
    question: tuple[str, ...]
    answer: str | None

    def chain_of(self) -> dict[int, int]:
        """Token position -> the number (1, 2, ...) of the chain of the mention it is in."""
        return {position: number for number, chain in enumerate(self.example.clusters, start=1)
                for start, end in chain for position in range(start, end)}

    def tagged(self) -> str:
        """The story with each mention's tokens written ``[word]N``, N its chain's number."""
        chain_of = self.chain_of()
        return " ".join(f"[{token}]{chain_of[i]}" if i in chain_of else token for i, token in enumerate(self.tokens))


@dataclass(frozen=True)
class Answer:
    """A reader's answer to one question: ``predicted`` and ``probabilities`` (the ``top`` most probable answers:
    words for attention-sum readers, classes for classification ones), read ``with_chains`` or not."""

    question: Question
    predicted: str
    probabilities: dict[str, float]
    with_chains: bool

    @property
    def correct(self) -> bool | None:
        """Whether the predicted answer is the right one (None: the right one is unknown to the reader)."""
        return None if self.question.answer is None else self.predicted == self.question.answer

    def summary(self) -> str:
        """One line: the question, the predicted answer, with or without chains, the right answer."""
        chains = "with its chains" if self.with_chains else "without chains"
        right = "" if self.question.answer is None else f", right answer {self.question.answer}"
        return f"{' '.join(self.question.question)} -> {self.predicted} ({chains}{right})"

    def __repr__(self) -> str:
        top = ", ".join(f"{answer} {p:.3f}" for answer, p in self.probabilities.items())
        return f"Answer({self.summary()}; p: {top})"

    def _repr_html_(self) -> str:
        rows = [(answer, f"{p:.3f}", "right" if answer == self.question.answer else "")
                for answer, p in self.probabilities.items()]
        return html_table(("answer", "p", ""), rows, self.summary())


@dataclass(frozen=True, eq=False)  # numpy fields
class RelationAttention:
    """Where each C-GRU layer of a reader looks while reading one story: ``masses[k, t, d, r]`` is layer k's
    attention mass at token t in direction d (forward, backward) on relation type r (0: the sequential state, the
    token before it in reading order; 1: the coreferent one, the state the neighbouring mention of its entity left
    in the chain's memory), Σ_{c: r_c = r} α_c, so each token's two entries sum to 1. ``choice[t, d]``: token t
    has an incoming coreference edge in direction d (forward: the first token of a chain's second and later
    mentions; backward: the last token of each mention but the last); elsewhere the coreferent mass is 0 by
    construction."""

    question: Question
    masses: np.ndarray  # (layers, N, 2, 2)
    choice: np.ndarray  # (N, 2) bool

    @property
    def coreferent(self) -> np.ndarray:
        """(layers, N, directions): the mass on the coreferent state."""
        return self.masses[..., 1]

    def rows(self) -> list[tuple[str, ...]]:
        """One row per token with a choice in some direction: position, token, chain, then the coreferent mass of
        every layer and direction ("-": no choice there)."""
        chain_of, rows = self.question.chain_of(), []
        for t in np.flatnonzero(self.choice.any(-1)):
            cells = [f"{self.masses[k, t, d, 1]:.2f}" if self.choice[t, d] else "-"
                     for k in range(len(self.masses)) for d in range(2)]
            rows.append((str(t), self.question.tokens[t], str(chain_of.get(int(t), "")), *cells))
        return rows

    def headers(self) -> tuple[str, ...]:
        """The columns of :meth:`rows`."""
        return ("position", "token", "chain",
                *(f"L{k + 1} {('fw', 'bw')[d]}" for k in range(len(self.masses)) for d in range(2)))

    def __repr__(self) -> str:
        lines = [" ".join(f"{cell:>8}" for cell in row) for row in [self.headers(), *self.rows()]]
        return "\n".join(["RelationAttention: coreferent attention (mass on relation 1, the other mention's "
                          "state) per layer and direction", *lines])

    def _repr_html_(self) -> str:
        return html_table(self.headers(), self.rows(),
                           "coreferent attention (mass on the other mention's state) per layer and direction")

    def plot(self, title: str = "") -> Figure:
        """A heatmap of the coreferent mass per token (columns; mention tokens tagged and coloured by chain) and
        layer and direction (rows), blank where the token has no coreference edge coming in: a matplotlib
        :class:`Figure` (no pyplot state), which Jupyter displays and ``savefig`` writes."""
        tokens, chain_of = self.question.tokens, self.question.chain_of()
        rows = [(k, d) for k in range(len(self.masses)) for d in range(2)]
        values = np.array([self.masses[k, :, d, 1] for k, d in rows])
        shown = np.ma.masked_array(values, mask=np.array([~self.choice[:, d] for _, d in rows]))
        cmap = matplotlib.colormaps["viridis"].copy()
        cmap.set_bad("white")
        figure = Figure(figsize=(max(8, 0.3 * len(tokens)), 1.2 + 0.4 * len(rows)))
        axes = figure.subplots()
        image = axes.imshow(shown, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for row, column in zip(*np.nonzero(~shown.mask)):
            value = values[row, column]
            axes.text(column, row, f"{value:.2f}".lstrip("0"), ha="center", va="center", fontsize=7,
                      color="black" if value > 0.5 else "white")
        axes.set_xticks(range(len(tokens)), [f"{t} {chain_of[i]}" if i in chain_of else t
                                             for i, t in enumerate(tokens)], rotation=90, fontsize=8)
        for position, label in enumerate(axes.get_xticklabels()):
            if position in chain_of:
                label.set_color(matplotlib.colormaps["tab10"]((chain_of[position] - 1) % 10))
                label.set_fontweight("bold")
        axes.set_yticks(range(len(rows)), [f"layer {k + 1} {DIRECTIONS[d]}" for k, d in rows], fontsize=8)
        figure.colorbar(image, ax=axes, label="attention on the\ncoreferent state", fraction=0.03, pad=0.01)
        axes.set_title(title or "C-GRU attention on the coreferent state per token (blank: no coreference edge, "
                       "only the sequential state)", fontsize=9)
        axes.grid(False)
        figure.tight_layout()
        return figure


@dataclass(frozen=True)
class WordPreferences:
    """Layer 1's attention on the coreferent state at a token with one incoming coreference edge, per word and
    direction: σ((w_1 − w_0)ᵀ e) of the word's embedding e and the layer's relation keys w_r (its key-based
    addressing, 1 − α_t in the paper's notation), which depends on the word alone."""

    values: dict[str, tuple[float, float]]  # word -> (forward, backward)

    def __repr__(self) -> str:
        width = max(map(len, self.values), default=4)
        lines = [f"{'word':<{width}} {'forward':>8} {'backward':>8}",
                 *(f"{word:<{width}} {fw:>8.3f} {bw:>8.3f}" for word, (fw, bw) in self.values.items())]
        return "\n".join(["WordPreferences (layer 1's attention on the coreferent state)", *lines])

    def _repr_html_(self) -> str:
        rows = [(word, f"{fw:.3f}", f"{bw:.3f}") for word, (fw, bw) in self.values.items()]
        return html_table(("word", "forward", "backward"), rows, "layer 1's attention on the coreferent state")


class Reader:
    """A reader checkpoint of ``python -m inference.train --model ga_cgru|ga_gru|ga_gru_onehot|bi_cgru|bi_gru``
    on a device, made by :func:`~inference.api.load`: ``kind`` the model, ``task`` (``babi:N``, ``lambada`` or
    ``wikihop``), ``module`` the :class:`generative.coref_gru.GatedAttentionReader` (in eval mode), ``words``
    (id 0 is padding, which an unseen word reads as) and ``classes`` (a classification task's answers; None
    for an attention-sum one)."""

    def __init__(self, path: Path, module: GatedAttentionReader, checkpoint: dict[str, Any],
                 device: torch.device) -> None:
        self.path, self.module, self.checkpoint, self.device = path, module, checkpoint, device
        self.kind, self.task = checkpoint["model"], checkpoint["task"]
        self.words: list[str] = checkpoint["words"]
        self.classes: list[str] | None = checkpoint["classes"]
        self._index = {word: number for number, word in enumerate(self.words)}
        self._answers = None if self.classes is None else {a: n for n, a in enumerate(self.classes)}
        self._data: dict[str | None, ReadingData] = {}

    @property
    def config(self) -> ReaderConfig:
        """The reader's sizes and choices (recurrent layer, answer head, chains per document, ...)."""
        return self.module.config

    @property
    def history(self) -> list[dict]:
        """The trainer's record of each epoch: training NLL, dev accuracy, time."""
        return self.checkpoint["training"].get("state", {}).get("history", [])

    @property
    def test_accuracy(self) -> float | None:
        """The test accuracy the trainer measured at the end (None for a run that has not finished)."""
        return self.checkpoint["training"].get("test_accuracy")

    def __repr__(self) -> str:
        head = f"{len(self.classes)} classes" if self.classes is not None else "attention-sum"
        tested = "" if self.test_accuracy is None else f", test accuracy {self.test_accuracy:.3f}"
        return (f"Reader(kind={self.kind!r}, task={self.task!r}, checkpoint='{self.path}', words={len(self.words)}, "
                f"answers: {head}, device='{self.device}', parameters={parameter_count(self.module):,}{tested})")

    # ---- questions

    def data(self, data_dir: str | None = None) -> ReadingData:
        """The task's splits as the trainer read them, with this reader's words and classes (read once per
        ``data_dir``; default $ENTITYLM_DATA)."""
        if data_dir not in self._data:
            self._data[data_dir] = checkpoint_data(self.checkpoint, data_dir)
        return self._data[data_dir]

    def examples(self, split: str = "test", data_dir: str | None = None) -> list[ReadingExample]:
        """The questions of a split (``train``, ``dev``, ``test``) as the reader reads them."""
        splits = self.data(data_dir).splits
        if split not in splits:
            raise ValueError(f"split must be one of {sorted(splits)}, got {split!r}")
        return splits[split]

    def question(self, story: Story) -> Question:
        """A question in any of the forms of the module docstring, as the reader reads it and as words."""
        if isinstance(story, str):
            if not self.task.startswith("babi:"):
                raise ValueError(f"a story given as text is a bAbI story; this reader reads {self.task}")
            examples = parse_babi(story, int(self.task.partition(":")[2]), chains=checkpoint_chains(self.checkpoint))
            if not examples:
                raise ValueError("the story has no question (a line 'N question?<TAB>answer<TAB>facts')")
            story = examples[-1]
        if isinstance(story, BabiExample):
            if not self.task.startswith("babi:"):
                raise ValueError(f"a BabiExample is a bAbI question; this reader reads {self.task}")
            example = babi_reading_example(story, self._index, self._answers)
            return Question(example, story.document, story.question, story.answer)
        if isinstance(story, ReadingExample):
            return Question(story, tuple(self.words[i] for i in story.document),
                            tuple(self.words[i] for i in story.query), self._label(story.answer))
        raise ValueError(f"a question is a bAbI story (str), a BabiExample or a ReadingExample, not "
                         f"{type(story).__name__}")

    def _label(self, answer: int) -> str | None:
        if self.classes is None:  # a word id; 0, padding, is no answer
            return self.words[answer] if 0 < answer < len(self.words) else None
        return self.classes[answer] if 0 <= answer < len(self.classes) else None  # -1: a class unseen in training

    def _batch(self, example: ReadingExample, chains: bool):
        example = example if chains else replace(example, clusters=())
        return make_reading_batch([example], self.config.max_chains).to(self.device)

    # ---- answers and attention

    def answer(self, story: Story, chains: bool = True, top: int = 3) -> Answer:
        """The reader's answer to a question and the probabilities of its ``top`` most probable answers;
        ``chains=False`` reads the story with no coreference chain (every token then has its sequential edge
        only, so a C-GRU layer reads like a GRU): the same weights, to see how much they rely on the chains."""
        question = self.question(story)
        with torch.no_grad():
            probabilities = self.module.answer_logits(self._batch(question.example, chains))[0].exp().cpu()
        values, ids = probabilities.topk(min(top, int((probabilities > 0).sum())))
        labels = {i: self._label(i) or f"<id {i}>" for i in ids.tolist()}
        ranked = {labels[i]: p for p, i in zip(values.tolist(), ids.tolist())}
        return Answer(question, next(iter(ranked)), ranked, chains)

    def relation_attention(self, story: Story) -> RelationAttention:
        """Each C-GRU layer's attention over relation types per token and direction while reading a question's
        story (``module.coref_attention``). ValueError for a reader without C-GRU layers."""
        if self.config.recurrent != "cgru":
            raise ValueError(f"a {self.kind} reader has no C-GRU layers, so no relation attention")
        question = self.question(story)
        batch = self._batch(question.example, chains=True)
        with torch.no_grad():
            masses = torch.stack([layer[0] for layer in self.module.coref_attention(batch)]).cpu().numpy()
        choice = np.stack([batch.edges.incoming[0, :, 1:].any(-1).cpu().numpy(),  # forward: edges read here
                           batch.edges.outgoing[0, :, 1:].any(-1).cpu().numpy()], axis=-1)  # backward: swapped
        return RelationAttention(question, masses, choice)

    def word_preferences(self, words: Sequence[str]) -> WordPreferences:
        """Layer 1's attention on the coreferent state at a token of each word with one incoming coreference edge,
        per direction (:meth:`generative.coref_gru.CorefGRU.attention` over a sequential and a coreferent chain):
        in layer 1 it depends on the word's embedding alone. ValueError for a reader without C-GRU layers or a
        word outside its vocabulary."""
        if self.config.recurrent != "cgru":
            raise ValueError(f"a {self.kind} reader has no C-GRU layers, so no relation keys")
        unknown = [word for word in words if word not in self._index]
        if unknown:
            raise ValueError(f"words outside the reader's vocabulary: {unknown}")
        layer = self.module.documents[0].rnn
        with torch.no_grad():
            inputs = self.module.embedding(torch.tensor([[self._index[w] for w in words]], device=self.device))
            incoming = torch.ones(1, len(words), 2, dtype=torch.bool, device=self.device)
            relation = torch.tensor([0, 1], device=self.device).expand(1, len(words), 2)
            values = [direction.attention(inputs, incoming, relation)[0, :, 1].tolist()
                      for direction in (layer.forward_layer, layer.backward_layer)]
        return WordPreferences({word: (fw, bw) for word, fw, bw in zip(words, *values)})

    def accuracy(self, questions: str | Sequence[Story] = "test", chains: bool = True,
                 data_dir: str | None = None) -> float:
        """The fraction of questions answered right (:func:`inference.training.coref_gru.accuracy`): a split's name
        (read from ``data_dir``) or a list of questions; ``chains=False`` reads every story without its chains."""
        examples = self.examples(questions, data_dir) if isinstance(questions, str) else \
            [self.question(story).example for story in questions]
        if not examples:
            raise ValueError("no questions to answer")
        if not chains:
            examples = [replace(example, clusters=()) for example in examples]
        return accuracy(self.module, batches(examples, EVAL_BATCH, self.config.max_chains, self.device))
