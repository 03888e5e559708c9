"""Speed of entitylm's importance sampling and training, each against its baseline in the same run.

1. Importance-sampling throughput (token x particles per second): our particle-vectorised estimator against
   ``pyro.infer.Importance`` over the same model, guide and documents, one particle at a time.
2. Peak memory of N = 100 particles on the longest document (resident set size of a fresh process on CPU,
   ``torch.cuda.max_memory_allocated`` on a GPU).
3. Training throughput (tokens per second, forward + backward on gold annotation): EntityNLM (model and
   proposal, by the fast known-annotation path and by the Pyro program token by token) against the RNNLM, on
   the same batches, both as trained (200-token pieces) and on whole documents.

    python benchmarks/speed.py --data-dir DATA [--checkpoint CKPT] [--device cpu|cuda] [--out benchmarks/results]

Prints a table and writes ``speed.json`` and ``speed.md``. Timings on shared machines vary by 20-40% between
runs: compare the ratios, which are measured within one run.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyro
import torch
from pyro.infer import Importance

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's packages

from benchmarks.runs import command_record
from coref.document import sentence_chunks
from coref.io.atomic import write_text_atomic
from generative.baselines.rnnlm import RNNLM, RNNLMConfig
from generative.entitynlm.model import PROPOSAL_CONTEXTS, Annotation, EntityNLMConfig, EntityProposal
from generative.layers.batch import batches_by_length, make_batch
from inference.algorithms.importance import estimate_marginal
from inference.checks import integer, output_folder
from inference.commands.cli import USER_ERRORS, Parser, run_main
from inference.data import prepared_documents
from inference.runtime import resolve_device, set_seed
from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained


def timed(function) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def importance_throughput(model, proposal, batch, particles: int, device: torch.device) -> dict:
    """Token x particles per second: one vectorised run against pyro.infer.Importance, particle by particle."""
    tokens = batch.num_tokens
    estimate_marginal(model.model, proposal.guide, batch, 2)  # warm-up: first calls allocate and import
    vectorised = timed(lambda: (estimate_marginal(model.model, proposal.guide, batch, particles), sync(device)))
    with torch.no_grad():
        sequential = timed(lambda: (Importance(model.model, proposal.guide, num_samples=particles).run(batch, 1),
                                    sync(device)))
    return {"tokens": tokens, "particles": particles,
            "vectorised_token_particles_per_s": tokens * particles / vectorised,
            "pyro_importance_token_particles_per_s": tokens * particles / sequential,
            "speedup": sequential / vectorised}


def training_throughput(model, proposals: dict, rnnlm, batches, device: torch.device, repeats: int = 3) -> dict:
    """Tokens per second of a forward + backward pass on gold annotation, each EntityNLM variant against the
    RNNLM on the same batches: the fast path (model + the paper's proposal, and + both proposals) and the Pyro
    program token by token (the cost before the fast path). After a warm-up pass, the variants run in turn
    ``repeats`` times and each keeps its median time, so that a slow spell of the machine hits all alike."""
    tokens = sum(batch.num_tokens for batch in batches)
    forward, bidirectional = proposals["forward"], proposals["bidirectional"]

    def rnnlm_step(batch):
        return -rnnlm.log_likelihood(batch).sum()

    def fast_step(batch):
        return -(model.log_likelihood(batch).sum() + forward.log_likelihood(batch).sum())

    def fast_both_step(batch):
        return fast_step(batch) - bidirectional.log_likelihood(batch).sum()

    def program_step(batch):
        joint = model.program_log_joint(batch, Annotation.of(batch)).sum()
        return -(joint + forward.program_log_likelihood(batch).sum())

    variants = {"rnnlm": rnnlm_step, "entitynlm_fast": fast_step, "entitynlm_fast_both_proposals": fast_both_step,
                "entitynlm_program": program_step}

    def run(step) -> None:
        for batch in batches:
            step(batch).backward()
        sync(device)

    for step in variants.values():
        step(batches[0]).backward()  # warm-up
    seconds = {name: [] for name in variants}
    for _ in range(repeats):
        for name, step in variants.items():
            seconds[name].append(timed(lambda step=step: run(step)))
    median = {name: statistics.median(values) for name, values in seconds.items()}
    result = {"tokens": tokens, "repeats": repeats}
    for name, value in median.items():
        result[f"{name}_tokens_per_s"] = tokens / value
        if name != "rnnlm":
            result[f"{name}_over_rnnlm"] = value / median["rnnlm"]
    return result


PEAK_MEMORY_CHILD = """
import resource, sys, torch
from benchmarks.speed import peak_memory_run
print(peak_memory_run(*sys.argv[1:]))
"""


def peak_memory_run(checkpoint: str, data_dir: str, device_name: str, particles: str) -> float:
    """Peak memory (MiB) of importance sampling the longest LitBank test document, in this process."""
    device = resolve_device(device_name)
    loaded = Checkpoint.load(checkpoint)
    model, proposal = entitynlm_modules(loaded, device)
    documents = prepared_documents("litbank", "test", data_dir, loaded.preprocess, loaded.vocabulary, quiet=True)
    longest = max(documents, key=lambda d: len(d.tokens))
    batch = make_batch([longest], loaded.vocabulary).to(device)
    estimate_marginal(model.model, proposal.guide, batch, int(particles))
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


def build_parser() -> Parser:
    parser = Parser(prog="python benchmarks/speed.py", description=__doc__)
    parser.add_argument("--data-dir", required=True, help="folder holding the corpora (litbank/)")
    parser.add_argument("--checkpoint", help="EntityNLM checkpoint (default: the bundled one)")
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda")
    parser.add_argument("--particles", type=integer(1), default=100, help="particles of the vectorised estimator")
    parser.add_argument("--sequential-particles", type=integer(1), default=10,
                        help="particles for the one-at-a-time comparison (it is slow)")
    parser.add_argument("--out", type=output_folder, default="benchmarks/results",
                        help="folder of speed_DEVICE.json and speed_DEVICE.md")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_main(lambda: run(args), USER_ERRORS)


def run(args: argparse.Namespace) -> int:
    """Measure, print the table, and write speed_DEVICE.json and speed_DEVICE.md."""
    set_seed(0)
    device = resolve_device(args.device)
    checkpoint_path = args.checkpoint or str(pretrained("entitynlm.pt"))
    loaded = Checkpoint.load(checkpoint_path)
    model, proposal = entitynlm_modules(loaded, device)
    documents = prepared_documents("litbank", "test", args.data_dir, loaded.preprocess, loaded.vocabulary, quiet=True)

    # 1. importance sampling: the first 200 tokens of one document keep the sequential run short
    excerpt = documents[0].replace(tokens=documents[0].tokens[:200], sentences=None,
                                   mentions=[m for m in documents[0].mentions if m.end <= 200])
    batch = make_batch([excerpt], loaded.vocabulary).to(device)
    throughput = importance_throughput(model, proposal, batch, args.sequential_particles, device)
    full = timed(lambda: (estimate_marginal(model.model, proposal.guide, batch, args.particles), sync(device)))
    throughput[f"vectorised_token_particles_per_s_at_{args.particles}"] = batch.num_tokens * args.particles / full

    # 2. peak memory, in a fresh process so that nothing else counts
    child = subprocess.run([sys.executable, "-c", PEAK_MEMORY_CHILD, checkpoint_path, args.data_dir, args.device,
                            str(args.particles)], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parents[1])
    if child.returncode != 0:  # it reads what this run already read, so this is a crash, said in one line
        last = (child.stderr.strip().splitlines() or ["no message"])[-1]
        raise ValueError(f"the peak-memory measurement failed (status {child.returncode}): {last}")
    peak_mib = float(child.stdout.strip().splitlines()[-1])

    # 3. training throughput on the same batches: the training setting (200-token pieces, 4,000-token batches)
    #    and whole documents; the RNNLM and the second proposal are fresh modules of the same sizes
    config = EntityNLMConfig(**loaded.config)
    rnnlm = RNNLM(RNNLMConfig(**{k: loaded.config[k] for k in ("vocab_size", "embedding_size", "hidden_size",
                                                                 "dropout", "softmax")}),
                  list(loaded.vocabulary.counts)).to(device)
    proposals = {context: EntityProposal(config, context=context).to(device) for context in PROPOSAL_CONTEXTS}
    for module in (model, rnnlm, *proposals.values()):
        module.train()
    pieces = [piece for document in documents[:4] for piece in sentence_chunks(document, 200)]
    training = {
        "pieces_200": training_throughput(model, proposals, rnnlm, [b.to(device) for b in batches_by_length(
            pieces, loaded.vocabulary, 4_000)], device),
        "whole_documents": training_throughput(model, proposals, rnnlm, [b.to(device) for b in batches_by_length(
            documents[:4], loaded.vocabulary, 8_000)], device, repeats=1),
    }

    result = {**command_record(build_parser(), args),
              "machine": platform.platform(), "device": str(device), "torch_threads": torch.get_num_threads(),
              "checkpoint": checkpoint_path, "config": loaded.config, "importance_sampling": throughput,
              "peak_memory_mib": {"particles": args.particles, "document_tokens": max(len(d.tokens) for d in documents),
                                  "peak": peak_mib},
              "training": training}
    rows = [
        ("IS throughput, vectorised (token x particles / s)", f"{throughput['vectorised_token_particles_per_s']:,.0f}"),
        ("IS throughput, pyro.infer.Importance one particle at a time",
         f"{throughput['pyro_importance_token_particles_per_s']:,.0f}"),
        ("IS speed-up of vectorisation (same run)", f"{throughput['speedup']:.1f}x"),
        (f"IS throughput, vectorised at N={args.particles}",
         f"{throughput[f'vectorised_token_particles_per_s_at_{args.particles}']:,.0f}"),
        (f"peak memory, N={args.particles}, longest LitBank test document (MiB)", f"{peak_mib:,.0f}"),
    ]
    for setting, label in (("pieces_200", "200-token pieces"), ("whole_documents", "whole documents")):
        figures = training[setting]
        rows += [
            (f"training tokens/s, {label}: RNNLM", f"{figures['rnnlm_tokens_per_s']:,.0f}"),
            (f"training tokens/s, {label}: EntityNLM model + paper proposal, fast path",
             f"{figures['entitynlm_fast_tokens_per_s']:,.0f} ({figures['entitynlm_fast_over_rnnlm']:.2f}x RNNLM cost)"),
            (f"training tokens/s, {label}: EntityNLM model + both proposals, fast path",
             f"{figures['entitynlm_fast_both_proposals_tokens_per_s']:,.0f} "
             f"({figures['entitynlm_fast_both_proposals_over_rnnlm']:.2f}x)"),
            (f"training tokens/s, {label}: EntityNLM model + paper proposal, Pyro program",
             f"{figures['entitynlm_program_tokens_per_s']:,.0f} ({figures['entitynlm_program_over_rnnlm']:.2f}x)"),
        ]
    table = "\n".join(["| measure | value |", "|---|---:|", *(f"| {name} | {value} |" for name, value in rows)])
    processor = platform.processor() or platform.machine()
    header = f"Device: {device} ({processor}), torch threads {torch.get_num_threads()}\n\n"
    print(header + table)
    out = Path(args.out)
    write_text_atomic(out / f"speed_{device.type}.json", json.dumps(result, indent=2) + "\n")
    write_text_atomic(out / f"speed_{device.type}.md", header + table + "\n")
    pyro.clear_param_store()
    return 0


if __name__ == "__main__":
    sys.exit(main())
