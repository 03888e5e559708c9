"""Several processes, one run (``torch.distributed``): what a command needs to run under ``torchrun``.

``torchrun --nproc-per-node K -m inference.train ...`` starts K copies of a command with ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous (``MASTER_ADDR``/``MASTER_PORT``) in their environment;
every command starts the process group from them (:func:`process_group`, called by
:func:`inference.commands.cli.run_main`): gloo on the CPU, NCCL for CUDA tensors where there is a GPU. Without
them, or with one process, nothing is started and :func:`ranks` is the one-process :class:`Ranks`.

Training is data-parallel with the same global batch: every rank draws the same batch order (one seed), takes
its share of each batch's documents (:meth:`Ranks.shard`) and scales its loss by the global batch's size, and
:func:`sum_gradients` adds the ranks' gradients before the update, so each update is the one-process update on
the whole batch (to float rounding). Evaluation gives each rank whole batches or documents and gathers the
results in order (:meth:`Ranks.gather`), each drawn from its own seed, so a figure does not depend on the number
of ranks. Only rank 0 prints, shows progress and writes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    """This process's place in the run: ``rank`` of ``world`` processes."""

    rank: int = 0
    world: int = 1

    @property
    def leader(self) -> bool:
        """Rank 0: the one that prints, shows progress and writes checkpoints and results."""
        return self.rank == 0

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of ``items``: every ``world``-th from its own rank (a rank may get none)."""
        return list(items[self.rank::self.world])

    def gather(self, mine: Sequence[T]) -> list[T]:
        """Every rank's :meth:`shard` results back in the order of the items they came from (on every rank)."""
        if self.world == 1:
            return list(mine)
        shares: list[list[T] | None] = [None] * self.world
        dist.all_gather_object(shares, list(mine))
        total = sum(len(share) for share in shares)
        return [shares[position % self.world][position // self.world] for position in range(total)]

    def total(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over the ranks (float64, so the sum does not depend on how it is split)."""
        summed = values.detach().to(torch.float64)
        if self.world > 1:
            summed = summed.clone()
            dist.all_reduce(summed)
        return summed

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


@dataclass(frozen=True)
class Share:
    """A rank's share of one global training batch: its part (None: it has none) and the size of the whole batch
    (its tokens, or its examples), by which every rank divides its summed loss."""

    part: Any
    size: int


def ranks() -> Ranks:
    """The run's ranks: from the started process group, else one process."""
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size())
    return Ranks()


def launched() -> bool:
    """Whether this process was started as one of several by ``torchrun`` (``WORLD_SIZE`` > 1)."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def local_device(name: str) -> str:
    """Under ``torchrun`` on a GPU machine, ``cuda`` is this process's own GPU (``cuda:LOCAL_RANK``)."""
    if name == "cuda" and launched():
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    return name


@contextmanager
def process_group() -> Iterator[Ranks]:
    """The process group of a ``torchrun`` launch for the length of a command (nothing for one process)."""
    if not launched() or dist.is_initialized():
        yield ranks()
        return
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    try:
        with ExitStack() as quiet:
            if not ranks().leader:  # the others' reports would repeat rank 0's; their errors still show (the
                devnull = quiet.enter_context(open(os.devnull, "w"))  # caller prints them after this block)
                quiet.enter_context(redirect_stdout(devnull))
                quiet.enter_context(redirect_stderr(devnull))
            yield ranks()
    finally:
        dist.destroy_process_group()


def sum_gradients(parameters: Sequence[torch.nn.Parameter], run: Ranks) -> None:
    """Add every rank's gradients, in one all-reduce of a flat buffer: what DistributedDataParallel's reducer
    does, for losses each rank has already scaled by the global batch (so the sum is the one-process gradient).
    A parameter no rank used keeps no gradient (as in one process, where the optimiser then skips it); one that a
    rank did not use counts as zero there. A rank whose share of a batch is empty takes part with zeros."""
    if run.world == 1:
        return
    used = torch.tensor([p.grad is not None for p in parameters], dtype=torch.float64)
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten().to(torch.float64)
                      for p in parameters] + [used.to(parameters[0].device)])
    dist.all_reduce(flat)
    offset = 0
    used_anywhere = flat[-len(parameters):] > 0
    for p, anywhere in zip(parameters, used_anywhere.tolist()):
        size = p.numel()
        p.grad = flat[offset:offset + size].view_as(p).to(p.dtype) if anywhere else None
        offset += size
