"""EntityNLM's posterior as a coreference resolver of text: the pipeline's mentions given, their entities
sampled, and the model's local link conditionals around the MAP.

The coreference pipeline finds the mentions (its detector, outermost, linked ones only, or with ``"detected"``
every span it finds) and resolves them (its ranker). On the same mentions, given to EntityNLM as observed R and L,
the posterior p(E | x, R, L) is sampled (:func:`pipeline_mention_posteriors`: particle Gibbs from the pipeline's
clusters, the proposal mixed with its hints); the MAP is the particle of highest log p(x, R, E, L) + w x the
ranker's tree score of its partition (w = 0: the posterior's own MAP). Around the MAP, the local conditionals
(:class:`LocalLinks`) give, for each mention and each cluster among the ``window`` mentions before it, P(the
mention joins that cluster | the MAP's other clusters, x), each candidate structure scored exactly by
log p(x, R, E, L) (:mod:`inference.algorithms.scoring`): a Gibbs conditional, not a marginal, and the link
probabilities that were calibrated on dev (at temperature :data:`LINK_TEMPERATURE`). On a text they are scored on
pieces of a bounded number of tokens (:func:`link_pieces`), so a book costs O(mentions x window x piece): linear in
its length. :func:`resolve_texts` is what ``python -m inference.posterior --text/--file/--conll`` and the API's
``posterior`` run; :mod:`inference.evaluation.posterior_resolver` scores it on corpora.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from coref.corpora.preprocess import Vocabulary, kept_tokens, preprocess_document
from coref.document import Document, excerpt, sentence_cuts
from coref.io.progress import progress as progress_bar
from coref.resolution.hints import CorefHint
from coref.resolution.rerank import interpolated_index
from generative.entitynlm.model import EntityNLM, EntityProposal
from inference.algorithms.config import GIVEN_MENTIONS, ProposalConfig
from inference.algorithms.hints import document_hints, hint_pipeline
from inference.algorithms.posterior import (
    Antecedent,
    AntecedentRanking,
    Posterior,
    PosteriorConfig,
    onto_original,
    posteriors,
)
from inference.algorithms.scoring import candidate_log_joints, noise_free
from inference.distributed import ranks
from inference.runtime import set_seed
from inference.training.checkpoint import Checkpoint, entitynlm_modules

WINDOW = 30  # each mention is paired with this many mentions before it
LINK_TEMPERATURE = 3.0  # the local link conditionals' temperature chosen on LitBank dev (calibrated there)
LINK_PIECE = 2_000  # tokens: the pieces a long text's local conditionals are scored on (:func:`link_pieces`)


def link_pairs(mentions: int, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) indices of every pair of mentions at most ``window`` mentions apart."""
    later = np.repeat(np.arange(mentions), np.minimum(np.arange(mentions), window))
    earlier = np.concatenate([np.arange(max(0, j - window), j) for j in range(mentions)] or [np.zeros(0, int)])
    return earlier.astype(np.int64), later


@dataclass(frozen=True)
class LocalLinks:
    """The scored moves of one MAP structure's mentions: mention ``mention[k]`` moved to cluster ``cluster[k]``
    scores ``score[k]`` = log p(x, R, E, L); the pairs of :func:`link_pairs` and each one's earlier mention's cluster.
    """

    mention: np.ndarray
    cluster: np.ndarray
    score: np.ndarray
    later: np.ndarray
    earlier_cluster: np.ndarray

    def move_probabilities(self, temperature: float = 1.0) -> np.ndarray:
        """P(mention[k] joins cluster[k] | the rest) for each move, the scores divided by ``temperature`` (1: the
        model's own conditional; above 1 a flatter, tempered one)."""
        scaled = self.score / temperature
        peak = np.full(self.mention.max(initial=-1) + 1, -np.inf)
        np.maximum.at(peak, self.mention, scaled)
        weight = np.exp(scaled - peak[self.mention])
        total = np.bincount(self.mention, weights=weight, minlength=len(peak))
        return weight / total[self.mention]

    def probabilities(self, temperature: float = 1.0) -> np.ndarray:
        """P(later joins earlier's cluster | the rest) for each pair, at ``temperature`` (as
        :meth:`move_probabilities`)."""
        moves = self.move_probabilities(temperature).tolist()
        joins = dict(zip(zip(self.mention.tolist(), self.cluster.tolist()), moves))
        return np.array([joins.get(pair, 0.0) for pair in zip(self.later.tolist(), self.earlier_cluster.tolist())])

    @classmethod
    def joined(cls, parts: Sequence[tuple[LocalLinks, int]]) -> LocalLinks:
        """The links of pieces of one document as one: each part's mentions numbered from its offset."""
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, np.zeros(0), empty, empty)
        return cls(*(np.concatenate([getattr(links, name) + offset * (name in ("mention", "later"))
                                     for links, offset in parts])
                     for name in ("mention", "cluster", "score", "later", "earlier_cluster")))


