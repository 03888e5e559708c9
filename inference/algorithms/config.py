"""How EntityNLM's latent structure is sampled: two frozen configs and the named presets built from them.

:class:`SamplingConfig` says how the particles are run (the sampler, how many, where SMC resamples, particle
Gibbs sweeps, the seed); :class:`ProposalConfig` says what they are drawn from (the proposal Q, its temperature,
its mixtures with the coreference pipeline's reading and with the model's own choice given the word, the model's
new-entity bias and document cache, and whether the mentions are given). Every sampling entry point (the API's
``log_likelihood``, ``posterior`` and ``resolve``, ``python -m inference.marginal_ppl`` and ``python -m
inference.posterior``) reads its settings from one :class:`Preset`, which holds one pair of configs for each of
the two tasks:

- ``likelihood``: the marginal log p(x), R, E and L all latent;
- ``posterior``: the coreference structure of a text, by default the entities of the pipeline's mentions.

``"settled"`` is the default everywhere: the estimate that moved at most 0.2% from N = 100 to N = 1000 on
LitBank and OntoGUM test (SMC after any token, the pipeline's hints at weight 0.5 and temperature 4, the
lookahead at 0.8), and the posterior that resolves (the pipeline's mentions given, five sweeps of particle Gibbs,
hints at weight 0.99 and temperature 0.5: its MAP at least the pipeline's CoNLL F1 on LitBank and OntoGUM).
``"paper"`` is Ji et al. (2017)'s: importance sampling from the proposal Q alone (eq. 11), for reproducing Table
1, and the posterior of R, E and L by the same draws resampled once.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from numbers import Integral, Real

SAMPLERS = ("is", "smc")  # importance sampling (eq. 11; for structures, resampled once at the end), SMC
RESAMPLING = ("sentence", "token")  # where SMC may resample
GIVEN_MENTIONS = ("pipeline", "detected")  # the pipeline's linked mentions, or every span its detector finds
PROPOSAL_CONTEXTS = ("forward", "bidirectional")
TASKS = ("likelihood", "posterior")


def _integer(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")


def _real(name: str, value: object, low: float, high: float, *, low_open: bool = False,
          high_open: bool = True) -> None:
    inside = (isinstance(value, Real) and not isinstance(value, bool) and not math.isnan(value)
              and (value > low if low_open else value >= low) and (value < high if high_open else value <= high))
    if not inside:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")


def _choice(name: str, value: object, choices: tuple, optional: bool = False) -> None:
    if not (value in choices or (optional and value is None)):
        raise ValueError(f"{name} must be one of {choices}{' or None' if optional else ''}, got {value!r}")


@dataclass(frozen=True)
class SamplingConfig:
    """How the particles run: ``sampler`` "smc" (resampling where ``resample`` allows, "sentence" ends or after
    any "token", when a document's ESS falls below ``ess_threshold`` x ``particles``) or "is" (importance sampling,
    the paper's eq. 11); ``sweeps`` > 1 is particle Gibbs (that many passes, each later one conditional SMC on a
    structure drawn from the last); ``seed`` seeds batch n with ``batch_seed(seed, n)``; ``batch_tokens`` is
    particles x padded tokens per batch (the grouping is part of what a seed reproduces)."""

    sampler: str = "smc"
    particles: int = 100
    resample: str = "token"
    ess_threshold: float = 0.5
    sweeps: int = 1
    seed: int = 0
    batch_tokens: int = 20_000

    def __post_init__(self) -> None:
        _choice("sampler", self.sampler, SAMPLERS)
        _integer("particles", self.particles, 1)
        _choice("resample", self.resample, RESAMPLING)
        _real("ess_threshold", self.ess_threshold, 0.0, 1.0, high_open=False)
        _integer("sweeps", self.sweeps, 1)
        _integer("seed", self.seed, 0)
        _integer("batch_tokens", self.batch_tokens, 1)

    @property
    def resampling(self) -> str:
        """Where the particles are resampled: "never" (importance sampling), "sentence" or "token"."""
        return "never" if self.sampler == "is" else self.resample


@dataclass(frozen=True)
class ProposalConfig:
    """What the particles are drawn from. ``context``: the proposal Q, "forward" (the paper's, reads x_<=t) or
    "bidirectional" (None: the checkpoint's). ``temperature`` divides Q's R, E, L logits. ``hint_weight`` mixes Q
    with the coreference pipeline's reading of the text (:mod:`generative.entitynlm.hints`; 0: Q alone), the
    ranker's scores divided by ``hint_temperature``, smoothed by ``hint_epsilon``, from ``hint_detector`` and
    ``hint_resolver`` (None: the bundled ones). ``lookahead`` mixes in the model's own choice given the word
    (:mod:`generative.entitynlm.lookahead`; 0: none). ``new_entity_bias`` is added to the new entity's logit in the
    model's p(E) (eq. 4), ``document_cache`` the weight of a unigram cache of the document's words so far in the
    model's eq. 6 (0: none). ``given_mentions``: None samples R, E and L; "pipeline" (the spans the pipeline
    links) or "detected" (every span its detector finds) gives the mentions, and only their entities are
    sampled (posteriors only)."""

    context: str | None = None
    temperature: float = 1.0
    hint_weight: float = 0.5
    hint_temperature: float = 4.0
    hint_epsilon: float = 0.02
    hint_detector: str | None = None
    hint_resolver: str | None = None
    lookahead: float = 0.8
    new_entity_bias: float = 0.0
    document_cache: float = 0.0
    given_mentions: str | None = None

    def __post_init__(self) -> None:
        _choice("context", self.context, PROPOSAL_CONTEXTS, optional=True)
        _real("temperature", self.temperature, 0.0, math.inf, low_open=True)
        _real("hint_weight", self.hint_weight, 0.0, 1.0)
        _real("hint_temperature", self.hint_temperature, 0.0, math.inf, low_open=True)
        _real("hint_epsilon", self.hint_epsilon, 0.0, 1.0, low_open=True)
        _real("lookahead", self.lookahead, 0.0, 1.0)
        _real("new_entity_bias", self.new_entity_bias, -math.inf, math.inf)
        _real("document_cache", self.document_cache, 0.0, 1.0)
        _choice("given_mentions", self.given_mentions, GIVEN_MENTIONS, optional=True)

    @property
    def hinted(self) -> bool:
        """Whether the proposal follows the coreference pipeline (which must then read the texts)."""
        return self.hint_weight > 0


SAMPLING_FIELDS = frozenset(field.name for field in fields(SamplingConfig))
PROPOSAL_FIELDS = frozenset(field.name for field in fields(ProposalConfig))


@dataclass(frozen=True)
class Settings:
    """One task's sampling and proposal configs."""

    sampling: SamplingConfig
    proposal: ProposalConfig

    def replace(self, **changes: object) -> Settings:
        """These settings with ``changes``, each a field of :class:`SamplingConfig` or :class:`ProposalConfig`
        (their names do not overlap); an unknown name is refused."""
        unknown = sorted(set(changes) - SAMPLING_FIELDS - PROPOSAL_FIELDS)
        if unknown:
            raise ValueError(f"unknown sampling option {unknown[0]!r}; the options are "
                             f"{', '.join(sorted(SAMPLING_FIELDS | PROPOSAL_FIELDS))}")
        return Settings(
            dataclasses.replace(self.sampling, **{k: v for k, v in changes.items() if k in SAMPLING_FIELDS}),
            dataclasses.replace(self.proposal, **{k: v for k, v in changes.items() if k in PROPOSAL_FIELDS}))

    def describe(self) -> str:
        """One line: what runs and what it draws from."""
        sampling, proposal = self.sampling, self.proposal
        how = ("importance sampling" if sampling.sampler == "is"
               else f"SMC resampling at {'sentence ends' if sampling.resample == 'sentence' else 'any token'}")
        parts = [f"{how}, {sampling.particles} particles"]
        if sampling.sweeps > 1:
            parts.append(f"{sampling.sweeps} sweeps of particle Gibbs")
        parts.append(f"hints {proposal.hint_weight:g} at T = {proposal.hint_temperature:g}" if proposal.hinted
                     else "the proposal Q alone" if not proposal.lookahead else "Q")
        if proposal.lookahead:
            parts.append(f"lookahead {proposal.lookahead:g}")
        if proposal.given_mentions:
            parts.append(f"the {proposal.given_mentions} mentions given")
        return ", ".join(parts)


@dataclass(frozen=True)
class Preset:
    """A named pair of :class:`Settings`: ``likelihood`` for the marginal log p(x), ``posterior`` for the
    coreference structure of a text."""

    name: str
    likelihood: Settings
    posterior: Settings

    def settings(self, task: str, **changes: object) -> Settings:
        """The settings of ``task`` ("likelihood" or "posterior") with ``changes`` (:meth:`Settings.replace`)."""
        _choice("task", task, TASKS)
        return getattr(self, task).replace(**changes)

    def __repr__(self) -> str:
        return (f"Preset({self.name!r}:\n  likelihood: {self.likelihood.describe()}\n"
                f"  posterior:  {self.posterior.describe()})")


PAPER_PROPOSAL = ProposalConfig(hint_weight=0.0, hint_temperature=1.0, lookahead=0.0)
PRESETS = {
    "settled": Preset(
        "settled",
        likelihood=Settings(SamplingConfig(), ProposalConfig()),
        posterior=Settings(SamplingConfig(sampler="is", sweeps=5),
                           ProposalConfig(hint_weight=0.99, hint_temperature=0.5, lookahead=0.0,
                                          given_mentions="pipeline")),
    ),
    "paper": Preset(
        "paper",
        likelihood=Settings(SamplingConfig(sampler="is", resample="sentence"), PAPER_PROPOSAL),
        posterior=Settings(SamplingConfig(sampler="is", resample="sentence"), PAPER_PROPOSAL),
    ),
}
DEFAULT_PRESET = "settled"


def preset(name: str | Preset = DEFAULT_PRESET) -> Preset:
    """The preset named ``name`` (one of :data:`PRESETS`), or ``name`` itself when it is a :class:`Preset`."""
    if isinstance(name, Preset):
        return name
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {tuple(PRESETS)} (or an entitylm.Preset), got {name!r}")
    return PRESETS[name]


def settings_for(task: str, name: str | Preset = DEFAULT_PRESET, **changes: object) -> Settings:
    """The settings of ``task`` in preset ``name``, with ``changes``: what every sampling entry point runs."""
    return preset(name).settings(task, **changes)
