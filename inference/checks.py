"""Value checks shared by the commands' option parsers and the configs made in Python: each takes an option's text
and returns its value, or raises :class:`argparse.ArgumentTypeError` saying what was wanted, so a bad value is
refused while parsing, before any work is done (a config's check turns the same message into a ValueError)."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path


def integer(minimum: int) -> Callable[[str], int]:
    """An option type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def real(low: float, high: float = math.inf, *, include_low: bool = True) -> Callable[[str], float]:
    """An option type: a finite number from ``low`` (included unless ``include_low`` is False) to below ``high``."""
    if high < math.inf:
        wanted = f"in [{low:g}, {high:g})" if include_low else f"in ({low:g}, {high:g})"
    elif low == -math.inf:
        wanted = "a finite number"
    else:
        wanted = f"at least {low:g}" if include_low else f"greater than {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        inside = (low <= value if include_low else low < value) and value < high
        if not (inside and math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    return parse


def probability(text: str) -> float:
    """An option type: a number in (0, 1]."""
    value = real(0, include_low=False)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def output_file(text: str) -> str:
    """An option type: a file the command may write: not a folder, in a folder that exists or can be made."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: is a folder, not a file")
    _require_writable(path.parent, text)
    return text


def output_folder(text: str) -> str:
    """An option type: a folder the command may write in: an existing folder, or one that can be made."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: exists and is not a folder")
    _require_writable(path, text)
    return text


def _require_writable(folder: Path, shown: str) -> None:
    """Refuse ``shown`` unless files can be made in ``folder``: its nearest existing ancestor is a folder we may
    write in (the command makes the missing folders below it)."""
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise argparse.ArgumentTypeError(f"{shown}: cannot be written: {ancestor} is a file, not a folder")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{shown}: cannot be written: no permission to write in {ancestor}")
