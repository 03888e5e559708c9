"""Reweighted wake-sleep on EntityNLM: wake-theta's gradient is the gradient of log p(x), the coref wake's that of
log p(E_gold | x, R, L) (each checked against the enumeration of a tiny model), and the refine command updates
exactly the modules its --wake names."""

from __future__ import annotations

import pyro
import pytest
import torch

from generative.entitynlm.lockstep import EntityNLMParticles
from generative.entitynlm.state import Annotation
from inference.algorithms.refine import (
    coref_quality,
    pipeline_mention_counts,
    pipeline_mention_documents,
    wake_coref_loss,
    wake_theta_loss,
)
from inference.algorithms.smc import sample_structures
from inference.commands import refine
from inference.training.checkpoint import Checkpoint
from tests.test_entitynlm import EOS, WORDS, annotations, tiny_batch, tiny_models


def gradient(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def assert_estimated_gradient(loss, model, proposal, batch, exact: torch.Tensor) -> None:
    """The gradient of ``loss`` (20,000 particles, no supervised term) is the model's gradient of -exact per token
    within 5%, and leaves the proposal alone."""
    (-exact / batch.num_tokens).backward()
    expected = gradient(model)
    model.zero_grad()
    pyro.set_rng_seed(0)
    loss(model, proposal, batch, 20_000, EOS, supervised_weight=0.0).backward()
    estimated = gradient(model)
    assert torch.linalg.norm(estimated - expected) < 0.05 * torch.linalg.norm(expected)
    assert not any(p.grad is not None and p.grad.abs().sum() > 0 for p in proposal.parameters())


@pytest.mark.parametrize("changes", [{}, {"entity_words": 4}], ids=["paper", "copy"])
def test_wake_theta_follows_the_gradient_of_the_marginal_likelihood(changes):
    model, proposal = tiny_models(**changes)  # with the copy too: the language model fine-tuned with it
    batch = tiny_batch([{"words": WORDS}])
    every = list(annotations(len(WORDS), model.config.max_mention_length))
    enumerated = tiny_batch([{"words": WORDS, "sentence": [0] * len(WORDS), "R": R, "E": E, "L": L}
                             for R, E, L in every])
    exact = torch.logsumexp(model.log_likelihood(enumerated), 0)  # log p(x), with its gradient
    assert_estimated_gradient(wake_theta_loss, model, proposal, batch, exact)


GIVEN = {"R": [1, 1, 0, 1], "E": [1, 1, 0, 1], "L": [2, 1, 1, 1]}  # two mentions, the second linked to the first


def exact_conditional(model) -> torch.Tensor:
    """log p(E_gold | x, R_gold, L_gold) by enumeration, with its gradient."""
    every = list(annotations(len(WORDS), model.config.max_mention_length))
    consistent = [(R, E, L) for R, E, L in every if R == GIVEN["R"] and L == GIVEN["L"]]
    assert len(consistent) == 2  # the second mention: the first's entity, or a new one
    joint = model.log_likelihood(tiny_batch([{"words": WORDS, "sentence": [0] * len(WORDS), "R": R, "E": E, "L": L}
                                             for R, E, L in consistent]))
    return joint[consistent.index((GIVEN["R"], GIVEN["E"], GIVEN["L"]))] - torch.logsumexp(joint, 0)


def test_the_coref_wake_follows_the_gradient_of_the_gold_entities_conditional():
    model, proposal = tiny_models()
    batch = tiny_batch([{"words": WORDS, **GIVEN}])
    exact = exact_conditional(model)
    assert_estimated_gradient(wake_coref_loss, model, proposal, batch, exact)
    # its evaluation: the same conditional, per gold mention (two here)
    pyro.set_rng_seed(0)
    quality = coref_quality(model, proposal, [batch], 20_000, EOS)
    assert quality["coref_log_likelihood_per_mention"] == pytest.approx(exact.item() / 2, abs=0.01)


def test_drawn_structures_of_a_padded_batch_score_as_each_document_alone():
    model, proposal = tiny_models()
    model.eval()  # no dropout: the scorings compare exactly
    rows = [{"words": WORDS * 2, "R": [1, 1, 0, 0] * 2, "E": [1, 1, 0, 0, 1, 1, 0, 0], "L": [2, 1, 1, 1] * 2},
            {"words": WORDS[:2], "R": [1, 1], "E": [1, 1], "L": [2, 1]}]  # a mention up to its end, then padding
    padded = tiny_batch(rows)
    pyro.set_rng_seed(0)
    with torch.no_grad():
        system = EntityNLMParticles(model, proposal, padded, 3, mentions=Annotation.mentions_of(padded))
        sampled = sample_structures(system, EOS, "never")
        scores = model.log_joint(padded, sampled.annotations(padded.mask))  # (3, 2)
        for particle in range(3):
            for b, row in enumerate(rows):
                n = len(row["words"])
                drawn = {site: getattr(sampled, site)[particle, b, :n].tolist() for site in ("R", "E", "L")}
                alone = model.log_likelihood(tiny_batch([{"words": row["words"], **drawn}]))
                assert drawn["R"] == row["R"] and drawn["L"] == row["L"]
                assert scores[particle, b].item() == pytest.approx(alone.item(), abs=1e-4)


def test_the_refine_command_updates_what_wake_names(tmp_path, capsys):
    from inference.training.checkpoint import pretrained

    bundled = Checkpoint.load(pretrained("entitynlm.pt"))
    proposal_key = "bidirectional_proposal"
    for wake, changed, more in (("theta", {"model"}, []), ("phi", {proposal_key}, []), ("coref", {"model"}, []),
                                ("coref", {"model"}, ["--coref-mentions", "pipeline"]),
                                ("coref", {"model"}, ["--coref-objective", "local"]),
                                ("coref", {"model"}, ["--coref-mentions", "pipeline", "--coref-objective", "local",
                                                      "--pipeline-margin", "1"])):
        out = tmp_path / f"{wake}{'-'.join(more)}.pt"
        argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", wake, "--steps", "2", "--eval-every", "1",
                "--eval-pieces", "4", "--particles", "4", "--out", str(out), "--device", "cpu", *more]
        assert refine.main(argv) == 0
        refined = Checkpoint.load(out)
        for key in ("model", proposal_key):
            same = all(torch.equal(refined.weights[key][name], value) for name, value in bundled.weights[key].items())
            assert same == (key not in changed) or refined.training["refinement"]["best"]["step"] == 0, (wake, key)


