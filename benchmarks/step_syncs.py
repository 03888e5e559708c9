"""Operations, host synchronisations and time per token step of EntityNLM's sampler.

The bundled model on the first two documents of the embedded sample corpus's test split (one batch), N
particles, one thread: the default sampler (SMC at sentence ends, the proposal alone) and the settled one (SMC
after any token, the pipeline's hints at weight 0.5 / temperature 4, lookahead 0.8). Counts come from
:func:`inference.algorithms.syncs.step_counts`, times from separate runs without the counter (the best of
``--repeats``); ``--fixed-size`` measures on the CPU the form other devices run. Prints one JSON line per sampler.

    MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 python benchmarks/step_syncs.py
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import pyro
import torch

from coref.corpora.preprocess import EOS
from coref.corpora.registry import load_corpus
from coref.resolution.pipeline import bundled_pipeline
from generative.entitynlm import state
from generative.entitynlm.lockstep import EntityNLMParticles
from generative.layers.batch import make_batch
from inference.algorithms.config import settings_for
from inference.algorithms.hints import batch_hints, document_hints
from inference.algorithms.smc import ParticleStructures, sample_structures
from inference.algorithms.syncs import step_counts
from inference.data import prepared_documents
from inference.training.checkpoint import Checkpoint, entitynlm_modules, pretrained

SETTLED = settings_for("likelihood").proposal  # the pipeline's hints at 0.5 / T 4, the lookahead at 0.8


def samplers(particles: int, documents: int) -> dict[str, Callable[[], ParticleStructures]]:
    """A run of the default and of the settled sampler (each starts its system afresh)."""
    checkpoint = Checkpoint.load(str(pretrained("entitynlm.pt")))
    model, proposal = entitynlm_modules(checkpoint, "cpu")
    prepared = prepared_documents("sample", "test", None, checkpoint.preprocess, checkpoint.vocabulary,
                                  quiet=True)[:documents]
    batch = make_batch(prepared, checkpoint.vocabulary)
    originals = {(d.id, d.part): d for d in load_corpus("sample", "test", None).documents}
    hints = document_hints(SETTLED, bundled_pipeline(), [originals[d.id, d.part] for d in prepared], prepared,
                           checkpoint.preprocess)
    keyed = {(d.id, d.part): hint for d, hint in zip(prepared, hints)}
    by_key = {(d.id, d.part): d for d in prepared}
    eos = checkpoint.vocabulary.index(EOS)
    hints = batch_hints(SETTLED, batch, keyed, by_key)
    return {
        "default": lambda: sample_structures(EntityNLMParticles(model, proposal, batch, particles), eos, "sentence",
                                             history=False),
        "settled": lambda: sample_structures(EntityNLMParticles(model, proposal, batch, particles, hints,
                                                                SETTLED.lookahead), eos, "token", history=False),
    }


def measure(run: Callable[[], ParticleStructures], repeats: int, seed: int) -> dict:
    """Counts per step (one run) and milliseconds per step (the best of ``repeats`` runs), from ``seed``."""
    pyro.set_rng_seed(seed)
    counts = step_counts(run)
    times = []
    for _ in range(repeats):
        pyro.set_rng_seed(seed)
        start = time.perf_counter()
        sampled = run()
        times.append(time.perf_counter() - start)
    return {"steps": counts.steps, "ops_per_step": round(counts.ops, 1), "syncs_per_step": round(counts.syncs, 3),
            "sync_kinds": {name: round(value, 3) for name, value in counts.sync_kinds.items()},
            "steps_with_syncs": len(counts.sync_steps),
            "setup_syncs": counts.setup_syncs, "end_syncs": counts.end_syncs,
            "ms_per_step": round(1000 * min(times) / counts.steps, 3),
            "log_marginal": [round(value, 3) for value in sampled.log_marginal.tolist()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--particles", type=int, default=100)
    parser.add_argument("--documents", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", choices=("default", "settled"), help="measure one sampler only")
    parser.add_argument("--fixed-size", action="store_true",
                        help="the step's fixed-size form, as off the CPU (state.CHEAP_SYNC_DEVICES emptied)")
    args = parser.parse_args()
    if args.fixed_size:
        state.CHEAP_SYNC_DEVICES = ()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    for name, run in samplers(args.particles, args.documents).items():
        if args.only in (None, name):
            print(json.dumps({"sampler": name, **measure(run, args.repeats, args.seed)}), flush=True)


if __name__ == "__main__":
    main()
