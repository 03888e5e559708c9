"""EntityNLM's posterior as a coreference resolver on the pipeline's mentions, and how calibrated its links are.

The coreference pipeline finds the mentions (its detector, outermost, linked ones only: the EntityNLM key's
kind, which has no singletons) and resolves them (its ranker, greedy). On the same mentions, given to EntityNLM
as observed R and L, the posterior p(E | x, R, L) is sampled (:func:`inference.algorithms.smc.sample_structures`
with ``mentions``); its MAP structure (the particle of highest p(x, R, E, L)) is scored against the gold beside
the pipeline's own clusters, by CoNLL F1 on the same documents and tokens. With ``ranker_weight`` w the MAP is
instead the particle of highest log p(x, R, E, L) + w x the ranker's tree score of its partition
(:meth:`~coref.resolution.hints.CorefHint.tree_log_scores`): the paper's "EntityNLM + base" reranker (§5.2, Table
2, eq. 12 with the base resolver's score), over the posterior's particles instead of a k-best list; the report
gives the CoNLL F1 of every weight of :data:`~coref.resolution.rerank.DEFAULT_GRID`, to choose w on dev, and
the chosen MAP's approximate-randomization p-value against the pipeline. With ``local_search`` the MAP
is climbed further by iterated conditional modes (:func:`local_mode`, the exact joint of each single-mention
move, as the local conditionals below score them) and both MAPs are reported: the particles' and the climbed one.

Calibration: for each mention and each of the ``window`` mentions before it, the probability that the two are one
entity against whether the gold says so (both spans gold mentions of one entity), two ways:

- ``particles``: the posterior marginal, the weighted share of particles that put them together. Over a whole
  document the weights of 100 particles collapse onto a few (ESS near 1), so these are mostly 0 or 1;
- ``local``: the model's conditional around the MAP structure, P(mention j joins cluster c | the MAP's other
  clusters, x), for each cluster c among the window's and a new one, each candidate structure scored exactly by
  log p(x, R, E, L) (the known-annotation path, new-entity embeddings at their mean as reranking scores them);
  P(i ~ j) is then the probability that j joins i's cluster. A Gibbs conditional, not a marginal: it keeps the
  rest of the MAP fixed. ``--link-temperature T`` divides the scores by T before the softmax (a tempered
  conditional, chosen on dev: the report gives the calibration error at several T).

Expected calibration error over ``bins`` equal-width bins: sum_b (n_b / n) |mean probability_b - observed rate_b|;
the reliability diagram plots the two per bin. Pairs and candidate structures are bounded by the window, so they
grow linearly with the mentions (the candidates' scoring, O(mentions x window x tokens), is the cost).

Texts without gold: :func:`resolve_texts` runs the same sampling on what the pipeline reads in a text
(:class:`ResolvedText`: the particles, the MAP, the pipeline's clusters and the local conditionals around the MAP),
the command's ``--given-mentions`` with ``--text``, ``--file`` or ``--conll`` (:func:`analyse_on_pipeline_mentions`)
and ``LanguageModel.resolve``. There the local conditionals are scored on pieces of a bounded number of tokens
(:func:`link_pieces`), so a book costs O(mentions x window x piece): linear in its length.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from coref.corpora.preprocess import Vocabulary, kept_tokens, preprocess_document
from coref.document import Document, excerpt, sentence_cuts
from coref.io.conll import format_conll
from coref.io.progress import progress as progress_bar
from coref.metrics.coreference import CorefEvaluation, score_document
from coref.resolution.hints import CorefHint
from coref.resolution.kbest import document_with_clusters
from coref.resolution.rerank import (
    DEFAULT_GRID,
    approximate_randomization,
    interpolated_index,
    micro_average,
    weight_json,
)
from generative.entitynlm.model import EntityNLM, EntityProposal
from inference.algorithms.config import GIVEN_MENTIONS, ProposalConfig
from inference.algorithms.hints import corpus_hints, document_hints, hint_pipeline
from inference.algorithms.posterior import (
    Antecedent,
    AntecedentRanking,
    Posterior,
    PosteriorConfig,
    coreference_marginals,
    document_name,
    format_antecedents,
    input_documents,
    load_model,
    onto_original,
    posterior_summary,
    posteriors,
    without_singletons,
    write_analysis,
)
from inference.data import prepared_documents
from inference.distributed import ranks
from inference.evaluation.rerank import candidate_log_joint, candidate_log_joints, noise_free
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint, entitynlm_modules

WINDOW = 30  # each mention is paired with this many mentions before it
BINS = 10
IMPROVEMENT = 1e-3  # nats: a move raises the joint by more than the scores' rounding between runs
TEMPERATURES = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)  # the local conditionals' temperatures reported


@dataclass(frozen=True)
class Calibration:
    """Predicted probabilities of coreference against the gold's answers, in equal-width bins."""

    probabilities: np.ndarray
    labels: np.ndarray
    bins: int = BINS

    def table(self) -> list[dict]:
        """Per non-empty bin: its range, pairs, mean predicted probability and observed rate of coreference."""
        index = np.minimum((self.probabilities * self.bins).astype(np.int64), self.bins - 1)
        rows = []
        for b in range(self.bins):
            members = index == b
            if members.any():
                rows.append({"low": b / self.bins, "high": (b + 1) / self.bins, "pairs": int(members.sum()),
                             "predicted": float(self.probabilities[members].mean()),
                             "observed": float(self.labels[members].mean())})
        return rows

    @property
    def ece(self) -> float:
        """Expected calibration error: the pairs' share of each bin times its |predicted - observed|."""
        total = len(self.probabilities)
        return sum(row["pairs"] / total * abs(row["predicted"] - row["observed"]) for row in self.table())



