"""EntityNLM and the RNNLM in a notebook (:class:`LanguageModel`): likelihoods, posterior coreference, samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from coref.corpora.preprocess import BOS, EOS, preprocess_document
from coref.document import Document, EntityAnnotation, bracketed, decode_entities
from coref.io.conll import format_conll
from coref.io.html import document_html
from generative.entitynlm.model import EntityNLM, EntityNLMConfig, EntityProposal
from inference.algorithms.config import DEFAULT_PRESET, Preset, ProposalConfig, settings_for
from inference.algorithms.driver import particle_batches
from inference.algorithms.hints import batch_hints, document_hints, hint_pipeline
from inference.algorithms.likelihood import run_samplers
from inference.algorithms.posterior import (
    AntecedentRanking,
    CoreferenceMarginals,
    Posterior,
    PosteriorConfig,
    antecedent_rankings,
    coreference_marginals,
    marginals_figure,
    original_posteriors,
    posterior_proposal,
)
from inference.algorithms.resolver import (
    LINK_PIECE,
    LINK_TEMPERATURE,
    LocalLinks,
    check_given_mentions,
    link_rankings,
    resolve_texts,
)
from inference.algorithms.scoring import gold_mention_documents, noise_free, rerank_document
from inference.api.arguments import Texts, as_documents, kept_random_state, seeded
from inference.api.reranking import Reranking, Resolver, check_rerank_options, resolver_of
from inference.api.tables import formatted, html_table
from inference.training.checkpoint import Checkpoint, entitynlm_modules, language_model

# ---- likelihoods ------------------------------------------------------------------------------------------------

LIKELIHOOD_COLUMNS = ("document", "tokens", "log p (nats)", "perplexity", "ESS", "PSIS k-hat")


@dataclass(frozen=True)
class Likelihood:
    """One document's log-likelihood: ``log_p`` (nats; for EntityNLM the estimate log p_hat(x), exact for the
    RNNLM) over ``tokens`` predicted tokens (words and sentence ends, as the perplexities of ``entitylm marginal-ppl``
    count them). For EntityNLM also the ESS and PSIS k-hat of the weights (None: ArviZ could not fit one, see
    ``statistics["psis_khat_note"]``) and every statistic the command reports (``statistics``)."""

    document: str
    log_p: float
    tokens: int
    sampler: str  # "is", "smc", or "exact" (RNNLM)
    particles: int | None = None
    ess: float | None = None
    psis_khat: float | None = None
    statistics: dict = field(default_factory=dict)

    @property
    def perplexity(self) -> float:
        """exp(-log p / tokens)."""
        return float(np.exp(-self.log_p / self.tokens))

    def row(self) -> tuple[str, ...]:
        return (self.document, str(self.tokens), f"{self.log_p:.2f}", f"{self.perplexity:.2f}",
                formatted(self.ess, ".1f"), formatted(self.psis_khat, ".2f"))

    def __repr__(self) -> str:
        how = "exact" if self.sampler == "exact" else f"{self.sampler.upper()}, {self.particles} particles"
        text = (f"Likelihood({self.document!r}: log p = {self.log_p:.2f} nats over {self.tokens} tokens, "
                f"perplexity {self.perplexity:.2f}, {how}")
        if self.sampler != "exact":
            text += f", ESS {formatted(self.ess, '.1f')}, PSIS k-hat {formatted(self.psis_khat, '.2f')}"
        return text + ")"

    def _repr_html_(self) -> str:
        return html_table(LIKELIHOOD_COLUMNS, [self.row()])


@dataclass(frozen=True)
class Likelihoods(Sequence[Likelihood]):
    """The likelihoods of several documents (a list of :class:`Likelihood`, in input order) and the corpus
    perplexity exp(-sum log p / sum tokens), the paper's."""

    documents: list[Likelihood]

    def __getitem__(self, index):  # type: ignore[override]
        return self.documents[index]

    def __len__(self) -> int:
        return len(self.documents)

    @property
    def log_p(self) -> float:
        return sum(result.log_p for result in self.documents)

    @property
    def tokens(self) -> int:
        return sum(result.tokens for result in self.documents)

    @property
    def perplexity(self) -> float:
        return float(np.exp(-self.log_p / self.tokens))

    def summary(self) -> str:
        return (f"{len(self)} documents, {self.tokens} tokens: log p = {self.log_p:.2f}, "
                f"perplexity {self.perplexity:.2f}")

    def __repr__(self) -> str:
        widths = [max(len(row[i]) for row in [LIKELIHOOD_COLUMNS, *(r.row() for r in self)]) for i in range(6)]
        lines = [" ".join(cell.rjust(width) for cell, width in zip(row, widths))
                 for row in [LIKELIHOOD_COLUMNS, *(result.row() for result in self)]]
        return "\n".join([*lines, self.summary()])

    def _repr_html_(self) -> str:
        return html_table(LIKELIHOOD_COLUMNS, [result.row() for result in self], caption=self.summary())


