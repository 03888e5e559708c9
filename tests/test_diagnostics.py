"""The token-level diagnostics (inference.evaluation.diagnostics): its decompositions add up, and the command runs.

The bundled EntityNLM and RNNLM on the embedded sample corpus (2 documents, no data folder needed). Where a
figure must equal another exactly, the model's new-entity noise (eq. 7) is switched off, so that rescoring a
structure gives the very log p(x, z) the sampler weighted it with.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pyro
import pytest
import torch

from coref.corpora.preprocess import EOS
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.layers.batch import make_batch
from inference.algorithms.smc import sample_structures
from inference.commands import diagnostics as diagnostics_command
from inference.data import prepared_documents
from inference.evaluation import diagnostics
from inference.training.checkpoint import (
    Checkpoint,
    entitynlm_checkpoint,
    entitynlm_modules,
    language_model,
    pretrained,
)


@pytest.fixture(scope="module")
def bundled():
    """The bundled models without new-entity noise, the sample test split in one batch, and ``</s>``'s id."""
    _, checkpoint = entitynlm_checkpoint()
    checkpoint.config = {**checkpoint.config, "new_entity_scale": 0.0}
    model, proposal = entitynlm_modules(checkpoint)
    rnnlm = language_model(Checkpoint.load(pretrained("rnnlm.pt")))
    documents = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    batch = make_batch(documents, checkpoint.vocabulary)
    return model, proposal, rnnlm, batch, checkpoint.vocabulary


@pytest.fixture(scope="module")
def summary(bundled):
    model, proposal, rnnlm, batch, vocabulary = bundled
    pyro.set_rng_seed(0)
    part = diagnostics.diagnose_batch(batch, model, proposal, rnnlm, 8, vocabulary.index(EOS))
    return part, diagnostics.summarise([part], vocabulary, top=5)


def test_the_groups_partition_the_tokens(bundled, summary):
    _, _, _, batch, _ = bundled
    part, result = summary
    groups = result["groups"]
    assert groups["all"]["tokens"] == result["tokens"] == batch.num_tokens
    assert groups["mention"]["tokens"] + groups["outside"]["tokens"] + groups["eos"]["tokens"] == result["tokens"]
    assert min(groups[g]["tokens"] for g in ("mention", "outside", "eos")) > 0
    overlap = part.groups["mention"].long() + part.groups["outside"].long() + part.groups["eos"].long()
    assert torch.equal(overlap, batch.mask.long())  # each real token in exactly one group
    for name in diagnostics.TERMS:  # and so the groups' sums are the total's
        total = sum(groups[g]["nats"][name] for g in ("mention", "outside", "eos"))
        assert total == pytest.approx(groups["all"]["nats"][name], rel=1e-5)


