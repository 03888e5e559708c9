"""The sampling presets: what they hold, that they refuse bad values, and that every face runs the same default
(the API's ``log_likelihood``, ``posterior``, ``resolve`` and the ``marginal_ppl`` and ``posterior`` commands)."""

from __future__ import annotations

import dataclasses

import pytest

import entitylm as elm
from inference.algorithms.config import PRESETS, Settings, settings_for
from inference.algorithms.posterior import PosteriorConfig
from inference.commands import marginal_ppl as marginal_command
from inference.commands import posterior as posterior_command
from inference.commands.cli import config_of
from inference.evaluation.marginal_ppl import MarginalConfig

TEXT = "Anna met her brother Tom in Paris. She thanked him, and he smiled at her."


def marginal_settings(argv: list[str]) -> Settings:
    """The settings ``python -m inference.marginal_ppl ARGV`` runs with."""
    args = marginal_command.build_parser().parse_args(argv)
    captured = {}

    def keep(config: MarginalConfig) -> dict:
        captured["config"] = config
        return {}

    original = marginal_command.marginal_perplexity
    marginal_command.marginal_perplexity = keep
    try:
        marginal_command.run(args)
    finally:
        marginal_command.marginal_perplexity = original
    return captured["config"].settings


def posterior_settings(argv: list[str]) -> Settings:
    """The settings ``python -m inference.posterior --text ... ARGV`` runs with."""
    return config_of(PosteriorConfig, posterior_command.parse_args(["--text", TEXT, *argv])).settings


def test_the_commands_defaults_are_the_apis():
    assert marginal_settings([]) == settings_for("likelihood") == MarginalConfig().settings
    assert posterior_settings([]) == settings_for("posterior") == PosteriorConfig().settings
    assert marginal_settings(["--preset", "paper"]) == settings_for("likelihood", "paper")
    assert posterior_settings(["--preset", "paper"]) == settings_for("posterior", "paper")


def test_an_option_given_overrides_its_presets_value():
    changed = marginal_settings(["--preset", "paper", "--particles", "7", "--lookahead", "0.3"])
    assert changed == settings_for("likelihood", "paper", particles=7, lookahead=0.3)
    own = posterior_settings(["--given-mentions", "none", "--sweeps", "2"])
    assert own == settings_for("posterior", given_mentions=None, sweeps=2)


def test_the_settled_preset_is_the_measured_configuration_and_the_paper_one_is_eq_11():
    settled, paper = elm.preset("settled"), elm.preset("paper")
    likelihood = settled.likelihood
    assert (likelihood.sampling.sampler, likelihood.sampling.resample, likelihood.sampling.particles) == (
        "smc", "token", 100)
    assert (likelihood.proposal.hint_weight, likelihood.proposal.hint_temperature,
            likelihood.proposal.lookahead) == (0.5, 4.0, 0.8)
    posterior = settled.posterior
    assert (posterior.sampling.sampler, posterior.sampling.sweeps, posterior.proposal.hint_weight,
            posterior.proposal.hint_temperature, posterior.proposal.given_mentions) == ("is", 5, 0.99, 0.5,
                                                                                        "pipeline")
    for settings in (paper.likelihood, paper.posterior):
        assert settings.sampling.sampler == "is" and not settings.proposal.hinted
        assert settings.proposal.lookahead == 0 and settings.proposal.given_mentions is None
    assert set(PRESETS) == {"settled", "paper"} and "lookahead 0.8" in repr(settled)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: elm.SamplingConfig(particles=0), "particles must be an integer of at least 1"),
    (lambda: elm.SamplingConfig(sampler="mcmc"), "sampler must be one of"),
    (lambda: elm.SamplingConfig(resample="never"), "resample must be one of"),
    (lambda: elm.SamplingConfig(sweeps=True), "sweeps must be an integer"),
    (lambda: elm.ProposalConfig(hint_weight=1.0), r"hint_weight must be in \[0, 1\)"),
    (lambda: elm.ProposalConfig(temperature=0), r"temperature must be in \(0, inf\)"),
    (lambda: elm.ProposalConfig(given_mentions="gold"), "given_mentions must be one of"),
    (lambda: elm.preset("best"), "preset must be one of"),
    (lambda: settings_for("likelihood", particle=3), "unknown sampling option 'particle'"),
])
def test_bad_settings_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_preset_object_is_taken_as_it_is():
    mine = dataclasses.replace(elm.preset("paper"), name="mine")
    assert elm.preset(mine) is mine and settings_for("posterior", mine) == mine.posterior


def test_the_default_posterior_resolves_on_the_pipelines_mentions_and_prints_its_clusters():
    model = elm.load("entitynlm")
    result = model.posterior(TEXT, particles=8, sweeps=2, link_piece=10)
    assert result.given_mentions == "pipeline" and result.pipeline is not None
    assert sorted(m.span for m in result.map.mentions) == sorted(m.span for m in result.pipeline.mentions)
    text = repr(result)
    assert "log p_hat(x, R, L)" in text and "MAP clusters" in text and "PosteriorCoreference(" in text
    assert any("She" in line and "Anna" in line or "him" in line for line in text.splitlines()[2:])
    for ranking in [*result.antecedents(), *result.links()]:
        assert ranking.mention <= 1 and all(a.probability <= 1 for a in ranking.antecedents)
    resolved = model.resolve(TEXT, particles=8, sweeps=2, link_piece=10)
    assert resolved.map == result.map and resolved.log_marginal == result.log_marginal
    own = model.posterior(TEXT, given_mentions=None, particles=8, sweeps=1)
    assert own.pipeline is None and "log p_hat(x) =" in repr(own)
    with pytest.raises(ValueError, match="links are the local conditionals on given mentions"):
        own.links()
