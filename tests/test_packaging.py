"""The set-up files agree with each other: pyproject.toml, environment.yml, .ci/run, the README and the docs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from entitylm.__main__ import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
# Where commands are documented: the README (the front door) and the pages of the documentation site.
DOCUMENTATION = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
ENTITYLM = Path(sys.executable).parent / "entitylm"  # the console script `pip install -e .` puts beside python

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


def _scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_command_the_docs_show_has_a_console_script():
    """`python -m coref.X` / `python -m inference.X` in the README or the docs: each is a command of `entitylm` and
    has its `entitylm-X` console script, the dispatcher under that name; each command is documented."""
    scripts = _scripts()
    shown = {}
    for page in DOCUMENTATION:
        for module in re.findall(r"python -m ((?:coref|inference)\.\w+)", page.read_text(encoding="utf-8")):
            shown.setdefault(module, page.relative_to(ROOT))
    commands = {module: name for name, (module, _) in COMMANDS.items()}
    missing = {module: str(page) for module, page in shown.items() if module not in commands}
    assert shown and not missing, f"no entitylm command for {missing}"
    assert set(commands) <= set(shown), f"undocumented commands: {sorted(set(commands) - set(shown))}"
    assert set(scripts) == {"entitylm"} | {f"entitylm-{name}" for name in COMMANDS}
    assert all(name == module.split(".")[1].replace("_", "-") for module, name in commands.items())
    assert set(scripts.values()) == {"entitylm.__main__:main"}  # one dispatcher: `entitylm-X` is `entitylm X`


def test_the_entitylm_script_is_installed():
    assert _scripts()["entitylm"] == "entitylm.__main__:main"
    assert ENTITYLM.is_file(), f"{ENTITYLM} missing: run `pip install -e .`"


def test_entitylm_help_lists_every_command_with_one_line():
    done = subprocess.run([ENTITYLM, "--help"], capture_output=True, text=True, check=True)
    listed = dict(re.findall(r"^  ([a-z][a-z-]+)  +(\S.*)$", done.stdout, flags=re.MULTILINE))
    assert set(listed) == set(COMMANDS)
    assert done.stderr == ""


def test_a_command_runs_through_entitylm_as_through_its_module(tmp_path):
    """`entitylm score` and `entitylm-score` are `python -m coref.score`: the same output and status, the same
    one-line error."""
    key = ROOT / "coref" / "corpora" / "data" / "sample_dev.conll"
    for args in ([key, key], [key, tmp_path / "missing.conll"]):
        module = subprocess.run([sys.executable, "-m", "coref.score", *args], capture_output=True, text=True)
        for command in ([ENTITYLM, "score"], [ENTITYLM.with_name("entitylm-score")]):
            through = subprocess.run([*command, *args], capture_output=True, text=True)
            assert (through.returncode, through.stdout, through.stderr) == (module.returncode, module.stdout,
                                                                             module.stderr)
    assert through.returncode == 2 and len(through.stderr.splitlines()) == 1 and "missing.conll" in through.stderr
    help_text = subprocess.run([ENTITYLM, "score", "--help"], capture_output=True, text=True)
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: entitylm score ")
    usage = subprocess.run([ENTITYLM, "mentions", "train", "--epochs", "0"], capture_output=True, text=True)
    assert usage.stderr.splitlines()[-1].startswith("entitylm mentions train: error: ")
    unknown = subprocess.run([ENTITYLM, "scor"], capture_output=True, text=True)
    assert unknown.returncode == 2 and len(unknown.stderr.splitlines()) == 1 and "'scor'" in unknown.stderr


def test_import_entitylm_is_the_notebook_api_without_loading_torch():
    """`import entitylm as elm` gives inference.api's own objects; torch loads with the first of them, so the
    command line's `entitylm --help` stays quick."""
    quick = "import sys, entitylm; assert 'torch' not in sys.modules; print(len(entitylm.__all__))"
    count = subprocess.run([sys.executable, "-c", quick], capture_output=True, text=True, check=True).stdout
    import entitylm as elm
    import inference.api as api

    assert elm.__all__ == api.__all__ and int(count) == len(api.__all__)
    assert all(getattr(elm, name) is getattr(api, name) for name in api.__all__)
    assert set(api.__all__) <= set(dir(elm))
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        elm.nonexistent  # noqa: B018


def test_each_entry_point_names_the_module_of_its_command():
    """`command_module` reads which module an entry point runs `main` from (benchmarks find a parser through it)."""
    import importlib.util

    from entitylm.__main__ import command_module

    targets = {command_module(module) for module, _ in COMMANDS.values()}
    assert all(importlib.util.find_spec(target) is not None for target in targets)
    with pytest.raises(ValueError, match="not an entry point"):
        command_module("coref.document")
