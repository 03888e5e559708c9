"""Shared fixtures: where the real corpora are (``ENTITYLM_DATA``), skipping cleanly when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

# Shared CI machines stall at times: judge property tests by their examples, not by their speed.
settings.register_profile("entitylm", deadline=None)
settings.load_profile("entitylm")



@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """Tiny models gain nothing from threads; on a busy machine the thread pool's waiting made them 40x slower.
    The processes the tests start (notebook kernels, commands, doc examples) get one thread too: beside the other
    xdist worker, a kernel's two threads on the one core left made a notebook 6x slower."""
    threads, omp = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
    torch.set_num_threads(1)
    os.environ["OMP_NUM_THREADS"] = "1"
    yield
    torch.set_num_threads(threads)
    if omp is None:
        os.environ.pop("OMP_NUM_THREADS", None)
    else:
        os.environ["OMP_NUM_THREADS"] = omp


DATA_HINT = "set ENTITYLM_DATA to the folder holding litbank/ and ontogum/ (`make test` uses ../shared/data)"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real-data folder, or a skip that says why."""
    value = os.environ.get("ENTITYLM_DATA")
    if not value:
        pytest.skip(f"real corpora unavailable: ENTITYLM_DATA is not set; {DATA_HINT}")
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"real corpora unavailable: ENTITYLM_DATA={value} is not a directory; {DATA_HINT}")
    return path


def _corpus_dir(data_dir: Path, name: str) -> Path:
    path = data_dir / name
    if not path.is_dir():
        pytest.skip(f"corpus {name!r} unavailable: {path} does not exist; {DATA_HINT}")
    return path


@pytest.fixture(scope="session")
def litbank_dir(data_dir: Path) -> Path:
    return _corpus_dir(data_dir, "litbank")


@pytest.fixture(scope="session")
def ontogum_dir(data_dir: Path) -> Path:
    return _corpus_dir(data_dir, "ontogum")



@pytest.fixture(scope="session")
def texts_dir(data_dir: Path) -> Path:
    """Short public-domain texts for bug reproductions (``DATA/texts``, described by its SOURCE.md)."""
    return _corpus_dir(data_dir, "texts")
