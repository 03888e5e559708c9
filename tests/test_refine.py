"""Reweighted wake-sleep on EntityNLM: wake-theta's gradient is the gradient of log p(x) (checked against the
enumerated marginal of a tiny model), and the refine command updates exactly the modules its --wake names."""

from __future__ import annotations

import pyro
import torch

from inference.algorithms.refine import wake_theta_loss
from inference.commands import refine
from inference.training.checkpoint import Checkpoint
from tests.test_entitynlm import EOS, WORDS, annotations, tiny_batch, tiny_models


def gradient(model) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_wake_theta_follows_the_gradient_of_the_marginal_likelihood():
    model, proposal = tiny_models()
    batch = tiny_batch([{"words": WORDS}])
    every = list(annotations(len(WORDS), model.config.max_mention_length))
    enumerated = tiny_batch([{"words": WORDS, "sentence": [0] * len(WORDS), "R": R, "E": E, "L": L}
                             for R, E, L in every])
    exact = torch.logsumexp(model.log_likelihood(enumerated), 0)  # log p(x), with its gradient
    (-exact / batch.num_tokens).backward()
    expected = gradient(model)
    model.zero_grad()
    pyro.set_rng_seed(0)
    wake_theta_loss(model, proposal, batch, 20_000, EOS, supervised_weight=0.0).backward()
    estimated = gradient(model)
    assert torch.linalg.norm(estimated - expected) < 0.05 * torch.linalg.norm(expected)
    assert not any(p.grad is not None and p.grad.abs().sum() > 0 for p in proposal.parameters())


def test_the_refine_command_updates_what_wake_names(tmp_path, capsys):
    from inference.training.checkpoint import pretrained

    bundled = Checkpoint.load(pretrained("entitynlm.pt"))
    proposal_key = "bidirectional_proposal"
    for wake, changed in (("theta", {"model"}), ("phi", {proposal_key})):
        out = tmp_path / f"{wake}.pt"
        argv = ["--checkpoint", str(pretrained("entitynlm.pt")), "--wake", wake, "--steps", "2", "--eval-every", "1",
                "--eval-pieces", "4", "--particles", "4", "--out", str(out), "--device", "cpu"]
        assert refine.main(argv) == 0
        refined = Checkpoint.load(out)
        for key in ("model", proposal_key):
            same = all(torch.equal(refined.weights[key][name], value) for name, value in bundled.weights[key].items())
            assert same == (key not in changed) or refined.training["refinement"]["best"]["step"] == 0, (wake, key)