def reliability_figure(calibrations: dict[str, Calibration], title: str) -> Figure:
    """The reliability diagram of each named calibration: observed rate against mean predicted probability per
    bin (the diagonal is perfect calibration), with its ECE in the legend."""
    figure = Figure(figsize=(4.5, 4.5))
    axes = figure.subplots()
    axes.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="calibrated")
    for name, calibration in calibrations.items():
        rows = calibration.table()
        axes.plot([row["predicted"] for row in rows], [row["observed"] for row in rows], marker="o",
                  label=f"{name} (ECE {calibration.ece:.3f})")
    axes.set_xlabel("P(coreferent)")
    axes.set_ylabel("coreferent in the gold")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8, loc="upper left")
    figure.tight_layout()
    return figure


def link_pairs(mentions: int, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """(earlier, later) indices of every pair of mentions at most ``window`` mentions apart."""
    later = np.repeat(np.arange(mentions), np.minimum(np.arange(mentions), window))
    earlier = np.concatenate([np.arange(max(0, j - window), j) for j in range(mentions)] or [np.zeros(0, int)])
    return earlier.astype(np.int64), later


def link_calibration(posterior: Posterior, gold: Document, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """P(coreferent) and the gold's answer for the given mentions' pairs within ``window`` of one document."""
    marginals = coreference_marginals(posterior.structures, posterior.weights)
    earlier, later = link_pairs(len(marginals.spans), window)
    probabilities = marginals.same_entity(earlier, later)
    entity = {mention.span: mention.entity for mention in gold.mentions}
    gold_entity = np.array([entity.get(span, -1 - number) for number, span in enumerate(marginals.spans)])
    return probabilities, gold_entity[earlier] == gold_entity[later]


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


def local_mode(model: EntityNLM, checkpoint: Checkpoint, document: Document, device: torch.device,
               rounds: int, window: int = WINDOW, chunk: int = 64) -> tuple[Document, int, LocalLinks]:
    """``document``'s clusters (a MAP structure) climbed by iterated conditional modes on log p(x, R, E, L), scored
    exactly as :func:`local_links` scores them: each round scores every :class:`LocalMoves` move and makes every
    one that raises the joint, all at once where together they raise it too, else the best alone; until no move
    raises it or after ``rounds`` rounds. A search for the MAP beyond the particles': the joint never falls.
    Returns the structure (its mentions sorted), the number of single-mention moves made (a mention moved in
    two rounds counts twice), and the structure's :func:`local_links`: the last round's scores, so that the moves
    of the structure it stops at are scored once."""
    moved, done = 0, 0
    while True:
        moves = LocalMoves.of(document, window)
        with torch.no_grad():
            scores = moves.scores(model, checkpoint, device, chunk).cpu().numpy()
        now = scores[moves.cluster == moves.labels[moves.mention]].max(initial=-np.inf)  # any stay: this partition
        order = np.lexsort((-scores, moves.mention))  # by mention, its best move first
        best = order[np.r_[True, moves.mention[order][1:] != moves.mention[order][:-1]]] if len(order) else order
        better = best[scores[best] > now + IMPROVEMENT]
        if not len(better) or done == rounds:
            return moves.document, moved, moves.links(scores, window)
        together, alone = [moves.partition_after(better), moves.partition_after([better[np.argmax(scores[better])]])]
        joint = candidate_log_joint(model, checkpoint, moves.document, [together], device)[0]
        document = document_with_clusters(moves.document, together if joint > now + IMPROVEMENT else alone)
        moved += len(better) if joint > now + IMPROVEMENT else 1
        done += 1


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
                                vocabulary: Vocabulary, device: torch.device, mentions: str = "pipeline"
                                ) -> list[PipelineMentionsPosterior]:
    """The posterior p(E | x, R, L) of each of ``documents`` (the model's tokens; their own mentions are not
    read) given the pipeline's mentions of its ``hints`` (by document key): "pipeline", the spans it links, or
    "detected", every span its detector finds, the ones it leaves alone as entities of their own. Sampled as
    ``config`` says (particles, method, sweeps from the pipeline's clusters, the proposal's hints, seed)."""
    check_given_mentions(mentions)
    settings = config.settings()
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


def evaluate_on_pipeline_mentions(config: PosteriorConfig, window: int = WINDOW,
                                  reliability: str | Path | None = None, link_temperature: float = 1.0,
                                  local_search: int = 0, ranker_weight: float = 0.0, mentions: str = "pipeline"
                                  ) -> dict:
    """The posterior's MAP structure and link marginals on the pipeline's mentions of the corpus split, beside
    the pipeline's own clusters (module docstring); ``reliability``: write the reliability diagram there (PNG);
    ``link_temperature``: the local conditionals' temperature (their calibration error is also reported at each of
    :data:`TEMPERATURES`, to choose it on dev); ``local_search``: climb each particle MAP by at most this many
    rounds of :func:`local_mode` (0: the particles' own); ``ranker_weight``: the MAP is the particle of highest
    log p(x, R, E, L) + ``ranker_weight`` x :func:`ranker_scores` (0: the posterior's own). ``mentions``:
    "pipeline", the spans the pipeline links (its answer's mentions), or "detected", every span its detector finds
    (as EntityNLM can encode them), so that the posterior also decides which stay alone, as reranking's candidates
    on predicted mentions do; either way the pipeline's answer is the same, and singletons are dropped from both
    answers before scoring."""
    check_given_mentions(mentions)
    device = resolve_device(config.device)
    settings = config.settings().proposal
    pipeline = hint_pipeline(settings)  # the mentions are its, whatever the proposal's weight on its hints
    checkpoint, model, proposal = load_model(config.checkpoint, device, settings)
    gold = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                              checkpoint.vocabulary, quiet=True)
    hints = corpus_hints(settings, pipeline, config.corpus, config.split, config.data_dir, gold,
                         checkpoint.preprocess)
    started = time.perf_counter()
    resolved = pipeline_mention_posteriors(model, proposal, gold, hints, config, checkpoint.vocabulary, device,
                                           mentions)
    seconds = time.perf_counter() - started
    given = [document.pipeline for document in resolved]
    results = [document.posterior for document in resolved]
    scored: dict[tuple[int, int], CorefEvaluation] = {}  # (document, particle): the particle's MAP scored

    def map_indices(weight: float) -> list[int]:  # each document's MAP particle at this ranker weight
        return [document.map_index(weight) for document in resolved]

    def chosen(weight: float) -> list[CorefEvaluation]:
        indices = map_indices(weight)
        for number, index in enumerate(indices):
            if (number, index) not in scored:
                scored[number, index] = score_document(gold[number],
                                                       without_singletons(results[number].structures[index]))
        return [scored[number, index] for number, index in enumerate(indices)]

    by_weight = [{"weight": weight_json(weight), "conll_f1": micro_average(chosen(weight)).conll_f1}
                 for weight in DEFAULT_GRID]
    chosen_maps = [posterior.structures[index] for posterior, index in zip(results, map_indices(ranker_weight))]
    pairs = [link_calibration(posterior, document, window) for posterior, document in zip(results, gold)]
    labels = np.concatenate([label for _, label in pairs])
    calibration = Calibration(np.concatenate([p for p, _ in pairs]), labels)
    scorer = link_scorer(checkpoint, device, config.settings().proposal)
    if local_search:  # the climbed MAPs, and their links as the search's last round scored them
        climbed = [local_mode(scorer, checkpoint, structure, device, local_search, window)
                   for structure in progress_bar(chosen_maps, desc="local search", unit="document")]
        maps, moved, links = [c[0] for c in climbed], sum(c[1] for c in climbed), [c[2] for c in climbed]
    else:
        maps, moved = chosen_maps, 0
        links = [local_links(scorer, checkpoint, structure, device, window)
                 for structure in progress_bar(maps, desc="local link probabilities", unit="document")]

    def local_calibration(temperature: float) -> Calibration:
        return Calibration(np.concatenate([link.probabilities(temperature) for link in links]), labels)

    local = local_calibration(link_temperature)
    pipeline_documents, map_documents = ([score_document(key, without_singletons(response))
                                          for key, response in zip(gold, responses)] for responses in (given, maps))
    pipeline, posterior_map = micro_average(pipeline_documents), micro_average(map_documents)
    result = {
        "corpus": config.corpus, "split": config.split, "given_mentions": mentions, "documents": len(gold),
        "particles": config.particles,
        "method": config.method, "resample": config.resample, "sweeps": config.sweeps, "proposal": proposal.context,
        "hint_weight": settings.hint_weight, "hint_temperature": settings.hint_temperature,
        "lookahead": settings.lookahead,
        "new_entity_bias": config.new_entity_bias, "ranker_weight": ranker_weight,
        "map_by_ranker_weight": by_weight,
        "p_value_vs_pipeline": approximate_randomization(pipeline_documents, map_documents),
        "local_search": local_search, "moved_by_local_search": moved,
        "device": str(device),
        "mentions": sum(len(document.mentions) for document in given),
        "gold_mentions": sum(len(document.mentions) for document in gold),
        "pipeline": {"scores": pipeline.to_json(), "conll_f1": pipeline.conll_f1},
        "posterior_map": {"scores": posterior_map.to_json(), "conll_f1": posterior_map.conll_f1},
        "calibration": {"window": window, "pairs": len(calibration.labels), "ece": calibration.ece,
                        "coreferent_share": float(calibration.labels.mean()) if len(calibration.labels) else 0.0,
                        "bins": calibration.table(), "link_temperature": link_temperature, "local_ece": local.ece,
                        "local_bins": local.table(),
                        "local_ece_by_temperature": {str(t): local_calibration(t).ece for t in TEMPERATURES}},
        "ess": [posterior.ess for posterior in results], "seconds": seconds,
    }
    if local_search:  # the particles' own MAP beside the climbed one
        particle_map = micro_average(chosen(ranker_weight))
        result["particle_map"] = {"scores": particle_map.to_json(), "conll_f1": particle_map.conll_f1}
    if reliability is not None:
        title = f"{config.corpus}/{config.split}: {len(labels)} mention pairs, {config.particles} particles"
        reliability_figure({"particles": calibration, "local": local}, title).savefig(reliability, dpi=120)
        result["reliability"] = str(reliability)
    return result


