"""What makes a run reproducible and says where it runs: the seeds, the device, and the check that a resumed run
keeps the options it started with. The commands and the notebook API both call these."""

from __future__ import annotations

import random
from collections.abc import Collection

import numpy as np
import pyro
import pyro.util
import torch

from inference.distributed import local_device


def set_seed(seed: int) -> None:
    """Seed python, numpy, torch and pyro, so a run is reproducible."""
    random.seed(seed)
    np.random.seed(seed)
    pyro.set_rng_seed(seed)  # torch too


def batch_seed(seed: int, number: int) -> int:
    """The seed batch ``number`` of a run seeded ``seed`` draws from: each batch has its own, so its figures do
    not depend on the batches before it, nor on which rank ran it under torchrun."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when there is a GPU; ``cuda`` without one is an error, not a silent CPU run. Under
    ``torchrun``, ``cuda`` is the process's own GPU (``cuda:LOCAL_RANK``)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    name = local_device(name)
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is available (this torch build or machine has none)")
    if name == "cpu":
        torch.set_flush_denormal(True)  # STACK.md: denormals made backward passes 6-12x slower on CPU
    pyro.enable_validation(False)  # validation checks every site's support with a host sync
    return torch.device(name)


def changed_options(before: dict, now: dict, free: Collection[str]) -> list[str]:
    """The options on which a run being resumed (``now``) differs from the run that wrote ``before``, each as
    ``--name OLD (now NEW)``: all but the ``free`` ones, which may change on resuming, and those ``before`` does
    not record."""
    return [f"--{key.replace('_', '-')} {before[key]} (now {now[key]})" for key in sorted(now)
            if key not in free and key in before and before[key] != now[key]]


def random_state() -> dict:
    """Python's, numpy's and torch's random states (CUDA's too where there is CUDA): what the API keeps for its
    caller around a seeded call."""
    state = pyro.util.get_rng_state()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_random_state(state: dict) -> None:
    pyro.util.set_rng_state(state)
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])
