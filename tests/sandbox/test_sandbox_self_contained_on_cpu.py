"""The sandbox package is self-contained: it imports the standard library and itself only, so it can be copied
where an unprivileged judge reads it (test_sandbox_unprivileged.py) and never pulls the rest of mrgrpo in."""

from __future__ import annotations

import ast
import sys


def test_the_sandbox_imports_only_the_standard_library_and_itself(repo_root):
    outside = []
    for path in sorted((repo_root / "mrgrpo" / "sandbox").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if name.startswith("mrgrpo.sandbox") or top in ("__future__", "tqdm"):  # tqdm: run_batch's optional bar
                    continue
                if top == "mrgrpo" or top not in sys.stdlib_module_names:
                    outside.append(f"{path.name}:{node.lineno} imports {name}")
    assert outside == []