# ---- posterior coreference ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # numpy fields: compare the parts
class PosteriorCoreference:
    """EntityNLM's posterior over the coreference structure of one text, from weighted particles.

    ``samples``: each particle's structure as a Document on the text's own tokens, ``weights`` their normalised
    weights; ``map``: the sampled structure of highest joint probability p(X, R, E, L) (the posterior's mode
    among the samples, as ``python -m inference.posterior`` writes to map.conll); ``pairwise``: for every span some
    particle makes a mention, P(it is a mention), and P(two spans are mentions of one entity) for the pairs asked
    (``pairwise.same_entity``, or ``pairwise.matrix`` over a bounded set of spans: held sparsely, a book's fits);
    ``log_marginal``: the sampler's estimate of log p(x) (of log p(x, R, L) when the mentions are given), ``ess``
    its effective sample size. With the pipeline's mentions given (``given_mentions``, the default), ``pipeline``
    holds the pipeline's own clusters of the same mentions and :meth:`links` the model's local link conditionals
    around the MAP, the link probabilities that were calibrated on dev."""

    document: Document
    samples: list[Document]
    weights: np.ndarray
    log_joint: np.ndarray
    log_marginal: float
    ess: float
    resamplings: int
    settings: str
    proposal: str
    map: Document
    pairwise: CoreferenceMarginals
    given_mentions: str | None = None
    pipeline: Document | None = None
    local: LocalLinks | None = None

    @classmethod
    def of(cls, posterior: Posterior, settings: str, proposal: str, map_structure: Document | None = None,
           given_mentions: str | None = None, pipeline: Document | None = None, local: LocalLinks | None = None
           ) -> PosteriorCoreference:
        """The posterior of :func:`inference.algorithms.posterior.original_posteriors` (structures on the original
        tokens), described by ``settings``; ``map_structure`` None is the particle of highest log p(X, R, E, L)."""
        return cls(posterior.document, posterior.structures, posterior.weights, posterior.log_joint,
                   posterior.log_marginal, posterior.ess, posterior.resamplings, settings, proposal,
                   posterior.map_structure if map_structure is None else map_structure,
                   coreference_marginals(posterior.structures, posterior.weights), given_mentions, pipeline, local)

    @property
    def particles(self) -> int:
        return len(self.samples)

    def antecedents(self, min_probability: float = 0.05, top: int | None = 5) -> list[AntecedentRanking]:
        """Per likely mention span, the posterior over its antecedent (an earlier mention or a new entity) among
        the particles: at most ``top`` antecedents (None: all), those of at least ``min_probability``, the rest as
        the ranking's ``remainder``."""
        return antecedent_rankings(self.samples, self.weights, min_probability, top)

    def links(self, temperature: float = LINK_TEMPERATURE, min_probability: float = 0.0, top: int | None = None
              ) -> list[AntecedentRanking]:
        """Per mention of the MAP, the model's local conditional over its antecedent given the MAP's other clusters,
        at ``temperature`` (T = 3 was calibrated on LitBank dev): only where the mentions were given."""
        if self.local is None:
            raise ValueError("links are the local conditionals on given mentions: posterior(text, "
                             "given_mentions='pipeline') computes them")
        return link_rankings(self.map, self.local, temperature, min_probability, top)

    def mention_titles(self) -> dict[tuple[int, int], str]:
        """Per mention of the MAP structure: the posterior probability that it is a mention and that it is
        coreferent with its antecedent in the MAP structure (the hover text of the HTML display)."""
        index = {span: a for a, span in enumerate(self.pairwise.spans)}
        links, last_of = [], {}
        for mention in self.map.mentions:  # sampled structures neither nest nor cross: these are in text order
            a = index[mention.span]
            links.append((a, last_of.get(mention.entity, -1)))
            last_of[mention.entity] = a
        linked = [(a, b) for a, b in links if b >= 0]
        coreferent = iter(self.pairwise.same_entity(*np.array(linked, dtype=np.int64).reshape(-1, 2).T).tolist())
        titles = {}
        for mention, (a, b) in zip(self.map.mentions, links):
            title = f"P(mention) = {self.pairwise.mention[a]:.2f}"
            if b >= 0:
                title += f", P(coreferent with '{self.pairwise.texts[b]}') = {next(coreferent):.2f}"
            else:
                title += ", first mention of its entity in the MAP structure"
            titles[mention.span] = title
        return titles

    def clusters(self) -> list[list[str]]:
        """The MAP's entities of more than one mention, each as its mentions' texts in text order."""
        tokens = self.map.tokens
        return [[" ".join(tokens[start:end]) for start, end in spans]
                for spans in self.map.clusters() if len(spans) > 1]

    def to_conll(self) -> str:
        """The MAP structure as a CoNLL-2012 document (what ``coref.io.conll.parse_conll`` reads back)."""
        return format_conll([self.map])

    def plot(self, max_spans: int = 40) -> Figure:
        """A heatmap of P(same entity) between the ``max_spans`` most probable mention spans, in text order."""
        return marginals_figure(self.pairwise, self.document.id, max_spans)

    def summary(self) -> str:
        what = f"log p_hat(x, R, L) = {self.log_marginal:.2f}" if self.given_mentions else \
            f"log p_hat(x) = {self.log_marginal:.2f}"
        return (f"{self.document.id}: {what}, ESS {self.ess:.1f} of {self.particles} ({self.settings}; "
                f"{self.proposal} proposal, {self.resamplings} resamplings)")

    def __repr__(self) -> str:
        clusters = self.clusters()
        shown = [f"  {number}: {' | '.join(texts[:6])}{' | ...' if len(texts) > 6 else ''}"
                 for number, texts in enumerate(clusters[:10], 1)]
        more = [f"  ... {len(clusters) - 10} more"] if len(clusters) > 10 else []
        return "\n".join([f"PosteriorCoreference({self.summary()})",
                          f"MAP clusters ({len(clusters)} of more than one mention):", *shown, *more])

    def _repr_html_(self) -> str:
        return document_html(self.map, title=self.summary(), mention_titles=self.mention_titles())


