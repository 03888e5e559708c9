"""How a command runs: its result printed and, with ``--json OUT``, written; bad input in one line with exit status 2,
Ctrl-C in one line with status 130 (the contract of :mod:`coref.cli`, which ``tests/test_bad_input.py`` checks)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import fields
from typing import TypeVar

from coref import cli
from coref.cli import real
from coref.io.atomic import write_text_atomic

# What bad input raises: the commands report these in one line (exit status 2), never as a traceback. Every
# input error of entitylm is a ValueError (CorpusError, ConllError, CheckpointError, ...); non-finite
# importance weights raise FloatingPointError.
USER_ERRORS = (*cli.USER_ERRORS, FloatingPointError)

T = TypeVar("T")


def run_command(run: Callable[[argparse.Namespace], dict], format_result: Callable[[dict], str],
                args: argparse.Namespace) -> int:
    """Run a command: the result is printed and, with ``--json OUT``, written to OUT; bad input gives one line on
    stderr and exit status 2, Ctrl-C one line and status 130 (:func:`coref.cli.run_main`)."""

    def body() -> int:
        result = run(args)
        print(format_result(result))
        if getattr(args, "json", None):
            write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
        return 0

    return cli.run_main(body, USER_ERRORS)


def config_of(config: type[T], args: argparse.Namespace, **values) -> T:
    """The config dataclass ``config`` from a command's parsed options: each field from the option of its name,
    unless given in ``values`` (an option the command turns into something else first)."""
    options = vars(args)
    return config(**{field.name: options[field.name] for field in fields(config)
                     if field.name in options and field.name not in values}, **values)


def probability(text: str) -> float:
    """An option type: a number in (0, 1]."""
    value = real(0, include_low=False)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value