@dataclass(frozen=True)
class LocalMoves:
    """Every local move of a structure's mentions (``document``'s, sorted; ``labels`` their clusters): mention
    ``mention[k]`` moved to cluster ``cluster[k]``, the partition :meth:`partition` (k). Each mention moves to each
    cluster of the ``window`` mentions before it, or stays in its own, or leaves for a new one alone (unless its
    own is one already: each partition once). The partitions are built a chunk at a time, as they are scored, so
    memory stays linear in the mentions."""

    document: Document
    labels: np.ndarray
    mention: np.ndarray
    cluster: np.ndarray
    first: int = 0  # the mentions before this one are context only: they do not move

    @classmethod
    def of(cls, document: Document, window: int = WINDOW, first: int = 0) -> LocalMoves:
        mentions = sorted(document.mentions)
        labels = np.array([mention.entity for mention in mentions], dtype=np.int64)
        fresh = int(labels.max(initial=0)) + 1
        size = Counter(labels.tolist())
        moves: list[tuple[int, int]] = []
        for j in range(first, len(mentions)):
            alone = [fresh] if size[int(labels[j])] > 1 else []
            moves += [(j, cluster) for cluster in [
                *dict.fromkeys([*labels[max(0, j - window):j].tolist(), int(labels[j])]), *alone]]
        mention, cluster = (np.array(values, dtype=np.int64) for values in zip(*moves)) if moves else (
            np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        return cls(document.replace(mentions=mentions), labels, mention, cluster, first)

    def partition(self, k: int) -> frozenset:
        """Move ``k`` as a partition of the mentions (numbered from 1)."""
        return self.partition_after([k])

    def partition_after(self, ks: Sequence[int]) -> frozenset:
        """The partition of the mentions (numbered from 1) after moves ``ks``, of distinct mentions, all made (each
        mention that leaves for a new cluster alone in its own)."""
        moved = self.labels.copy()
        fresh = int(self.labels.max(initial=0)) + 1
        for k in ks:
            j = int(self.mention[k])
            moved[j] = self.cluster[k] if self.cluster[k] < fresh else fresh + j
        return frozenset(frozenset(np.flatnonzero(moved == label) + 1) for label in set(moved.tolist()))

    def links(self, scores: np.ndarray, window: int = WINDOW) -> LocalLinks:
        """These moves with their ``scores`` (of :meth:`scores`), and the pairs of :func:`link_pairs` they decide
        (those of the mentions that move)."""
        earlier, later = link_pairs(len(self.labels), window)
        decided = later >= self.first
        return LocalLinks(self.mention, self.cluster, scores, later[decided], self.labels[earlier[decided]])

    def scores(self, model: EntityNLM, checkpoint: Checkpoint, device: torch.device, chunk: int = 64
               ) -> torch.Tensor:
        """log p(x, R, E, L) of every move, scored exactly (``chunk`` per run; with gradient where autograd is on)."""
        moves = len(self.mention)
        return torch.cat([candidate_log_joints(model, checkpoint, self.document, [
            self.partition(k) for k in range(first, min(first + chunk, moves))], device)
            for first in range(0, moves, chunk)] or [torch.zeros(0, device=device)])


def local_links(model: EntityNLM, checkpoint: Checkpoint, document: Document, device: torch.device,
                window: int = WINDOW, chunk: int = 64, piece_tokens: int | None = None) -> LocalLinks:
    """Every mention of ``document`` (its clusters: a MAP structure) moved as :class:`LocalMoves` says, each
    candidate scored exactly (``chunk`` per run). ``piece_tokens``: score them on :func:`link_pieces` of about
    that many tokens instead of the whole document (None), so that the work grows linearly with its length."""
    pieces = [(document, 0, 0)] if piece_tokens is None else link_pieces(document, piece_tokens, window)
    parts = []
    for piece, first, offset in pieces:
        moves = LocalMoves.of(piece, window, first)
        with torch.no_grad():
            parts.append((moves.links(moves.scores(model, checkpoint, device, chunk).cpu().numpy(), window), offset))
    return LocalLinks.joined(parts)


def link_pieces(document: Document, piece_tokens: int, window: int = WINDOW) -> list[tuple[Document, int, int]]:
    """``document`` cut for the local conditionals of a long text: its pieces of about ``piece_tokens`` tokens
    (:func:`~coref.document.sentence_cuts`), each with the text before it from the sentence of the ``window``-th
    mention before its first one. Per piece: the excerpt, the number of its context mentions (they do not
    move) and the index of its first mention in the document. Each mention's moves are then scored on its
    piece and context: the clusters of its window are all there, what lies beyond is not read."""
    mentions = sorted(document.mentions)
    spanned = {b for m in mentions for b in range(m.start + 1, m.end)}
    starts = [0, *(s for s, _ in document.sentences if s and s not in spanned)]  # where an excerpt may begin
    first_at = [m.start for m in mentions]
    pieces = []
    for k, (begin, end) in enumerate(sentence_cuts(document, piece_tokens)):
        own = bisect_left(first_at, begin)
        context = mentions[own - window].start if own >= window else 0
        start = starts[bisect_right(starts, min(context, begin)) - 1]
        offset = bisect_left(first_at, start)
        pieces.append((excerpt(document, start, end, f"{document.id}#{k}"), own - offset, offset))
    return pieces


def local_log_conditionals(model: EntityNLM, checkpoint: Checkpoint, document: Document, device: torch.device,
                           window: int = WINDOW) -> torch.Tensor:
    """log P(each mention stays in its own cluster | the other mentions' clusters, x), normalised exactly over its
    :class:`LocalMoves` (with gradient where autograd is on): on a gold structure, its pseudo-likelihood terms."""
    moves = LocalMoves.of(document, window)
    scores = moves.scores(model, checkpoint, device)
    mention = torch.from_numpy(moves.mention).to(scores.device)
    peak = torch.full((len(moves.labels),), -torch.inf, device=scores.device).scatter_reduce(
        0, mention, scores.detach(), "amax")
    total = torch.zeros_like(peak).index_add(0, mention, torch.exp(scores - peak[mention]))
    own = torch.from_numpy(moves.cluster == moves.labels[moves.mention]).to(scores.device)
    return scores[own] - peak - total.log()  # each mention's own move comes once, in mention order


def check_given_mentions(mentions: str) -> None:
    """One line for a kind of given mentions that is not one of :data:`GIVEN_MENTIONS`, before any work."""
    if mentions not in GIVEN_MENTIONS:
        raise ValueError(f"given mentions are one of {', '.join(GIVEN_MENTIONS)}, got {mentions!r}")


def ranker_scores(hint: CorefHint, posterior: Posterior) -> np.ndarray:
    """The pipeline ranker's tree score (:meth:`CorefHint.tree_log_scores`) of each particle's partition of the
    given mentions (spans of the hint; any of its spans not given stays alone)."""
    index = {span: j for j, span in enumerate(hint.spans)}
    labels = np.tile(-1 - np.arange(len(hint)), (len(posterior.structures), 1))
    for s, structure in enumerate(posterior.structures):
        for mention in structure.mentions:
            if mention.span not in index:
                raise ValueError(f"document {posterior.document.id!r}: a sampled mention {mention.span} is not "
                                 "among the pipeline's")
            labels[s, index[mention.span]] = mention.entity
    return np.concatenate([hint.tree_log_scores(labels[first:first + 64])  # (64, M, K) at a time
                           for first in range(0, len(labels), 64)] or [np.zeros(0)])


@dataclass(frozen=True)
class PipelineMentionsPosterior:
    """One document's posterior on the pipeline's mentions: ``pipeline``, the pipeline's answer (the given
    mentions in its clusters, on the model's tokens); ``posterior``, the particles; ``ranker``, the ranker's tree
    score of each particle's partition (:func:`ranker_scores`)."""

    pipeline: Document
    posterior: Posterior
    ranker: np.ndarray

    def map_index(self, ranker_weight: float = 0.0) -> int:
        """The particle of highest log p(x, R, E, L) + ``ranker_weight`` x its tree score (0: the posterior's own
        MAP; inf: the ranker's choice among the particles)."""
        return interpolated_index(self.posterior.log_joint, self.ranker, ranker_weight)


def pipeline_mention_posteriors(model: EntityNLM, proposal: EntityProposal, documents: Sequence[Document],
                                hints: dict[tuple[str, int], CorefHint], config: PosteriorConfig,
                                vocabulary: Vocabulary, device: torch.device) -> list[PipelineMentionsPosterior]:
    """The posterior p(E | x, R, L) of each of ``documents`` (the model's tokens; their own mentions are not
    read) given the pipeline's mentions of its ``hints`` (by document key), as ``config``'s settings name them:
    "pipeline", the spans it links, or "detected", every span its detector finds, the ones it leaves alone as
    entities of their own. Sampled as ``config`` says (particles, method, sweeps from the pipeline's clusters, the
    proposal's hints, seed)."""
    mentions = config.settings.proposal.given_mentions
    check_given_mentions(mentions)
    settings = config.settings
    given = [hints[document.key].response(document, singletons=mentions == "detected") for document in documents]
    set_seed(config.seed)
    results = posteriors(model, proposal, given, vocabulary, settings, device,
                         hints if settings.proposal.hinted else None, given_mentions=True)
    return [PipelineMentionsPosterior(pipeline, posterior, ranker_scores(hints[pipeline.key], posterior))
            for pipeline, posterior in zip(given, results)]


def link_scorer(checkpoint: Checkpoint, device: torch.device, options: ProposalConfig) -> EntityNLM:
    """The model that scores the local conditionals exactly: the checkpoint without its noise (new entities at
    their mean embedding, as reranking scores them), built for the posterior's ``options`` (its new-entity bias)."""
    return entitynlm_modules(noise_free(checkpoint), device, run=options)[0]


def link_rankings(structure: Document, links: LocalLinks, temperature: float = 1.0, min_probability: float = 0.0,
                  top: int | None = None) -> list[AntecedentRanking]:
    """Per mention of ``structure`` (a MAP structure, its mentions sorted as :class:`LocalMoves` sorts them), its
    antecedent under the local conditionals ``links`` at ``temperature``: each move to a cluster of its window
    names that cluster's closest mention before it; a move to a cluster with none before it (its own, when it is
    its cluster's first, or a new one alone) is "new entity". At most ``top`` antecedents (None: all), none less
    probable than ``min_probability``; the rest is the remainder. The given mentions are mentions for sure."""
    mentions = sorted(structure.mentions)
    moves = links.move_probabilities(temperature)
    last: dict[int, int] = {}  # each cluster's latest mention so far
    by_mention: dict[int, list[int]] = {}
    for k, j in enumerate(links.mention.tolist()):
        by_mention.setdefault(j, []).append(k)
    rankings = []
    for j, mention in enumerate(mentions):
        answers: dict[int | None, float] = {}
        for k in by_mention.get(j, []):
            antecedent = last.get(int(links.cluster[k]))
            answers[antecedent] = answers.get(antecedent, 0.0) + float(moves[k])
        ranked = sorted(((p, i) for i, p in answers.items() if p >= min_probability and p > 0),
                        key=lambda pair: (-pair[0], -1 if pair[1] is None else pair[1]))[:top]
        listed = [Antecedent(None, None, p) if i is None else Antecedent(
            mentions[i].span, structure.mention_text(mentions[i]), p) for p, i in ranked]
        rankings.append(AntecedentRanking(mention.span, structure.mention_text(mention), 1.0, listed,
                                          max(0.0, 1.0 - sum(a.probability for a in listed))))
        last[mention.entity] = j
    return rankings


@dataclass(frozen=True)
class ResolvedText:
    """One text resolved by the posterior on the pipeline's mentions, on the text's own tokens: ``posterior``, the
    particles; ``map``, the MAP structure (at the ranker weight asked for); ``pipeline``, the pipeline's clusters
    of the same mentions; ``local``, the model's local conditionals around the MAP (its mentions numbered in text
    order)."""

    posterior: Posterior
    map: Document
    pipeline: Document
    local: LocalLinks

    def links(self, temperature: float = 1.0, min_probability: float = 0.0, top: int | None = None
              ) -> list[AntecedentRanking]:
        """Per mention of the MAP, its antecedent under the local conditionals at ``temperature``
        (:func:`link_rankings`): the link probabilities that were calibrated on dev."""
        return link_rankings(self.map, self.local, temperature, min_probability, top)


def resolve_texts(model: EntityNLM, proposal: EntityProposal, checkpoint: Checkpoint, originals: Sequence[Document],
                  config: PosteriorConfig, device: torch.device, ranker_weight: float = 0.0,
                  piece_tokens: int | None = LINK_PIECE, window: int = WINDOW
                  ) -> list[ResolvedText]:
    """Texts (``originals``: their own mentions are not read) resolved by the posterior on the pipeline's mentions,
    as :func:`evaluate_on_pipeline_mentions` scores it: the pipeline of ``config``'s hints reads each text,
    EntityNLM is given its mentions (``config``'s ``given_mentions``) and samples their entities (``config``:
    particles, method, sweeps, hints, seed, new-entity bias), the MAP is the particle of highest log p(x, R, E, L) +
    ``ranker_weight`` x its ranker score, and the local conditionals around it are scored on pieces of about
    ``piece_tokens`` tokens (:func:`link_pieces`; None: whole texts). Under torchrun, rank 0 alone scores and
    returns them (the others return nothing)."""
    check_given_mentions(config.settings.proposal.given_mentions)
    originals = [document.replace(mentions=()) for document in originals]
    settings = config.settings.proposal
    prepared = [preprocess_document(document, checkpoint.preprocess, checkpoint.vocabulary)[0]
                for document in originals]
    read = document_hints(settings, hint_pipeline(settings), originals, prepared, checkpoint.preprocess)
    hints = {document.key: hint for document, hint in zip(prepared, read)}
    resolved = pipeline_mention_posteriors(model, proposal, prepared, hints, config, checkpoint.vocabulary, device)
    if not ranks().leader:  # under torchrun every rank has every posterior; rank 0 goes on
        return []
    scorer = link_scorer(checkpoint, device, config.settings.proposal)
    texts = []
    for original, document in progress_bar(list(zip(originals, resolved)), desc="local link probabilities",
                                           unit="document"):
        kept = kept_tokens(original, checkpoint.preprocess)
        best = document.posterior.structures[document.map_index(ranker_weight)]
        posterior = replace(document.posterior, document=original, structures=[
            onto_original(structure, original, kept) for structure in document.posterior.structures])
        texts.append(ResolvedText(posterior, onto_original(best, original, kept),
                                  onto_original(document.pipeline, original, kept),
                                  local_links(scorer, checkpoint, best, device, window, piece_tokens=piece_tokens)))
    return texts