# ---- generation -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """A document sampled from EntityNLM: its words (``</s>`` ends a sentence) and the R, E, L drawn with them,
    decoded into mentions and entities (``document``)."""

    document: Document
    annotation: EntityAnnotation

    @property
    def R(self) -> tuple[int, ...]:
        """Per token: 1 inside a mention."""
        return self.annotation.R

    @property
    def E(self) -> tuple[int, ...]:
        """Per token: its mention's entity (1..K in order of first mention), 0 outside mentions."""
        return self.annotation.E

    @property
    def L(self) -> tuple[int, ...]:
        """Per token: the tokens left in its mention, itself included (1 outside mentions)."""
        return self.annotation.L

    @property
    def text(self) -> str:
        return " ".join(self.document.tokens)

    def __repr__(self) -> str:
        return f"Generated({bracketed(self.document)})"

    def _repr_html_(self) -> str:
        return document_html(self.document)


# ---- the model --------------------------------------------------------------------------------------------------


class LanguageModel:
    """A checkpoint's language model on a device (made by :func:`load`): EntityNLM, whose entities are latent,
    or the RNNLM baseline, which reads the same tokens with the same vocabulary."""

    def __init__(self, path: Path, checkpoint: Checkpoint, device: torch.device) -> None:
        self.path, self.checkpoint, self.device, self.kind = path, checkpoint, device, checkpoint.kind
        self._entitynlm: dict[tuple, tuple[EntityNLM, EntityProposal]] = {}
        self._scorer: EntityNLM | None = None  # EntityNLM with its new-entity embedding at its mean (rerank)
        self.proposal: str | None = None  # the proposal log_likelihood uses
        if self.kind == "entitynlm":
            self.proposal = EntityNLMConfig(**checkpoint.config).proposal  # what inference.evaluation.marginal_ppl uses
            self.module = self.modules(self.proposal)[0]
        else:
            self.module = language_model(checkpoint, device)

    def modules(self, proposal: str, options: ProposalConfig | None = None) -> tuple[EntityNLM, EntityProposal]:
        """EntityNLM and its proposal named ``proposal`` ("forward" or "bidirectional"), built for a run's
        ``options`` (None: as trained) once and kept for the next call with the same ones."""
        run = None if options is None else (options.temperature, options.document_cache, options.new_entity_bias)
        if (proposal, run) not in self._entitynlm:
            with kept_random_state():  # building a module draws initial weights, which the checkpoint's replace
                self._entitynlm[proposal, run] = entitynlm_modules(self.checkpoint, self.device, proposal, options)
        return self._entitynlm[proposal, run]

    @property
    def history(self) -> list[dict]:
        """The trainer's record of each epoch (train and dev NLL per token, time), as ``python -m inference.train``
        wrote it to the checkpoint."""
        return self.checkpoint.training.get("state", {}).get("history", [])

    def __repr__(self) -> str:
        parameters = sum(p.numel() for p in self.module.parameters())
        return (f"{type(self).__name__}(kind={self.kind!r}, checkpoint='{self.path}', "
                f"vocabulary={len(self.checkpoint.vocabulary)} words, device='{self.device}', "
                f"parameters={parameters:,})")

    def _require_entitynlm(self, what: str) -> None:
        if self.kind != "entitynlm":
            raise ValueError(f"{what} needs EntityNLM's latent entities; this is a {self.kind} model "
                             f"({self.path}): load('entitynlm')")

    def read(self, text: Texts) -> tuple[list[Document], list[Document]]:
        """The texts as Documents (:func:`as_documents`) and as the model reads them: the checkpoint's
        preprocessing and vocabulary (words outside it become ``<unk>``), as ``inference.evaluation.marginal_ppl``
        prepares a corpus."""
        originals = as_documents(text)
        vocabulary = self.checkpoint.vocabulary
        return originals, [preprocess_document(d, self.checkpoint.preprocess, vocabulary)[0] for d in originals]

    def log_likelihood(self, text: Texts, preset: str | Preset = DEFAULT_PRESET, **changes: object
                       ) -> Likelihood | Likelihoods:
        """log p(x) of a text (a :class:`Likelihood`) or of a list of texts (:class:`Likelihoods`, with the corpus
        perplexity). EntityNLM estimates it from weighted particles as ``preset``'s likelihood settings say
        (:mod:`inference.algorithms.config`): "settled", the default, is SMC resampling after any token with the
        proposal mixed with the coreference pipeline's reading and the model's lookahead (the estimate that has
        settled at 100 particles); "paper" is importance sampling from the proposal Q alone (eq. 11). ``changes``
        override single settings (``particles=1000``, ``seed=1``, ``sampler="is"``, ``document_cache=0.1``: the
        fields of :class:`~inference.algorithms.config.SamplingConfig` and
        :class:`~inference.algorithms.config.ProposalConfig`). The RNNLM computes it exactly (only
        ``document_cache`` and ``batch_tokens`` apply). A Document is read the way the corpora are (``python -m
        inference.marginal_ppl``: its mentions, if any, decide which punctuation is kept, and are otherwise not
        used); documents are batched as that command does, so a corpus's documents get the command's numbers for
        the same settings."""
        settings = settings_for("likelihood", preset, **changes)
        sampling, options = settings.sampling, settings.proposal
        if options.given_mentions:
            raise ValueError("log_likelihood estimates log p(x), R, E and L all latent: given_mentions is for "
                             "posterior")
        if options.document_cache and self.kind not in ("entitynlm", "rnnlm"):
            raise ValueError(f"document_cache applies to EntityNLM and the RNNLM, not to a {self.kind} model")
        originals, prepared = self.read(text)
        vocabulary = self.checkpoint.vocabulary
        per_particle = sampling.particles if self.kind == "entitynlm" else 1
        batches = particle_batches(prepared, vocabulary, per_particle, sampling.batch_tokens, self.device)
        results: dict[tuple[str, int], Likelihood] = {}
        if self.kind == "entitynlm":
            with kept_random_state():  # loading the pipeline draws initial weights, as sampling draws
                batch_hint = None
                if options.hinted:
                    read = document_hints(options, hint_pipeline(options), originals, prepared,
                                          self.checkpoint.preprocess)
                    by_key = {document.key: hint for document, hint in zip(prepared, read)}
                    documents = {document.key: document for document in prepared}
                    batch_hint = [batch_hints(options, batch, by_key, documents) for batch in batches]
                model, proposal = self.modules(options.context or self.proposal, options)
                run = run_samplers(batches, model, proposal, (sampling.sampler,), vocabulary.index(EOS), sampling,
                                   options, batch_hint, progress=False)[sampling.sampler]
            for key, row in zip(run.keys, run.statistics):
                results[key["document"], key["part"]] = Likelihood(
                    key["document"], row["log_likelihood"], key["tokens"], sampling.sampler, sampling.particles,
                    row["ess"], row["psis_khat"], row)
        else:
            with torch.no_grad():
                for batch in batches:
                    log_p = (self.module.log_likelihood(batch, options.document_cache) if options.document_cache
                             else self.module.log_likelihood(batch)).tolist()
                    for (name, part), value, tokens in zip(batch.keys, log_p, batch.lengths.tolist()):
                        results[name, part] = Likelihood(name, value, tokens, "exact")
        ordered = [results[document.key] for document in originals]
        return ordered[0] if isinstance(text, (str, Document)) else Likelihoods(ordered)

    def perplexity(self, text: Texts, preset: str | Preset = DEFAULT_PRESET, **changes: object) -> float:
        """exp(-log p / tokens) of a text, or of a list of texts taken together (see :meth:`log_likelihood`)."""
        return self.log_likelihood(text, preset, **changes).perplexity

    def posterior(self, text: str | Document, preset: str | Preset = DEFAULT_PRESET, ranker_weight: float = 0.0,
                  link_piece: int | None = LINK_PIECE, **changes: object) -> PosteriorCoreference:
        """EntityNLM's posterior over the coreference structure of one text (a Document's own mentions are
        ignored), sampled as ``preset``'s posterior settings say (:mod:`inference.algorithms.config`), ``changes``
        overriding single settings (``particles=500``, ``seed=1``, ``given_mentions=None``, ...).

        "settled", the default, is the posterior that resolves, as ``python -m inference.posterior`` runs it: the
        coreference pipeline reads the text, the model is given its mentions (``given_mentions``: "pipeline", the
        spans it links; "detected", every span it finds) and samples their entities by five sweeps of particle
        Gibbs from the pipeline's clusters, the proposal mixed with the pipeline; the MAP is the particle of highest
        log p(x, R, E, L) + ``ranker_weight`` x its ranker score, ``pipeline`` the pipeline's own clusters, and
        :meth:`PosteriorCoreference.links` the model's local link conditionals around the MAP, scored on pieces of
        ``link_piece`` tokens. ``given_mentions=None`` samples R, E and L too: the model's own mentions (``preset=
        "paper"``: importance resampling from the proposal Q alone)."""
        self._require_entitynlm("posterior")
        if not isinstance(text, (str, Document)):
            raise ValueError(f"posterior takes one text (a str or a Document), not a {type(text).__name__}")
        settings = settings_for("posterior", preset, **changes)
        options = settings.proposal
        context = posterior_proposal(self.checkpoint, options.context)
        described = f"{getattr(preset, 'name', preset)}: {settings.describe()}"
        with kept_random_state():  # loading the pipeline and the link scorer draws initial weights too
            model, guide = self.modules(context, options)
            if options.given_mentions is None:
                (result,) = original_posteriors(model, guide, as_documents(text), self.checkpoint, settings,
                                                self.device, progress=False)
                return PosteriorCoreference.of(result, described, guide.context)
            config = PosteriorConfig(settings=settings)
            (resolved,) = resolve_texts(model, guide, self.checkpoint, as_documents(text), config, self.device,
                                        ranker_weight, link_piece)
        return PosteriorCoreference.of(resolved.posterior, described, guide.context, resolved.map,
                                       options.given_mentions, resolved.pipeline, resolved.local)

    def resolve(self, text: str | Document, mentions: str = "pipeline", preset: str | Preset = DEFAULT_PRESET,
                ranker_weight: float = 0.0, link_piece: int | None = LINK_PIECE, **changes: object
                ) -> PosteriorCoreference:
        """:meth:`posterior` on the pipeline's ``mentions`` ("pipeline" or "detected"): the posterior as a
        resolver, as ``python -m inference.posterior --text ...`` runs it."""
        check_given_mentions(mentions)
        return self.posterior(text, preset, ranker_weight, link_piece, **{**changes, "given_mentions": mentions})

    def generate(self, tokens: int = 50, seed: int = 0) -> Generated:
        """A document sampled from EntityNLM's generative story: ``tokens`` tokens (and on until the last
        mention ends), with the R, E, L drawn for them. The RNNLM module has no sampler."""
        self._require_entitynlm("generate")
        if isinstance(tokens, bool) or not isinstance(tokens, Integral) or tokens < 1:
            raise ValueError(f"tokens must be an integer of at least 1, got {tokens!r}")
        vocabulary = self.checkpoint.vocabulary
        with seeded(seed), torch.no_grad():
            ids, annotation = self.module.generate(tokens, vocabulary.index(BOS), vocabulary.index(EOS))
        words = [vocabulary.word(i) for i in ids]
        ends = [i + 1 for i, word in enumerate(words) if word == EOS]
        ends += [len(words)] if not ends or ends[-1] != len(words) else []
        document = decode_entities(f"sample (seed {seed})", words, annotation, zip([0, *ends[:-1]], ends))
        return Generated(document, annotation)

    def rerank(self, document: Document, resolver: Resolver = None, k: int = 10, weight: float | None = None,
               generator: str = "heuristic") -> Reranking:
        """Rerank a resolver's k-best coreference structures of a Document's gold mentions by EntityNLM's
        log p(R, E, L, X) (paper §5.2, eq. 12), as ``python -m inference.rerank`` reranks every document of a
        corpus (:func:`inference.evaluation.rerank.rerank_document`, without its cache, parses or randomization tests).
        ``document``: a Document with mentions and clusters, as :func:`~inference.api.documents` reads a corpus;
        it is preprocessed the way the command reads it (outermost mentions, no singletons), and each candidate
        is scored against its clusters (CoNLL F1). ``resolver``: a mention ranker (:func:`train_resolver`), the
        path of one (``python -m coref.resolver train``), or None for the bundled one. ``generator``: "heuristic"
        (the paper's k-best) or "exact". ``weight``: the interpolation weight of the resolver's tree score (the
        command picks it on dev), for the ``interpolated`` choice; None leaves it out."""
        self._require_entitynlm("rerank")
        if not isinstance(document, Document):
            raise ValueError(f"rerank takes a Document with mentions (elm.documents(corpus, split) reads a corpus's), "
                             f"not a {type(document).__name__}")
        check_rerank_options(k, weight, generator)
        ranker = resolver_of(resolver)
        resolver_document, model_document = gold_mention_documents(document, self.checkpoint)
        if not resolver_document.mentions:
            raise ValueError(f"document {document.id!r} has no mentions to rerank (after preprocessing: outermost "
                             "mentions, singletons dropped)")
        if self._scorer is None:
            self._scorer = entitynlm_modules(noise_free(self.checkpoint), self.device)[0]
        (candidates,) = rerank_document(resolver_document, model_document, ranker, self._scorer, self.checkpoint,
                                        self.device, k, (generator,)).values()
        return Reranking(resolver_document, candidates, generator, k, None if weight is None else float(weight))
