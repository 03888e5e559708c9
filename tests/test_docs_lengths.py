"""The README and the docs are a manual, not a lab notebook: their lengths are bounded, and no page, docstring or
``--help`` text names an issue number (experiment history lives in CHANGELOG.md and benchmarks/results/NOTES.md,
which may).

Words are counted as ``wc -w`` counts them: runs of non-whitespace.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
PACKAGES = ("coref", "generative", "inference", "entitylm")  # their docstrings, comments and --help texts

README_MAX_LINES = 150
README_MAX_WORDS = 1200
PAGE_MAX_WORDS = 3000
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)  # "issue 27", "Issue #4", "issues 26"


def words(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").split())


def test_the_readme_is_short():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, f"README.md: {len(text.splitlines())} lines"
    assert words(README) <= README_MAX_WORDS, f"README.md: {words(README)} words"


@pytest.mark.parametrize("page", DOCS, ids=[str(page.relative_to(ROOT)) for page in DOCS])
def test_every_docs_page_is_at_most_3000_words(page: Path):
    assert words(page) <= PAGE_MAX_WORDS, (
        f"{page.relative_to(ROOT)}: {words(page)} words; split it, or move history to CHANGELOG.md or "
        f"benchmarks/results/NOTES.md")


def _python_files() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_the_pages_and_the_packages_name_no_issue_numbers():
    assert DOCS and _python_files()
    found = []
    for path in [README, *DOCS, *_python_files()]:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if ISSUE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "say what is true now, without the issue's number:\n" + "\n".join(found)


def test_the_pattern_finds_what_it_should():
    for text in ("issue 27", "Issue #4", "(issue 26's ranker)", "issues 26"):
        assert ISSUE.search(text), text
    for text in ("an issue", "tissue 3", "issue-free", "GitHub issues"):
        assert not ISSUE.search(text), text
