"""The small HTML tables the API's results show in Jupyter (their ``_repr_html_``), and how a figure is written."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


def html_table(headers: Sequence[str], rows: Sequence[Sequence[object]], caption: str = "") -> str:
    """A table with a header row and an optional caption, every cell escaped."""
    head = "".join(f"<th>{escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows)
    caption = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def formatted(value: float | None, spec: str) -> str:
    """``value`` in the format ``spec``, None as n/a."""
    return "n/a" if value is None else format(value, spec)


def cell(value: object) -> str:
    """A figure of a table: floats with two decimals, None as n/a."""
    return formatted(value, ".2f") if value is None or isinstance(value, float) else str(value)

