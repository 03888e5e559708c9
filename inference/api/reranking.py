"""Reranking a coreference resolver's k-best structures with EntityNLM (paper §5.2), one document at a time:
:meth:`LanguageModel.rerank <inference.api.LanguageModel.rerank>` gives a :class:`Reranking`, and
:func:`train_resolver` trains the base resolver as ``python -m coref.resolver train`` does.

The candidates are those of ``python -m inference.rerank`` (:func:`inference.evaluation.rerank.rerank_document`): the
resolver scores every antecedent arc over the document's gold mentions, a k-best generator
(:mod:`coref.resolution.kbest`) turns the table into a list of antecedent trees, and every distinct partition is scored
by EntityNLM's log p(R, E, L, X) (eq. 12) with its new-entity embedding at its mean, so scores are deterministic.
The choices are those of :mod:`coref.resolution.rerank`: the base one-best, EntityNLM alone, EntityNLM + ``weight`` x
the resolver's tree score, and the oracle (best CoNLL F1 against the document's own clusters).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

from coref.document import Document
from coref.resolution.kbest import Partition, document_with_clusters
from coref.resolution.pipeline import BUNDLED as BUNDLED_COREF
from coref.resolution.ranker import MentionRanker, resolver_documents, resolver_syntax
from coref.resolution.rerank import (
    GENERATORS,
    Candidate,
    CandidateList,
    base_choice,
    format_weight,
    interpolated_choice,
    oracle_choice,
)
from inference.api.tables import html_table
from inference.training.resolution import train_ranker

Resolver = MentionRanker | str | os.PathLike | None


def train_resolver(corpus: str = "sample", split: str = "train", data_dir: str | None = None, epochs: int = 5,
                   seed: int = 23, lowercase: bool = False) -> MentionRanker:
    """The base mention-ranking resolver trained on the gold mentions and clusters of a corpus split (cort's
    latent structured perceptron), as ``python -m coref.resolver train --corpus CORPUS`` trains it (the same
    documents, parses where the corpus has them, and settings), without scoring dev after each epoch. Save it
    with ``.save(path)``; :meth:`LanguageModel.rerank` takes it or its path."""
    if isinstance(epochs, bool) or not isinstance(epochs, Integral) or epochs < 1:
        raise ValueError(f"epochs must be an integer of at least 1, got {epochs!r}")
    documents = resolver_documents(corpus, split, data_dir)
    if not documents:
        raise ValueError(f"{corpus}/{split} has no documents to train a resolver on")
    ranker = train_ranker(documents, resolver_syntax(corpus, split, data_dir, documents), epochs=epochs,
                                 seed=seed, lowercase=lowercase, progress=False)
    ranker.settings.update(corpus=corpus, keep_singletons=False, detector=None)
    return ranker


def resolver_of(resolver: Resolver) -> MentionRanker:
    """A :class:`~coref.resolution.ranker.MentionRanker` as it is, the one a path names (``python -m coref.resolver
    train``'s .npz), or for None the bundled one of :func:`~inference.api.coreference` (trained on LitBank's
    detected mentions; a resolver trained on gold mentions, :func:`train_resolver`, is the paper's setting)."""
    if isinstance(resolver, MentionRanker):
        return resolver
    if resolver is None:
        return MentionRanker.load(BUNDLED_COREF["resolver"])
    if isinstance(resolver, (str, os.PathLike)):
        return MentionRanker.load(resolver)  # a file that is no resolver is a ValueError naming it
    raise ValueError(f"resolver must be a MentionRanker (train_resolver), the path of one, or None (the bundled "
                     f"one), not {type(resolver).__name__}")


def check_rerank_options(k: int, weight: float | None, generator: str) -> None:
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"k must be an integer of at least 1, got {k!r}")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, Real) or math.isnan(weight)
                               or weight < 0):
        raise ValueError(f"weight must be a number of at least 0 (inf: the resolver score alone) or None, "
                         f"got {weight!r}")
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")


