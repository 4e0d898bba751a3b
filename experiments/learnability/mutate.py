"""Plausible wrong versions of a correct program, for "failed attempt -> feedback -> fix" transcripts.

Each mutant is ONE small source edit made at the exact position `ast` reports, so the rest of the program (layout,
comments) is untouched and the fix reads as a diff a programmer would make:

- ``off_by_one``: an integer literal ``k`` (0 <= k <= 1000) becomes ``k + 1`` or ``k - 1``;
- ``operator``: a binary operator swapped for a sibling (``+``/``-``, ``*``/``//``, ``%``/``//``, ...);
- ``comparison``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=`` swapped;
- ``boolean``: ``and``/``or`` swapped;
- ``edge_case``: an ``if`` statement without ``else`` that stands on its own lines among siblings is deleted.

Edits inside ``while`` conditions and augmented assignments are skipped (they turn into endless loops more often
than into wrong answers). Whether a mutant really fails is decided by the sandbox, not here.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

_BINOP_SWAPS = {ast.Add: ("+", ["-"]), ast.Sub: ("-", ["+"]), ast.Mult: ("*", ["+", "//"]),
                ast.FloorDiv: ("//", ["*", "%"]), ast.Mod: ("%", ["//"]), ast.Div: ("/", ["*"])}
_CMP_SWAPS = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
              ast.Eq: ("==", "!="), ast.NotEq: ("!=", "==")}


@dataclass(frozen=True)
class Mutant:
    kind: str
    code: str
    line: int  # 1-based line of the edit


def _offsets(code: str) -> list[int]:
    """Character offset of the start of every line (1-based line i starts at result[i - 1])."""
    starts, pos = [], 0
    for line in code.splitlines(keepends=True):
        starts.append(pos)
        pos += len(line)
    starts.append(pos)
    return starts


def _char_pos(code_lines: list[str], starts: list[int], lineno: int, col_byte: int) -> int:
    """ast column offsets count UTF-8 bytes; convert (line, byte column) to a character offset in the source."""
    line = code_lines[lineno - 1]
    return starts[lineno - 1] + len(line.encode("utf-8")[:col_byte].decode("utf-8", errors="ignore"))


def _excluded_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        roots = []
        if isinstance(node, ast.While):
            roots.append(node.test)
        elif isinstance(node, ast.AugAssign):
            roots.append(node)
        for root in roots:
            skip.update(id(n) for n in ast.walk(root))
    return skip


def mutants(code: str) -> list[Mutant]:
    """Every single-edit mutant of ``code`` that still parses and differs from it (deterministic order)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    lines = code.splitlines(keepends=True)
    starts = _offsets(code)
    skip = _excluded_nodes(tree)
    edits: list[tuple[str, int, int, int, str]] = []  # (kind, line, start, end, replacement)

    def pos(lineno: int, col: int) -> int:
        return _char_pos(lines, starts, lineno, col)

    def operator_between(left: ast.AST, right: ast.AST, symbol: str) -> tuple[int, int] | None:
        a, b = pos(left.end_lineno, left.end_col_offset), pos(right.lineno, right.col_offset)
        gap = code[a:b]
        i = gap.find(symbol)
        # the operator must be the only non-space, non-paren text in between (a "//" is not a "/")
        if i < 0 or gap.replace(symbol, "", 1).strip(" \t\\\n()") != "":
            return None
        return a + i, a + i + len(symbol)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 1000:
            a, b = pos(node.lineno, node.col_offset), pos(node.end_lineno, node.end_col_offset)
            if code[a:b] != str(node.value):
                continue
            for delta in (1, -1):
                if node.value + delta >= 0:
                    edits.append(("off_by_one", node.lineno, a, b, str(node.value + delta)))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAPS:
            symbol, others = _BINOP_SWAPS[type(node.op)]
            span = operator_between(node.left, node.right, symbol)
            if span:
                edits.extend(("operator", node.lineno, span[0], span[1], o) for o in others)
        elif isinstance(node, ast.Compare):
            left = node.left
            for op, right in zip(node.ops, node.comparators, strict=True):
                if type(op) in _CMP_SWAPS:
                    symbol, other = _CMP_SWAPS[type(op)]
                    span = operator_between(left, right, symbol)
                    if span:
                        edits.append(("comparison", node.lineno, span[0], span[1], other))
                left = right
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            symbol, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            span = operator_between(node.values[0], node.values[1], symbol)
            if span:
                edits.append(("boolean", node.lineno, span[0], span[1], other))
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list) or len(block) < 2:
                continue
            for stmt in block:
                if not isinstance(stmt, ast.If) or stmt.orelse or id(stmt) in skip:
                    continue
                a, b = pos(stmt.lineno, stmt.col_offset), pos(stmt.end_lineno, stmt.end_col_offset)
                line_a, line_b = starts[stmt.lineno - 1], starts[stmt.end_lineno]
                own_lines = code[line_a:a].strip() == "" and code[b:line_b].strip() == ""
                if own_lines:
                    edits.append(("edge_case", stmt.lineno, line_a, line_b, ""))

    out: list[Mutant] = []
    seen = {code}
    for kind, line, a, b, replacement in edits:
        new = code[:a] + replacement + code[b:]
        if new in seen:
            continue
        try:
            ast.parse(new)
        except SyntaxError:
            continue
        seen.add(new)
        out.append(Mutant(kind, new, line))
    return out


def shuffled_mutants(code: str, seed: str | int) -> list[Mutant]:
    """`mutants(code)` in a seeded order that alternates kinds, so the first few candidates are varied."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutant]] = {}
    for m in mutants(code):
        by_kind.setdefault(m.kind, []).append(m)
    for group in by_kind.values():
        rng.shuffle(group)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    out: list[Mutant] = []
    while any(by_kind[k] for k in kinds):
        for k in kinds:
            if by_kind[k]:
                out.append(by_kind[k].pop())
    return out
