"""What every entitylm command line shares: one-line errors and exit statuses, --help, option checks, progress bars.

Every command (``python -m coref.corpora``, ``python -m inference.train``, ..., the benchmark scripts) keeps one
contract, which ``tests/test_bad_input.py`` checks on a table of bad inputs:

- bad input (a missing or unreadable file, an option out of range, an output path that cannot be written) gives
  ONE line on stderr that names the file (``FILE:LINE: reason`` where there is a line) or the option, and exit
  status 2: never a traceback, and nothing half-written left behind;
- Ctrl-C gives the one line ``interrupted`` and exit status 130;
- ``--help`` shows every option with its default, under the module's whole docstring.

It lives in ``coref`` (which imports neither pyro nor the other packages) so that the coreference commands share
it too; :mod:`inference.commands.cli` builds on it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

from tqdm import tqdm

from coref.io.atomic import remove_partial_files

BAD_INPUT = 2  # argparse's status for a usage error; every command uses it for any bad input
INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT (128 + 2)
USER_ERRORS: tuple[type[Exception], ...] = (ValueError, OSError)  # every entitylm input error is a ValueError

T = TypeVar("T")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """``--help`` with each option's default (left out where there is none, and for flags) and the description
    with its own line breaks: the module docstrings it shows are written to be read as they are."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line, ``PROG: error: MESSAGE``, with status 2 (argparse
    prints the usage before it, a second line), and whose help is :class:`HelpFormatter`'s. Sub-commands made
    with ``add_subparsers`` are parsers of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")


class FileLineError(ValueError):
    """Bad input located by file and line: its message is ``FILE:LINE: reason`` (each reader subclasses it)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


# ---- option types: a bad value is refused while parsing, before any work is done -----------------------------


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


# ---- running a command --------------------------------------------------------------------------------------


def one_line(message: str) -> str:
    """``message`` on one line: a library's multi-line message has its lines joined."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def describe(error: BaseException) -> str:
    """What went wrong, in one line; an OSError names its file first (``PATH: No such file or directory``)."""
    if isinstance(error, OSError) and error.filename is not None:
        target = f" -> {error.filename2}" if error.filename2 is not None else ""
        return one_line(f"{error.filename}{target}: {error.strerror or error}")
    return one_line(str(error)) or type(error).__name__


def run_main(body: Callable[[], int], errors: tuple[type[Exception], ...] = USER_ERRORS) -> int:
    """Run a command's body and return its exit status: bad input (``errors``) prints ``error: MESSAGE`` on one
    line and returns 2, Ctrl-C prints ``interrupted`` and returns 130. Files are written atomically
    (:mod:`coref.io.atomic`), so either way none is left half-written."""
    try:
        return body()
    except errors as error:
        print(f"error: {describe(error)}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        remove_partial_files()
        print("interrupted", file=sys.stderr)
        return INTERRUPTED


def run_subcommand(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen sub-command (its ``run(args)``, set with ``set_defaults``) under
    :func:`run_main`: the ``main`` of every command with sub-commands."""
    args = parser.parse_args(argv)
    return run_main(lambda: args.run(args))


def progress(iterable: Iterable[T] | None = None, *, desc: str, unit: str, enabled: bool = True, **options) -> tqdm:
    """A tqdm progress bar that says what it counts (``unit``: "document", "batch", "step"; ``desc``: of what).
    It is drawn only on a terminal, so that logs, pipes and the one-line errors stay free of bar lines."""
    return tqdm(iterable, desc=desc, unit=unit, disable=None if enabled else True, **options)
