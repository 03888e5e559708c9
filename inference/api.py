"""entitylm in a notebook: a few calls over the library, each result printable and displayable in Jupyter.

    import inference.api as elm
    model = elm.load("entitynlm")                          # or "rnnlm", or the path of any checkpoint
    model.log_likelihood("Anna met her brother. She thanked him.")    # log p_hat(x), perplexity, ESS, k-hat
    model.posterior("Anna met her brother. She thanked him.")         # posterior coreference, highlighted
    elm.coreference("Anna met her brother. She thanked him.")         # the discriminative resolver's answer
    elm.score("key.conll", "response.conll")                          # MUC, B3, CEAFe, LEA, CoNLL F1

    mneme = elm.train("d_mneme", corpus="sample", out="runs/d_mneme", epochs=5)  # python -m inference.train
    story = mneme.generate(entities=["Sarah King", "the dog"], tokens=200, seed=0)  # annotated and measured
    story.metrics, story.memory_attention()                         # entity usage; memory reads per chunk
    mneme.log_likelihood("The dog barked. Sarah King smiled.", entities=["Sarah King", "the dog"])

Nothing here computes anything the commands do not: a text is tokenised as ``python -m inference.posterior
--text`` does (:func:`inference.posterior.tokenize`) and read with the checkpoint's preprocessing; likelihoods
are what ``python -m inference.marginal_ppl`` measures per document (its :func:`run_samplers`), posteriors what
``python -m inference.posterior`` samples (:func:`original_posteriors`), scores those of ``python -m
coref.score``. The MNEMELM story LMs (:class:`StoryLanguageModel`) are trained by ``python -m inference.train``
itself (:func:`train`), sample as ``python -m inference.generate`` does, and score and annotate stories as
``python -m inference.mneme_eval`` does. Every sampling call takes a ``seed``: the same seed gives the same
numbers, and the caller's random state is left as it was. Bad input raises ValueError with a message that names
it.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from functools import cache
from html import escape
from numbers import Integral
from pathlib import Path
from typing import TextIO

import numpy as np
import torch
from matplotlib.figure import Figure

from coref.cli import INTERRUPTED
from coref.conll import format_conll, read_conll
from coref.display import document_html
from coref.document import Document, EntityAnnotation, bracketed, decode_entities
from coref.entity_metrics import StoryMetrics, story_metrics
from coref.metrics import CorefEvaluation, Score, evaluate
from coref.preprocess import BOS, EOS, preprocess_document
from coref.resolve import CorefPipeline, bundled_pipeline, clusters, format_clusters
from coref.score import TABLE_ROWS, format_table, scoring_warnings
from coref.stories import PromptedStory, prompt_tokens
from coref.text import TokenizedText
from coref.text import tokenize as tokenize_text
from generative.entitynlm import EntityNLM, EntityNLMConfig, EntityProposal
from generative.mneme import MnemeConfig, MnemeExample, MnemeLM, parameter_count
from generative.mneme import make_batch as make_story_batch
from inference import train as train_command
from inference.checkpoint import Checkpoint, entitynlm_modules, language_model, pretrained
from inference.common import resolve_device, set_seed
from inference.entity_usage import Annotator, story_text
from inference.generate import entity_story, sample_story
from inference.marginal_ppl import particle_batches, random_state, restore_random_state, run_samplers
from inference.mneme_eval import Tally
from inference.posterior import (
    AntecedentRanking,
    CoreferenceMarginals,
    Posterior,
    antecedent_rankings,
    coreference_marginals,
    marginals_figure,
    original_posteriors,
    posterior_proposal,
    tokenize,
)
from inference.story_lm import MODELS as STORY_MODELS
from inference.story_lm import (
    StoryLMCheckpoint,
    StoryVocabulary,
    encode_story,
    is_story_lm_file,
    load_story_lm,
)

BUNDLED = {"entitynlm": "entitynlm.pt", "rnnlm": "rnnlm.pt"}  # load() names -> inference/pretrained files
TRAINABLE = (*BUNDLED, *STORY_MODELS)  # what train() trains and load() then reads
SAMPLERS = ("is", "smc")  # importance sampling (resampling once at the end, for posteriors), SMC
POSTERIOR_METHODS = {"is": "sir", "smc": "smc"}  # a sampler's name in inference.posterior
Texts = str | Document | Sequence[str | Document]


# ---- loading ----------------------------------------------------------------------------------------------------


def load(name_or_path: str | os.PathLike = "entitynlm", device: str = "cpu") -> LanguageModel | StoryLanguageModel:
    """A language model to score, analyse and sample texts with: ``"entitynlm"`` or ``"rnnlm"`` (the checkpoints
    bundled in ``inference/pretrained``), or the path of a checkpoint of ``python -m inference.train``: an
    EntityNLM or RNNLM one (a :class:`LanguageModel`) or a MNEMELM story LM's (vanilla, s_mneme, d_mneme, ...:
    a :class:`StoryLanguageModel`, told apart by its format tag). ``device``: ``"cpu"``, ``"cuda"`` or
    ``"auto"`` (CUDA when there is a GPU)."""
    name = str(name_or_path)
    if name in BUNDLED:
        path = pretrained(BUNDLED[name])
    else:
        path = Path(name)
        if not path.is_file():
            raise ValueError(f"{name!r}: neither a bundled model ({', '.join(map(repr, BUNDLED))}) nor a "
                             "checkpoint file")
    with kept_random_state():  # building a module draws initial weights, which the checkpoint's then replace
        if is_story_lm_file(path):
            return StoryLanguageModel(path, *load_story_lm(path, resolve_device(device)))
        checkpoint = Checkpoint.load(path)
        if checkpoint.kind not in BUNDLED:
            raise ValueError(f"{path}: a {checkpoint.kind} checkpoint; this API reads entitynlm, rnnlm and story LM "
                             "ones (python -m inference.perplexity scores the others)")
        return LanguageModel(path, checkpoint, resolve_device(device))


def train(model: str, corpus: str, out: str | os.PathLike, data_dir: str | None = None, *, verbose: bool = False,
          **options: object) -> LanguageModel | StoryLanguageModel:
    """Train ``model`` on ``corpus`` into the folder ``out`` with ``python -m inference.train`` (its
    :func:`~inference.train.main`, in this process) and load the result, ``out/model.pt``. ``model``: a story LM
    (:data:`STORY_MODELS`, options of ``python -m inference.story_lm --help``) or ``entitynlm``/``rnnlm``
    (options of ``python -m inference.train --help``). Each option is the command's flag: ``d_model=16`` is
    ``--d-model 16``, ``True`` a bare flag (``resume=True``), a list several values (``proposals=["forward"]``);
    False and None leave it out. The trainer's seed (``seed=``, default 0) decides the run; the caller's random
    state is kept. Its per-epoch lines and summary are shown with ``verbose``; the loaded model's ``history``
    keeps the per-epoch record. A bad option or input raises ValueError with the trainer's message. The
    trainer's ``device`` (default auto) is also the one the model is loaded on (default cpu)."""
    if model not in TRAINABLE:
        raise ValueError(f"train: this API trains and loads {', '.join(TRAINABLE)}, not {model!r} (python -m "
                         "inference.train trains the others)")
    argv = ["--model", model, "--corpus", corpus, "--out", str(out), *_flags({"data_dir": data_dir, **options})]
    captured = {name: _Capture(getattr(sys, name) if verbose else None) for name in ("stdout", "stderr")}
    try:
        with kept_random_state(), redirect_stdout(captured["stdout"]), redirect_stderr(captured["stderr"]):
            status = train_command.main(argv)
    except SystemExit as stop:  # argparse's way out of a bad option, with its one-line message on stderr
        status = stop.code
    if status == INTERRUPTED:
        raise KeyboardInterrupt
    if status != 0:
        lines = [line for line in captured["stderr"].getvalue().splitlines() if line.strip()]
        reason = lines[-1].split("error: ", 1)[-1] if lines else f"exit status {status}"
        raise ValueError(f"inference.train: {reason}")
    return load(Path(out) / "model.pt", str(options.get("device", "cpu")))


