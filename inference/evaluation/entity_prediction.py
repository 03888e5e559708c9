"""Entity prediction on InScript (Ji et al. 2017, §5.3, Table 3): which entity does the next mention refer to?
(:func:`evaluate_entity_prediction`; its command is :mod:`inference.commands.entity_prediction`, ``python -m
inference.entity_prediction``.)

The protocol (Modi et al. 2017, as adapted by the paper): R is given, so the positions of mention starts are
known; after the first three sentences of a story, at each of its first (at most) 30 mention starts, a
predictor sees the left context with its gold entities and names the entity of the mention: one mentioned
before, or "new". Accuracy over all such slots of the test split, and per scenario.

Predictors:

- **always-new**;
- **shallow features**: a linear (conditional-logit) classifier over the candidates (every entity mentioned so
  far, and "new") with the features of Modi et al. (2017): recency of the entity's last mention and its
  frequency so far; fitted by maximum likelihood on every mention of the training split;
- **EntityNLM**: argmax of p(E_t | R_t = 1, history) (eq. 4) in one teacher-forced run over the story's gold
  R, E, L: the history is the words and gold entities of the left context only;
- **EntityNLM, new-entity bias tuned on dev** (ours): the same, with one constant added to the new entity's
  log-probability, chosen for accuracy on the dev split. The model is trained to predict every mention, and
  most training mentions are not slots (the slots come late in a story, where fewer entities are new), so
  its "new" probability need not be calibrated for the slots.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from pyro.poutine.messenger import Messenger

from coref.corpora.preprocess import Vocabulary
from coref.document import Document, encode_entities
from coref.io.progress import progress
from generative.entitynlm.heads import DrawnRows
from generative.entitynlm.model import Annotation, EntityNLM
from generative.layers.batch import batches_by_length, stream_positions
from inference.data import prepared_documents
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import CheckpointError, entitynlm_checkpoint, entitynlm_modules

NEW = -1  # the prediction "a new entity"
PAPER = {"always-new": 31.08, "shallow features": 45.34, "Modi et al. (2017)": 62.65, "EntityNLM": 74.23,
         "human": 77.35}


@dataclass(frozen=True)
class Slot:
    """A mention start to predict: its token, the gold entity (NEW for a first mention) and the entities so far,
    each with its last mention's token and sentence and its mention count."""

    document: str
    token: int
    gold: int
    known: tuple[int, ...]
    last_token: tuple[int, ...]
    last_sentence: tuple[int, ...]
    count: tuple[int, ...]
    sentence: int


def slots(document: Document, skip_sentences: int = 3, max_slots: int | None = 30) -> list[Slot]:
    """The prediction slots of a story: its mention starts from sentence ``skip_sentences`` on, the first
    ``max_slots`` of them (all mentions with ``skip_sentences=0, max_slots=None``, as training uses)."""
    sentence_of = document.sentence_of()
    seen: dict[int, tuple[int, int, int]] = {}  # entity -> (last token, last sentence, count)
    found = []
    for mention in document.mentions:
        sentence = sentence_of[mention.start]
        if sentence >= skip_sentences and (max_slots is None or len(found) < max_slots):
            known = tuple(seen)
            found.append(Slot(
                document.id, mention.start, mention.entity if mention.entity in seen else NEW, known,
                tuple(seen[e][0] for e in known), tuple(seen[e][1] for e in known), tuple(seen[e][2] for e in known),
                sentence,
            ))
        count = seen.get(mention.entity, (0, 0, 0))[2]
        seen[mention.entity] = (mention.end - 1, sentence, count + 1)
    return found


# ---- the shallow-feature baseline -----------------------------------------------------------------------------


def candidate_features(slot: Slot) -> np.ndarray:
    """(1 + known entities, 6) features of the candidates: "new" has an indicator and log(1 + known entities);
    a known entity has log(1 + tokens since its last mention), log(1 + sentences since), log(1 + its mentions so
    far) and whether it is the most recently mentioned entity."""
    known = len(slot.known)
    rows = np.zeros((known + 1, 6))
    rows[0, :2] = 1.0, math.log1p(known)
    if known:
        rows[1:, 2] = np.log1p(slot.token - np.array(slot.last_token))
        rows[1:, 3] = np.log1p(slot.sentence - np.array(slot.last_sentence))
        rows[1:, 4] = np.log1p(np.array(slot.count))
        rows[1 + int(np.argmax(slot.last_token)), 5] = 1.0
    return rows


def _target(slot: Slot) -> int:
    return 0 if slot.gold == NEW else 1 + slot.known.index(slot.gold)


