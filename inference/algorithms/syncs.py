"""How many tensor operations and host synchronisations the sampler's token step makes.

On a GPU every operation whose result's size or value the host must read (``nonzero``, ``item``/``bool``/``int``
of a tensor, ``unique``, boolean-mask indexing, a copy to the CPU) stalls the launch queue until the device has
caught up; a step without them can be queued ahead, captured, or compiled whole. :class:`OpCounter` is a
``TorchDispatchMode`` that counts the aten operations of a region and which of them are such synchronisations;
:func:`step_counts` runs a sampler (:func:`inference.algorithms.smc.sample_structures`) under it and reports them
per token step of its loop (the setup before the loop and the tracing after it are counted apart). On the CPU nothing
actually waits, but the same operations are the ones a device would wait on, so the count is the same.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from inference.algorithms import smc

# operations whose output's size or value the host reads whatever their arguments (in inference mode the
# composite ones, e.g. item and nonzero_numpy, arrive undecomposed)
ALWAYS_SYNC = frozenset({
    "nonzero", "nonzero_numpy", "_local_scalar_dense", "item", "is_nonzero", "equal", "allclose",
    "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive", "unique_dim_consecutive",
    "masked_select", "argwhere",
})
INDEXING = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})  # sync with a boolean index
REGIONS = ("setup", "steps", "end")


def is_sync(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether aten operation ``func`` called on ``args``/``kwargs`` makes the host wait for the device: a
    data-dependent output size or a value read back, a boolean-mask index (a ``nonzero`` inside),
    ``repeat_interleave`` without ``output_size``, or a copy from another device to the CPU."""
    name = func.overloadpacket.__name__
    if name in ALWAYS_SYNC:
        return True
    if name in INDEXING:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        return any(isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8)
                   for index in indices or ())
    if name == "repeat_interleave":
        return kwargs.get("output_size") is None
    if name in ("_to_copy", "copy_"):
        source = args[1] if name == "copy_" else args[0]
        target = args[0].device if name == "copy_" else kwargs.get("device")
        return (isinstance(source, torch.Tensor) and target is not None and torch.device(target).type == "cpu"
                and source.device.type != "cpu")
    return False


class OpCounter(TorchDispatchMode):
    """Counts the aten operations (``ops``) and the synchronising ones among them (``syncs``, by name) of the
    region it is entered for, split into the sampler's ``setup``, token ``steps`` and ``end`` (:meth:`region`), and
    the syncs of each token step (``syncs_at``, by step)."""

    def __init__(self) -> None:
        super().__init__()
        self.current = "setup"
        self.ops: Counter[str] = Counter()  # by region
        self.syncs: dict[str, Counter[str]] = {region: Counter() for region in REGIONS}  # by region, then name
        self.steps = 0
        self.syncs_at: Counter[int] = Counter()

    def region(self, name: str) -> None:
        """Count what follows into region ``name`` (one of :data:`REGIONS`)."""
        self.current = name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops[self.current] += 1
        if is_sync(func, args, kwargs):
            self.syncs[self.current][func.overloadpacket.__name__] += 1
            if self.current == "steps":
                self.syncs_at[self.steps - 1] += 1
        return func(*args, **kwargs)

    def counted_steps(self, steps: Iterable[int]) -> Iterator[int]:
        """``steps`` (the sampler's loop), counting each iteration into ``steps`` and what follows into ``end``."""
        self.region("steps")
        for step in steps:
            self.steps += 1
            yield step
        self.region("end")


@dataclass(frozen=True)
class StepCounts:
    """Per token step of the sampler's loop: aten operations ``ops`` and host synchronisations ``syncs`` (and by
    name ``sync_kinds``), and the steps that make any (``sync_steps``); ``setup_syncs`` and ``end_syncs`` those
    before and after the loop, in all."""

    steps: int
    ops: float
    syncs: float
    sync_kinds: dict[str, float]
    sync_steps: tuple[int, ...]
    setup_syncs: int
    end_syncs: int


def step_counts(run: Callable[[], object]) -> StepCounts:
    """Call ``run`` (a sampler's run: the system's start, then :func:`~inference.algorithms.smc.sample_structures`)
    under an :class:`OpCounter` and return its counts per token step (the loop is found by the progress bar it
    iterates, which is patched to mark each step)."""
    counter = OpCounter()
    original = smc.progress_bar

    def marking(iterable: Iterable[int], **options) -> Iterator[int]:
        return counter.counted_steps(original(iterable, **options))

    with mock.patch.object(smc, "progress_bar", marking), counter:
        run()
    steps = max(counter.steps, 1)
    kinds = counter.syncs["steps"]
    return StepCounts(counter.steps, counter.ops["steps"] / steps, sum(kinds.values()) / steps,
                      {name: count / steps for name, count in sorted(kinds.items())}, tuple(sorted(counter.syncs_at)),
                      sum(counter.syncs["setup"].values()), sum(counter.syncs["end"].values()))
