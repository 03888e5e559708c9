"""Atomic file writes: a reader (or a resumed run) never sees a half-written file.

A file is written to a temporary file beside it (``.NAME.PID.N.part``) and renamed over it only when the
write succeeds. Every temporary file is known from before it exists until it is renamed or removed, so that
:func:`remove_partial_files` can clean up after a Ctrl-C that lands where the ``with`` block's own cleanup
cannot run (between entering the context manager and its body).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_PENDING: set[Path] = set()  # the temporary files being written in this process
_NUMBERS = itertools.count()


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary file beside ``path`` to write to; it replaces ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{os.getpid()}.{next(_NUMBERS)}.part"
    _PENDING.add(temporary)
    try:
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
        _PENDING.discard(temporary)


def remove_partial_files() -> None:
    """Remove the temporary files of the writes still under way in this process (after an interruption)."""
    for temporary in list(_PENDING):
        temporary.unlink(missing_ok=True)
        _PENDING.discard(temporary)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
