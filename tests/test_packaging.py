"""The set-up files agree with each other: pyproject.toml, environment.yml, .ci/run, the README and the docs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Where commands are documented: the README (the front door) and the pages of the documentation site.
DOCUMENTATION = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")


def _pyproject_requirements() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    return {re.sub(r"\s+", "", r) for r in requirements if "python_version" not in r}


def _environment_pip_requirements() -> set[str]:
    """The `- pip:` list of environment.yml, options (`--...`) and the project itself (`-e .`) left out."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    entries = []
    for line in lines[start + 1 :]:
        match = re.match(r"^\s+- (.+)$", line)
        if not match:
            break
        entries.append(match.group(1).strip())
    return {re.sub(r"\s+", "", e) for e in entries if not e.startswith("-")}


def test_environment_yml_mirrors_pyproject():
    assert _environment_pip_requirements() == _pyproject_requirements()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in ci.splitlines()[-1]
    assert "make test" in readme and "make demo" in readme


def test_torch_is_installed_before_the_package():
    makefile = (ROOT / "Makefile").read_text()
    assert makefile.index('"$(TORCH_SPEC)"') < makefile.index("-e '.[test]'")
    assert "TORCH_SPEC ?= torch==2.13.0" in makefile


def test_every_command_the_docs_show_has_a_console_script():
    """`python -m coref.X` / `python -m inference.X` in the README or the docs: each is also `entitylm-X` after
    installing, and each console script is documented."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    modules = {name: target.removesuffix(":main") for name, target in scripts.items()}
    shown = {}
    for page in DOCUMENTATION:
        for module in re.findall(r"python -m ((?:coref|inference)\.\w+)", page.read_text(encoding="utf-8")):
            shown.setdefault(module, page.relative_to(ROOT))
    missing = {module: str(page) for module, page in shown.items() if module not in modules.values()}
    assert shown and not missing, f"no console script for {missing}"
    assert set(modules.values()) <= set(shown), f"undocumented commands: {sorted(set(modules.values()) - set(shown))}"
    assert all(name == "entitylm-" + module.split(".")[1].replace("_", "-") for name, module in modules.items())
