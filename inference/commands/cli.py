"""What every entitylm command line shares: one-line errors and exit statuses, --help, running a command.

Every command (``entitylm COMMAND``, its ``python -m`` entry point, the benchmark scripts) keeps one contract, which
``tests/test_bad_input.py`` checks on a table of bad inputs:

- bad input (a missing or unreadable file, an option out of range, an output path that cannot be written) gives
  ONE line on stderr that names the file (``FILE:LINE: reason`` where there is a line) or the option, and exit
  status 2: never a traceback, and nothing half-written left behind;
- Ctrl-C gives the one line ``interrupted`` and exit status 130;
- ``--help`` shows every option with its default, under the module's whole docstring and then its library
  module's (:func:`help_text`).

The option types that refuse a bad value while parsing are :mod:`inference.checks` (the configs check with them
too); the option groups many commands share are :mod:`inference.commands.options`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from types import ModuleType
from typing import NoReturn, TypeVar

import torch

from coref.io.atomic import remove_partial_files, write_text_atomic

BAD_INPUT = 2  # argparse's status for a usage error; every command uses it for any bad input
INTERRUPTED = 130  # the shell's status for a command stopped by SIGINT (128 + 2)
# What bad input raises: the commands report these in one line (exit status 2), never as a traceback. Every
# input error of entitylm is a ValueError (CorpusError, ConllError, CheckpointError, ...) or an OSError;
# non-finite importance weights raise FloatingPointError.
USER_ERRORS: tuple[type[Exception], ...] = (ValueError, OSError, FloatingPointError)

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
    with ``add_subparsers`` are parsers of this class too. A command's ``prog`` is its documented ``python -m``
    form, or ``entitylm COMMAND`` when it runs through the dispatcher."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        if str(kwargs.get("prog", "")).startswith("python -m ") and sys.argv[0].startswith("entitylm "):
            kwargs["prog"] = sys.argv[0]  # run as `entitylm COMMAND` (entitylm.__main__ names it so): say so
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(BAD_INPUT, f"{self.prog}: error: {one_line(message)}\n")


def help_text(command_doc: str | None, library: ModuleType) -> str:
    """A command's ``--help`` description: its own module's docstring (the command line: usage, what it writes)
    and then its library module's (what is computed and why), so that each text is written once, where it
    belongs, and ``--help`` still shows both."""
    return f"{command_doc}\n{library.__doc__}"


def command_parser(prog: str, description: str) -> tuple[Parser, argparse._SubParsersAction]:
    """The parser of a command with sub-commands (``python -m coref.mentions train|evaluate``), and what its
    sub-commands are added to (:func:`inference.commands.options.add_command`); a command line names one."""
    parser = Parser(prog=prog, description=description)
    return parser, parser.add_subparsers(dest="command", required=True)


def one_line(message: str) -> str:
    """``message`` on one line: a library's multi-line message has its lines joined."""
    return " ".join(line.strip() for line in message.splitlines() if line.strip())


def describe(error: BaseException) -> str:
    """What went wrong, in one line; an OSError names its file first (``PATH: No such file or directory``)."""
    if isinstance(error, OSError) and error.filename is not None:
        target = f" -> {error.filename2}" if error.filename2 is not None else ""
        return one_line(f"{error.filename}{target}: {error.strerror or error}")
    return one_line(str(error)) or type(error).__name__


@contextmanager
def launched_process_group() -> Iterator[None]:
    """Under ``torchrun`` (``WORLD_SIZE`` > 1), the process group for the command's length
    (:func:`inference.distributed.process_group`); a command not launched by it loads neither that nor torch, so
    ``entitylm --help`` and the commands without a model start quickly."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        yield
        return
    from inference.distributed import process_group

    with process_group():
        yield


def run_main(body: Callable[[], int], errors: tuple[type[Exception], ...] = USER_ERRORS) -> int:
    """Run a command's body and return its exit status: bad input (``errors``) prints ``error: MESSAGE`` on one
    line and returns 2, Ctrl-C prints ``interrupted`` and returns 130. Files are written atomically
    (:mod:`coref.io.atomic`), so either way none is left half-written."""
    try:
        with launched_process_group():
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


def run_command(run: Callable[[argparse.Namespace], dict], format_result: Callable[[dict], str],
                args: argparse.Namespace) -> int:
    """Run a command: the result is printed and, with ``--json OUT``, written to OUT; bad input gives one line on
    stderr and exit status 2, Ctrl-C one line and status 130 (:func:`run_main`)."""

    def body() -> int:
        if getattr(args, "threads", None):  # --threads (add_threads); the same numbers on any count
            torch.set_num_threads(args.threads)
        result = run(args)
        if int(os.environ.get("RANK", "0")) != 0:  # under torchrun every rank computes; rank 0 prints and writes
            return 0
        print(format_result(result))
        if getattr(args, "json", None):
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        return 0

    return run_main(body)


def json_text(result: dict) -> str:
    """``result`` as the indented JSON a training command prints (its ``format_result`` for :func:`run_command`)."""
    return json.dumps(result, indent=2)


def config_of(config: type[T], args: argparse.Namespace, **values) -> T:
    """The config dataclass ``config`` from a command's parsed options: each field from the option of its name,
    unless given in ``values`` (an option the command turns into something else first)."""
    options = vars(args)
    return config(**{field.name: options[field.name] for field in fields(config)
                     if field.name in options and field.name not in values}, **values)
