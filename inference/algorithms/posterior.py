"""Posterior coreference structures p(R, E, L | X) of a text under EntityNLM, drawn by importance resampling
(SIR) or sequential Monte Carlo (SMC, resampling at sentence ends); see inference/algorithms/smc.py.

Mentions are never given: R, E and L are all latent. The text is read the way the model reads it (the
checkpoint's preprocessing), and the structures are mapped back onto the original tokens. :func:`analyse`
writes a folder of samples, MAP structures, marginals, antecedent lists and heatmaps for texts;
:func:`evaluate_map` scores the MAP structure as a resolver against a corpus split's gold. Both take a
:class:`PosteriorConfig`; their command is :mod:`inference.commands.posterior` (``python -m inference.posterior``,
whose help lists the files written).
"""

from __future__ import annotations

import json
import math
import re
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from matplotlib.figure import Figure

from coref.corpora.preprocess import EOS, Vocabulary, drop_singletons, kept_tokens, preprocess_document
from coref.document import Document, Mention, bracketed
from coref.io.conll import format_conll, read_conll, read_utf8
from coref.io.progress import progress as progress_bar
from coref.io.text import plain_document
from coref.metrics.coreference import evaluate
from coref.resolution.hints import CorefHint
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.model import EntityNLM, EntityNLMConfig, EntityProposal
from generative.entitynlm.state import Annotation
from generative.layers.batch import DocumentBatch, batches_by_length
from inference.algorithms.config import DEFAULT_PRESET, ProposalConfig, Settings, settings_for
from inference.algorithms.driver import run_batches
from inference.algorithms.hints import batch_hints, corpus_hints, document_hints, hint_pipeline
from inference.algorithms.smc import ParticleStructures, particle_gibbs, stream_to_document
from inference.data import prepared_documents
from inference.distributed import ranks
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import PROPOSAL_WEIGHTS, Checkpoint, entitynlm_checkpoint, entitynlm_modules

METHODS = ("sir", "smc")  # the command's names of the samplers: importance resampling, SMC
SAMPLER_METHODS = {"is": "sir", "smc": "smc"}
METHODS_SAMPLER = {method: sampler for sampler, method in SAMPLER_METHODS.items()}


@dataclass(frozen=True)
class PosteriorConfig:
    """The options of ``python -m inference.posterior``. The texts: one of ``text``, a UTF-8 ``file`` or a
    ``conll`` file (for :func:`analyse`), or the ``corpus`` split (for :func:`evaluate_map`). The model:
    ``checkpoint`` (None: the bundled one). ``settings``: the sampler and its proposal
    (:mod:`inference.algorithms.config`; by default the settled preset's posterior settings, named ``preset`` in
    the record); ``both`` (:func:`evaluate_map` only) runs importance resampling and SMC in turn from the same
    seed. The outputs of :func:`analyse`, in the folder ``out``: ``samples`` structures per document, spans and
    antecedents of at least ``min_probability``, ``max_spans`` spans per heatmap, ``top_antecedents`` per span."""

    text: str | None = None
    file: str | None = None
    conll: str | None = None
    checkpoint: str | None = None
    samples: int = 20
    min_probability: float = 0.05
    max_spans: int = 40
    top_antecedents: int = 5
    out: str = "posterior"
    corpus: str = "sample"
    split: str = "test"
    data_dir: str | None = None
    device: str = "auto"
    settings: Settings = settings_for("posterior")
    preset: str = DEFAULT_PRESET
    both: bool = False

    @property
    def method(self) -> str:
        """The command's name of the sampler: ``sir``, ``smc``, or ``both``."""
        return "both" if self.both else SAMPLER_METHODS[self.settings.sampling.sampler]

    @property
    def seed(self) -> int:
        return self.settings.sampling.seed

    def sampled_by(self, method: str) -> Settings:
        """The settings with the sampler the command names ``method`` (``sir`` or ``smc``)."""
        return self.settings.replace(sampler=METHODS_SAMPLER[method])


@dataclass(frozen=True)
class Posterior:
    """The weighted particles of one document: each particle's structure as a Document, and its normalised
    weight."""

    document: Document
    structures: list[Document]
    weights: np.ndarray
    log_joint: np.ndarray
    log_marginal: float
    ess: float
    stage_ess: float
    resamplings: int

    @property
    def map_structure(self) -> Document:
        """The sampled structure with the highest joint probability p(X, R, E, L)."""
        return self.structures[int(np.argmax(self.log_joint))]