@dataclass(frozen=True)
class Reranking:
    """A document's k-best list reranked by EntityNLM: ``candidates`` (a :class:`coref.resolution.rerank.CandidateList`:
    the base one-best first, then the list's other distinct partitions in list order), each with the resolver's
    tree score, EntityNLM's log p(R, E, L, X) and its evaluation against the document's clusters; ``document``
    the document as the resolver read it (gold mentions, case kept). ``choices`` names the candidate each system
    picks: ``base``, ``EntityNLM``, ``interpolated`` (when a ``weight`` was given) and ``oracle``."""

    document: Document
    candidates: CandidateList
    generator: str
    k: int
    weight: float | None = None

    def __len__(self) -> int:
        return len(self.candidates.candidates)

    def __getitem__(self, index: int) -> Candidate:
        return self.candidates.candidates[index]

    @property
    def resolver_scores(self) -> np.ndarray:
        """Per candidate: the resolver's score of its antecedent tree (the sum of its arcs)."""
        return np.array([candidate.resolver_score for candidate in self.candidates.candidates])

    @property
    def log_probs(self) -> np.ndarray:
        """Per candidate: EntityNLM's log p(R, E, L, X) of the words with its clusters (nats)."""
        return np.array([candidate.log_prob for candidate in self.candidates.candidates])

    @property
    def conll_f1(self) -> np.ndarray:
        """Per candidate: its CoNLL F1 against the document's clusters (a fraction; singletons dropped)."""
        return np.array([candidate.evaluation.conll_f1 for candidate in self.candidates.candidates])

    @property
    def choices(self) -> dict[str, int]:
        """The candidate each system chooses (:mod:`coref.resolution.rerank`'s choosers, ties to the resolver's
        order)."""
        chosen = {"base": base_choice(self.candidates), "EntityNLM": interpolated_choice(self.candidates, 0.0)}
        if self.weight is not None:
            chosen["interpolated"] = interpolated_choice(self.candidates, self.weight)
        chosen["oracle"] = oracle_choice(self.candidates)
        return chosen

    @property
    def base(self) -> int:
        return self.choices["base"]

    @property
    def entitynlm(self) -> int:
        return self.choices["EntityNLM"]

    @property
    def interpolated(self) -> int | None:
        return self.choices.get("interpolated")

    @property
    def oracle(self) -> int:
        return self.choices["oracle"]

    def partition(self, index: int) -> Partition:
        """Candidate ``index``'s clusters, as sets of mention numbers 1..n in text order."""
        return self[index].partition

    def structure(self, index: int) -> Document:
        """The document with candidate ``index``'s clusters (:func:`coref.resolution.kbest.document_with_clusters`)."""
        return document_with_clusters(self.document, self[index].partition)

    def clusters(self, index: int) -> list[list[str]]:
        """Candidate ``index``'s entities as the words of their mentions, in text order."""
        structure = self.structure(index)
        entities: dict[object, list[str]] = {}
        for mention in structure.mentions:
            entities.setdefault(mention.entity, []).append(structure.mention_text(mention))
        return list(entities.values())

    def summary(self) -> str:
        weight = "" if self.weight is None else f", weight {format_weight(self.weight)}"
        return (f"{self.document.id}: {len(self.document.mentions)} gold mentions, {len(self)} distinct candidates "
                f"of a {self.generator} {self.k}-best list{weight}")

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        marks: dict[int, list[str]] = {}
        for name, index in self.choices.items():
            marks.setdefault(index, []).append(name)
        return [(str(number), f"{candidate.resolver_score:.1f}", f"{candidate.log_prob:.2f}",
                 f"{100 * candidate.evaluation.conll_f1:.2f}", ", ".join(marks.get(number, [])))
                for number, candidate in enumerate(self.candidates.candidates)]

    HEADERS = ("#", "resolver score", "log p(R,E,L,X)", "CoNLL F1", "chosen by")

    def __repr__(self) -> str:
        lines = [f"Reranking({self.summary()})",
                 f"{'#':>3} {'resolver score':>15} {'log p(R,E,L,X)':>15} {'CoNLL F1':>9}  chosen by"]
        for number, score, log_prob, f1, marks in self.rows():
            lines.append(f"{number:>3} {score:>15} {log_prob:>15} {f1:>9}  {'<- ' + marks if marks else ''}".rstrip())
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return html_table(self.HEADERS, self.rows(), self.summary())