def _flags(options: dict[str, object]) -> list[str]:
    """Keyword options as command-line flags (see :func:`train`)."""
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


class _Capture(io.StringIO):
    """A stream that keeps what is written to it and, when given ``echo``, passes it on there as well."""

    def __init__(self, echo: TextIO | None) -> None:
        super().__init__()
        self.echo = echo

    def write(self, text: str) -> int:
        if self.echo is not None:
            self.echo.write(text)
        return super().write(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()


@contextmanager
def kept_random_state() -> Iterator[None]:
    """Give python's, numpy's, torch's and pyro's random states back as they were before the block."""
    state = random_state()
    try:
        yield
    finally:
        restore_random_state(state)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Seed python, numpy, torch and pyro (as the commands' ``--seed``) for the block, then give the caller's
    random state back: a result depends on its seed only, and sampling here never shifts the notebook's RNGs."""
    with kept_random_state():
        set_seed(seed)
        yield


def as_documents(text: Texts) -> list[Document]:
    """Texts as Documents: a string tokenised as ``inference.posterior --text`` does (words and punctuation
    marks; sentences end at . ! ?), named ``text`` (``text 0``, ``text 1``, ... in a list); a Document as it is."""
    many = not isinstance(text, (str, Document))
    if many and not isinstance(text, Sequence):
        raise ValueError(f"a text is a str or a coref.document.Document (or a list of them), not {type(text).__name__}")
    items = list(text) if many else [text]
    if not items:
        raise ValueError("no texts given")
    documents = []
    for number, item in enumerate(items):
        if isinstance(item, Document):
            documents.append(item)
        elif isinstance(item, str):
            if not item.strip():
                raise ValueError(f"text {number if many else ''}".rstrip() + " is empty")
            documents.append(tokenize(item, f"text {number}" if many else "text"))
        else:
            raise ValueError(f"a text is a str or a coref.document.Document, not {type(item).__name__}")
    keys = [document.key for document in documents]
    repeated = next((key for key in keys if keys.count(key) > 1), None)
    if repeated:
        raise ValueError(f"two documents are named {repeated[0]!r} part {repeated[1]}: results are matched by name")
    return documents


def _check_sampling(particles: int, sampler: str) -> None:
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
    if isinstance(particles, bool) or not isinstance(particles, Integral) or particles < 1:
        raise ValueError(f"particles must be an integer of at least 1, got {particles!r}")


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[object]], caption: str = "") -> str:
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    caption = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _number(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _cell(value: object) -> str:
    """A figure of a table: floats with two decimals, None as n/a."""
    return _number(value, ".2f") if value is None or isinstance(value, float) else str(value)


# ---- likelihoods ------------------------------------------------------------------------------------------------

LIKELIHOOD_COLUMNS = ("document", "tokens", "log p (nats)", "perplexity", "ESS", "PSIS k-hat")


@dataclass(frozen=True)
class Likelihood:
    """One document's log-likelihood: ``log_p`` (nats; for EntityNLM the estimate log p_hat(x), exact for the
    RNNLM) over ``tokens`` predicted tokens (words and sentence ends, as the perplexities of inference.marginal_ppl
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
                _number(self.ess, ".1f"), _number(self.psis_khat, ".2f"))

    def __repr__(self) -> str:
        how = "exact" if self.sampler == "exact" else f"{self.sampler.upper()}, {self.particles} particles"
        text = (f"Likelihood({self.document!r}: log p = {self.log_p:.2f} nats over {self.tokens} tokens, "
                f"perplexity {self.perplexity:.2f}, {how}")
        if self.sampler != "exact":
            text += f", ESS {_number(self.ess, '.1f')}, PSIS k-hat {_number(self.psis_khat, '.2f')}"
        return text + ")"

    def _repr_html_(self) -> str:
        return _html_table(LIKELIHOOD_COLUMNS, [self.row()])


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
        return _html_table(LIKELIHOOD_COLUMNS, [result.row() for result in self], caption=self.summary())


# ---- posterior coreference ----------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # numpy fields: compare the parts
class PosteriorCoreference:
    """EntityNLM's posterior over the coreference structure of one text, from weighted particles.

    ``samples``: each particle's structure as a Document on the text's own tokens, ``weights`` their normalised
    weights; ``map``: the sampled structure of highest joint probability p(X, R, E, L) (the posterior's mode
    among the samples, as ``inference.posterior`` writes to map.conll); ``pairwise``: for every span some
    particle makes a mention, P(it is a mention) and P(two spans are mentions of one entity), a symmetric matrix;
    ``log_marginal``: the sampler's estimate of log p(x), ``ess`` its effective sample size."""

    document: Document
    samples: list[Document]
    weights: np.ndarray
    log_joint: np.ndarray
    log_marginal: float
    ess: float
    resamplings: int
    sampler: str
    proposal: str
    map: Document
    pairwise: CoreferenceMarginals

    @classmethod
    def of(cls, posterior: Posterior, sampler: str, proposal: str) -> PosteriorCoreference:
        """The posterior of :func:`inference.posterior.original_posteriors` (structures on the original tokens)."""
        return cls(posterior.document, posterior.structures, posterior.weights, posterior.log_joint,
                   posterior.log_marginal, posterior.ess, posterior.resamplings, sampler, proposal,
                   posterior.map_structure, coreference_marginals(posterior.structures, posterior.weights))

    @property
    def particles(self) -> int:
        return len(self.samples)

    def antecedents(self, min_probability: float = 0.05) -> list[AntecedentRanking]:
        """Per likely mention span, the posterior over its antecedent (an earlier mention or a new entity)."""
        return antecedent_rankings(self.samples, self.weights, min_probability)

    def mention_titles(self) -> dict[tuple[int, int], str]:
        """Per mention of the MAP structure: the posterior probability that it is a mention and that it is
        coreferent with its antecedent in the MAP structure (the hover text of the HTML display)."""
        index = {span: a for a, span in enumerate(self.pairwise.spans)}
        titles, last_of = {}, {}
        for mention in self.map.mentions:  # sampled structures neither nest nor cross: these are in text order
            a = index[mention.span]
            title = f"P(mention) = {self.pairwise.mention[a]:.2f}"
            if mention.entity in last_of:
                b = last_of[mention.entity]
                title += f", P(coreferent with '{self.pairwise.texts[b]}') = {self.pairwise.coreference[a, b]:.2f}"
            else:
                title += ", first mention of its entity in the MAP structure"
            titles[mention.span] = title
            last_of[mention.entity] = a
        return titles

    def to_conll(self) -> str:
        """The MAP structure as a CoNLL-2012 document (what ``coref.conll.parse_conll`` reads back)."""
        return format_conll([self.map])

    def plot(self, max_spans: int = 40) -> Figure:
        """A heatmap of P(same entity) between the ``max_spans`` most probable mention spans, in text order."""
        return marginals_figure(self.pairwise, self.document.id, max_spans)

    def summary(self) -> str:
        return (f"{self.document.id}: log p_hat(x) = {self.log_marginal:.2f}, ESS {self.ess:.1f} of {self.particles} "
                f"({self.sampler.upper()}, {self.proposal} proposal, {self.resamplings} resamplings)")

    def __repr__(self) -> str:
        return f"PosteriorCoreference({self.summary()})\nMAP: {bracketed(self.map)}"

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
        self._entitynlm: dict[str, tuple[EntityNLM, EntityProposal]] = {}
        self.proposal: str | None = None  # the proposal log_likelihood uses
        if self.kind == "entitynlm":
            self.proposal = EntityNLMConfig(**checkpoint.config).proposal  # what inference.marginal_ppl uses
            self.module = self.modules(self.proposal)[0]
        else:
            self.module = language_model(checkpoint, device)

    def modules(self, proposal: str) -> tuple[EntityNLM, EntityProposal]:
        """EntityNLM and its proposal named ``proposal`` ("forward" or "bidirectional"), built once."""
        if proposal not in self._entitynlm:
            self._entitynlm[proposal] = entitynlm_modules(self.checkpoint, self.device, proposal)
        return self._entitynlm[proposal]

    @property
    def history(self) -> list[dict]:
        """The trainer's record of each epoch (train and dev NLL per token, time), as ``python -m inference.train``
        wrote it to the checkpoint."""
        return self.checkpoint.training.get("state", {}).get("history", [])

    def __repr__(self) -> str:
        parameters = sum(p.numel() for p in self.module.parameters())
        return (f"LanguageModel(kind={self.kind!r}, checkpoint='{self.path}', "
                f"vocabulary={len(self.checkpoint.vocabulary)} words, device='{self.device}', "
                f"parameters={parameters:,})")

    def _require_entitynlm(self, what: str) -> None:
        if self.kind != "entitynlm":
            raise ValueError(f"{what} needs EntityNLM's latent entities; this is a {self.kind} model "
                             f"({self.path}): load('entitynlm')")

    def log_likelihood(self, text: Texts, particles: int = 100, sampler: str = "smc", seed: int = 0,
                       batch_tokens: int = 20_000) -> Likelihood | Likelihoods:
        """log p(x) of a text (a :class:`Likelihood`) or of a list of texts (:class:`Likelihoods`, with the corpus
        perplexity). EntityNLM estimates it from ``particles`` annotations drawn from its proposal, by ``sampler``
        "smc" (sequential Monte Carlo resampling at sentence ends: less variance, the command's default) or
        "is" (importance sampling, the paper's eq. 11); the RNNLM computes it exactly. A Document is read the
        way the corpora are (``inference.marginal_ppl``: its mentions, if any, decide which punctuation is kept,
        and are otherwise not used); documents are batched as that command does (``batch_tokens`` particles x
        tokens), so a corpus's documents get the command's numbers for the same random state."""
        _check_sampling(particles, sampler)
        originals = as_documents(text)
        vocabulary = self.checkpoint.vocabulary
        prepared = [preprocess_document(d, self.checkpoint.preprocess, vocabulary)[0] for d in originals]
        per_particle = particles if self.kind == "entitynlm" else 1
        batches = particle_batches(prepared, vocabulary, per_particle, batch_tokens, self.device)
        results: dict[tuple[str, int], Likelihood] = {}
        if self.kind == "entitynlm":
            with seeded(seed):
                run = run_samplers(batches, *self.modules(self.proposal), particles, (sampler,),
                                   vocabulary.index(EOS), progress=False)[sampler]
            for key, row in zip(run.keys, run.statistics):
                results[key["document"], key["part"]] = Likelihood(
                    key["document"], row["log_likelihood"], key["tokens"], sampler, particles, row["ess"],
                    row["psis_khat"], row)
        else:
            with torch.no_grad():
                for batch in batches:
                    log_p = self.module.log_likelihood(batch).tolist()
                    for (name, part), value, tokens in zip(batch.keys, log_p, batch.lengths.tolist()):
                        results[name, part] = Likelihood(name, value, tokens, "exact")
        ordered = [results[document.key] for document in originals]
        return ordered[0] if isinstance(text, (str, Document)) else Likelihoods(ordered)

    def perplexity(self, text: Texts, particles: int = 100, sampler: str = "smc", seed: int = 0) -> float:
        """exp(-log p / tokens) of a text, or of a list of texts taken together (see :meth:`log_likelihood`)."""
        return self.log_likelihood(text, particles, sampler, seed).perplexity

    def posterior(self, text: str | Document, particles: int = 500, sampler: str = "smc", seed: int = 0,
                  proposal: str | None = None) -> PosteriorCoreference:
        """EntityNLM's posterior p(R, E, L | x) over the coreference structure of one text (a Document's own
        mentions are ignored), from ``particles`` particles: ``sampler`` "smc" resamples at sentence ends
        (more effective samples), "is" resamples once at the end (SIR, whose MAP structure was the better
        resolver on LitBank and OntoGUM, see ``python -m inference.posterior --help``). ``proposal``: forward or
        bidirectional (default: forward where the checkpoint has it, as the command)."""
        self._require_entitynlm("posterior")
        _check_sampling(particles, sampler)
        if not isinstance(text, (str, Document)):
            raise ValueError(f"posterior takes one text (a str or a Document), not a {type(text).__name__}")
        model, guide = self.modules(posterior_proposal(self.checkpoint, proposal))
        with seeded(seed):
            (result,) = original_posteriors(model, guide, as_documents(text), self.checkpoint, particles,
                                            POSTERIOR_METHODS[sampler], device=self.device, progress=False)
        return PosteriorCoreference.of(result, sampler, guide.context)

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


# ---- story language models (MNEMELM) --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoryLikelihood:
    """log p(story | its entity prompt) of a story LM: ``log_p`` (nats, exact) over ``tokens`` predicted tokens (the
    story's and ``<eos>``, as ``inference.mneme_eval`` counts them); ``entity_nll`` (-log p_e) and ``other_nll``
    (-log p_r): the mean NLL of the tokens inside a mention of a prompt entity and of the others, where the story
    has mentions (a :class:`coref.stories.PromptedStory`; None for a text); ``unknown``: the words of the prompt
    and the story that the model reads as ``<unk>``."""

    story: PromptedStory
    log_p: float
    tokens: int
    entity_nll: float | None
    other_nll: float | None
    mention_tokens: int
    cache_size: int
    unknown: tuple[str, ...]

    @property
    def perplexity(self) -> float:
        """exp(-log p / tokens)."""
        return float(np.exp(-self.log_p / self.tokens))

    def summary(self) -> str:
        """One line: the story's name, log p, perplexity, -log p_e and -log p_r, and the cache size."""
        return (f"{self.story.id}: log p = {self.log_p:.2f} nats over {self.tokens} tokens, perplexity "
                f"{self.perplexity:.2f}, -log p_e {_number(self.entity_nll, '.2f')} over {self.mention_tokens} "
                f"mention tokens, -log p_r {_number(self.other_nll, '.2f')} (cache {self.cache_size})")

    def __repr__(self) -> str:
        shown = " ".join(self.unknown[:10]) + (" ..." if len(self.unknown) > 10 else "")
        unknown = f"; {len(self.unknown)} words read as <unk>: {shown}" if self.unknown else ""
        return f"StoryLikelihood({self.summary()}{unknown})"

    def _repr_html_(self) -> str:
        names = {k: " ".join(words) for k, words in enumerate(self.story.entities)}
        return document_html(self.story.document(), title=self.summary(), entity_names=names)


@dataclass(frozen=True, eq=False)  # numpy fields
class MemoryAttention:
    """Where a memory model's last layer looks while reading a story: ``weights[c, j]`` is the attention on slot
    j (``slots[j]``: the non-entity slot, then the prompt entities) averaged over the memory heads and the tokens
    of chunk c (``chunks[c]``: its token span); each row sums to 1. ``moved[c, j]``: how far slot j's value moves
    after chunk c, ‖V_j after − V_j before‖ (eq. 4-6 of :mod:`generative.mneme`; 0 for S-MNEMELM's static
    memory)."""

    weights: np.ndarray
    moved: np.ndarray
    slots: list[str]
    chunks: list[tuple[int, int]]

    def __repr__(self) -> str:
        width = max(len(slot) for slot in self.slots)
        head = " " * width + "".join(f"{f'{start}-{end - 1}':>8}" for start, end in self.chunks)
        rows = [slot.rjust(width) + "".join(f"{weight:8.2f}" for weight in self.weights[:, j])
                for j, slot in enumerate(self.slots)]
        return "\n".join([f"MemoryAttention({len(self.chunks)} chunks x {len(self.slots)} slots; columns: the "
                          "chunks' tokens)", head, *rows])

    def _repr_html_(self) -> str:
        rows = [(slot, *(f"{w:.2f}" for w in self.weights[:, j])) for j, slot in enumerate(self.slots)]
        return _html_table(("slot", *(f"{start}-{end - 1}" for start, end in self.chunks)), rows,
                           "mean memory attention of the last layer per chunk (columns: token spans)")


@dataclass(frozen=True)
class GeneratedStory:
    """A story sampled by a story LM from an entity prompt: the ``prompt`` as written (``<sep> e1 <sep> ...``,
    of ``entities``), the sampled ``words`` (``ended``: it stopped at ``<eos>``, not at the token limit),
    ``document``: its ``text`` annotated by the bundled coreference pipeline (singletons dropped, entity numbers
    the pipeline's own), and ``metrics``: :func:`coref.entity_metrics.story_metrics` against the prompt's
    entities (entities, mentions, exact and subset prompt matches, coherence, consistency). ``document`` and
    ``metrics`` are None for an empty story (``<eos>`` drawn first)."""

    model: StoryLanguageModel = field(repr=False, compare=False)
    entities: tuple[tuple[str, ...], ...]
    words: tuple[str, ...]
    ended: bool
    seed: int
    document: Document | None
    metrics: StoryMetrics | None

    @property
    def prompt(self) -> tuple[str, ...]:
        """The prompt's words, ``<sep> e1 <sep> e2 <sep> ...`` (:func:`coref.stories.prompt_tokens`)."""
        return tuple(prompt_tokens(entity_story(self.entities))[0])

    @property
    def text(self) -> str:
        """The words as the annotator reads them: joined by spaces, ``<unk>`` written ``UNK``."""
        return story_text(self.words)

    @property
    def unknown(self) -> list[str]:
        """The prompt's words outside the model's vocabulary, which it read as ``<unk>``."""
        return self.model.vocabulary.unknown(self.prompt)

    def memory_attention(self) -> MemoryAttention:
        """The memory attention of the model's last layer per chunk and slot while reading the prompt and the
        words again (``model.cross_attention``: the same computation as sampling them)."""
        if self.model.config.memory == "none":
            raise ValueError(f"memory_attention: a {self.model.kind} model has no entity memory")
        if not self.words:
            raise ValueError("memory_attention: the story has no words")
        vocabulary, chunk = self.model.vocabulary, self.model.config.chunk
        prompt, owners = prompt_tokens(entity_story(self.entities))
        batch = make_story_batch([MnemeExample(vocabulary.encode(prompt), owners, vocabulary.encode(self.words))])
        trace = self.model.module.cross_attention(batch.to(self.model.device))
        tokens = trace.attention[0, -1].mean(0).cpu().numpy()  # last layer, mean over heads: (T, Z)
        chunks = [(start, min(start + chunk, len(self.words))) for start in range(0, len(self.words), chunk)]
        values = trace.values[0]
        return MemoryAttention(np.stack([tokens[start:end].mean(0) for start, end in chunks]),
                               (values[1:] - values[:-1]).norm(dim=-1).cpu().numpy(),
                               ["non-entity", *(" ".join(entity) for entity in self.entities)], chunks)

    def summary(self) -> str:
        """One line: the model, the prompt, the seed, the number of words and how the story ended."""
        end = "ended with <eos>" if self.ended else "cut at the token limit"
        return f"{self.model.kind} from '{' '.join(self.prompt)}' (seed {self.seed}): {len(self.words)} words, {end}"

    def __repr__(self) -> str:
        lines = [f"GeneratedStory({self.summary()})"]
        if self.unknown:
            lines.append(f"prompt words read as <unk>: {' '.join(self.unknown)}")
        if self.document is not None:
            lines.append(bracketed(self.document))
            lines.append("metrics: " + ", ".join(f"{name} {_cell(value)}" for name, value in self.metrics.items()))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if self.document is None:
            return f"<p>{escape(self.summary())}</p>"
        metrics = _html_table(tuple(self.metrics), [tuple(map(_cell, self.metrics.values()))])
        return document_html(self.document, title=self.summary()) + metrics


@cache
def story_annotator() -> Annotator:
    """The coreference pipeline and POS tagger that annotate generated stories (:class:`inference.entity_usage.
    Annotator`, the bundled models), loaded once per process."""
    return Annotator.load()


def _entity_words(entities: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    if isinstance(entities, str) or not isinstance(entities, Sequence):
        raise ValueError(f"entities are a list of strings (each an entity's words), not {type(entities).__name__}")
    if not all(isinstance(entity, str) and entity.split() for entity in entities):
        raise ValueError(f"every entity is a non-empty string, got {list(entities)!r}")
    return tuple(tuple(entity.split()) for entity in entities)


class StoryLanguageModel:
    """A MNEMELM story LM (Papalampidi et al. 2022: VANILLALM, S-MNEMELM, D-MNEMELM or an ablation) on a device,
    made by :func:`load`: it reads and writes stories conditioned on an entity prompt. ``kind``: the preset,
    ``module``: the :class:`generative.mneme.MnemeLM`, ``checkpoint``: its
    :class:`inference.story_lm.StoryLMCheckpoint`."""

    def __init__(self, path: Path, module: MnemeLM, checkpoint: StoryLMCheckpoint) -> None:
        self.path, self.module, self.checkpoint, self.kind = path, module, checkpoint, checkpoint.model
        self.device = module.embedding.weight.device

    @property
    def vocabulary(self) -> StoryVocabulary:
        """The model's words (``<pad> <sep> <unk> <eos>``, then the training words)."""
        return self.checkpoint.vocabulary

    @property
    def config(self) -> MnemeConfig:
        """The model's sizes and choices (memory, chunk, segment, cache, ...)."""
        return self.checkpoint.config

    @property
    def history(self) -> list[dict]:
        """The trainer's record of each epoch: train and dev NLL and KL per story token, dev perplexity, time."""
        return self.checkpoint.training.get("state", {}).get("history", [])

    def __repr__(self) -> str:
        return (f"StoryLanguageModel(kind={self.kind!r}, checkpoint='{self.path}', vocabulary="
                f"{len(self.vocabulary)} words, device='{self.device}', parameters={parameter_count(self.module):,})")

    def log_likelihood(self, text: str | PromptedStory, entities: Sequence[str] = (),
                       cache_size: int | None = None) -> StoryLikelihood:
        """log p(story | prompt), exact: ``text`` a string (tokenised by :func:`coref.text.tokenize`) written for
        the prompt of ``entities`` (each entity's words, e.g. ``["Anna", "her brother"]``), or a
        :class:`coref.stories.PromptedStory` (e.g. of ``coref.stories.load_stories``), whose prompt and
        mentions give -log p_e and -log p_r too. ``cache_size``: the T-XL cache (default the model's; smaller
        simulates longer narratives, as ``inference.mneme_eval --cache-sizes``)."""
        if isinstance(text, PromptedStory):
            if entities:
                raise ValueError("log_likelihood: a PromptedStory has its own entities; give entities with a str")
            story = text
        elif isinstance(text, str):
            tokenized = tokenize_text(text)  # ValueError for an empty text
            story = PromptedStory("text", "text", tokenized.tokens, tokenized.sentences, _entity_words(entities), ())
        else:
            raise ValueError(f"a story is a str or a coref.stories.PromptedStory, not {type(text).__name__}")
        if cache_size is not None and (isinstance(cache_size, bool) or not isinstance(cache_size, Integral)
                                       or cache_size < 0):
            raise ValueError(f"cache_size must be an integer of at least 0, got {cache_size!r}")
        batch = make_story_batch([encode_story(story, self.vocabulary)])
        with torch.no_grad():
            log_p = self.module.token_log_probs(batch.to(self.device), cache_size).cpu()
        tally = Tally(sections=1)
        tally.add(-log_p, batch)
        metrics = tally.metrics()
        return StoryLikelihood(story, float(log_p.double().sum()), metrics["tokens"], metrics["entity_nll"],
                               metrics["other_nll"], metrics["mention_tokens"],
                               self.config.cache if cache_size is None else cache_size,
                               tuple(self.vocabulary.unknown([*prompt_tokens(story)[0], *story.tokens])))

    def perplexity(self, text: str | PromptedStory, entities: Sequence[str] = (),
                   cache_size: int | None = None) -> float:
        """exp(-log p / tokens) of a story (see :meth:`log_likelihood`)."""
        return self.log_likelihood(text, entities, cache_size).perplexity

    def generate(self, entities: Sequence[str], tokens: int = 200, seed: int = 0, top_p: float = 0.8,
                 temperature: float = 1.0) -> GeneratedStory:
        """A story written for the prompt of ``entities`` (each entity's words, e.g. ``["Sarah King", "the
        dog"]``; a word outside the vocabulary reads as ``<unk>``), sampled as ``python -m inference.generate``
        does: nucleus sampling (§5.2: ``top_p`` 0.8, ``temperature`` 1) with the full T-XL memory, from a random
        stream seeded by ``seed`` (the caller's is not used), until ``<eos>`` or ``tokens`` tokens; then
        annotated and measured as ``inference.mneme_eval`` measures generated stories."""
        if isinstance(tokens, bool) or not isinstance(tokens, Integral) or tokens < 1:
            raise ValueError(f"tokens must be an integer of at least 1, got {tokens!r}")
        words_of = _entity_words(entities)
        story = entity_story(words_of)
        prompt, owners = prompt_tokens(story)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        words, ended = sample_story(self.module, self.vocabulary, prompt, owners, tokens, top_p, temperature,
                                    generator, lambda word: None)
        document, metrics = None, None
        if words:
            [(document, tags)] = story_annotator().annotate([words], [f"{self.kind} sample (seed {seed})"])
            metrics = story_metrics(document, tags, story.entities)
        return GeneratedStory(self, words_of, tuple(words), ended, seed, document, metrics)


# ---- coreference resolution and scoring -------------------------------------------------------------------------


@dataclass(frozen=True)
class Coreference:
    """The coreference of a text by the mention detector and mention ranker of :mod:`coref.resolve`."""

    document: Document
    tokenized: TokenizedText

    def clusters(self) -> list[list[dict[str, object]]]:
        """The entities, each its mentions in text order (words, token span, character span in the text)."""
        return clusters(self.document, self.tokenized)

    def to_conll(self) -> str:
        return format_conll([self.document])

    def __repr__(self) -> str:
        return format_clusters(self.document, self.tokenized)

    def _repr_html_(self) -> str:
        return document_html(self.document)


def coreference(text: str, detector: str | os.PathLike | None = None,
                resolver: str | os.PathLike | None = None) -> Coreference:
    """The coreference of a raw text by a mention detector and the mention ranker trained on its mentions (the
    bundled ones by default; see ``python -m coref.resolve``). Tokenised with :func:`coref.text.tokenize`."""
    if not isinstance(text, str):
        raise ValueError(f"coreference takes a str, not a {type(text).__name__}")
    tokenized = tokenize_text(text)
    pipeline = bundled_pipeline() if detector is None and resolver is None else CorefPipeline.load(detector, resolver)
    return Coreference(pipeline.resolve(tokenized), tokenized)


Annotations = Document | str | os.PathLike | Sequence[Document]


def _annotations(value: Annotations, side: str) -> list[Document]:
    if isinstance(value, Document):
        return [value]
    if isinstance(value, (str, os.PathLike)):
        return read_conll(value, strict=True)[0]  # a CoNLL file, read as coref.score reads it
    documents = list(value)
    if not all(isinstance(document, Document) for document in documents):
        raise ValueError(f"the {side} must be a Document, a CoNLL file's path, or a list of Documents")
    return documents


@dataclass(frozen=True)
class Scores:
    """A response's scores against a key (:class:`coref.metrics.CorefEvaluation`): ``scores["muc"].f1`` etc.,
    fractions in [0, 1]; ``conll_f1`` the mean F1 of MUC, B3 and CEAFe; ``warnings`` what the official scorer's
    rules did that changes figures (repeated spans, unmatched documents)."""

    evaluation: CorefEvaluation
    metrics: tuple[str, ...]

    def __getitem__(self, metric: str) -> Score:
        return getattr(self.evaluation, metric)

    @property
    def conll_f1(self) -> float:
        return self.evaluation.conll_f1

    @property
    def warnings(self) -> list[str]:
        return scoring_warnings(self.evaluation)

    def __repr__(self) -> str:
        return "\n".join([format_table(self.evaluation, self.metrics), *self.warnings])

    def _repr_html_(self) -> str:
        rows = [(name, *(f"{100 * value:.2f}" for value in (self[name].recall, self[name].precision, self[name].f1)))
                for name in self.metrics]
        caption = f"CoNLL F1 {100 * self.conll_f1:.2f} ({self.evaluation.documents} key documents)"
        return _html_table(("metric", "recall", "precision", "F1"), rows, caption)


def score(key: Annotations, response: Annotations, metrics: Sequence[str] = TABLE_ROWS) -> Scores:
    """Score a response's coreference against a key's, with the official CoNLL-2012 scorer's semantics (exact
    span matches, micro-averaged over documents matched by name). Each side: a Document, a CoNLL file's path, or
    a list of Documents. Two single Documents are compared whatever their names. ``metrics``: which rows the
    table shows, of ``mentions``, ``muc``, ``bcub``, ``ceafe``, ``ceafm``, ``blanc`` and ``lea``."""
    unknown = [metric for metric in metrics if metric not in TABLE_ROWS]
    if unknown or not metrics:
        raise ValueError(f"unknown metrics {unknown}; choose from {TABLE_ROWS}")
    keys, responses = _annotations(key, "key"), _annotations(response, "response")
    if isinstance(key, Document) and isinstance(response, Document):
        responses = [response.replace(id=key.id, part=key.part)]
    return Scores(evaluate(keys, responses), tuple(metrics))
