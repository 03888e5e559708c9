"""The one batch driver of EntityNLM's samplers: every batch of a run sampled from its own seed, shared among
torchrun's ranks, with a progress bar, and gathered back in order. The likelihood (:mod:`inference.algorithms.
likelihood`) and the posteriors (:mod:`inference.algorithms.posterior`) run on it, so a seed gives the same
figures to the commands, the API and the benchmarks, alone or under torchrun."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from coref.corpora.preprocess import Vocabulary
from coref.document import Document
from coref.io.progress import progress as progress_bar
from generative.layers.batch import DocumentBatch, batches_by_length
from inference.distributed import ranks
from inference.runtime import batch_seed, set_seed

R = TypeVar("R")


def particle_batches(documents: Sequence[Document], vocabulary: Vocabulary, particles: int, batch_tokens: int,
                     device: torch.device | str) -> list[DocumentBatch]:
    """``documents`` in batches of similar length holding about ``batch_tokens`` particles x padded tokens each,
    on the device: how a run groups a corpus (sampling draws per batch, so the grouping is part of what a seed
    reproduces)."""
    return [b.to(device) for b in batches_by_length(documents, vocabulary, max(1, batch_tokens // particles))]


def run_batches(batches: Sequence[DocumentBatch], sample: Callable[[DocumentBatch, int], R], seed: int,
                description: str, progress: bool = True) -> list[R]:
    """``sample(batch, number)`` of every batch, batch ``number`` from seed :func:`batch_seed` ``(seed, number)``
    (its figures do not depend on the batches before it); under torchrun each rank samples every ``world``-th
    batch and every rank gets all results, in the batches' order (the same as one process's)."""
    run = ranks()
    mine, done = run.shard(range(len(batches))), []
    with progress_bar(total=sum(batches[number].size for number in mine), unit="document", desc=description,
                      enabled=progress and run.leader) as bar:
        for number in mine:
            set_seed(batch_seed(seed, number))
            done.append(sample(batches[number], number))
            bar.update(batches[number].size)
    return run.gather(done)
