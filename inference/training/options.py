"""The options of a training run as a config dataclass, checked the same way from a command line and from Python.

Each training config declares, once, how each option is checked (``CHECKS``: the value checks of
:mod:`inference.checks`, or a tuple of the allowed values); its command's parser takes its types, choices and
defaults from there, and :func:`check` applies the same checks to a config made in Python (``elm.train(...)``),
with the message the command line gives ("--dropout: must be in [0, 1), got 1.5").
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from typing import Any

Check = Callable[[Any], Any] | tuple


def check(config: Any, checks: Mapping[str, Check]) -> None:
    """A ValueError naming the option for the first value of ``config`` its check refuses (None: not given)."""
    for name, rule in checks.items():
        value = getattr(config, name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is None:
                continue
            flag = f"--{name.replace('_', '-')}"
            if isinstance(rule, tuple):
                if item not in rule:
                    raise ValueError(f"{flag}: invalid choice: {item!r} (choose from {', '.join(map(str, rule))})")
                continue
            try:
                rule(item)
            except argparse.ArgumentTypeError as error:
                raise ValueError(f"{flag}: {error}") from None


def check_run(options: Any, checks: Mapping[str, Check]) -> None:
    """What a training config's ``__post_init__`` does: :func:`check` its values, and make its ``out`` a plain
    string, since the checkpoints it is recorded in hold plain values only."""
    check(options, checks)
    options.out = str(options.out)


def defaults(config: type) -> dict[str, Any]:
    """The default of every field of a config dataclass that has one (the parser's defaults)."""
    return {field.name: field.default for field in fields(config) if field.default is not MISSING}


def option(checks: Mapping[str, Check], name: str) -> dict[str, Any]:
    """``add_argument`` keywords of an option's check: ``type=`` for an option type, ``choices=`` for values."""
    rule = checks[name]
    return {"choices": rule} if isinstance(rule, tuple) else {"type": rule}