def posteriors(model: EntityNLM, proposal: EntityProposal, documents: Sequence[Document], vocabulary: Vocabulary,
               settings: Settings, device: torch.device | str = "cpu",
               hints: dict[tuple[str, int], CorefHint] | None = None, given_mentions: bool = False,
               progress: bool = True) -> list[Posterior]:
    """Posteriors of preprocessed ``documents`` (same order), structures on the same tokens, sampled as
    ``settings`` say: importance resampling or SMC (resampling a document where ``resample`` allows when its ESS is
    below ``ess_threshold`` x ``particles``), ``sweeps`` > 1 passes of particle Gibbs
    (:func:`inference.algorithms.smc.particle_gibbs`) pooled, started from the documents' own structure when their
    mentions are given. ``hints`` (by document key): the proposal follows the coreference pipeline
    (:mod:`generative.entitynlm.hints`) at the settings' weight, and the settings' lookahead. ``given_mentions``:
    the documents' own mentions are given (R and L observed) and only their entities are sampled,
    p(E | x, R, L). Batches run on the one batch driver (:func:`inference.algorithms.driver.run_batches`)."""
    sampling, options = settings.sampling, settings.proposal
    by_document = {document.key: document for document in documents}
    batches = batches_by_length(documents, vocabulary, max(1, sampling.batch_tokens // sampling.particles))

    def sample(batch: DocumentBatch, number: int) -> list[Posterior]:
        batch = batch.to(device)
        batch_hint = None if hints is None else batch_hints(options, batch, hints, by_document)
        mentions = Annotation.mentions_of(batch) if given_mentions else None
        start = Annotation.of(batch) if given_mentions and sampling.sweeps > 1 else None
        system = partial(EntityNLMParticles, model, proposal, batch, sampling.particles, hints=batch_hint,
                         lookahead=options.lookahead, mentions=mentions)
        sampled = particle_gibbs(system, vocabulary.index(EOS), sampling.sweeps, sampling.resampling, start,
                                 ess_threshold=sampling.ess_threshold, progress=progress and ranks().leader)
        return [_posterior(by_document[key], sampled, index, int(batch.lengths[index]))
                for index, key in enumerate(batch.keys)]

    done = run_batches(batches, sample, sampling.seed,
                       f"{SAMPLER_METHODS[sampling.sampler].upper()} posteriors, {sampling.particles} particles each",
                       progress)
    by_key = {posterior.document.key: posterior for batch in done for posterior in batch}
    return [by_key[document.key] for document in documents]


def _posterior(document: Document, sampled: ParticleStructures, index: int, length: int) -> Posterior:
    structures = [
        stream_to_document(document, sampled.annotation(particle, index, length))
        for particle in range(sampled.particles)
    ]
    return Posterior(
        document=document,
        structures=structures,
        weights=torch.softmax(sampled.log_weights[:, index].double(), 0).cpu().numpy(),  # sums to 1 in float64
        log_joint=sampled.log_joint[:, index].double().cpu().numpy(),
        log_marginal=float(sampled.log_marginal[index]),
        ess=float(sampled.ess[index]),
        stage_ess=float(sampled.stage_ess[index]),
        resamplings=int(sampled.resamplings[index]),
    )


def without_singletons(document: Document) -> Document:
    return document.replace(mentions=drop_singletons(document.mentions))


# ---- what the weighted particles say about spans ------------------------------------------------------------
#
# Everything here is linear in the particles' mentions: a span x span table (or a particles x spans one) of a
# book would not fit in memory. Pairwise probabilities are computed only for the pairs or the bounded set of
# spans asked for (the heatmap's, the MAP structure's antecedent links).


@dataclass(frozen=True)
class SpanEntities:
    """The mentions of P particles' structures of one text, one row per (particle, mention): ``span[m]`` indexes
    ``spans`` (every span some particle makes a mention, in text order, with its ``texts``), ``entity[m]`` is the
    entity particle ``particle[m]`` gives it (its own numbering). A particle never makes one span two mentions."""

    spans: list[tuple[int, int]]
    texts: list[str]
    particles: int
    particle: np.ndarray
    span: np.ndarray
    entity: np.ndarray

    def mention_probability(self, weights: np.ndarray) -> np.ndarray:
        """(S,) the posterior probability that each span is a mention, from the particles' normalised weights (a
        sum of weights, kept at most 1 where float rounding would put it a hair above)."""
        return np.minimum(np.bincount(self.span, weights=weights[self.particle], minlength=len(self.spans)), 1.0)

    def entity_columns(self, indices: np.ndarray) -> np.ndarray:
        """(P, len(indices)) the entity each particle gives each of the spans ``indices`` (distinct), -1 where it
        makes the span no mention: a dense table of a bounded set of columns."""
        hit, column = self._columns(indices)
        table = np.full((self.particles, len(indices)), -1, dtype=np.int64)
        table[self.particle[hit], column] = self.entity[hit]
        return table

    def restricted(self, indices: np.ndarray) -> SpanEntities:
        """The table of the spans ``indices`` (increasing) alone, renumbered 0..len(indices) - 1."""
        hit, column = self._columns(indices)
        return SpanEntities([self.spans[a] for a in indices], [self.texts[a] for a in indices], self.particles,
                            self.particle[hit], column, self.entity[hit])

    def _columns(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which mention rows are of the spans ``indices`` (distinct), and for those the position of their span
        in ``indices``."""
        column = np.full(len(self.spans), -1)
        column[indices] = np.arange(len(indices))
        hit = column[self.span] >= 0
        return hit, column[self.span[hit]]


def span_entities(structures: Sequence[Document]) -> SpanEntities:
    """The mentions of ``structures`` (annotations of one text, one per particle) as a :class:`SpanEntities`."""
    rows = [(p, m.start, m.end, m.entity) for p, structure in enumerate(structures) for m in structure.mentions]
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    unique, column = np.unique(table[:, 1:3], axis=0, return_inverse=True)
    spans = [(int(start), int(end)) for start, end in unique]
    tokens = structures[0].tokens if structures else ()
    return SpanEntities(spans, [" ".join(tokens[start:end]) for start, end in spans], len(structures),
                        table[:, 0], column.reshape(-1), table[:, 3])


@dataclass(frozen=True)
class CoreferenceMarginals:
    """Posterior probabilities over the spans some particle makes a mention: ``mention[a]`` that span a is a
    mention; :meth:`same_entity` and :meth:`matrix` that two spans are mentions of one entity, for the pairs asked
    for. Held sparsely (the particles' mentions and their weights), so a book's marginals take memory linear in
    its length; a dense matrix is only ever made over a bounded set of spans."""

    spans: list[tuple[int, int]]
    texts: list[str]
    mention: np.ndarray
    entities: SpanEntities
    weights: np.ndarray

    def same_entity(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """P(spans ``first[i]`` and ``second[i]`` are mentions of one entity), for each i (``mention`` where the
        two are one span)."""
        first, second = np.asarray(first, dtype=np.int64), np.asarray(second, dtype=np.int64)
        involved, inverse = np.unique(np.concatenate([first, second]), return_inverse=True)
        table = self.entities.entity_columns(involved)
        a, b = table[:, inverse[: len(first)]], table[:, inverse[len(first):]]
        return np.minimum(self.weights @ ((a == b) & (a >= 0)), 1.0)  # at most 1 despite float rounding

    def matrix(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """The dense ``len(indices)`` x ``len(indices)`` matrix of P(same entity) between the spans ``indices``
        (the diagonal is their mention probability): for a bounded set of spans, such as a heatmap's."""
        indices = np.asarray(indices, dtype=np.int64)
        rows, columns = np.meshgrid(indices, indices, indexing="ij")
        return self.same_entity(rows.ravel(), columns.ravel()).reshape(len(indices), len(indices))

    def to_json(self, max_spans: int = 40) -> dict:
        """Every span with its mention probability, and P(same entity) among the ``max_spans`` most probable
        ones (:func:`heatmap_spans`; their indices into ``spans``), the heatmap's numbers."""
        shown = heatmap_spans(self.mention, max_spans)
        return {
            "spans": [{"start": s, "end": e, "text": text, "mention_probability": round(float(p), 6)}
                      for (s, e), text, p in zip(self.spans, self.texts, self.mention)],
            "coreference": {"spans": shown.tolist(), "matrix": np.round(self.matrix(shown), 6).tolist()},
        }


def coreference_marginals(structures: Sequence[Document], weights: np.ndarray,
                          min_probability: float = 0.0) -> CoreferenceMarginals:
    """Weighted coreference marginals of ``structures`` (annotations of one text), over the spans whose mention
    probability is at least ``min_probability``."""
    table = span_entities(structures)
    mention = table.mention_probability(weights)
    keep = np.flatnonzero(mention >= min_probability)
    kept = table.restricted(keep)
    return CoreferenceMarginals(kept.spans, kept.texts, mention[keep], kept, weights)


class Antecedent(NamedTuple):
    """One answer to "what does this mention corefer with?": ``span`` is the closest earlier mention of its
    entity (None: the mention starts a new entity), ``probability`` the posterior probability that the span is
    a mention and this is its antecedent."""

    span: tuple[int, int] | None
    text: str | None
    probability: float


@dataclass(frozen=True)
class AntecedentRanking:
    """A mention span, its posterior mention probability, and its likely antecedents, most probable first;
    ``remainder`` is the probability of all the antecedents left out (``mention`` minus the listed ones)."""

    span: tuple[int, int]
    text: str
    mention: float
    antecedents: list[Antecedent]
    remainder: float = 0.0

    def to_json(self) -> dict:
        return {
            "start": self.span[0], "end": self.span[1], "text": self.text,
            "mention_probability": round(self.mention, 6),
            "antecedents": [
                {"antecedent": None if a.span is None else {"start": a.span[0], "end": a.span[1], "text": a.text},
                 "probability": round(a.probability, 6)}
                for a in self.antecedents
            ],
            "remainder": round(self.remainder, 6),
        }


def antecedent_rankings(structures: Sequence[Document], weights: np.ndarray, min_probability: float = 0.0,
                        top: int | None = None) -> list[AntecedentRanking]:
    """For every span whose mention probability is at least ``min_probability`` (text order), the posterior over
    its antecedent: the closest earlier mention of the same entity in a particle, or a new entity. The sparse
    marginals: at most ``top`` antecedents per span (None: all), none less probable than ``min_probability`` (or
    impossible); what is left out is the span's ``remainder``, so its listed antecedents and the remainder sum to
    its mention probability.

    One pass over all mentions of all particles at once: sorted by (particle, entity, position), each mention's
    antecedent is the one before it when that one is of the same particle and entity.
    """
    table = span_entities(structures)
    mention = table.mention_probability(weights)
    order = np.lexsort((table.span, table.entity, table.particle))
    particle, span, entity = table.particle[order], table.span[order], table.entity[order]
    antecedent = np.full(len(span), -1)
    chained = (particle[1:] == particle[:-1]) & (entity[1:] == entity[:-1])
    antecedent[1:][chained] = span[:-1][chained]
    pairs, pair_of = np.unique(np.stack([span, antecedent], 1).reshape(-1, 2), axis=0, return_inverse=True)
    probability = np.minimum(np.bincount(pair_of.reshape(-1), weights=weights[particle], minlength=len(pairs)), 1.0)
    likely = np.flatnonzero((probability >= min_probability) & (probability > 0))
    likely = likely[np.lexsort((-probability[likely], pairs[likely, 0]))]  # by span, most probable first
    if top is not None:  # the rank of each pair among its span's: keep the first ``top``
        first_of_span = np.r_[True, pairs[likely[1:], 0] != pairs[likely[:-1], 0]]
        starts = np.maximum.accumulate(np.where(first_of_span, np.arange(len(likely)), 0))
        likely = likely[np.arange(len(likely)) - starts < top]
    ranked: dict[int, list[Antecedent]] = {}
    for a, b, p in zip(pairs[likely, 0].tolist(), pairs[likely, 1].tolist(), probability[likely].tolist()):
        earlier = (None, None) if b < 0 else (table.spans[b], table.texts[b])
        ranked.setdefault(a, []).append(Antecedent(*earlier, p))
    listed = np.bincount(pairs[likely, 0], weights=probability[likely], minlength=len(table.spans))
    return [AntecedentRanking(table.spans[a], table.texts[a], float(mention[a]), ranked.get(a, []),
                              max(0.0, float(mention[a] - listed[a])))
            for a in np.flatnonzero(mention >= min_probability).tolist()]


def format_antecedents(name: str, rankings: Sequence[AntecedentRanking]) -> str:
    """The antecedent rankings of one document as text: each span with its mention probability, then its
    antecedents indented, spans as ``TEXT [START:END]`` (token indices)."""
    lines = [f"# {name}"]
    for ranking in rankings:
        lines.append(f"{ranking.text} [{ranking.span[0]}:{ranking.span[1]}]  (mention {ranking.mention:.3f})")
        for a in ranking.antecedents:
            antecedent = "new entity" if a.span is None else f"{a.text} [{a.span[0]}:{a.span[1]}]"
            lines.append(f"  {a.probability:.3f}  {antecedent}")
        if ranking.remainder >= 0.0005:
            lines.append(f"  {ranking.remainder:.3f}  (the antecedents left out)")
    return "\n".join(lines) + "\n"


# ---- the heatmap ---------------------------------------------------------------------------------------------

LABEL_WIDTH = 28  # characters of span text in a heatmap label
MAX_FIGURE_INCHES = 14.0  # the heatmap's plot side at most, whatever --max-spans and the document's length
DPI = 120


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut after a whole word and marked with "…" when it is cut (a
    first word longer than ``width`` is cut inside, and marked too)."""
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if text[width - 1] != " " and " " in cut:  # the cut would split a word: drop that word
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip() + "…"


def span_label(text: str, start: int) -> str:
    """A heatmap label: the span's text, shortened, and its first token's index (tells repeated texts apart)."""
    return f"{shorten(text, LABEL_WIDTH)} [{start}]"


def heatmap_spans(mention: np.ndarray, max_spans: int) -> np.ndarray:
    """The indices of the ``max_spans`` spans of highest mention probability (ties: the earlier), in text order."""
    return np.sort(np.argsort(-mention, kind="stable")[:max_spans])


def plot_marginals(marginals: CoreferenceMarginals, path: str | Path, name: str, max_spans: int = 40) -> None:
    """The heatmap of :func:`marginals_figure` written to ``path`` as a PNG."""
    marginals_figure(marginals, name, max_spans).savefig(path, dpi=DPI, format="png")


def marginals_figure(marginals: CoreferenceMarginals, name: str, max_spans: int = 40) -> Figure:
    """A heatmap of P(same entity) for the ``max_spans`` most probable mention spans of a document, in text
    order: a row per mention, a column per earlier mention (the lower triangle: the matrix is symmetric). The
    figure's size is bounded, so a long document gives a readable picture of its likeliest mentions. A plain
    matplotlib :class:`Figure` (no pyplot state), which Jupyter displays and ``savefig`` writes."""
    shown = heatmap_spans(marginals.mention, max_spans)
    labels = [span_label(marginals.texts[a], marginals.spans[a][0]) for a in shown]
    side = min(MAX_FIGURE_INCHES, 3.0 + 0.22 * len(shown))
    figure = Figure(figsize=(side + 1.5, side))
    axes = figure.subplots()
    of_more = f" most probable of {len(marginals.spans)}" if len(shown) < len(marginals.spans) else ""
    axes.set_title(f"{shorten(name, 60)}: the {len(shown)}{of_more} mention spans", fontsize=10)
    if len(shown) < 2:
        axes.text(0.5, 0.5, "fewer than two mention spans: no pair to show", ha="center", va="center")
        axes.set_axis_off()
    else:
        matrix = marginals.matrix(shown)[1:, :-1]
        matrix[np.triu_indices_from(matrix, k=1)] = np.nan  # a column's mention after the row's: not an antecedent
        image = axes.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
        fontsize = min(8.0, max(2.0, 50 * (side - 3.0) / len(shown)))  # ~1.25 line heights per row
        axes.set_xticks(range(len(shown) - 1), labels[:-1], rotation=90, fontsize=fontsize)
        axes.set_yticks(range(len(shown) - 1), labels[1:], fontsize=fontsize)
        axes.set_xlabel("antecedent (earlier mention)")
        axes.set_ylabel("mention")
        figure.colorbar(image, ax=axes, label="P(same entity | text)", fraction=0.04, pad=0.02)
    figure.tight_layout()
    return figure


# ---- the output folder ---------------------------------------------------------------------------------------

OUTPUT_FILES = ("samples.conll", "map.conll", "marginals.json", "antecedents.txt", "antecedents.json",
                "summary.json")
GIVEN_MENTIONS_FILES = ("pipeline.conll", "links.txt", "links.json")  # written beside them with --given-mentions
HEATMAP_FILE = re.compile(r"heatmap-[\w.-]+\.png")


def check_output_folder(out: Path) -> None:
    """Refuse an ``--out`` that is not a folder, or a folder holding anything this command does not write."""
    if not out.exists():
        for parent in out.parents:
            if parent.exists() and not parent.is_dir():
                raise ValueError(f"--out {out}: {parent} is a file, not a folder")
        return
    if not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a folder")
    foreign = sorted(entry.name for entry in out.iterdir()
                     if not (entry.is_file() and (entry.name in (*OUTPUT_FILES, *GIVEN_MENTIONS_FILES)
                                                  or HEATMAP_FILE.fullmatch(entry.name))))
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise ValueError(f"--out {out}: holds {foreign[0]!r}{more}, which this command does not write; "
                         "refusing to replace the folder (choose a new or empty one)")


@contextmanager
def replacing_folder(out: str | Path) -> Iterator[Path]:
    """A new empty folder beside ``out`` to write a run's outputs into; when the block succeeds it takes the
    place of ``out`` (so no file of an earlier run is left beside the new ones), and when it fails or is
    interrupted it is removed with any parent folders made for it, leaving ``out`` as it was. An ``out`` that
    holds files this command does not write is refused (:func:`check_output_folder`), at the start and again
    just before the swap."""
    out = Path(out).resolve()  # a symlink's target is what gets replaced
    check_output_folder(out)
    missing = [parent for parent in out.parents if not parent.exists()]  # nearest first
    staging = out.parent / f".{out.name}.{secrets.token_hex(4)}.partial"
    try:
        staging.mkdir(parents=True)
    except OSError as error:
        _remove_empty(missing)
        raise ValueError(f"--out {out}: cannot write there ({error.strerror or error})") from None
    replaced = staging.with_suffix(".old")
    try:
        yield staging
        check_output_folder(out)
        if out.exists():
            out.rename(replaced)
        staging.rename(out)
    except BaseException:
        if replaced.exists() and not out.exists():
            replaced.rename(out)  # interrupted between the two renames: the earlier run's folder goes back
        shutil.rmtree(staging, ignore_errors=True)
        _remove_empty(missing)
        raise
    shutil.rmtree(replaced, ignore_errors=True)


def _remove_empty(folders: Sequence[Path]) -> None:
    """Remove ``folders`` (innermost first) while they are empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def heatmap_file_names(names: Sequence[str]) -> list[str]:
    """``heatmap-NAME.png`` per document name, made file-safe, with ``-2``, ``-3`` ... where two would clash."""
    files: list[str] = []
    for name in names:
        stem = "heatmap-" + (re.sub(r"[^\w.-]+", "_", name)[:80] or "document")
        file, number = f"{stem}.png", 1
        while file in files:
            number += 1
            file = f"{stem}-{number}.png"
        files.append(file)
    return files


# ---- the two uses -----------------------------------------------------------------------------------------------


def posterior_proposal(checkpoint: Checkpoint, proposal: str | None = None) -> str:
    """The proposal posterior sampling uses: ``proposal`` when given, else the paper's forward one where the
    checkpoint has it (its MAP structures are the better resolver, see ``--proposal``), else the checkpoint's."""
    if proposal is not None:
        return proposal
    if PROPOSAL_WEIGHTS["forward"] in checkpoint.weights:
        return "forward"
    return EntityNLMConfig(**checkpoint.config).proposal


def load_model(checkpoint: str | None, device: torch.device, options: ProposalConfig
               ) -> tuple[Checkpoint, EntityNLM, EntityProposal]:
    """The checkpoint (None: the bundled one), its model and its proposal (the ``options``' context, None:
    :func:`posterior_proposal`), built for the ``options`` (the model's new-entity bias and document cache)."""
    _, loaded = entitynlm_checkpoint(checkpoint)
    return (loaded, *entitynlm_modules(loaded, device, posterior_proposal(loaded, options.context), options))


def input_documents(text: str | None = None, file: str | None = None, conll: str | None = None) -> list[Document]:
    """The documents of ``text``, a UTF-8 text ``file`` (read by :func:`coref.io.text.plain_document`) or a
    ``conll`` file, without mentions (malformed ones are no concern here)."""
    if file is not None:
        return [plain_document(read_utf8(file), Path(file).stem, what=file)]
    if text is not None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes on the command line arrive as surrogates
            raise ValueError("--text: not UTF-8 text") from None
        return [plain_document(text)]
    documents, _ = read_conll(conll)
    if not documents:
        raise ValueError(f"{conll}: no documents")
    repeated = [key for key, count in Counter(document.key for document in documents).items() if count > 1]
    if repeated:
        raise ValueError(f"{conll}: document {repeated[0][0]!r} part {repeated[0][1]} appears more than once")
    return [document.replace(mentions=()) for document in documents]


def document_name(document: Document) -> str:
    """How outputs name a document: its id, and its part when not 0 (CoNLL-2012 splits documents in parts)."""
    return document.id if document.part == 0 else f"{document.id} part {document.part}"


def onto_original(structure: Document, original: Document, kept: list[int]) -> Document:
    """A structure on the preprocessed tokens moved onto the original tokens (``kept[i]``: original of token i)."""
    mentions = [Mention(kept[m.start], kept[m.end - 1] + 1, m.entity) for m in structure.mentions]
    return original.replace(mentions=mentions)


def original_posteriors(model: EntityNLM, proposal: EntityProposal, originals: Sequence[Document],
                        checkpoint: Checkpoint, settings: Settings, device: torch.device | str = "cpu",
                        progress: bool = True) -> list[Posterior]:
    """:func:`posteriors` of documents as they were read (their mentions, if any, are not used): each is read the
    way the model reads text (the checkpoint's preprocessing and vocabulary), and every sampled structure is
    moved back onto its original tokens, so ``Posterior.document`` is the original and its ``structures`` and
    ``map_structure`` annotate the original tokens. Where the ``settings`` say so, the proposal follows the
    coreference pipeline's reading of the originals."""
    originals = [document.replace(mentions=()) for document in originals]
    config = checkpoint.preprocess
    prepared = [preprocess_document(document, config, checkpoint.vocabulary)[0] for document in originals]
    hints, options = None, settings.proposal
    if options.hinted:
        read = document_hints(options, hint_pipeline(options), originals, prepared, config)
        hints = {document.key: hint for document, hint in zip(prepared, read)}
    results = posteriors(model, proposal, prepared, checkpoint.vocabulary, settings, device, hints, progress=progress)
    moved = []
    for original, posterior in zip(originals, results):
        kept = kept_tokens(original, config)
        structures = [onto_original(structure, original, kept) for structure in posterior.structures]
        moved.append(replace(posterior, document=original, structures=structures))
    return moved


def analyse(config: PosteriorConfig) -> dict:
    """The texts (``text``, ``file`` or ``conll``): samples, MAP structures, marginals, antecedent lists and
    heatmaps, into the folder ``config.out`` (replaced as a whole when the run succeeds)."""
    device = resolve_device(config.device)
    set_seed(config.seed)
    originals = input_documents(config.text, config.file, config.conll)
    settings = config.settings
    checkpoint, model, proposal = load_model(config.checkpoint, device, settings.proposal)
    results = original_posteriors(model, proposal, originals, checkpoint, settings, device)
    if not ranks().leader:  # under torchrun every rank has every posterior; rank 0 writes them
        return {"maps": [], "summary": [], "out": config.out, "files": []}
    summary = [posterior_summary(posterior, config, proposal.context) for posterior in results]
    return write_analysis(config, results, [posterior.map_structure for posterior in results], summary)


def posterior_summary(posterior: Posterior, config: PosteriorConfig, proposal: str) -> dict:
    """One document's row of summary.json: its estimate of log p(x), ESS (of the particles of every sweep, pooled)
    and resamplings, and how it was drawn."""
    return {"document": posterior.document.id, "part": posterior.document.part,
            "log_marginal": posterior.log_marginal, "ess": posterior.ess,
            "mean_sentence_end_ess": posterior.stage_ess, "resamplings": posterior.resamplings,
            "particles": config.settings.sampling.particles, "sweeps": config.settings.sampling.sweeps,
            "method": config.method, "proposal": proposal,
            "new_entity_bias": config.settings.proposal.new_entity_bias}


def write_analysis(config: PosteriorConfig, results: Sequence[Posterior], maps: Sequence[Document],
                   summary: Sequence[dict], extra: dict[str, str] | None = None) -> dict:
    """Write the folder ``config.out`` (replaced as a whole when this succeeds): per document of ``results``
    (posteriors on the original tokens), ``config.samples`` structures drawn by weight, its MAP structure of
    ``maps``, marginals, antecedent lists and heatmap; ``summary`` (a row per document, each given its heatmap's
    file) and the ``extra`` files (name: text) of :data:`GIVEN_MENTIONS_FILES`."""
    set_seed(config.seed)  # the samples' draws, whatever the posteriors' batches drew
    extra = extra or {}
    names = [document_name(posterior.document) for posterior in results]
    summary = [{**row, "heatmap": heatmap} for row, heatmap in zip(summary, heatmap_file_names(names))]
    with replacing_folder(config.out) as folder:
        samples, marginals, antecedents, texts = [], {}, {}, []
        for name, row, posterior in progress_bar(zip(names, summary, results), total=len(results), unit="document",
                                                 desc="marginals, antecedents and heatmaps"):
            original, on_original = posterior.document, posterior.structures
            draws = np.random.choice(len(on_original), size=config.samples, p=posterior.weights)
            samples += [on_original[p].replace(id=f"{original.id}#sample{k}") for k, p in enumerate(draws)]
            table = coreference_marginals(on_original, posterior.weights, config.min_probability)
            marginals[name] = table.to_json(config.max_spans)
            rankings = antecedent_rankings(on_original, posterior.weights, config.min_probability,
                                           config.top_antecedents)
            antecedents[name] = [ranking.to_json() for ranking in rankings]
            texts.append(format_antecedents(name, rankings))
            plot_marginals(table, folder / row["heatmap"], name, config.max_spans)
        written = {"samples.conll": format_conll(samples), "map.conll": format_conll(maps),
                   "marginals.json": json.dumps(marginals, indent=1) + "\n",
                   "antecedents.json": json.dumps(antecedents, indent=1) + "\n",
                   "antecedents.txt": "\n".join(texts), "summary.json": json.dumps(summary, indent=2) + "\n",
                   **extra}
        for file, text in written.items():
            if file not in (*OUTPUT_FILES, *GIVEN_MENTIONS_FILES):
                raise ValueError(f"{file}: not among the files this command writes")
            (folder / file).write_text(text, encoding="utf-8")
    return {"maps": list(maps), "summary": summary, "out": config.out, "files": list(written)}


def evaluate_map(config: PosteriorConfig) -> dict:
    """The MAP structure as a resolver on the corpus split (CoNLL F1 against the gold) and the samplers' ESS, by
    ``config.method`` or, with ``both``, each sampler from the same seed."""
    device = resolve_device(config.device)
    settings = config.settings.proposal
    pipeline = hint_pipeline(settings) if settings.hinted else None
    checkpoint, model, proposal = load_model(config.checkpoint, device, settings)
    gold = prepared_documents(config.corpus, config.split, config.data_dir, checkpoint.preprocess,
                              checkpoint.vocabulary, quiet=True)
    tokens = sum(len(document.tokens) + len(document.sentences) for document in gold)
    hints = (corpus_hints(settings, pipeline, config.corpus, config.split, config.data_dir, gold,
                          checkpoint.preprocess) if pipeline else None)
    result = {"corpus": config.corpus, "split": config.split, "documents": len(gold), "tokens": tokens,
              "particles": config.settings.sampling.particles, "proposal": proposal.context,
              "new_entity_bias": settings.new_entity_bias,
              "device": str(device), "methods": {}}
    for method in METHODS if config.method == "both" else [config.method]:
        set_seed(config.seed)
        started = time.perf_counter()
        results = posteriors(model, proposal, gold, checkpoint.vocabulary, config.sampled_by(method), device, hints)
        seconds = time.perf_counter() - started
        response = [without_singletons(posterior.map_structure) for posterior in results]
        scores = evaluate(gold, response)
        log_marginal = sum(posterior.log_marginal for posterior in results)
        result["methods"][method] = {
            "scores": scores.to_json(), "conll_f1": scores.conll_f1,
            "perplexity": math.exp(-log_marginal / tokens),
            "ess": [posterior.ess for posterior in results],
            "mean_sentence_end_ess": [posterior.stage_ess for posterior in results],
            "resamplings": [posterior.resamplings for posterior in results],
            "mentions": sum(len(document.mentions) for document in response), "seconds": seconds,
        }
    result["gold_mentions"] = sum(len(document.mentions) for document in gold)
    return result


def format_evaluation(result: dict) -> str:
    """The scores of :func:`evaluate_map` per method, as the command prints them."""
    lines = [f"{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens, "
             f"{result['particles']} particles, {result['proposal']} proposal, gold mentions {result['gold_mentions']}",
             f"{'method':<6} {'MUC F1':>7} {'B3 F1':>7} {'CEAFe F1':>9} {'CoNLL F1':>9} {'ment. F1':>9} "
             f"{'mentions':>9} {'final ESS':>10} {'ESS@</s>':>9} {'resampl.':>9} {'ppl':>8} {'seconds':>8}"]
    for method, row in result["methods"].items():
        scores = row["scores"]
        lines.append(
            f"{method:<6} {100 * scores['muc']['f1']:>7.2f} {100 * scores['bcub']['f1']:>7.2f} "
            f"{100 * scores['ceafe']['f1']:>9.2f} {100 * row['conll_f1']:>9.2f} "
            f"{100 * scores['mentions']['f1']:>9.2f} {row['mentions']:>9} "
            f"{np.mean(row['ess']):>10.2f} {np.mean(row['mean_sentence_end_ess']):>9.2f} "
            f"{np.mean(row['resamplings']):>9.1f} {row['perplexity']:>8.2f} {row['seconds']:>8.1f}"
        )
    return "\n".join(lines)


def format_analysis(result: dict) -> str:
    """Each document's estimate and MAP structure, and where :func:`analyse` wrote, as the command prints them."""
    lines = []
    for document, row in zip(result["maps"], result["summary"]):
        given = row.get("given_mentions")  # R and L observed: the estimate is of log p(x, R, L)
        lines.append(f"{document_name(document)}: {'log p(x, R, L)' if given else 'log p(x)'} ~ "
                     f"{row['log_marginal']:.2f}, ESS {row['ess']:.1f} of {row['particles'] * row['sweeps']} "
                     f"({row['method']}, "
                     f"{row['proposal']} proposal, {row['resamplings']} resamplings)"
                     + (f"; the pipeline's {row['mentions']} {'linked' if given == 'pipeline' else 'detected'} "
                        f"mentions given, ranker weight {row['ranker_weight']:g}" if given else ""))
        lines.append("  MAP: " + bracketed(document))
    lines.append(f"wrote {', '.join(result['files'])} and heatmaps to {result['out']}/")
    return "\n".join(lines)
