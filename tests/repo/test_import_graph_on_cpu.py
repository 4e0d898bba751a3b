"""The package's import graph, read with `ast` (nothing imported): no cycle between mrgrpo modules, and no private
name (``_x``) imported from another module.

Every import counts, at module level or inside a function: a cycle through a deferred import is still two modules
that each need the other. Importing ``a.b.c`` is an edge to ``a.b.c`` only (not to the packages above it, which
Python imports first without that being a dependency of the importer).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted((root / "mrgrpo").rglob("*.py"))}


def imports(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(the module imported from, the names taken from it, line) for every import statement of one module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.append((source, [alias.name for alias in node.names], node.lineno))
    return out


def graph(root: Path) -> dict[str, set[str]]:
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for source, names, _ in imports(name, path):
            targets = [f"{source}.{n}" for n in names if f"{source}.{n}" in mods]  # from pkg import submodule
            if len(targets) < len(names) or not names:  # something else is taken from the module itself
                targets.append(source)
            edges[name] |= {t for t in targets if t in mods and t != name}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def private_imports(root: Path) -> list[str]:
    mods = modules(root)
    bad = []
    for name, path in mods.items():
        rel = path.relative_to(root).as_posix()
        for source, names, line in imports(name, path):
            if not source.startswith("mrgrpo"):
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{rel}:{line}: from {source} import {n}")
    return bad


def test_no_import_cycle_between_mrgrpo_modules(repo_root):
    assert cycles(graph(repo_root)) == []


def test_no_private_name_is_imported_from_another_mrgrpo_module(repo_root):
    assert private_imports(repo_root) == []


@pytest.mark.parametrize("files, expected", [
    ({"a.py": "from mrgrpo import b\n", "b.py": "def f():\n    from mrgrpo.a import x\n"}, [["mrgrpo.a", "mrgrpo.b"]]),
    ({"a.py": "from mrgrpo import b\n", "b.py": "import json\n"}, []),
    ({"p/__init__.py": "from .q import x\n", "p/q.py": "from mrgrpo.p.r import y\n", "p/r.py": ""}, []),
    ({"p/__init__.py": "", "p/q.py": "from . import r\n", "p/r.py": "from .q import z\n"},
     [["mrgrpo.p.q", "mrgrpo.p.r"]]),
])
def test_the_checker_finds_a_cycle_through_a_deferred_or_relative_import(tmp_path, files, expected):
    for rel, text in {"__init__.py": "", **files}.items():
        (tmp_path / "mrgrpo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mrgrpo" / rel).write_text(text)
    assert cycles(graph(tmp_path)) == expected


def test_the_checker_finds_a_private_import_wherever_it_is(tmp_path):
    for rel, text in {"__init__.py": "", "a.py": "from mrgrpo.b import _hidden, shown, __version__\n", "b.py": "",
                      "sandbox/__init__.py": "", "sandbox/c.py": "from mrgrpo.b import _not_here_either\n"}.items():
        (tmp_path / "mrgrpo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "mrgrpo" / rel).write_text(text)
    assert private_imports(tmp_path) == ["mrgrpo/a.py:1: from mrgrpo.b import _hidden",
                                         "mrgrpo/sandbox/c.py:1: from mrgrpo.b import _not_here_either"]


# The command modules: only they (and the entry points) may import `mrgrpo.cli`; the library raises
# `mrgrpo.errors.UsageError` and runs jobs through `mrgrpo.jobs`.
COMMAND_MODULES = {"mrgrpo.__main__", "mrgrpo.cli", "mrgrpo.score_cli", "mrgrpo.data.cli", "mrgrpo.eval.cli"}


def test_the_library_never_imports_the_command_module(repo_root):
    users = {name for name, targets in graph(repo_root).items() if "mrgrpo.cli" in targets}
    assert users <= COMMAND_MODULES, sorted(users - COMMAND_MODULES)
