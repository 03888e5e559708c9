"""Bad input located by file and line: every reader's error says ``FILE:LINE: reason``, which the commands print as
their one line (:mod:`inference.commands.cli`)."""

from __future__ import annotations


class FileLineError(ValueError):
    """Bad input located by file and line: its message is ``FILE:LINE: reason`` (each reader subclasses it)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")