class ShallowClassifier:
    """A conditional logit over the candidates of a slot: score = w . features (see :func:`candidate_features`)."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = weights

    @classmethod
    def fit(cls, training: Sequence[Slot], steps: int = 200) -> ShallowClassifier:
        """Maximum likelihood (L-BFGS) on the training slots."""
        features = [torch.tensor(candidate_features(slot), dtype=torch.float64) for slot in training]
        targets = [_target(slot) for slot in training]
        padded = torch.nn.utils.rnn.pad_sequence(features, batch_first=True)  # (S, C, F)
        valid = torch.nn.utils.rnn.pad_sequence([torch.ones(len(f), dtype=torch.bool) for f in features],
                                                batch_first=True)
        target = torch.tensor(targets)
        weights = torch.zeros(padded.shape[-1], dtype=torch.float64, requires_grad=True)
        optimizer = torch.optim.LBFGS([weights], max_iter=steps, line_search_fn="strong_wolfe")

        def loss() -> torch.Tensor:
            optimizer.zero_grad()
            logits = (padded @ weights).masked_fill(~valid, -math.inf)
            value = torch.nn.functional.cross_entropy(logits, target)
            value.backward()
            return value

        optimizer.step(loss)
        return cls(weights.detach().numpy())

    def predict(self, slot: Slot) -> int:
        choice = int(np.argmax(candidate_features(slot) @ self.weights))
        return NEW if choice == 0 else slot.known[choice - 1]


# ---- EntityNLM ---------------------------------------------------------------------------------------------


class EntityLogits(Messenger):
    """Records the model's log-probabilities over the entity slots (known entities, then the new one) at every
    E site, left on the device until the run ends."""

    def __init__(self) -> None:
        super().__init__()
        self.logits: dict[int, torch.Tensor] = {}

    def _postprocess_message(self, msg: dict) -> None:
        if msg["type"] == "sample" and msg["name"].startswith("E_"):
            site = msg["fn"]
            while not isinstance(site, DrawnRows):  # under the mask and the plates' expansion
                site = site.base_dist
            # eq. 4 is drawn only in the rows where a mention starts: the others stay -inf
            logits = site.drawn.logits.new_full((*site.batch_shape, site.drawn.logits.shape[-1]), -math.inf)
            logits[site.rows] = site.drawn.logits
            self.logits[int(msg["name"][2:])] = logits[0]  # (B, C)


@dataclass(frozen=True)
class EntityScores:
    """EntityNLM's view of a slot: the best known entity (None before any) and how much more log-probability
    the new entity has than it (+inf when no entity is known)."""

    best_known: int | None
    new_margin: float

    def prediction(self, new_bias: float = 0.0) -> int:
        """The argmax (eq. 4), with ``new_bias`` added to the new entity's log-probability."""
        return NEW if self.best_known is None or self.new_margin + new_bias >= 0 else self.best_known


@torch.no_grad()
def entitynlm_scores(
    model: EntityNLM, documents: Sequence[Document], slots_of: dict[str, list[Slot]], vocabulary: Vocabulary,
    device: torch.device, batch_tokens: int = 20_000,
) -> dict[tuple[str, int], EntityScores]:
    """EntityNLM's scores at every slot, from one teacher-forced run per batch of stories."""
    scores = {}
    by_key = {document.key: document for document in documents}
    batches = batches_by_length(documents, vocabulary, batch_tokens)
    for batch in progress(batches, desc="EntityNLM: scoring the slots", unit="batch"):
        batch = batch.to(device)
        with EntityLogits() as recorded:
            model.story(batch, 1, Annotation.of(batch))
        for b, key in enumerate(batch.keys):
            document = by_key[key]
            stream = stream_positions(document)
            for slot in slots_of[document.id]:  # entity slot k holds the (k + 1)-th entity by first mention
                logits = recorded.logits[stream[slot.token]][b].double().cpu()
                known = len(slot.known)
                if known == 0:
                    scores[document.id, slot.token] = EntityScores(None, math.inf)
                    continue
                best = int(logits[:known].argmax())
                scores[document.id, slot.token] = EntityScores(slot.known[best], float(logits[known] - logits[best]))
    return scores


def tune_new_bias(dev_slots: Sequence[Slot], scores: dict[tuple[str, int], EntityScores],
                  grid: Sequence[float] = tuple(x / 4 for x in range(-16, 17))) -> tuple[float, dict[float, float]]:
    """The bias on the new entity's log-probability that maximises dev accuracy (ties: the smallest |bias|)."""
    accuracy = {bias: float(np.mean([scores[s.document, s.token].prediction(bias) == s.gold for s in dev_slots]))
                for bias in grid}
    best = max(accuracy.values())
    return min((bias for bias in grid if accuracy[bias] == best), key=abs), accuracy


# ---- the command ---------------------------------------------------------------------------------------------


def accuracy_table(all_slots: Sequence[Slot], predictions: dict[str, dict[tuple[str, int], int]]) -> dict:
    """Accuracy (%) of every predictor, overall and per scenario (the story id's prefix)."""
    table = {}
    for name, predicted in predictions.items():
        correct: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for slot in all_slots:
            scenario = slot.document.split("_")[0]
            hit = predicted[slot.document, slot.token] == slot.gold
            for group in ("all", scenario):
                correct[group] += hit
                total[group] += 1
        table[name] = {group: 100 * correct[group] / total[group] for group in total}
    return table


