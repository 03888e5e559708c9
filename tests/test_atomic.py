"""Atomic writes: the file appears whole or not at all, and an interruption leaves no temporary file."""

from __future__ import annotations

import os

import pytest

from coref.io.atomic import atomic_path, write_text_atomic
from inference.commands.cli import INTERRUPTED, run_main


def test_a_write_replaces_the_file_with_a_normal_mode_and_leaves_nothing_else(tmp_path):
    target = tmp_path / "deep" / "result.json"
    write_text_atomic(target, "first")
    write_text_atomic(target, "second")
    assert target.read_text() == "second" and os.listdir(target.parent) == ["result.json"]
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_failed_write_keeps_the_old_file(tmp_path):
    target = tmp_path / "model.pt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old" and os.listdir(tmp_path) == ["model.pt"]


def test_ctrl_c_where_the_with_block_cannot_clean_up_still_leaves_no_temporary_file(tmp_path):
    suspended = []  # keeps the context manager alive, as a traceback or shutdown can: its cleanup never runs

    def body() -> int:
        writing = atomic_path(tmp_path / "model.pt")
        suspended.append(writing)
        writing.__enter__().write_text("half")  # interrupted before the with statement's body: no __exit__
        raise KeyboardInterrupt

    assert run_main(body) == INTERRUPTED
    assert os.listdir(tmp_path) == []