LINK_TEMPERATURE = 3.0  # the local link conditionals' temperature chosen on LitBank dev (calibrated there)
LINK_PIECE = 2_000  # tokens: the pieces a long text's local conditionals are scored on (:func:`link_pieces`)


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
                  config: PosteriorConfig, device: torch.device, mentions: str = "pipeline",
                  ranker_weight: float = 0.0, piece_tokens: int | None = LINK_PIECE, window: int = WINDOW
                  ) -> list[ResolvedText]:
    """Texts (``originals``: their own mentions are not read) resolved by the posterior on the pipeline's mentions,
    as :func:`evaluate_on_pipeline_mentions` scores it: the pipeline of ``config``'s hints reads each text, EntityNLM
    is given its ``mentions`` and samples their entities (``config``: particles, method, sweeps, hints, seed,
    new-entity bias), the MAP is the particle of highest log p(x, R, E, L) + ``ranker_weight`` x its ranker
    score, and the local conditionals around it are scored on pieces of about ``piece_tokens`` tokens
    (:func:`link_pieces`; None: whole texts). Under torchrun, rank 0 alone scores and returns them (the others
    return nothing)."""
    check_given_mentions(mentions)
    originals = [document.replace(mentions=()) for document in originals]
    settings = config.settings().proposal
    prepared = [preprocess_document(document, checkpoint.preprocess, checkpoint.vocabulary)[0]
                for document in originals]
    read = document_hints(settings, hint_pipeline(settings), originals, prepared, checkpoint.preprocess)
    hints = {document.key: hint for document, hint in zip(prepared, read)}
    resolved = pipeline_mention_posteriors(model, proposal, prepared, hints, config, checkpoint.vocabulary, device,
                                           mentions)
    if not ranks().leader:  # under torchrun every rank has every posterior; rank 0 goes on
        return []
    scorer = link_scorer(checkpoint, device, config.settings().proposal)
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


