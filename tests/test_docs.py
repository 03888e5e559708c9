"""The documentation: the MkDocs site builds in strict mode, and every Python example of the docs runs.

- ``mkdocs build --strict`` (``mkdocs.yml``, pages under ``docs/``): a broken link or anchor, a page left out of
  the nav, a missing API reference or snippet section fails the build, and the test prints the build log.
- Every ```` ```python ```` block of ``docs/**/*.md`` and ``README.md`` is executed: each page's blocks in order
  in one namespace, in a fresh interpreter, on the CPU, without a data directory (examples use the bundled
  models and the embedded ``sample`` corpus). A block preceded by ``<!-- skip-example: REASON -->`` is not run
  (keep these rare, and say why). Shell blocks are never run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
BUILD_TIMEOUT_S = 300
EXAMPLES_TIMEOUT_S = 120  # per page

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")
SKIP = re.compile(r"^<!--\s*skip-example\b\s*:?\s*(?P<reason>.*?)\s*-->$")  # the reason is required


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # 1-based line of the block's first code line
    code: str
    skip: str | None  # why it is not run ("" for a skip marker without a reason), or None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def python_examples(page: Path) -> list[Example]:
    """The ```python blocks of a Markdown page (dedented when they sit in a list), with their skip markers."""
    lines = page.read_text(encoding="utf-8").splitlines()
    examples, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), len(lines))
        if info.split(" ", 1)[0].lower() in ("python", "py", "python3"):
            before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            skip = SKIP.match(before)["reason"] if SKIP.match(before) else None
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            examples.append(Example(page, i + 2, code, skip))
        i = end + 1
    return examples


EXAMPLES = {page: python_examples(page) for page in PAGES}
RUNNABLE = {page: [e for e in examples if e.skip is None] for page, examples in EXAMPLES.items()}
RUNNABLE = {page: examples for page, examples in RUNNABLE.items() if examples}

# Runs the blocks of one page in one namespace; each is compiled under its page and line, so a traceback points
# into the Markdown file.
RUNNER = """
import json, sys
namespace = {"__name__": "__main__"}
for block in json.load(sys.stdin):
    code = "\\n" * (block["line"] - 1) + block["code"]
    exec(compile(code, block["file"], "exec"), namespace)
"""


def _environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "ENTITYLM_DATA"}  # no data directory
    env.update(OMP_NUM_THREADS="1", MPLBACKEND="agg", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    return env


def test_the_site_builds_in_strict_mode(tmp_path: Path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[test]' installs it with its plugins)")
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
               "--site-dir", str(tmp_path / "site")]
    done = subprocess.run(command, cwd=ROOT, env=_environment(), capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{log}"
    assert (tmp_path / "site" / "index.html").is_file(), log
    for page in ("api", "results", "notebooks/entitynlm_tour"):
        assert (tmp_path / "site" / page / "index.html").is_file(), f"{page} was not built:\n{log}"


def test_examples_are_found_and_skips_say_why():
    """The parser sees the examples (a change of syntax must not silently run nothing), and every skip has a
    reason."""
    assert sum(len(examples) for examples in RUNNABLE.values()) >= 3
    for examples in EXAMPLES.values():
        for example in examples:
            assert example.skip is None or example.skip.strip(), (
                f"{example.where}: say why the example is skipped: <!-- skip-example: REASON -->")
    # a skip marker must sit right before a python block, or it marks nothing
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, 1):
            if SKIP.match(line.strip()):
                after = next((text.strip() for text in lines[number:] if text.strip()), "")
                assert re.match(r"^(`{3,}|~{3,})\s*(python|py|python3)\b", after), (
                    f"{page.relative_to(ROOT)}:{number}: the marker is not followed by a python block")


@pytest.mark.parametrize("page", list(RUNNABLE), ids=[str(page.relative_to(ROOT)) for page in RUNNABLE])
def test_python_examples_run(page: Path, tmp_path: Path):
    blocks = [{"file": str(example.page), "line": example.line, "code": example.code} for example in RUNNABLE[page]]
    try:
        done = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks), cwd=tmp_path,
                              env=_environment(), capture_output=True, text=True, timeout=EXAMPLES_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the examples of {page.relative_to(ROOT)} ran over {EXAMPLES_TIMEOUT_S} s: keep them small")
    where = ", ".join(example.where for example in RUNNABLE[page])
    assert done.returncode == 0, f"an example failed ({where}):\n{done.stdout}\n{done.stderr}"


COMMAND = re.compile(r"^## `python -m (?P<module>[\w.]+)`", re.MULTILINE)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def command_sections() -> dict[str, str]:
    """The text of each ``## `python -m MODULE` `` section of the command pages, by module."""
    sections = {}
    for page in sorted((ROOT / "docs" / "commands").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        starts = [(match.start(), match["module"]) for match in COMMAND.finditer(text)]
        for (start, module), (end, _) in zip(starts, [*starts[1:], (len(text), "")]):
            sections[module] = text[start:text.find("\n## ", start + 1) if "\n## " in text[start + 1:end] else end]
    return sections


def command_module(entry: str) -> str:
    """The module whose ``main`` a documented ``python -m ENTRY`` runs: ENTRY itself, or the module a three-line
    entry point (kept so that the documented name works) imports its ``main`` from."""
    spec = importlib.util.find_spec(entry)
    path = Path(spec.origin)
    source = (path.parent / "__main__.py" if spec.submodule_search_locations else path).read_text(encoding="utf-8")
    shim = re.search(r"^\s+from ([\w.]+) import main$", source, re.MULTILINE)
    return shim[1] if shim and '__name__ == "__main__"' in source else entry


def test_every_command_page_lists_exactly_the_options_of_its_parser():
    """The option tables of docs/commands were written from the parsers: an option added, renamed or removed
    without its row fails here."""
    from tests.test_bad_input import PARSERS, parsers

    factories = dict(PARSERS)
    sections = command_sections()
    assert len(sections) >= 20
    for entry, text in sections.items():
        module = command_module(entry)
        top = getattr(importlib.import_module(module), factories[module])()
        options = {flag for parser in parsers(top) for action in parser._actions for flag in action.option_strings
                   if flag.startswith("--") and flag != "--help"}
        rows = {FLAG.search(line)[0] for line in text.splitlines() if line.startswith("| `--")}
        assert rows == options, f"docs/commands, python -m {entry}: rows for {sorted(options - rows)} missing, " \
                                f"rows for {sorted(rows - options)} without an option"
        usage = re.findall(r"```text\n(usage:.*?)```", text, re.DOTALL)
        stale = {flag for block in usage for flag in FLAG.findall(block)} - options - {"--help"}
        assert not stale, f"docs/commands, python -m {entry}: its usage shows {sorted(stale)}, which it lacks"
