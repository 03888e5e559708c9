"""Refine a trained proposal toward the model's posterior on text alone, and the model toward the marginal
likelihood it is scored by: reweighted wake-sleep's wake-phi and wake-theta updates (:func:`refine_proposal` of a
:class:`RefineConfig`; its command is :mod:`inference.commands.refine`, ``python -m inference.refine``).

A proposal fitted to gold annotations is sharper than the model's posterior p(R, E, L | X), and on long
documents its importance weights collapse onto one particle. The wake-phi update of reweighted wake-sleep
(Le et al. 2019) minimises sum_i w_i * -log q(z_i | x) with the self-normalised weights w_i of K particles
z_i ~ q: a stochastic estimate of KL(p(z | x) || q), which widens q where the posterior is wider. Its gradient
is only informative where the weights are not degenerate, so it runs on pieces of whole sentences of about
``--chunk`` tokens (the proposal's conditionals are local, so what it learns there holds on whole documents).
With ``--wake phi`` (the default) the model's parameters stay fixed.

``--wake theta`` fine-tunes the model instead (it is trained on p(x, z_gold) but scored on p(x)):
wake-theta maximises sum_i w_i log p(x, z_i), whose gradient is the self-normalised estimate of the gradient of
log p(x) (Le et al. 2019), plus ``--supervised-weight`` times the supervised log p(x, z_gold) of the same piece,
so that R, E and L keep the meaning the annotation gives them. The proposal stays fixed; ``--wake both`` updates
both, each by its own objective. ``--extra-text`` adds pieces of text without annotation to the training pieces
(LAMBADA's passages, or another corpus's training split read as text alone; :func:`inference.data.extra_text_names`):
wake-phi and wake-theta need none (the structures are drawn), and on those pieces the supervised term is left out.

``--wake coref`` fine-tunes the model for the posterior as a resolver (its MAP chooses entities given
the mentions): it maximises the conditional log p(E_gold | x, R_gold, L_gold) = log p(x, z_gold) - log p(x, R_gold,
L_gold), the second term's gradient the self-normalised estimate over entities drawn given the gold mentions (the
same sampler as ``--given-mentions``), plus ``--supervised-weight`` times log p(x, z_gold). The gold structure is
pulled up against the structures the posterior would choose on the same mentions: a CRF's likelihood, its
normaliser sampled, the gold among the sample (particle 0, so that the objective saturates where the proposal
misses what the model comes to prefer). It is evaluated on the dev pieces two ways: that conditional per gold
mention as sampled (log p(x, z_gold) - log p_hat(x, R, L), each piece's E summed out by ``--particles``
particles; it overestimates where the proposal misses mass, and can then exceed 0), and the exact local
conditional of each gold mention given the others' (:func:`local_coref_quality`), by which the best step is kept. With
``--coref-mentions pipeline`` the mentions are those the posterior is given as a resolver instead of the gold's:
the coreference pipeline's (``--hint-detector``, ``--hint-resolver``; its linked outermost spans), each in the
entity of the gold mention of the same span and a spurious one alone (the target the pipeline's ranker is
trained on), on train and dev alike; with ``--cross-fit-detectors`` and ``--cross-fit-resolvers`` (K pipelines, the
one of fold F trained with ``--held-out-fold F/K``) each train document's mentions are those of the pipeline that
never saw it, as wrong as those met on unseen text (:mod:`coref.corpora.folds`). ``--coref-objective local``
trains on the exact local conditionals instead (:func:`wake_coref_local_loss`: each gold mention's cluster against
its moves to the clusters before it or a new one, given the others': the pseudo-likelihood of the gold clusters,
no sampler and no particles); ``--pipeline-margin`` adds the logistic loss of the gold clusters against the
pipeline's own on the same mentions, where the posterior's sampler starts.

Every ``--eval-every`` steps (and before the first) it measures on dev pieces the mean ESS fraction and the
mean log p_hat(x) per token with ``--particles`` particles (higher is better: both sides are unbiased
estimates of p(x), and a better proposal has less of the downward bias of log p_hat), keeps the best
proposal by that log-likelihood, and writes ``OUT`` (the checkpoint with the refined proposal) and
``OUT.state`` (to resume) atomically.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from coref.corpora.folds import Fold
from coref.corpora.preprocess import EOS, PreprocessConfig
from coref.document import Document, sentence_chunks
from coref.io.atomic import atomic_path
from coref.io.progress import progress
from coref.resolution.pipeline import CorefPipeline
from coref.resolution.ranker import with_predicted_mentions
from generative.entitynlm.annotated import mention_may_start
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.model import EntityNLM, EntityProposal
from generative.entitynlm.state import Annotation
from generative.layers.batch import DocumentBatch, batches_by_length, make_batch
from inference.algorithms.config import PAPER_PROPOSAL, ProposalConfig
from inference.algorithms.hints import corpus_hints, hint_pipeline
from inference.algorithms.importance import ImportanceEstimate, importance_log_densities, log_importance_weights
from inference.algorithms.resolver import local_log_conditionals
from inference.algorithms.scoring import noise_free
from inference.algorithms.smc import sample_structures
from inference.data import check_extra_text, extra_text_documents, extra_text_names, prepared_documents
from inference.runtime import changed_options, resolve_device, set_seed
from inference.training.checkpoint import (
    PROPOSAL_WEIGHTS,
    Checkpoint,
    entitynlm_checkpoint,
    entitynlm_modules,
    module_weights,
    read_torch_file,
    with_entity_words,
)

# What a resumed refinement may change: how long it goes on, how often it evaluates, and where it runs.
RESUMABLE_CHANGES = frozenset({"steps", "eval_every", "device", "data_dir", "json"})
WAKES = ("phi", "theta", "both", "coref")
COREF_MENTIONS = ("gold", "pipeline")
COREF_OBJECTIVES = ("sampled", "local")


@dataclass(frozen=True)
class RefineConfig:
    """A refinement: the EntityNLM ``checkpoint`` whose ``proposal`` (None: the checkpoint's) is refined on
    ``corpus``, written to ``out`` (and ``out.state`` to resume); ``steps`` wake-phi steps of ``particles``
    particles on pieces of about ``chunk`` tokens, ``batch_tokens`` padded tokens (x particles) per step, Adam at
    ``lr``; every ``eval_every`` steps an evaluation on ``eval_pieces`` dev pieces. ``wake``: what is updated
    (:data:`WAKES`: the proposal, the model, both), the model with ``supervised_weight`` times the supervised
    objective beside wake-theta's; ``coref_mentions``: the mentions the coref wake is given (:data:`COREF_MENTIONS`;
    the pipeline's from ``hint_detector`` and ``hint_resolver``, None: the bundled ones), ``coref_objective`` its
    objective (:data:`COREF_OBJECTIVES`: the conditional with a sampled normaliser, or the exact local
    conditionals); ``cross_fit_detectors`` and ``cross_fit_resolvers``: the pipelines of the folds of train (each
    train document's mentions from the one that never saw it); ``pipeline_margin``: the weight of the gold
    clusters' logistic loss against the pipeline's own; ``entity_words``: the mention words each entity remembers
    for the model's copy (:func:`~inference.training.checkpoint.with_entity_words`; None: the checkpoint's),
    ``copy_weighting`` how the copy weighs them (None: the checkpoint's, else uniform); ``extra_text``: texts read
    without their annotation (:func:`inference.data.extra_text_names`) whose pieces join the training pieces, with
    no supervised term (not for the coref wake, which needs the gold mentions). The
    options of ``python -m inference.refine``; a resumed run must keep all but :data:`RESUMABLE_CHANGES`."""

    checkpoint: str
    out: str
    proposal: str | None = None
    corpus: str = "sample"
    data_dir: str | None = None
    steps: int = 300
    particles: int = 20
    chunk: int = 100
    batch_tokens: int = 2_000
    lr: float = 3e-4
    eval_every: int = 50
    eval_pieces: int = 200
    device: str = "auto"
    seed: int = 0
    wake: str = "phi"
    supervised_weight: float = 1.0
    coref_mentions: str = "gold"
    coref_objective: str = "sampled"
    hint_detector: str | None = None
    hint_resolver: str | None = None
    cross_fit_detectors: Sequence[str] = ()
    cross_fit_resolvers: Sequence[str] = ()
    pipeline_margin: float = 0.0
    entity_words: int | None = None
    copy_weighting: str | None = None
    extra_text: str | None = None

    def __post_init__(self) -> None:
        if self.wake not in WAKES:
            raise ValueError(f"wake must be one of {WAKES}, got {self.wake!r}")
        if self.coref_mentions not in COREF_MENTIONS:
            raise ValueError(f"coref_mentions must be one of {COREF_MENTIONS}, got {self.coref_mentions!r}")
        if self.coref_objective not in COREF_OBJECTIVES:
            raise ValueError(f"coref_objective must be one of {COREF_OBJECTIVES}, got {self.coref_objective!r}")
        if (self.coref_mentions != "gold" or self.coref_objective != "sampled") and self.wake != "coref":
            raise ValueError("--coref-mentions and --coref-objective are for --wake coref")
        if (self.hint_detector or self.hint_resolver) and self.coref_mentions != "pipeline":
            raise ValueError("--hint-detector and --hint-resolver are for --coref-mentions pipeline")
        if (self.cross_fit_detectors or self.cross_fit_resolvers) and self.coref_mentions != "pipeline":
            raise ValueError("--cross-fit-detectors and --cross-fit-resolvers are for --coref-mentions pipeline")
        if len(self.cross_fit_detectors) != len(self.cross_fit_resolvers) or len(self.cross_fit_detectors) == 1:
            raise ValueError("--cross-fit-detectors and --cross-fit-resolvers name the same number of models, at "
                             f"least 2 (one pipeline per fold), got {len(self.cross_fit_detectors)} and "
                             f"{len(self.cross_fit_resolvers)}")
        if self.supervised_weight < 0:
            raise ValueError(f"the supervised weight must be at least 0, got {self.supervised_weight}")
        if self.pipeline_margin < 0:
            raise ValueError(f"the pipeline margin's weight must be at least 0, got {self.pipeline_margin}")
        if self.pipeline_margin and (self.coref_mentions, self.coref_objective) != ("pipeline", "local"):
            raise ValueError("--pipeline-margin is for --coref-mentions pipeline --coref-objective local")
        if self.entity_words is not None and self.wake == "phi":
            raise ValueError("--entity-words gives the model a part to train: it is for --wake theta, both or coref")
        if self.copy_weighting is not None and self.entity_words is None:
            raise ValueError("--copy-weighting is for --entity-words")
        if extra_text_names(self.extra_text, self.corpus) and self.wake == "coref":
            raise ValueError("--extra-text is text without annotation: it is for --wake phi, theta or both (the "
                             "coref wake is given the gold mentions)")


def wake_phi_loss(model, proposal, batch: DocumentBatch, particles: int) -> torch.Tensor:
    """-sum_i w_i log q(z_i | x) per token, w_i the self-normalised importance weights (no gradient)."""
    log_p, log_q = importance_log_densities(model.model, proposal.guide, batch, particles)
    weights = torch.softmax(log_p - log_q.detach(), dim=0)
    return -(weights * log_q).sum() / batch.num_tokens


def drawn_structures(model: EntityNLM, proposal: EntityProposal, batch: DocumentBatch, particles: int, eos: int,
                     mentions: Annotation | None = None, reference: Annotation | None = None
                     ) -> tuple[torch.Tensor, Annotation]:
    """Structures z_i drawn from the proposal by the lockstep sampler (no gradient; given ``mentions``, E alone;
    with ``reference``, particle 0 is that annotation): their self-normalised weights w_i (N, B) and their
    annotations for the known-annotation path to score."""
    with torch.no_grad():
        system = EntityNLMParticles(model, proposal, batch, particles, mentions=mentions, reference=reference)
        sampled = sample_structures(system, eos, "never")
    return sampled.normalized_weights(), sampled.annotations(batch.mask)


def wake_theta_loss(model: EntityNLM, proposal: EntityProposal, batch: DocumentBatch, particles: int, eos: int,
                    supervised_weight: float) -> torch.Tensor:
    """-(sum_i w_i log p(x, z_i) + supervised_weight * log p(x, z_gold)) per token: z_i and w_i by
    :func:`drawn_structures`, log p(x, z_i) scored with gradient by the known-annotation path (all particles in one
    run)."""
    weights, drawn = drawn_structures(model, proposal, batch, particles, eos)
    objective = (weights * model.log_joint(batch, drawn)).sum()
    if supervised_weight:
        objective = objective + supervised_weight * model.log_likelihood(batch).sum()
    return -objective / batch.num_tokens


def wake_coref_loss(model: EntityNLM, proposal: EntityProposal, batch: DocumentBatch, particles: int, eos: int,
                    supervised_weight: float) -> torch.Tensor:
    """-(log p(E_gold | x, R_gold, L_gold) + supervised_weight * log p(x, z_gold)) per token: log p(x, R, L)'s
    gradient is sum_i w_i grad log p(x, R, E_i, L), the E_i and w_i drawn given the gold mentions
    (:func:`drawn_structures`), scored with gradient by the known-annotation path. The gold is particle 0 (the
    normaliser's sample holds it, as a sampled softmax holds its target): where the proposal misses the entities
    the model comes to prefer, the gold's weight grows and the gradient fades, instead of the model pushing down
    every drawn structure without end."""
    weights, drawn = drawn_structures(model, proposal, batch, particles, eos, Annotation.mentions_of(batch),
                                      reference=Annotation.of(batch))
    gold = model.log_likelihood(batch).sum()
    objective = (1 + supervised_weight) * gold - (weights * model.log_joint(batch, drawn)).sum()
    return -objective / batch.num_tokens


def pipeline_mention_documents(pipeline: CorefPipeline, corpus: str, split: str, data_dir: str | None,
                               documents: Sequence[Document], config: PreprocessConfig
                               ) -> list[tuple[Document, Document]]:
    """The preprocessed gold ``documents`` of a corpus split with ``pipeline``'s mentions (those the posterior is
    given as a resolver: its linked outermost spans), each in the entity of the gold mention of the same span, a
    spurious one alone (the entities the posterior should choose on the pipeline's mentions); beside each, the same
    mentions in the pipeline's own entities (where the posterior's sampler starts)."""
    hints = corpus_hints(PAPER_PROPOSAL, pipeline, corpus, split, data_dir, documents, config)
    resolved = [hints[document.key].response(document) for document in documents]
    return [(with_predicted_mentions(document, [mention.span for mention in clustered.mentions]),
             clustered.replace(mentions=sorted(clustered.mentions)))
            for document, clustered in zip(documents, resolved)]


def cross_fit_pipelines(detectors: Sequence[str], resolvers: Sequence[str]) -> dict[Fold, CorefPipeline]:
    """The pipeline of each fold F of K (K the number of models), its detector and its resolver both trained with
    fold F held out (``--held-out-fold F/K``): the pipeline to predict the documents of fold F."""
    pipelines = {}
    for detector, resolver in zip(detectors, resolvers):
        pipeline = CorefPipeline.load(detector, resolver)
        held_out = {pipeline.detector.info.get("held_out_fold"), pipeline.ranker.settings.get("held_out_fold")}
        if len(held_out) != 1:
            folds = " and ".join(fold or "no fold" for fold in held_out)
            raise ValueError(f"{detector} and {resolver} were trained with different folds held out ({folds}): "
                             "pair each fold's detector with its resolver")
        pipelines[held_out.pop()] = pipeline
    wanted = [str(Fold(index, len(detectors))) for index in range(len(detectors))]
    if sorted(pipelines, key=str) != wanted:
        raise ValueError(f"the cross-fit models must hold out the folds {', '.join(wanted)}, one pair each; they "
                         f"hold out {', '.join(fold or 'no fold' for fold in pipelines)}")
    return {Fold.parse(fold): pipeline for fold, pipeline in pipelines.items()}


def cross_fit_mention_documents(pipelines: dict[Fold, CorefPipeline], corpus: str, split: str, data_dir: str | None,
                                documents: Sequence[Document], config: PreprocessConfig
                                ) -> list[tuple[Document, Document]]:
    """:func:`pipeline_mention_documents` with each document's mentions from the pipeline of its fold (one that
    never saw it), in the order of ``documents``."""
    labelled = {}
    for fold, pipeline in pipelines.items():
        held_out = [document for document in documents if fold.holds(document)]
        labelled.update((pair[0].key, pair) for pair in pipeline_mention_documents(
            pipeline, corpus, split, data_dir, held_out, config))
    return [labelled[document.key] for document in documents]


def pipeline_mention_counts(gold: Sequence[Document], labelled: Sequence[Document]) -> dict[str, float]:
    """How the pipeline's mentions (``labelled``) stand against the ``gold`` mentions of the same documents: how
    many, the share that are spurious (no gold mention of their span) and the share of gold mentions found."""
    found = spurious = 0
    for document, relabelled in zip(gold, labelled):
        spans = {mention.span for mention in document.mentions}
        spurious += sum(mention.span not in spans for mention in relabelled.mentions)
        found += sum(mention.span in spans for mention in relabelled.mentions)
    mentions, annotated = found + spurious, sum(len(document.mentions) for document in gold)
    return {"mentions": mentions, "spurious_share": spurious / max(mentions, 1),
            "gold_found_share": found / max(annotated, 1)}


def wake_coref_local_loss(model: EntityNLM, checkpoint: Checkpoint, pieces: Sequence[Document],
                          batch: DocumentBatch, supervised_weight: float, rivals: DocumentBatch | None = None,
                          margin_weight: float = 0.0) -> torch.Tensor:
    """-(sum over the mentions of ``pieces`` (``batch``'s documents) of log P(the gold cluster | the other
    mentions' gold clusters, x) + supervised_weight * log p(x, z_gold)) per token: the pseudo-likelihood of the
    gold clusters, each term normalised exactly over the mention's local moves (no sampler). With ``rivals`` (the
    same pieces in the pipeline's own clusters), plus ``margin_weight`` times sum log(1 + p(x, z_pipeline) /
    p(x, z_gold)): the logistic loss of the gold clusters against the structure the posterior's sampler starts
    from, whose gradient lies where the two differ (where the pipeline errs)."""
    objective = sum(local_log_conditionals(model, checkpoint, piece, batch.words.device).sum() for piece in pieces)
    if supervised_weight:
        objective = objective + supervised_weight * model.log_likelihood(batch).sum()
    if margin_weight:  # both structures as two particles of one run, so that they share its dropout
        gold, rival = Annotation.of(batch), Annotation.of(rivals)
        joint = model.log_joint(batch, Annotation(*(torch.stack([a, b]) for a, b in (
            (gold.R, rival.R), (gold.E, rival.E), (gold.L, rival.L)))))
        objective = objective - margin_weight * torch.nn.functional.softplus(joint[1] - joint[0]).sum()
    return -objective / batch.num_tokens


@torch.no_grad()
def coref_quality(model: EntityNLM, proposal: EntityProposal, batches: list[DocumentBatch], particles: int,
                  eos: int) -> dict[str, float]:
    """log p(E_gold | x, R_gold, L_gold) per gold mention on ``batches`` (log p(x, R, L) estimated by ``particles``
    particles given the gold mentions; its estimate's downward bias is alike at every step), and the mean ESS
    fraction of those particles: what ``--wake coref`` should raise."""
    proposal.eval()
    model.eval()
    conditional, mentions, ess = 0.0, 0, []
    with torch.random.fork_rng():
        torch.manual_seed(0)  # every evaluation draws alike
        for batch in batches:
            system = EntityNLMParticles(model, proposal, batch, particles, mentions=Annotation.mentions_of(batch))
            sampled = sample_structures(system, eos, "never", history=False)
            conditional += float((model.log_likelihood(batch) - sampled.log_marginal).sum())
            mentions += int((mention_may_start(batch.L, batch.mask) & (batch.R == 1)).sum())  # their starts
            ess.append(sampled.ess / particles)
    return {"ess_fraction": float(torch.cat(ess).mean()), "coref_log_likelihood_per_mention": conditional / mentions}


@torch.no_grad()
def local_coref_quality(model: EntityNLM, checkpoint: Checkpoint, pieces: Sequence[Document],
                        device: torch.device) -> float:
    """Mean log P(a mention's gold cluster | the other mentions' gold clusters, x) over every mention of ``pieces``:
    each mention moved to each cluster of the 30 mentions before it, or a new one, each candidate scored exactly
    (:func:`inference.algorithms.resolver.local_log_conditionals`; ``model``'s weights in a noise-free
    copy). Exact, so the model cannot raise it by moving mass where the sampler does not look, as the sampled
    conditional of :func:`coref_quality` can; it is the conditional the resolver's local link probabilities read."""
    scorer = entitynlm_modules(noise_free(checkpoint), device)[0]
    scorer.load_state_dict(model.state_dict())
    scorer.eval()
    return float(torch.cat([local_log_conditionals(scorer, checkpoint, piece, device) for piece in pieces]).mean())


@torch.no_grad()
def proposal_quality(model, proposal, batches: list[DocumentBatch], particles: int) -> dict[str, float]:
    """Mean ESS fraction and log p_hat(x) per token on ``batches``: what refinement should raise."""
    proposal.eval()
    model.eval()
    ess, log_marginal, tokens = [], 0.0, 0
    with torch.random.fork_rng():
        torch.manual_seed(0)  # every evaluation draws alike
        for batch in batches:
            estimate = ImportanceEstimate(log_importance_weights(model.model, proposal.guide, batch, particles))
            ess.append(estimate.ess / particles)
            log_marginal += float(estimate.log_marginal.sum())
            tokens += batch.num_tokens
    return {"ess_fraction": float(torch.cat(ess).mean()), "log_likelihood_per_token": log_marginal / tokens}


def extra_text_pieces(config: RefineConfig, checkpoint: Checkpoint) -> tuple[list[Document], dict[str, dict]]:
    """The pieces of whole sentences (about ``config.chunk`` tokens) of ``config.extra_text``, preprocessed as the
    checkpoint's corpus is and read as text alone (a corpus's annotation dropped), and per text its documents,
    pieces and tokens."""
    pieces, counts = [], {}
    for name, documents in extra_text_documents(config.extra_text, config.corpus, config.data_dir,
                                                checkpoint.preprocess, checkpoint.vocabulary).items():
        text = [piece for document in documents for piece in sentence_chunks(document, config.chunk)]
        counts[name] = {"documents": len(documents), "pieces": len(text),
                        "tokens": sum(len(piece.tokens) for piece in text)}
        print(f"{name}: {json.dumps(counts[name])}", file=sys.stderr)
        pieces += text
    return pieces, counts


def refine_proposal(config: RefineConfig) -> dict:
    """Refine the proposal (resuming from ``out.state`` when it exists, with the same options), keep the best by
    the dev log-likelihood, and write ``out`` and ``out.state`` at each evaluation: the checkpoint, the proposal,
    the steps done, the figures before, the best figures and the history of evaluations."""
    options = asdict(config)
    check_extra_text(config.extra_text, config.corpus, config.data_dir)
    set_seed(config.seed)
    device = resolve_device(config.device)
    path, checkpoint = entitynlm_checkpoint(config.checkpoint)
    if config.entity_words is not None:
        checkpoint = with_entity_words(checkpoint, config.entity_words, config.copy_weighting, path)
    model, proposal = entitynlm_modules(checkpoint, device, config.proposal)
    context = proposal.context
    eos = checkpoint.vocabulary.index(EOS)
    updated = {"phi": [proposal], "theta": [model], "both": [proposal, model], "coref": [model]}[config.wake]
    coref = config.wake == "coref"
    score = "local_coref_log_likelihood_per_mention" if coref else "log_likelihood_per_token"
    for module in (model, proposal):
        for parameter in module.parameters():
            parameter.requires_grad_(module in updated)
    pipeline = hint_pipeline(ProposalConfig(hint_detector=config.hint_detector, hint_resolver=config.hint_resolver)
                             ) if config.coref_mentions == "pipeline" else None
    cross_fit = cross_fit_pipelines(config.cross_fit_detectors, config.cross_fit_resolvers) if (
        config.cross_fit_detectors) else None

    mention_counts = {}  # of the pipeline's mentions, by split
    rival_of = {}  # each train piece in the pipeline's own clusters, by key

    def pieces(split: str) -> list:
        documents = prepared_documents(config.corpus, split, config.data_dir, checkpoint.preprocess,
                                       checkpoint.vocabulary, quiet=True)
        if pipeline is not None:
            if cross_fit is not None and split == "train":
                pairs = cross_fit_mention_documents(cross_fit, config.corpus, split, config.data_dir, documents,
                                                    checkpoint.preprocess)
            else:
                pairs = pipeline_mention_documents(pipeline, config.corpus, split, config.data_dir, documents,
                                                   checkpoint.preprocess)
            mention_counts[split] = pipeline_mention_counts(documents, [labelled for labelled, _ in pairs])
            print(f"{split}: {json.dumps(mention_counts[split])}", file=sys.stderr)
            if split == "train" and config.pipeline_margin:
                rival_of.update((piece.key, piece) for _, clustered in pairs
                                for piece in sentence_chunks(clustered, config.chunk))
            documents = [labelled for labelled, _ in pairs]
        return [piece for document in documents for piece in sentence_chunks(document, config.chunk)]

    per_step = max(1, config.batch_tokens // config.particles)
    train_pieces = pieces("train")
    extra_pieces, extra_counts = extra_text_pieces(config, checkpoint)
    train = [(b.to(device), annotated) for pieces_, annotated in ((train_pieces, True), (extra_pieces, False))
             for b in batches_by_length(pieces_, checkpoint.vocabulary, per_step)]
    dev_pieces = pieces("dev")
    dev_pieces = [dev_pieces[i] for i in torch.randperm(len(dev_pieces), generator=torch.Generator().manual_seed(0))
                  [:config.eval_pieces].tolist()]
    dev = [b.to(device) for b in batches_by_length(dev_pieces, checkpoint.vocabulary, 20 * per_step)]

    if config.coref_objective == "local":
        piece_of = {piece.key: piece for piece in train_pieces}

        def model_loss(batch: DocumentBatch, supervised_weight: float) -> torch.Tensor:
            rivals = make_batch([rival_of[key] for key in batch.keys], checkpoint.vocabulary).to(device) if (
                config.pipeline_margin) else None
            return wake_coref_local_loss(model, checkpoint, [piece_of[key] for key in batch.keys], batch,
                                         supervised_weight, rivals, config.pipeline_margin)
    else:
        sampled_loss = wake_coref_loss if coref else wake_theta_loss

        def model_loss(batch: DocumentBatch, supervised_weight: float) -> torch.Tensor:
            return sampled_loss(model, proposal, batch, config.particles, eos, supervised_weight)

    def measure(model: EntityNLM, proposal: EntityProposal, batches: list[DocumentBatch], particles: int) -> dict:
        if not coref:
            return proposal_quality(model, proposal, batches, particles)
        return {**coref_quality(model, proposal, batches, particles, eos),
                "local_coref_log_likelihood_per_mention": local_coref_quality(model, checkpoint, dev_pieces, device)}
    optimizer = torch.optim.Adam([p for module in updated for p in module.parameters()], lr=config.lr)
    state_path = Path(f"{config.out}.state")
    state = {"step": 0, "history": [], "best": None, "args": options}
    best_weights = module_weights(proposal)
    best_model = module_weights(model)
    if state_path.exists():
        saved = read_torch_file(state_path, "refinement state")
        changed = changed_options(saved["state"].get("args", {}), options, RESUMABLE_CHANGES)
        if changed:
            raise ValueError(f"{state_path}: a refinement with other options: {', '.join(changed)}; resume it with "
                             "the same options, or choose another --out")
        proposal.load_state_dict(saved["proposal"])
        model.load_state_dict(saved.get("model", best_model))
        best_model = saved.get("best_model", best_model)
        optimizer.load_state_dict(saved["optimizer"])
        state, best_weights = {**saved["state"], "args": options}, saved["best_weights"]
        torch.set_rng_state(saved["rng"])
        print(f"resumed from {state_path} at step {state['step']}", file=sys.stderr)

    def evaluate() -> None:
        quality = {"step": state["step"], **measure(model, proposal, dev, config.particles)}
        state["history"].append(quality)
        print(json.dumps(quality), file=sys.stderr)
        if state["best"] is None or quality[score] > state["best"][score]:
            state["best"] = quality
            best_weights.update(module_weights(proposal))
            best_model.update(module_weights(model))

    if not state["history"]:
        evaluate()
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(config.seed)).tolist()
    bar = progress(range(state["step"], config.steps), desc=f"wake-{config.wake} ({context} proposal)", unit="step")
    for step in bar:
        batch, annotated = train[order[step % len(order)]]
        loss = torch.zeros((), device=device)
        if proposal in updated:
            proposal.train()
            model.eval()
            loss = loss + wake_phi_loss(model, proposal, batch, config.particles)
        if model in updated:
            proposal.eval()
            model.train()
            loss = loss + model_loss(batch, config.supervised_weight if annotated else 0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        state["step"] = step + 1
        if state["step"] % config.eval_every == 0 or state["step"] == config.steps:
            evaluate()
            refined = Checkpoint(checkpoint.kind, checkpoint.config, checkpoint.vocabulary, checkpoint.preprocess,
                                 {**checkpoint.weights, "model": best_model, PROPOSAL_WEIGHTS[context]: best_weights},
                                 {**checkpoint.training, "refinement": state})
            refined.save(config.out)
            with atomic_path(state_path) as temporary:
                torch.save({"proposal": module_weights(proposal), "model": module_weights(model),
                            "optimizer": optimizer.state_dict(), "state": state, "best_weights": best_weights,
                            "best_model": best_model, "rng": torch.get_rng_state()}, temporary)
    return {"checkpoint": str(path), "proposal": context, "wake": config.wake, "out": config.out,
            "steps": state["step"], **({"pipeline_mentions": mention_counts} if mention_counts else {}),
            **({"extra_text": extra_counts} if extra_counts else {}),
            "before": state["history"][0], "best": state["best"], "history": state["history"]}


def format_result(result: dict) -> str:
    """The figures before and at best, as the command prints them."""
    keys = ("proposal", "wake", "steps", "pipeline_mentions", "extra_text", "before", "best")
    return json.dumps({k: result[k] for k in keys if k in result}, indent=2)
