"""The one kind of progress bar: it says what it counts and is drawn only on a terminal, so that logs, pipes and the
commands' one-line errors stay free of bar lines."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from tqdm import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T] | None = None, *, desc: str, unit: str, enabled: bool = True, **options) -> tqdm:
    """A tqdm progress bar that says what it counts (``unit``: "document", "batch", "step"; ``desc``: of what).
    It is drawn only on a terminal, so that logs, pipes and the one-line errors stay free of bar lines."""
    return tqdm(iterable, desc=desc, unit=unit, disable=None if enabled else True, **options)
