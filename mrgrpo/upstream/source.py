"""Static reading of a verl source tree (``mrgrpo upstream --verl-source PATH``): nothing in it is imported.

A symbol ``'verl.a.b:Cls.meth'`` is found by parsing ``PATH/verl/a/b.py`` (or ``.../b/__init__.py``) with
:mod:`ast`, following ``from x import name`` re-exports and, for a method missing from a class body, the class's
bases (by name, within the tree). Its shape (parameters, ``async def``, base classes) is read from the AST in the
same token form as the installed-verl check uses (`mrgrpo.upstream.shape_problem`). Code facts that no symbol
carries (a config key a trainer reads, a line that copies a mask, an error a trainer raises) are regular
expressions over one file of the tree (:class:`Fact`).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple


class Found(NamedTuple):
    file: Path
    node: ast.AST  # ClassDef, FunctionDef, AsyncFunctionDef or Module
    line: int


class Fact(NamedTuple):
    """A code fact mrgrpo relies on: ``pattern`` (a regex) occurs in ``file`` (relative to the tree's root)."""

    file: str
    pattern: str
    what: str


def verl_root(path: Path) -> Path | None:
    """The directory that holds the ``verl`` package: PATH itself, or PATH's parent when PATH is the package."""
    path = path.resolve()
    if (path / "verl" / "__init__.py").is_file():
        return path
    if path.name == "verl" and (path / "__init__.py").is_file():
        return path.parent
    return None


def version(root: Path) -> str | None:
    f = root / "verl" / "version" / "version"
    return f.read_text(encoding="utf-8").strip() if f.is_file() else None


@lru_cache(maxsize=512)
def _parse(file: Path) -> ast.Module:
    return ast.parse(file.read_text(encoding="utf-8"), filename=str(file))


def module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file():
            return f
    return None


def _imported(tree: ast.Module, module: str, file: Path, name: str) -> str | None:
    """The module a top-level ``from X import name`` (or ``as name``) in this module takes ``name`` from."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    if node.level:
                        pkg = module.split(".") if file.name == "__init__.py" else module.split(".")[:-1]
                        pkg = pkg[: len(pkg) - (node.level - 1)]
                        return ".".join([*pkg, *(node.module.split(".") if node.module else [])]), alias.name
                    return node.module, alias.name
    return None


def _in_body(body: list[ast.stmt], name: str) -> ast.AST | None:
    hit = None
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            hit = node  # the last definition wins, as at run time
        elif isinstance(node, ast.If):  # e.g. `if TYPE_CHECKING:` / version switches: look inside too
            hit = _in_body(node.body, name) or _in_body(node.orelse, name) or hit
    return hit


def find(root: Path, path: str, _depth: int = 0) -> Found | None:
    """``'module:Qual.name'`` in the tree, or None."""
    if _depth > 8:
        return None
    module, _, qual = path.partition(":")
    file = module_file(root, module)
    if file is None:
        return None
    tree = _parse(file)
    if not qual:
        return Found(file, tree, 1)
    parts = qual.split(".")
    node = _in_body(tree.body, parts[0])
    if node is None:
        src = _imported(tree, module, file, parts[0])
        if src is None:
            return None
        return find(root, f"{src[0]}:{'.'.join([src[1], *parts[1:]])}", _depth + 1)
    owner = (module, file, tree)
    for i, part in enumerate(parts[1:], start=1):
        if not isinstance(node, ast.ClassDef):
            return None
        child = _in_body(node.body, part)
        if child is None:  # inherited: look in the bases, by name
            for base in node.bases:
                name = ast.unparse(base)
                target = _base_path(root, owner, name)
                if target:
                    hit = find(root, f"{target}.{'.'.join(parts[i:])}", _depth + 1)
                    if hit:
                        return hit
            return None
        node = child
    return Found(file, node, getattr(node, "lineno", 1))


def _base_path(root: Path, owner: tuple[str, Path, ast.Module], name: str) -> str | None:
    module, file, tree = owner
    head, _, rest = name.partition(".")
    if _in_body(tree.body, head) is not None:
        return f"{module}:{name}"
    src = _imported(tree, module, file, head)
    if src is None:
        return None
    return f"{src[0]}:{src[1]}{'.' + rest if rest else ''}"


def base_names(root: Path, found: Found, _depth: int = 0) -> set[str]:
    """Dotted names (``module.Qual``) of a class's bases, transitively, as far as the tree tells."""
    if not isinstance(found.node, ast.ClassDef) or _depth > 8:
        return set()
    module = _module_of(root, found.file)
    out: set[str] = set()
    for base in found.node.bases:
        target = _base_path(root, (module, found.file, _parse(found.file)), ast.unparse(base))
        if target is None:
            continue
        hit = find(root, target)
        if hit is None:
            out.add(target.replace(":", "."))
            continue
        real = f"{_module_of(root, hit.file)}.{hit.node.name}" if isinstance(hit.node, ast.ClassDef) else target
        out.add(real)
        out |= base_names(root, hit, _depth + 1)
    return out


def _module_of(root: Path, file: Path) -> str:
    rel = file.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def tokens(node: ast.AST) -> list[str] | None:
    """Parameter tokens of a function (``name``, ``name=default``, ``*``, ``**``), or of a class's ``__init__``
    (None when the class body has none: inherited, not read here)."""
    if isinstance(node, ast.ClassDef):
        init = _in_body(node.body, "__init__")
        if init is None:
            return None
        node = init
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = [p.arg if d is None else f"{p.arg}={ast.unparse(d)}" for p, d in zip(positional, defaults, strict=True)]
    if a.vararg:
        out.append("*")
    out += [p.arg if d is None else f"{p.arg}={ast.unparse(d)}" for p, d in zip(a.kwonlyargs, a.kw_defaults,
                                                                                   strict=True)]
    if a.kwarg:
        out.append("**")
    if out and out[0] in ("self", "cls"):
        out = out[1:]
    return out


def is_async(node: ast.AST) -> bool:
    return isinstance(node, ast.AsyncFunctionDef)


def where(root: Path, file: Path, line: int) -> str:
    return f"{file.relative_to(root)}:{line}"


def fact_line(root: Path, fact: Fact) -> tuple[str | None, str | None]:
    """(``file:line`` of the first match, problem) for a code fact in the tree."""
    f = root / fact.file
    if not f.is_file():
        return None, f"{fact.file} is missing ({fact.what})"
    text = f.read_text(encoding="utf-8")
    m = re.search(fact.pattern, text, re.M)
    if not m:
        return None, f"{fact.file}: no longer has {fact.what} (pattern {fact.pattern!r})"
    return f"{fact.file}:{text.count(chr(10), 0, m.start()) + 1}", None


def find_line(root: Path, file: str, pattern: str) -> str | None:
    """``file:line`` of the first match of pattern, or None."""
    loc, problem = fact_line(root, Fact(file, pattern, ""))
    return None if problem else loc


def describe(found: Found | None) -> Any:
    return None if found is None else type(found.node).__name__