def test_the_pipeline_mentions_carry_the_gold_entities_and_spurious_ones_stand_alone():
    from inference.algorithms.config import PAPER_PROPOSAL
    from inference.algorithms.hints import corpus_hints, hint_pipeline
    from inference.data import prepared_documents
    from inference.training.checkpoint import pretrained

    checkpoint = Checkpoint.load(pretrained("entitynlm.pt"))
    gold = prepared_documents("sample", "train", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    pipeline = hint_pipeline(PAPER_PROPOSAL)
    pairs = pipeline_mention_documents(pipeline, "sample", "train", None, gold, checkpoint.preprocess)
    labelled = [document for document, _ in pairs]
    hints = corpus_hints(PAPER_PROPOSAL, pipeline, "sample", "train", None, gold, checkpoint.preprocess)
    matched = spurious = 0
    for document, relabelled in zip(gold, labelled):
        assert relabelled.tokens == document.tokens
        assert [m.span for m in relabelled.mentions] == sorted(m.span for m in hints[document.key].response(
            document).mentions)  # the pipeline's linked spans, all of them
        entity = {m.span: m.entity for m in document.mentions}
        for a in relabelled.mentions:
            for b in relabelled.mentions:
                if a.span != b.span:
                    together = a.span in entity and b.span in entity and entity[a.span] == entity[b.span]
                    assert (a.entity == b.entity) == together, (document.key, a, b)
        matched += sum(m.span in entity for m in relabelled.mentions)
        spurious += sum(m.span not in entity for m in relabelled.mentions)
    assert matched and spurious  # both kinds occur, so both rules are checked
    assert [list(clustered.mentions) for _, clustered in pairs] == [
        sorted(hints[document.key].response(document).mentions) for document in gold]  # in the pipeline's entities
    annotated = sum(len(document.mentions) for document in gold)
    assert pipeline_mention_counts(gold, labelled) == pytest.approx(
        {"mentions": matched + spurious, "spurious_share": spurious / (matched + spurious),
         "gold_found_share": matched / annotated})


def test_the_pipeline_mentions_are_for_the_coref_wake(tmp_path, capsys):
    from inference.training.checkpoint import pretrained

    argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", "theta", "--coref-mentions", "pipeline",
            "--steps", "1", "--out", str(tmp_path / "out.pt"), "--device", "cpu"]
    assert refine.main(argv) != 0
    assert "--coref-mentions and --coref-objective are for --wake coref" in capsys.readouterr().err


def test_the_local_coref_objective_raises_the_gold_clusters_local_conditionals():
    from generative.layers.batch import make_batch
    from inference.algorithms.refine import wake_coref_local_loss
    from inference.algorithms.resolver import local_log_conditionals
    from inference.algorithms.scoring import noise_free
    from inference.data import prepared_documents
    from inference.training.checkpoint import entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0].eval()  # no dropout, no eq. 7 noise: deterministic
    (document, *_) = prepared_documents("sample", "train", None, checkpoint.preprocess, checkpoint.vocabulary,
                                        quiet=True)
    batch = make_batch([document], checkpoint.vocabulary)
    before = local_log_conditionals(model, checkpoint, document, "cpu")
    loss = wake_coref_local_loss(model, checkpoint, [document], batch, supervised_weight=0.0)
    assert loss.item() == pytest.approx(-before.sum().item() / batch.num_tokens, rel=1e-5)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(5):
        optimizer.zero_grad()
        wake_coref_local_loss(model, checkpoint, [document], batch, supervised_weight=0.0).backward()
        optimizer.step()
    with torch.no_grad():
        after = local_log_conditionals(model, checkpoint, document, "cpu")
    assert after.sum() > before.sum() + 0.1