Predictions = dict[tuple[str, int], int]  # (story, token) -> predicted entity (NEW for a new one)


def mcnemar_p(all_slots: Sequence[Slot], first: Predictions, second: Predictions) -> float:
    """Exact McNemar test (two-sided binomial test on the slots exactly one of two predictors gets right)."""
    from scipy.stats import binomtest

    right = [(first[s.document, s.token] == s.gold, second[s.document, s.token] == s.gold) for s in all_slots]
    only_first = sum(a and not b for a, b in right)
    only_second = sum(b and not a for a, b in right)
    return float(binomtest(only_first, only_first + only_second).pvalue) if only_first + only_second else 1.0


def evaluate_entity_prediction(checkpoint: str, corpus: str = "inscript", split: str = "test",
                               train_split: str = "train", dev_split: str = "dev", data_dir: str | None = None,
                               skip_sentences: int = 3, max_slots: int = 30, device: str = "auto",
                               seed: int = 0) -> dict:
    """Every predictor's accuracy on the slots of ``split`` (after ``skip_sentences`` sentences, at most
    ``max_slots`` per story), the shallow baseline fitted on ``train_split`` and the new-entity bias tuned on
    ``dev_split``, with the paper's figures and the McNemar test: the result ``python -m
    inference.entity_prediction`` prints and writes as JSON. ``checkpoint`` is an EntityNLM trained with its
    singletons kept."""
    set_seed(seed)
    where = resolve_device(device)
    _, loaded = entitynlm_checkpoint(checkpoint)
    if loaded.preprocess.drop_singletons:
        raise CheckpointError(f"{checkpoint}: trained without singletons; entity prediction needs a model "
                              "trained with --keep-singletons")
    model = entitynlm_modules(loaded, where)[0]
    started = time.perf_counter()
    training, dev, test = (prepared_documents(corpus, name, data_dir, loaded.preprocess, loaded.vocabulary,
                                              quiet=True)
                           for name in (train_split, dev_split, split))
    shallow = ShallowClassifier.fit([slot for document in training for slot in slots(document, 0, None)])
    slots_of = {document.id: slots(document, skip_sentences, max_slots) for document in test + dev}
    all_slots = [slot for document in test for slot in slots_of[document.id]]
    dev_slots = [slot for document in dev for slot in slots_of[document.id]]
    for document in test:
        encode_entities(document)  # a clear error for a story the model cannot read
    scores = entitynlm_scores(model, test + dev, slots_of, loaded.vocabulary, where)
    new_bias, dev_curve = tune_new_bias(dev_slots, scores)
    predictions = {
        "always-new": defaultdict(lambda: NEW),
        "shallow features": {(slot.document, slot.token): shallow.predict(slot) for slot in all_slots},
        "EntityNLM": {key: score.prediction() for key, score in scores.items()},
        "EntityNLM, new-entity bias tuned on dev": {key: score.prediction(new_bias) for key, score in scores.items()},
    }
    return {
        "corpus": corpus, "split": split, "checkpoint": str(checkpoint), "stories": len(test),
        "slots": len(all_slots), "new_slots": sum(slot.gold == NEW for slot in all_slots),
        "accuracy": accuracy_table(all_slots, predictions), "paper": PAPER,
        "p_entitynlm_vs_shallow": mcnemar_p(all_slots, predictions["EntityNLM"], predictions["shallow features"]),
        "new_bias": new_bias, "dev_accuracy_by_new_bias": {str(b): a for b, a in dev_curve.items()},
        "shallow_weights": shallow.weights.tolist(), "seconds": time.perf_counter() - started,
    }


def format_result(result: dict) -> str:
    """The accuracies beside the paper's, per scenario, as the command prints them."""
    accuracy = result["accuracy"]
    scenarios = sorted(group for group in accuracy["EntityNLM"] if group != "all")
    lines = [f"{result['corpus']}/{result['split']}: {result['stories']} stories, {result['slots']} slots "
             f"({result['new_slots']} new entities)",
             f"{'predictor':<40} {'accuracy':>8} {'paper':>7}  " + " ".join(f"{s[:7]:>7}" for s in scenarios)]
    for name, row in accuracy.items():
        paper = result["paper"].get(name)
        lines.append(f"{name[:40]:<40} {row['all']:>8.2f} {'' if paper is None else f'{paper:.2f}':>7}  "
                     + " ".join(f"{row[s]:>7.2f}" for s in scenarios))
    for name in ("Modi et al. (2017)", "human"):
        lines.append(f"{name:<40} {'':>8} {result['paper'][name]:>7.2f}")
    lines.append(f"new-entity bias chosen on dev: {result['new_bias']:+.2f}; EntityNLM vs shallow features: "
                 f"exact McNemar p = {result['p_entitynlm_vs_shallow']:.2g}")
    return "\n".join(lines)
