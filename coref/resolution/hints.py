"""What the coreference pipeline believes about a document, in the form a proposal for EntityNLM can use.

EntityNLM's proposal Q has to guess, token by token, where mentions start, how long they are and which entity
each one continues. The pipeline (:class:`~coref.resolution.pipeline.CorefPipeline`) answers the same questions
better (its CoNLL F1 on LitBank is twice that of Q's MAP). :func:`pipeline_hints` reads a document
the way EntityNLM's world allows it, R/E/L-encodable:

- the detector's mentions (at the ranker's mention threshold; the detector drops the less probable of two
  crossing spans), outermost only, at most ``max_length`` tokens (EntityNLM's L), each with its detector
  probability;
- for each, the ranker's antecedent distribution: a softmax over its scores (the root, "a new entity",
  scoring 0) divided by ``temperature``, cut to the ``top`` most probable antecedents (the rest of the mass
  goes to "new"): memory linear in the mentions;
- whether greedy decoding links it to any other mention (EntityNLM's annotations hold no singletons), and the
  greedy clusters themselves: the pipeline's own answer on these mentions.

A proposal mixes these with its own distributions (:mod:`generative.entitynlm.hints`); nothing here is torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coref.corpora.preprocess import outermost
from coref.document import Document, Mention
from coref.resolution.kbest import ROOT, clusters, tree_from_antecedents
from coref.resolution.pipeline import CorefPipeline
from coref.resolution.ranker import best_candidate, with_predicted_mentions

TOP_ANTECEDENTS = 10
MAX_LENGTH = 25  # EntityNLM's longest mention (L <= 25)


@dataclass(frozen=True)
class CorefHint:
    """The pipeline's reading of one document: ``spans`` (M) token spans, sorted, non-overlapping; ``detected``
    (M,) their detector probabilities; ``antecedents`` (M, K) indices of earlier spans (-1: none) with
    ``probabilities`` (M, K + 1), column 0 a new entity; ``linked`` (M,) bool, in a greedy cluster of two or
    more; ``clusters`` (M,) the greedy cluster of each span (1, 2, ... by first mention)."""

    spans: list[tuple[int, int]]
    detected: np.ndarray
    antecedents: np.ndarray
    probabilities: np.ndarray
    linked: np.ndarray
    clusters: np.ndarray

    def __len__(self) -> int:
        return len(self.spans)

    def restricted(self, kept: Sequence[int], spans: Sequence[tuple[int, int]]) -> CorefHint:
        """The hint of the mentions ``kept`` (indices, increasing), now at ``spans`` (e.g. mapped to another
        tokenisation): antecedents outside ``kept`` become -1 and their mass goes to a new entity."""
        kept_array = np.asarray(kept, dtype=np.int64)
        renumber = np.full(len(self) + 1, -1, dtype=np.int64)  # index -1 (no antecedent) stays -1
        renumber[kept_array] = np.arange(len(kept_array))
        antecedents = renumber[self.antecedents[kept_array]]
        probabilities = self.probabilities[kept_array].copy()
        lost = np.where(antecedents < 0, probabilities[:, 1:], 0.0)
        probabilities[:, 0] += lost.sum(1)
        probabilities[:, 1:] -= lost
        return CorefHint(list(spans), self.detected[kept_array], antecedents, probabilities,
                         self.linked[kept_array], self.clusters[kept_array])

    def tree_log_scores(self, labels: np.ndarray) -> np.ndarray:
        """The ranker's score of each partition of these spans, (S,) from ``labels`` (S, M): span j's cluster
        in partition s (any integers; a span alone in its cluster is a singleton). The score of the partition's
        best antecedent tree, as reranking scores a candidate (paper §5.2): every span's most probable arc from an
        earlier span of its cluster, or "new" for a cluster's first span, summed as log-probabilities. Greedy
        decoding's own partition scores highest. An earlier cluster-mate outside a span's listed antecedents
        counts as its least probable listed choice (an upper bound on its probability). At the ranker's softmax
        temperature T the scores are the arc-score sums divided by T, less a constant per document, so a weight
        on them absorbs T."""
        labels = np.asarray(labels, dtype=np.int64).reshape(-1, len(self))
        listed = self.antecedents >= 0
        same = listed & (labels[:, np.where(listed, self.antecedents, 0)] == labels[:, :, None])  # (S, M, K)
        best = np.where(same, self.probabilities[None, :, 1:], 0.0).max(-1, initial=0.0)
        positive = np.where(self.probabilities > 0, self.probabilities, np.inf).min(-1)
        order = np.argsort(labels, axis=1, kind="stable")
        ranked = np.take_along_axis(labels, order, 1)
        first = np.empty_like(labels, dtype=bool)
        np.put_along_axis(first, order, np.c_[np.ones((len(labels), 1), dtype=bool),
                                              ranked[:, 1:] != ranked[:, :-1]][:, :len(self)], 1)
        arc = np.where(first, self.probabilities[:, 0], np.where(best > 0, best, positive))
        return np.log(np.maximum(arc, np.finfo(float).tiny)).sum(1)  # a probability rounded to 0 stays finite

    def response(self, document: Document, singletons: bool = False) -> Document:
        """``document`` with the pipeline's greedy clusters of its linked spans: the pipeline's own answer
        (``singletons``: of every span, those it leaves alone in clusters of their own)."""
        return document.replace(mentions=[Mention(start, end, int(cluster)) for (start, end), cluster, linked
                                          in zip(self.spans, self.clusters, self.linked) if linked or singletons])


def pipeline_hints(pipeline: CorefPipeline, documents: Sequence[Document], temperature: float = 1.0,
                   top: int = TOP_ANTECEDENTS, max_length: int = MAX_LENGTH) -> list[CorefHint]:
    """:class:`CorefHint` of each document (only its tokens and sentences are read), the detector run on all of
    them in one batch."""
    if temperature <= 0:
        raise ValueError(f"the ranker's temperature must be positive, got {temperature}")
    found = pipeline.detector.span_probabilities(documents, threshold=pipeline.ranker.mention_threshold)
    return [_hint(pipeline, document, spans, temperature, top, max_length) for document, spans in zip(documents, found)]


def _hint(pipeline: CorefPipeline, document: Document, found: dict[tuple[int, int], float], temperature: float,
          top: int, max_length: int) -> CorefHint:
    candidates = [Mention(start, end, 0) for (start, end) in sorted(found) if end - start <= max_length]
    spans = [mention.span for mention in outermost(candidates)]
    ranked = with_predicted_mentions(document.replace(mentions=()), spans)
    antecedents = np.full((len(spans), top), -1, dtype=np.int64)
    probabilities = np.zeros((len(spans), top + 1))
    greedy = []
    for j, (candidate, scores) in enumerate(pipeline.ranker.candidate_scores(ranked, progress=False)):
        with_root = np.concatenate([[0.0], scores]) / temperature
        weights = np.exp(with_root - with_root.max())
        weights /= weights.sum()
        order = np.argsort(-weights[1:], kind="stable")[:top]
        antecedents[j, :len(order)] = candidate[order]
        probabilities[j, 1:len(order) + 1] = weights[1:][order]
        probabilities[j, 0] = 1.0 - probabilities[j, 1:].sum()
        best = best_candidate(with_root)  # the ranker's greedy decoding: ties to the closest, the root last
        greedy.append(ROOT if best == ROOT else int(candidate[best - 1]) + 1)
    cluster = np.zeros(len(spans), dtype=np.int64)
    linked = np.zeros(len(spans), dtype=bool)
    for number, members in enumerate(sorted(clusters(tree_from_antecedents(greedy)), key=min), start=1):
        indices = np.asarray(sorted(members), dtype=np.int64) - 1
        cluster[indices] = number
        linked[indices] = len(indices) > 1
    detected = np.asarray([found[span] for span in spans])
    return CorefHint(spans, detected, antecedents, probabilities, linked, cluster)