def test_the_pipeline_margin_is_the_logistic_loss_of_the_gold_against_the_pipelines_clusters():
    from generative.layers.batch import make_batch
    from inference.algorithms.config import PAPER_PROPOSAL
    from inference.algorithms.hints import hint_pipeline
    from inference.algorithms.refine import wake_coref_local_loss
    from inference.algorithms.scoring import noise_free
    from inference.data import prepared_documents
    from inference.training.checkpoint import entitynlm_modules, pretrained

    checkpoint = noise_free(Checkpoint.load(pretrained("entitynlm.pt")))
    model = entitynlm_modules(checkpoint, "cpu")[0].eval()  # no dropout, no eq. 7 noise: deterministic
    gold = prepared_documents("sample", "train", None, checkpoint.preprocess, checkpoint.vocabulary, quiet=True)
    pairs = [pair for pair in pipeline_mention_documents(hint_pipeline(PAPER_PROPOSAL), "sample", "train", None, gold,
                                                         checkpoint.preprocess)
             if pair[0].partition() != pair[1].partition()][:2]
    assert pairs  # the pipeline errs somewhere on the sample
    batch = make_batch([labelled for labelled, _ in pairs], checkpoint.vocabulary)
    rivals = make_batch([clustered for _, clustered in pairs], checkpoint.vocabulary)
    pieces = [labelled for labelled, _ in pairs]

    def margin() -> torch.Tensor:
        return model.log_likelihood(batch) - model.log_likelihood(rivals)  # log p(x, z_gold) - log p(x, z_pipeline)

    with torch.no_grad():
        local = wake_coref_local_loss(model, checkpoint, pieces, batch, 0.0)
        both = wake_coref_local_loss(model, checkpoint, pieces, batch, 0.0, rivals, margin_weight=2.0)
        before = margin()
    expected = local + 2.0 * torch.nn.functional.softplus(-before).sum() / batch.num_tokens
    assert both.item() == pytest.approx(expected.item(), rel=1e-5)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(5):  # the margin alone: the gold's joint pulled up against the pipeline's
        optimizer.zero_grad()
        (wake_coref_local_loss(model, checkpoint, pieces, batch, 0.0, rivals, margin_weight=1.0) - local).backward()
        optimizer.step()
    with torch.no_grad():
        assert (margin() > before).all()


def test_extra_text_trains_without_the_supervised_term(tmp_path, monkeypatch, capsys):
    """The pieces of --extra-text join the training pieces, and wake-theta is given no supervised term on them
    (they have no annotation); the corpus's own pieces keep theirs."""
    from inference.algorithms import refine as algorithm
    from inference.training.checkpoint import pretrained
    from tests.test_inference_cli import write_lambada_dev

    data = write_lambada_dev(tmp_path / "data")
    calls = []

    def recorded(model, proposal, batch, particles, eos, supervised_weight):
        calls.append(({key[0].split(":")[0] for key in batch.keys}, supervised_weight))  # (id, part)
        return wake_theta_loss(model, proposal, batch, particles, eos, supervised_weight)

    monkeypatch.setattr(algorithm, "wake_theta_loss", recorded)
    argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", "theta", "--supervised-weight", "0.5",
            "--extra-text", "lambada-dev", "--data-dir", str(data), "--steps", "12", "--eval-every", "12",
            "--eval-pieces", "2", "--particles", "2", "--batch-tokens", "200", "--out", str(tmp_path / "x.pt"),
            "--device", "cpu"]
    assert refine.main(argv) == 0
    assert '"lambada-dev": {\n      "documents": 2,\n      "pieces": 2,\n      "tokens": 14' in capsys.readouterr().out
    text = [weight for sources, weight in calls if sources == {"lambada-dev"}]
    annotated = [weight for sources, weight in calls if "lambada-dev" not in sources]
    assert text and annotated and len(text) + len(annotated) == len(calls) == 12  # batches of one kind
    assert set(text) == {0.0} and set(annotated) == {0.5}


def test_extra_text_is_refused_for_the_coref_wake(tmp_path, capsys):
    from inference.training.checkpoint import pretrained

    argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", "coref", "--extra-text", "lambada-dev",
            "--out", str(tmp_path / "x.pt"), "--device", "cpu"]
    assert refine.main(argv) == 2
    assert "--extra-text is text without annotation: it is for --wake phi, theta or both" in capsys.readouterr().err
