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

The sampling on the pipeline's mentions and the local conditionals are :mod:`inference.algorithms.resolver`'s
(what a text without gold gets); this module scores them against a corpus split's gold, and writes a text's
analysis for the command (:func:`analyse_on_pipeline_mentions`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from coref.document import Document
from coref.io.conll import format_conll
from coref.io.progress import progress as progress_bar
from coref.metrics.coreference import CorefEvaluation, score_document
from coref.resolution.kbest import document_with_clusters
from coref.resolution.rerank import (
    DEFAULT_GRID,
    approximate_randomization,
    micro_average,
    weight_json,
)
from generative.entitynlm.model import EntityNLM
from inference.algorithms.hints import corpus_hints, hint_pipeline
from inference.algorithms.posterior import (
    Posterior,
    PosteriorConfig,
    coreference_marginals,
    document_name,
    format_antecedents,
    input_documents,
    load_model,
    posterior_summary,
    without_singletons,
    write_analysis,
)
from inference.algorithms.resolver import (
    LINK_PIECE,
    WINDOW,
    LocalLinks,
    LocalMoves,
    check_given_mentions,
    link_pairs,
    link_scorer,
    local_links,
    pipeline_mention_posteriors,
    resolve_texts,
)
from inference.algorithms.scoring import candidate_log_joint
from inference.data import prepared_documents
from inference.distributed import ranks
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint

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


def link_calibration(posterior: Posterior, gold: Document, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """P(coreferent) and the gold's answer for the given mentions' pairs within ``window`` of one document."""
    marginals = coreference_marginals(posterior.structures, posterior.weights)
    earlier, later = link_pairs(len(marginals.spans), window)
    probabilities = marginals.same_entity(earlier, later)
    entity = {mention.span: mention.entity for mention in gold.mentions}
    gold_entity = np.array([entity.get(span, -1 - number) for number, span in enumerate(marginals.spans)])
    return probabilities, gold_entity[earlier] == gold_entity[later]


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


def evaluate_on_pipeline_mentions(config: PosteriorConfig, window: int = WINDOW,
                                  reliability: str | Path | None = None, link_temperature: float = 1.0,
                                  local_search: int = 0, ranker_weight: float = 0.0) -> dict:
    """The posterior's MAP structure and link marginals on the pipeline's mentions of the corpus split, beside the
    pipeline's own clusters (module docstring); ``reliability``: write the reliability diagram there (PNG);
    ``link_temperature``: the local conditionals' temperature (their calibration error is also reported at each of
    :data:`TEMPERATURES`, to choose it on dev); ``local_search``: climb each particle MAP by at most this many
    rounds of :func:`local_mode` (0: the particles' own); ``ranker_weight``: the MAP is the particle of highest log
    p(x, R, E, L) + ``ranker_weight`` x :func:`ranker_scores` (0: the posterior's own). The given mentions
    (``config``'s ``given_mentions``): "pipeline", the spans the pipeline links (its answer's mentions), or
    "detected", every span its detector finds (as EntityNLM can encode them), so that the posterior also decides
    which stay alone, as reranking's candidates on predicted mentions do; either way the pipeline's answer is the
    same, and singletons are dropped from both answers before scoring."""
    mentions = config.settings.proposal.given_mentions
    check_given_mentions(mentions)
    device = resolve_device(config.device)
    settings = config.settings.proposal
    pipeline = hint_pipeline(settings)  # the mentions are its, whatever the proposal's weight on its hints
    checkpoint, model, proposal = load_model(config.checkpoint, device, settings)
    gold = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                              checkpoint.vocabulary, quiet=True)
    hints = corpus_hints(settings, pipeline, config.corpus, config.split, config.data_dir, gold,
                         checkpoint.preprocess)
    started = time.perf_counter()
    resolved = pipeline_mention_posteriors(model, proposal, gold, hints, config, checkpoint.vocabulary, device)
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
    scorer = link_scorer(checkpoint, device, config.settings.proposal)
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
        "particles": config.settings.sampling.particles,
        "method": config.method, "resample": config.settings.sampling.resample,
        "sweeps": config.settings.sampling.sweeps, "proposal": proposal.context,
        "hint_weight": settings.hint_weight, "hint_temperature": settings.hint_temperature,
        "lookahead": settings.lookahead,
        "new_entity_bias": config.settings.proposal.new_entity_bias, "ranker_weight": ranker_weight,
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
        particles = config.settings.sampling.particles
        title = f"{config.corpus}/{config.split}: {len(labels)} mention pairs, {particles} particles"
        reliability_figure({"particles": calibration, "local": local}, title).savefig(reliability, dpi=120)
        result["reliability"] = str(reliability)
    return result


def analyse_on_pipeline_mentions(config: PosteriorConfig, link_temperature: float = 1.0, ranker_weight: float = 0.0,
                                 piece_tokens: int | None = LINK_PIECE, window: int = WINDOW) -> dict:
    """The texts of ``config`` (``text``, ``file`` or ``conll``) resolved by :func:`resolve_texts`, written to
    ``config.out`` as :func:`~inference.algorithms.posterior.analyse` writes (samples, map.conll, particle
    marginals, heatmaps, summary), with the pipeline's own answer (pipeline.conll) and the local conditionals
    around the MAP at ``link_temperature`` (links.txt, links.json: the link probabilities calibrated on dev)."""
    device = resolve_device(config.device)
    set_seed(config.seed)
    originals = input_documents(config.text, config.file, config.conll)
    checkpoint, model, proposal = load_model(config.checkpoint, device, config.settings.proposal)
    texts = resolve_texts(model, proposal, checkpoint, originals, config, device, ranker_weight, piece_tokens,
                          window)
    if not ranks().leader:
        return {"maps": [], "summary": [], "out": config.out, "files": []}
    summary, links_json, links_text = [], {}, []
    for text in texts:
        rankings = text.links(link_temperature, config.min_probability, config.top_antecedents)
        name = document_name(text.posterior.document)
        links_json[name] = [ranking.to_json() for ranking in rankings]
        links_text.append(format_antecedents(name, rankings))
        summary.append({**posterior_summary(text.posterior, config, proposal.context),
                        "given_mentions": config.settings.proposal.given_mentions,
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
