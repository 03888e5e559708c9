"""Refine a trained proposal toward the model's posterior on text alone: reweighted wake-sleep's wake-phi update.

    python -m inference.refine --checkpoint runs/entitynlm/model.pt --proposal bidirectional \\
        --corpus litbank+ontogum --data-dir DATA --out runs/entitynlm/refined.pt

A proposal fitted to gold annotations is sharper than the model's posterior p(R, E, L | X), and on long
documents its importance weights collapse onto one particle. The wake-phi update of reweighted wake-sleep
(Le et al. 2019) minimises sum_i w_i * -log q(z_i | x) with the self-normalised weights w_i of K particles
z_i ~ q: a stochastic estimate of KL(p(z | x) || q), which widens q where the posterior is wider. Its gradient
is only informative where the weights are not degenerate, so it runs on pieces of whole sentences of about
``--chunk`` tokens (the proposal's conditionals are local, so what it learns there holds on whole documents).
The model's parameters stay fixed.

Every ``--eval-every`` steps (and before the first) it measures on dev pieces the mean ESS fraction and the
mean log p_hat(x) per token with ``--particles`` particles (higher is better: both sides are unbiased
estimates of p(x), and a better proposal has less of the downward bias of log p_hat), keeps the best
proposal by that log-likelihood, and writes ``OUT`` (the checkpoint with the refined proposal) and
``OUT.state`` (to resume) atomically.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from coref.io.atomic import atomic_path
from coref.cli import Parser, integer, output_file, progress, real
from coref.document import sentence_chunks
from generative.layers.batch import DocumentBatch, batches_by_length
from generative.entitynlm.model import PROPOSAL_CONTEXTS
from inference.training.checkpoint import (
    PROPOSAL_WEIGHTS,
    Checkpoint,
    entitynlm_checkpoint,
    entitynlm_modules,
    module_weights,
    read_torch_file,
)
from inference.commands.cli import run_command
from inference.data import prepared_documents
from inference.runtime import changed_options, resolve_device, set_seed
from inference.algorithms.importance import ImportanceEstimate, importance_log_densities, log_importance_weights


def build_parser() -> Parser:
    parser = Parser(prog="python -m inference.refine", description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="EntityNLM checkpoint whose proposal is refined")
    parser.add_argument("--proposal", choices=PROPOSAL_CONTEXTS, help="which proposal (default: the checkpoint's)")
    parser.add_argument("--corpus", default="sample", help="corpus name, or several joined with '+'")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA; sample needs none)")
    parser.add_argument("--out", required=True, type=output_file,
                        help="the refined checkpoint; OUT.state resumes an interrupted refinement with the same "
                             "options (other options are refused)")
    parser.add_argument("--steps", type=integer(1), default=300, help="wake-phi steps in all (a resumed run's too)")
    parser.add_argument("--particles", type=integer(2), default=20,
                        help="K particles per wake-phi step and evaluation")
    parser.add_argument("--chunk", type=integer(1), default=100, help="tokens per piece of whole sentences")
    parser.add_argument("--batch-tokens", type=integer(1), default=2_000, help="padded tokens per step (x particles)")
    parser.add_argument("--lr", type=real(0, include_low=False), default=3e-4, help="Adam learning rate")
    parser.add_argument("--eval-every", type=integer(1), default=50, help="evaluate on dev every this many steps")
    parser.add_argument("--eval-pieces", type=integer(1), default=200, help="dev pieces the evaluation uses")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--json", metavar="PATH", type=output_file, help="also write the before/after figures as JSON")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


# What a resumed refinement may change: how long it goes on, how often it evaluates, and where it runs.
RESUMABLE_CHANGES = frozenset({"steps", "eval_every", "device", "data_dir", "json"})


def wake_phi_loss(model, proposal, batch: DocumentBatch, particles: int) -> torch.Tensor:
    """-sum_i w_i log q(z_i | x) per token, w_i the self-normalised importance weights (no gradient)."""
    log_p, log_q = importance_log_densities(model.model, proposal.guide, batch, particles)
    weights = torch.softmax(log_p - log_q.detach(), dim=0)
    return -(weights * log_q).sum() / batch.num_tokens


@torch.no_grad()
def proposal_quality(model, proposal, batches: list[DocumentBatch], particles: int) -> dict[str, float]:
    """Mean ESS fraction and log p_hat(x) per token on ``batches``: what refinement should raise."""
    proposal.eval()
    ess, log_marginal, tokens = [], 0.0, 0
    with torch.random.fork_rng():
        torch.manual_seed(0)  # every evaluation draws alike
        for batch in batches:
            estimate = ImportanceEstimate(log_importance_weights(model.model, proposal.guide, batch, particles))
            ess.append(estimate.ess / particles)
            log_marginal += float(estimate.log_marginal.sum())
            tokens += batch.num_tokens
    return {"ess_fraction": float(torch.cat(ess).mean()), "log_likelihood_per_token": log_marginal / tokens}


def run(args: argparse.Namespace) -> dict:
    set_seed(args.seed)
    device = resolve_device(args.device)
    path, checkpoint = entitynlm_checkpoint(args.checkpoint)
    model, proposal = entitynlm_modules(checkpoint, device, args.proposal)
    context = proposal.context
    for parameter in model.parameters():
        parameter.requires_grad_(False)

    def pieces(split: str) -> list:
        documents = prepared_documents(args.corpus, split, args.data_dir, checkpoint.preprocess,
                                       checkpoint.vocabulary, quiet=True)
        return [piece for document in documents for piece in sentence_chunks(document, args.chunk)]

    per_step = max(1, args.batch_tokens // args.particles)
    train = [b.to(device) for b in batches_by_length(pieces("train"), checkpoint.vocabulary, per_step)]
    dev_pieces = pieces("dev")
    dev_pieces = [dev_pieces[i] for i in torch.randperm(len(dev_pieces), generator=torch.Generator().manual_seed(0))
                  [:args.eval_pieces].tolist()]
    dev = [b.to(device) for b in batches_by_length(dev_pieces, checkpoint.vocabulary, 20 * per_step)]
    optimizer = torch.optim.Adam(proposal.parameters(), lr=args.lr)
    state_path = Path(f"{args.out}.state")
    state = {"step": 0, "history": [], "best": None, "args": vars(args)}
    best_weights = module_weights(proposal)
    if state_path.exists():
        saved = read_torch_file(state_path, "refinement state")
        changed = changed_options(saved["state"].get("args", {}), vars(args), RESUMABLE_CHANGES)
        if changed:
            raise ValueError(f"{state_path}: a refinement with other options: {', '.join(changed)}; resume it with "
                             "the same options, or choose another --out")
        proposal.load_state_dict(saved["proposal"])
        optimizer.load_state_dict(saved["optimizer"])
        state, best_weights = {**saved["state"], "args": vars(args)}, saved["best_weights"]
        torch.set_rng_state(saved["rng"])
        print(f"resumed from {state_path} at step {state['step']}", file=sys.stderr)

    def evaluate() -> None:
        quality = {"step": state["step"], **proposal_quality(model, proposal, dev, args.particles)}
        state["history"].append(quality)
        print(json.dumps(quality), file=sys.stderr)
        if state["best"] is None or quality["log_likelihood_per_token"] > state["best"]["log_likelihood_per_token"]:
            state["best"] = quality
            best_weights.update(module_weights(proposal))

    if not state["history"]:
        evaluate()
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed)).tolist()
    bar = progress(range(state["step"], args.steps), desc=f"wake-phi ({context} proposal)", unit="step")
    for step in bar:
        proposal.train()
        loss = wake_phi_loss(model, proposal, train[order[step % len(order)]], args.particles)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        state["step"] = step + 1
        if state["step"] % args.eval_every == 0 or state["step"] == args.steps:
            evaluate()
            refined = Checkpoint(checkpoint.kind, checkpoint.config, checkpoint.vocabulary, checkpoint.preprocess,
                                 {**checkpoint.weights, PROPOSAL_WEIGHTS[context]: best_weights},
                                 {**checkpoint.training, "refinement": state})
            refined.save(args.out)
            with atomic_path(state_path) as temporary:
                torch.save({"proposal": module_weights(proposal), "optimizer": optimizer.state_dict(), "state": state,
                            "best_weights": best_weights, "rng": torch.get_rng_state()}, temporary)
    return {"checkpoint": str(path), "proposal": context, "out": args.out, "steps": state["step"],
            "before": state["history"][0], "best": state["best"], "history": state["history"]}


def format_result(result: dict) -> str:
    return json.dumps({k: result[k] for k in ("proposal", "steps", "before", "best")}, indent=2)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, format_result, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
