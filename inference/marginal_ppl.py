"""Marginal perplexity of EntityNLM by importance sampling (paper §5.1), beside its baselines on the same tokens.

    python -m inference.marginal_ppl                                  # bundled model, embedded sample corpus
    python -m inference.marginal_ppl --checkpoint runs/entitynlm/model.pt --corpus litbank --split test \\
        --data-dir DATA --baseline runs/rnnlm/model.pt --baseline runs/ngram/model.pt --json result.json

R, E and L are latent at test time: for each document N annotations are drawn from the proposal and
p(x) is estimated by the mean importance weight (eq. 11). Perplexity = exp(-sum_docs log p_hat(x) / tokens),
over the word tokens and sentence ends every model predicts. Printed per document: tokens, log p_hat(x), ESS
and PSIS k-hat; in total: the perplexity, the perplexity of the ELBO (the mean log weight, a bound), and the
baselines' perplexities on the same tokens with the same vocabulary. ``--sampler smc`` replaces importance
sampling by sequential Monte Carlo with the same proposal and particle count (:mod:`inference.smc`): particles
are resampled at sentence ends when their ESS falls below half, and the product of the stages' mean weights
is again an unbiased estimate of p(x), with far less variance on long documents.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm import tqdm

from coref.document import Document
from coref.preprocess import EOS
from generative.batch import DocumentBatch, batches_by_length, token_stream
from generative.entitynlm import EntityNLM, EntityProposal
from inference.checkpoint import (
    Checkpoint,
    CheckpointError,
    entitynlm_checkpoint,
    entitynlm_modules,
    ngram_model,
    pretrained,
    rnnlm_module,
)
from inference.common import prepared_documents, resolve_device, run_command, set_seed
from inference.importance import estimate_marginal
from inference.smc import sample_structures

DEFAULT_BASELINES = ("rnnlm.pt",)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m inference.marginal_ppl", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--corpus", default="sample", help="corpus name or names joined with '+' (default: sample)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--data-dir", help="folder holding the corpora (default: $ENTITYLM_DATA)")
    parser.add_argument("--particles", type=int, default=100, help="importance samples per document (paper: 100)")
    parser.add_argument("--sampler", default="is", choices=["is", "smc"],
                        help="is: importance sampling (the paper, eq. 11); smc: sequential Monte Carlo resampling "
                             "at sentence ends (an unbiased estimate too, with far less variance)")
    parser.add_argument("--proposal-temperature", type=float, default=1.0,
                        help="divide the proposal's R/E/L logits by this (> 1 widens it; 1 = as trained)")
    parser.add_argument("--baseline", action="append", metavar="CKPT",
                        help="RNNLM or n-gram checkpoint, repeatable; 'none' for no baseline "
                             "(default: the bundled baselines with the bundled model)")
    parser.add_argument("--batch-tokens", type=int, default=20_000, help="particles x padded tokens per batch")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="OUT", help="also write the results as JSON")
    return parser.parse_args(argv)


def baseline_paths(args: argparse.Namespace) -> list[Path]:
    if args.baseline is None:
        return [pretrained(name) for name in DEFAULT_BASELINES] if args.checkpoint is None else []
    return [] if args.baseline == ["none"] else [Path(path) for path in args.baseline]


def baseline_log_likelihood(checkpoint: Checkpoint, documents: list[Document], batches: list[DocumentBatch],
                            device: torch.device) -> float:
    """Total log-likelihood of the documents under an RNNLM or n-gram baseline."""
    if checkpoint.kind == "ngram":
        ngram = ngram_model(checkpoint)
        return float(sum(ngram.log_prob(token_stream(d, checkpoint.vocabulary).words).sum() for d in documents))
    if checkpoint.kind == "rnnlm":
        model = rnnlm_module(checkpoint, device)
        with torch.no_grad():
            return float(sum(model.log_likelihood(batch).sum() for batch in batches))
    raise CheckpointError(f"a baseline must be an rnnlm or ngram checkpoint, not {checkpoint.kind}")


def run(args: argparse.Namespace) -> dict:
    set_seed(args.seed)
    device = resolve_device(args.device)
    path, checkpoint = entitynlm_checkpoint(args.checkpoint)
    baselines = [(p, Checkpoint.load(p)) for p in baseline_paths(args)]
    for baseline_path, baseline in baselines:
        checkpoint.require_vocabulary(baseline.vocabulary, f"baseline {baseline_path}")
    model, proposal = entitynlm_modules(checkpoint, device)
    proposal.temperature = args.proposal_temperature
    documents = prepared_documents(args.corpus, args.split, args.data_dir, checkpoint.preprocess,
                                   checkpoint.vocabulary, quiet=True)
    batches = [b.to(device) for b in batches_by_length(documents, checkpoint.vocabulary,
                                                         max(1, args.batch_tokens // args.particles))]
    started = time.perf_counter()
    rows = []
    eos = checkpoint.vocabulary.index(EOS)
    for batch in tqdm(batches, desc=f"{args.sampler}, {args.particles} particles", unit="batch"):
        rows += document_rows(batch, model, proposal, args.particles, args.sampler, eos)
    seconds = time.perf_counter() - started
    tokens = sum(row["tokens"] for row in rows)
    log_likelihood = sum(row["log_likelihood"] for row in rows)
    result = {
        "corpus": args.corpus, "split": args.split, "checkpoint": str(path), "device": str(device),
        "documents": len(rows), "tokens": tokens, "particles": args.particles,
        "proposal_temperature": args.proposal_temperature,
        "log_likelihood": log_likelihood,
        "perplexity": math.exp(-log_likelihood / tokens),
        "sampler": args.sampler,
        "elbo_perplexity": math.exp(-sum(row["elbo"] for row in rows) / tokens) if args.sampler == "is" else None,
        "baselines": {}, "ess": [row["ess"] for row in rows], "psis_khat": [row["psis_khat"] for row in rows],
        "seconds": seconds, "per_document": rows,
    }
    for baseline_path, baseline in baselines:
        name = baseline.kind
        if name in result["baselines"]:  # a second baseline of one kind is named by its file's folder
            name = f"{baseline.kind}:{baseline_path.parent.name}"
        total = baseline_log_likelihood(baseline, documents, batches, device)
        result["baselines"][name] = math.exp(-total / tokens)
    return result


def document_rows(batch: DocumentBatch, model: EntityNLM, proposal: EntityProposal, particles: int, sampler: str,
                  eos: int) -> list[dict]:
    """log p_hat(x) of each document of ``batch`` and its diagnostics: the ELBO and PSIS k-hat for importance
    sampling; for SMC the ESS of the final stage and how often the document was resampled."""
    keys = [{"document": key[0], "part": key[1], "tokens": int(batch.lengths[i])} for i, key in enumerate(batch.keys)]
    if sampler == "smc":
        sampled = sample_structures(model, proposal, batch, particles, eos, "sentence")
        return [{**key, "log_likelihood": float(sampled.log_marginal[i]), "elbo": None, "ess": float(sampled.ess[i]),
                 "psis_khat": None, "resamplings": int(sampled.resamplings[i])} for i, key in enumerate(keys)]
    estimate = estimate_marginal(model.model, proposal.guide, batch, particles)
    khat = estimate.psis_khat()
    return [{**key, "log_likelihood": float(estimate.log_marginal[i]), "elbo": float(estimate.elbo[i]),
             "ess": float(estimate.ess[i]), "psis_khat": float(khat[i])} for i, key in enumerate(keys)]


def format_result(result: dict) -> str:
    smc = result["sampler"] == "smc"
    lines = [f"{'document':<40} {'tokens':>7} {'log p_hat(x)':>13} {'ESS':>7} {'resampl.' if smc else 'k-hat':>8}"]
    for row in result["per_document"]:
        last = f"{row['resamplings']:>8}" if smc else f"{row['psis_khat']:>8.2f}"
        lines.append(f"{row['document'][:40]:<40} {row['tokens']:>7} {row['log_likelihood']:>13.2f} "
                     f"{row['ess']:>7.1f} {last}")
    lines.append(
        f"\n{result['corpus']}/{result['split']}: {result['documents']} documents, {result['tokens']} tokens, "
        f"{result['particles']} particles, {result['seconds']:.1f} s"
    )
    if smc:
        lines.append(f"EntityNLM perplexity (SMC):                {result['perplexity']:.2f}")
    else:
        lines.append(f"EntityNLM perplexity (importance sampling): {result['perplexity']:.2f}")
        lines.append(f"EntityNLM ELBO perplexity (bound):         {result['elbo_perplexity']:.2f}")
    for name, perplexity in result["baselines"].items():
        lines.append(f"{name + ' perplexity:':<43}{perplexity:.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(run, format_result, parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