def test_gold_joint_and_rnnlm_terms_are_the_models_log_likelihoods(bundled, summary):
    model, _, rnnlm, batch, _ = bundled
    part, result = summary
    with torch.no_grad():
        gold = model.log_likelihood(batch)
        baseline = rnnlm.log_likelihood(batch)
    torch.testing.assert_close(part.terms["joint_gold"].sum(-1), -gold, rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(part.terms["rnnlm"].sum(-1), -baseline, rtol=1e-5, atol=1e-3)
    figures = result["groups"]["all"]["nats_per_token"]
    assert figures["joint_gold"] == pytest.approx(-float(gold.sum()) / result["tokens"], rel=1e-5)
    assert figures["rnnlm"] == pytest.approx(-float(baseline.sum()) / result["tokens"], rel=1e-5)
    # the latent part is what the structure costs: the gold joint minus the words given the gold structure
    for group in result["groups"].values():
        nats = group["nats_per_token"]
        assert nats["word_gold"] + nats["latent_gold"] == pytest.approx(nats["joint_gold"], rel=1e-6)
        assert nats["word_gold_minus_rnnlm"] == pytest.approx(nats["word_gold"] - nats["rnnlm"], abs=1e-9)
        assert group["perplexity"]["rnnlm"] == pytest.approx(math.exp(nats["rnnlm"]))
    for row, gold_value in zip(result["per_document"], gold.tolist()):
        assert row["marginal_below_gold"] == (row["log_marginal"] < gold_value)


def test_the_marginal_decomposes_into_weighted_terms_and_the_remainder(summary):
    part, result = summary
    marginal = result["marginal"]
    assert marginal["noise_gap_per_document"] == pytest.approx(0, abs=1e-2)  # rescoring = the sampler's joint
    nats = result["groups"]["all"]["nats_per_token"]
    assert nats["marginal"] == pytest.approx(-marginal["log_likelihood"] / result["tokens"])
    assert nats["word_posterior"] + nats["latent_posterior"] - marginal["remainder_per_token"] == \
        pytest.approx(nats["marginal"], rel=1e-5)
    assert marginal["perplexity"] == pytest.approx(math.exp(nats["marginal"]))
    for row in result["per_document"]:
        assert row["word_posterior_nll"] + row["latent_posterior_nll"] - row["remainder"] == \
            pytest.approx(-row["log_marginal"], rel=1e-5)
        assert 1 <= row["ess"] <= 8


def test_one_particle_leaves_minus_log_q_as_the_remainder(bundled):
    """With one particle the weight is p(x, z) / q(z | x) and E_w is that particle: the remainder is -log q(z | x),
    here recomputed by the proposal's own known-annotation path on a batch carrying the sampled structure."""
    model, proposal, _, batch, vocabulary = bundled
    pyro.set_rng_seed(1)
    system = EntityNLMParticles(model, proposal, batch, 1)
    structures = sample_structures(system, vocabulary.index(EOS), resample="never")
    terms, remainder, noise_gap = diagnostics.posterior_decomposition(model, batch, structures)
    sampled = dataclasses.replace(batch, R=structures.R[0], E=structures.E[0], L=structures.L[0])
    with torch.no_grad():
        log_q = proposal.log_likelihood(sampled)
        joint = model.log_likelihood(sampled)
    torch.testing.assert_close(remainder, -log_q, rtol=1e-4, atol=1e-2)
    torch.testing.assert_close(noise_gap, torch.zeros_like(noise_gap), rtol=0, atol=1e-2)
    # E_w word + E_w latent of one particle: minus its joint, as the model scores the sampled structure
    torch.testing.assert_close(terms["word_posterior"].sum(-1) + terms["latent_posterior"].sum(-1), -joint,
                               rtol=1e-5, atol=1e-3)
    assert (structures.R[0] * batch.mask).sum() > 0  # the check has teeth: the sample has mentions
    assert not torch.equal(structures.R[0] * batch.mask, batch.R)  # and is not the gold


def strict_json(path: Path) -> dict:
    def refuse(constant: str):
        raise ValueError(f"{path}: {constant} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_command_end_to_end_on_the_sample_corpus(tmp_path, capsys):
    out = tmp_path / "diagnostics.json"
    assert diagnostics_command.main(["--particles", "5", "--device", "cpu", "--json", str(out)]) == 0
    result = strict_json(out)
    assert (result["corpus"], result["split"], result["documents"], result["particles"]) == ("sample", "test", 2, 5)
    assert result["proposal"] == Checkpoint.load(pretrained("entitynlm.pt")).config["proposal"]
    assert result["baseline"].endswith("rnnlm.pt")
    assert set(result["groups"]) == set(diagnostics.GROUPS)
    assert result["tokens"] == sum(row["tokens"] for row in result["per_document"])
    differences = result["largest_differences"]["tokens"]
    assert len(differences["entitynlm_wins"]) == 10
    assert differences["entitynlm_wins"][0]["difference"] <= differences["entitynlm_loses"][-1]["difference"]
    printed = capsys.readouterr().out
    assert "nats per token" in printed and "in gold mentions" in printed and "EntityNLM loses most" in printed


def test_without_a_baseline_the_rnnlm_columns_are_empty(tmp_path, capsys):
    out = tmp_path / "diagnostics.json"
    argv = ["--baseline", "none", "--particles", "2", "--documents", "1", "--device", "cpu", "--json", str(out)]
    assert diagnostics_command.main(argv) == 0
    result = strict_json(out)
    assert result["baseline"] is None and result["largest_differences"] == {}
    assert result["documents"] == len(result["per_document"]) == 1
    assert result["groups"]["all"]["nats_per_token"]["rnnlm"] is None
    assert "(no RNNLM baseline)" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--particles", "0"], "argument --particles: must be at least 1"),
    (["--documents", "0"], "argument --documents: must be at least 1"),
    (["--checkpoint", str(pretrained("rnnlm.pt"))], "an entitynlm checkpoint is needed"),
    (["--baseline", str(pretrained("entitynlm.pt"))], "the baseline must be an rnnlm checkpoint"),
])
def test_bad_input_gives_a_one_line_error(argv, message, capsys):
    try:
        status = diagnostics_command.main([*argv, "--device", "cpu"])
    except SystemExit as stop:  # an option out of range is refused while parsing
        status = stop.code
    assert status == 2
    error = capsys.readouterr().err
    assert message in error and error.strip().count("\n") == 0


def test_a_proposal_the_checkpoint_lacks_is_a_one_line_error(tmp_path, capsys):
    checkpoint = Checkpoint.load(pretrained("entitynlm.pt"))
    del checkpoint.weights["bidirectional_proposal"]
    checkpoint.save(tmp_path / "forward_only.pt")
    argv = ["--checkpoint", str(tmp_path / "forward_only.pt"), "--proposal", "bidirectional", "--device", "cpu"]
    assert diagnostics_command.main(argv) == 2
    error = capsys.readouterr().err
    assert "no bidirectional proposal" in error and error.strip().count("\n") == 0
