"""Who may import whom (DESIGN.md, "Layout"), read from the source with `ast`: every import at any depth (inside
functions and ``TYPE_CHECKING`` blocks too), relative ones resolved.

- ``coref`` imports nothing from ``generative``, ``inference`` or ``entitylm``, and not pyro: it is what everything
  else reads; ``generative`` imports nothing from ``inference`` or ``entitylm``; ``inference`` nothing from
  ``entitylm`` (the public face sits on top);
- no two modules import each other, directly or round a longer circle;
- nothing imports a command (``inference.commands.*``, from outside that package) or a ``python -m`` entry point:
  commands are called by their entry points, and ``entitylm COMMAND`` runs those by name (``runpy``); the
  dispatcher, a command itself, uses the commands' ``Parser``.

The documented entry points (``coref/resolve.py``, ``inference/marginal_ppl.py``, ...) are three-line modules whose
only code is ``if __name__ == "__main__":`` importing a command's ``main`` and running it; a package's
``__main__.py`` is the same wiring. Those imports run only when the module is the program, never when the package
is imported, so they make no edge between packages: they are exempt, and only they.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from entitylm.__main__ import COMMANDS as DISPATCHED

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("coref", "generative", "inference", "entitylm")
FORBIDDEN = {  # package -> what it may not import
    "coref": ("generative", "inference", "entitylm", "pyro"),
    "generative": ("inference", "entitylm"),
    "inference": ("entitylm",),
}
COMMANDS = "inference.commands"

DISPATCHER = "entitylm.__main__"  # `entitylm COMMAND`: a command itself, so it may use the commands' Parser


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer.replace('.', '/')}.py:{self.line} imports {self.imported}"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


def _is_main_block(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.comparators) == 1 and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def _is_entry_point(name: str, tree: ast.Module) -> bool:
    """A ``__main__.py``, or a module whose only statements are its docstring and an ``if __name__ == ...`` block."""
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    return name.endswith(".__main__") or (len(body) == 1 and _is_main_block(body[0]))


def _imports(name: str, tree: ast.Module) -> list[Import]:
    """Every module ``name`` imports (``from P import M`` names ``P.M`` where that is a module), at any depth."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append(Import(name, full if full in MODULES else base, node.lineno))
    return found


def _package_imports() -> tuple[list[Import], set[str]]:
    """Every import of every module, the entry points' wiring left out; and the entry points' names."""
    imports, entry_points = [], set()
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        if _is_entry_point(name, tree):
            entry_points.add(name)
            tree = ast.Module(body=[node for node in tree.body if not _is_main_block(node)], type_ignores=[])
            if name.endswith(".__main__") and name != "entitylm.__main__":
                continue
        imports += _imports(name, tree)
    return imports, entry_points


IMPORTS, ENTRY_POINTS = _package_imports()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _failures(violations: list[Import], what: str) -> str:
    shown = [str(v) for v in violations]
    return f"{what}:\n  " + "\n  ".join(shown) if shown else ""


def test_the_modules_were_read():
    """The modules are all read, and every command `entitylm` dispatches to is one of the thin entry points."""
    assert {"coref.document", "generative.registry", "inference.api", "entitylm.__main__"} <= set(MODULES)
    documented = {f"{module}.__main__" if f"{module}.__main__" in MODULES else module
                  for module, _ in DISPATCHED.values()}
    assert documented <= ENTRY_POINTS, sorted(documented - ENTRY_POINTS)


def test_each_package_imports_only_what_lies_below_it():
    violations = [i for i in IMPORTS for package, below in FORBIDDEN.items()
                  if _within(i.importer, package) and any(_within(i.imported, other) for other in below)]
    failures = _failures(violations, "imports across the layers")
    assert not failures, failures


def test_no_module_imports_a_command_or_an_entry_point():
    violations = [i for i in IMPORTS if i.imported in ENTRY_POINTS
                  or (_within(i.imported, COMMANDS) and not _within(i.importer, COMMANDS) and i.importer != DISPATCHER)]
    failures = _failures(violations, "imports of a command or an entry point")
    assert not failures, failures


def test_no_import_circle():
    graph = nx.DiGraph()
    graph.add_edges_from((i.importer, i.imported) for i in IMPORTS if i.imported in MODULES
                         and i.importer != i.imported)
    circles = [nx.find_cycle(graph.subgraph(component)) for component in nx.strongly_connected_components(graph)
               if len(component) > 1]
    shown = "\n  ".join(" -> ".join([*(a for a, _ in circle), circle[0][0]]) for circle in circles)
    assert not circles, f"import circles:\n  {shown}"


def test_every_package_says_what_lives_there():
    """The map reads from the packages themselves: each ``__init__.py`` opens with a docstring saying what is inside."""
    silent = [name for name, path in MODULES.items() if path.name == "__init__.py"
              and not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))]
    folders = {path.parent for path in MODULES.values()}
    unpackaged = sorted(str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").is_file())
    assert not silent and not unpackaged, f"packages without a docstring: {silent}; folders without one: {unpackaged}"