def analyse_on_pipeline_mentions(config: PosteriorConfig, link_temperature: float = 1.0, ranker_weight: float = 0.0,
                                 mentions: str = "pipeline", piece_tokens: int | None = LINK_PIECE,
                                 window: int = WINDOW) -> dict:
    """The texts of ``config`` (``text``, ``file`` or ``conll``) resolved by :func:`resolve_texts`, written to
    ``config.out`` as :func:`~inference.algorithms.posterior.analyse` writes (samples, map.conll, particle
    marginals, heatmaps, summary), with the pipeline's own answer (pipeline.conll) and the local conditionals
    around the MAP at ``link_temperature`` (links.txt, links.json: the link probabilities calibrated on dev)."""
    device = resolve_device(config.device)
    set_seed(config.seed)
    originals = input_documents(config.text, config.file, config.conll)
    checkpoint, model, proposal = load_model(config.checkpoint, device, config.settings().proposal)
    texts = resolve_texts(model, proposal, checkpoint, originals, config, device, mentions, ranker_weight,
                          piece_tokens, window)
    if not ranks().leader:
        return {"maps": [], "summary": [], "out": config.out, "files": []}
    summary, links_json, links_text = [], {}, []
    for text in texts:
        rankings = text.links(link_temperature, config.min_probability, config.top_antecedents)
        name = document_name(text.posterior.document)
        links_json[name] = [ranking.to_json() for ranking in rankings]
        links_text.append(format_antecedents(name, rankings))
        summary.append({**posterior_summary(text.posterior, config, proposal.context), "given_mentions": mentions,
                        "mentions": len(text.pipeline.mentions), "ranker_weight": ranker_weight,
                        "link_temperature": link_temperature, "link_piece_tokens": piece_tokens})
    return write_analysis(config, [text.posterior for text in texts], [text.map for text in texts], summary, {
        "pipeline.conll": format_conll([text.pipeline for text in texts]),
        "links.json": json.dumps(links_json, indent=1) + "\n", "links.txt": "\n".join(links_text)})


