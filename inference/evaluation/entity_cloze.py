"""Entity cloze by sentence likelihood, scored by the Mean Quantile (Kobayashi et al. 2017, §5.2.3, Table 4):
:func:`entity_cloze`, whose command is :mod:`inference.commands.entity_cloze` (``python -m inference.entity_cloze``).

On the Anonymized Language Modelling data, every sentence that mentions an entity already mentioned in an earlier
sentence is a cloze: its first such mention is the slot, the entities mentioned before the sentence are the
candidates, the true one e+ and the others E-. The model scores each candidate by the likelihood of the sentence
with the slot filled by that candidate, given the document before it; the Mean Quantile (eq. 11) is, averaged
over clozes, the fraction of E- scored below e+:

    MQ = |{e- in E- : p(e-) < p(e+)}| / |E-|

A cloze with no other candidate is left out (its quantile is undefined), as are ties' halves: a tie counts as
not below. All filled sentences of all clozes run as rows of a few large batches. Each row reads the whole
document before its sentence (the softmax runs on the sentence alone), so a split's clozes cost (candidates x
prefix length) LSTM steps each; ``max_clozes`` scores a seeded random sample of them (the result says how many
of how many).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from coref.corpora.anonymise import ENTITY_TOKENS
from coref.document import Document, Mention
from generative.registry import LANGUAGE_MODELS
from inference.data import language_model_documents
from inference.evaluation.perplexity import document_log_probs
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint, CheckpointError


@dataclass(frozen=True)
class Cloze:
    """One sentence of a document with its slot: the token of the first mention of an entity seen before it."""

    document: Document
    sentence: int
    slot: int  # token index in the document
    answer: int  # e+
    candidates: tuple[int, ...]  # e+ and E-, by first appearance

    def filled(self, entity: int) -> Document:
        """The document up to the end of the cloze sentence, the slot filled with ``entity``."""
        end = self.document.sentences[self.sentence][1]
        tokens = list(self.document.tokens[:end])
        tokens[self.slot] = ENTITY_TOKENS[entity - 1]
        mentions = [Mention(m.start, m.end, entity if m.start == self.slot else m.entity)
                    for m in self.document.mentions if m.end <= end]
        name = f"{self.document.id}#s{self.sentence}#e{entity}"
        return Document(name, tokens, self.document.sentences[: self.sentence + 1], mentions, self.document.part)


def clozes(document: Document) -> list[Cloze]:
    """The document's clozes (see the module docstring)."""
    found, seen = [], []  # seen: entities of earlier sentences, in order of first appearance
    by_sentence = [[m for m in document.mentions if start <= m.start < end] for start, end in document.sentences]
    for number, mentions in enumerate(by_sentence):
        slot = next((m for m in mentions if m.entity in seen), None)
        if slot is not None and len(seen) > 1:
            found.append(Cloze(document, number, slot.start, slot.entity, tuple(seen)))
        seen.extend(entity for entity in dict.fromkeys(m.entity for m in mentions) if entity not in seen)
    return found


def mean_quantile(scores: Sequence[dict[int, float]], answers: Sequence[int]) -> float:
    """Mean over clozes of the fraction of wrong candidates scored strictly below the right one (eq. 11)."""
    quantiles = []
    for score, answer in zip(scores, answers):
        wrong = [value for entity, value in score.items() if entity != answer]
        quantiles.append(sum(value < score[answer] for value in wrong) / len(wrong))
    return float(np.mean(quantiles)) if quantiles else float("nan")


def sample_clozes(documents: Sequence[Document], max_clozes: int | None, seed: int) -> tuple[list[Cloze], int]:
    """The clozes of ``documents`` (in document order), a random sample of ``max_clozes`` of them seeded by
    ``seed`` when there are more (None: all), and how many there were in all."""
    every = [cloze for document in documents for cloze in clozes(document)]
    if max_clozes is None:
        return every, len(every)
    kept = np.random.default_rng(seed).permutation(len(every))[:max_clozes]
    return [every[i] for i in sorted(kept)], len(every)


def sentence_scores(checkpoint: Checkpoint, cloze_list: Sequence[Cloze], device: torch.device,
                    batch_tokens: int, model: torch.nn.Module | None = None,
                    progress: bool = True) -> list[dict[int, float]]:
    """log p(cloze sentence filled with each candidate | the document before it), per cloze and candidate
    (``model``: the checkpoint's, already built on ``device``; default built here)."""
    filled = [cloze.filled(entity) for cloze in cloze_list for entity in cloze.candidates]
    # Targets are the words then </s> of every sentence, so sentence i's first target follows i earlier </s>.
    first_targets = [cloze.document.sentences[cloze.sentence][0] + cloze.sentence for cloze in cloze_list]
    scored_from = [first for cloze, first in zip(cloze_list, first_targets) for _ in cloze.candidates]
    log_probs = iter(document_log_probs(checkpoint, filled, device, batch_tokens, progress=progress,
                                         scored_from=scored_from, model=model))
    scores = []
    for cloze in cloze_list:
        scores.append({entity: float(next(log_probs).sum()) for entity in cloze.candidates})
    return scores


def entity_cloze(checkpoint: str, corpus: str = "sample", split: str = "test", data_dir: str | None = None,
                 max_clozes: int | None = 200, batch_tokens: int = 32_000, device: str = "auto", seed: int = 0) -> dict:
    """The Mean Quantile of a model of the anonymised data (``checkpoint``) on the clozes of a corpus split (a
    sample of ``max_clozes`` of them, seeded by ``seed``): the result ``python -m inference.entity_cloze`` prints
    and writes as JSON."""
    set_seed(seed)
    where = resolve_device(device)
    loaded = Checkpoint.load(checkpoint)
    if loaded.kind not in LANGUAGE_MODELS or LANGUAGE_MODELS[loaded.kind].data != "anonymised":
        raise CheckpointError(f"{checkpoint}: the entity cloze needs a model of the anonymised data, not a "
                              f"{loaded.kind} checkpoint")
    documents = language_model_documents("anonymised", corpus, split, data_dir, loaded.preprocess, loaded.vocabulary)
    found, in_split = sample_clozes(documents, max_clozes, seed)
    scores = sentence_scores(loaded, found, where, batch_tokens)
    return {"checkpoint": str(checkpoint), "config": loaded.config, "corpus": corpus,
            "split": split, "clozes": len(found), "clozes_in_split": in_split,
            "mean_candidates": float(np.mean([len(c.candidates) for c in found])) if found else 0.0,
            "mean_quantile": mean_quantile(scores, [cloze.answer for cloze in found])}


def format_result(result: dict) -> str:
    """The result in one line, as the command prints it."""
    return (f"{result['corpus']}/{result['split']}: {result['clozes']} of {result['clozes_in_split']} clozes, "
            f"{result['mean_candidates']:.1f} candidates on average, mean quantile {result['mean_quantile']:.3f}")