def format_pipeline_mentions(result: dict) -> str:
    """The two resolvers' scores on the same mentions and the posterior's calibration, as the command prints."""
    lines = [f"{result['corpus']}/{result['split']}: {result['documents']} documents, the pipeline's "
             f"{result['mentions']} {'detected' if result['given_mentions'] == 'detected' else 'linked'} mentions "
             f"(gold {result['gold_mentions']}), {result['particles']} particles "
             f"({result['method']}, resampling at each {result['resample']}, {result['sweeps']} sweep(s)), hint weight "
             f"{result['hint_weight']}, new-entity bias {result['new_entity_bias']:g}, ranker weight "
             f"{result['ranker_weight']:g}"
             + (f"; local search ({result['local_search']} rounds at most) made {result['moved_by_local_search']} "
                f"single-mention moves" if result["local_search"] else ""),
             f"{'resolver':<16} {'MUC F1':>7} {'B3 F1':>7} {'CEAFe F1':>9} {'CoNLL F1':>9}"]
    searched = [("particles' MAP", "particle_map")] if result["local_search"] else []
    for name, key in (("pipeline", "pipeline"), *searched, ("posterior MAP", "posterior_map")):
        scores = result[key]["scores"]
        lines.append(f"{name:<16} {100 * scores['muc']['f1']:>7.2f} {100 * scores['bcub']['f1']:>7.2f} "
                     f"{100 * scores['ceafe']['f1']:>9.2f} {100 * result[key]['conll_f1']:>9.2f}")
    lines.append(f"posterior MAP against the pipeline: p = {result['p_value_vs_pipeline']:.4f} (approximate "
                 "randomization)")
    lines.append("  MAP CoNLL F1 by ranker weight: " + ", ".join(
        f"{row['weight']:.3g}: {100 * row['conll_f1']:.2f}" if row["weight"] != "inf" else
        f"inf: {100 * row['conll_f1']:.2f}" for row in result["map_by_ranker_weight"]))
    calibration = result["calibration"]
    lines.append(f"links: {calibration['pairs']} pairs within {calibration['window']} mentions, "
                 f"{100 * calibration['coreferent_share']:.1f}% coreferent; expected calibration error "
                 f"{calibration['ece']:.4f} (particle marginals), {calibration['local_ece']:.4f} (local conditionals "
                 f"around the MAP, temperature {calibration['link_temperature']:g})")
    lines.append("  local conditionals' error by temperature: " + ", ".join(
        f"{t}: {ece:.4f}" for t, ece in calibration["local_ece_by_temperature"].items()))
    for name, key in (("particle marginals", "bins"), ("local conditionals", "local_bins")):
        lines.append(f"  {name}:")
        lines += [f"    P in [{row['low']:.1f}, {row['high']:.1f}): {row['pairs']:>6} pairs, predicted "
                  f"{row['predicted']:.3f}, observed {row['observed']:.3f}" for row in calibration[key]]
    return "\n".join(lines)
