"""The study reads the recipe's settings from their one home (the trainer yaml, `mrgrpo.first_turn.PLAN_SOURCES`),
and reaches mrgrpo through public names only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mrgrpo.config import recipe_settings
from mrgrpo.first_turn import PLAN_SOURCES

STUDY = Path(__file__).resolve().parents[1]


def _option(parser, dest: str):
    return next(a for a in parser._actions if a.dest == dest)


def _sft_data():
    from learnability.kit import build_parser

    return _option(build_parser(), "command").choices["sft-data"]


def test_sft_data_plan_sources_are_the_table_but_teacher():
    assert tuple(_option(_sft_data(), "plan_source").choices) == tuple(s for s in PLAN_SOURCES if s != "teacher")


def test_transcripts_rounds_default_is_the_recipes():
    from learnability.transcripts import LoopSettings

    assert _option(_sft_data(), "rounds").default is None and LoopSettings().rounds == recipe_settings()["rounds"]


def test_the_data_stage_rounds_default_is_the_recipes():
    from learnability.data import ExperimentOptions

    assert ExperimentOptions().rounds == recipe_settings()["rounds"]


def test_the_entry_points_rounds_default_is_the_recipes():
    from learnability.run import parser

    assert _option(parser({}), "rounds").default == recipe_settings()["rounds"]


def test_no_module_writes_a_rounds_default_or_the_plan_sources_out():
    """As in the package: ``rounds`` with a number as its default nowhere, and no literal list of the plan sources."""
    default = re.compile(r"\brounds\s*(?::\s*int\s*)?=\s*\d|--rounds.*default\s*=\s*\d")
    names = r"""['"](?:self|teacher|none)['"]"""
    literal = re.compile(rf"{names}\s*,\s*{names}\s*,\s*{names}")
    files = [p for p in STUDY.rglob("*.py") if "tests" not in p.relative_to(STUDY).parts]
    hits = [f"{p.relative_to(STUDY)}: {line.strip()}" for p in files for line in p.read_text().splitlines()
            if default.search(line) or literal.search(line)]
    assert hits == []


def test_the_study_imports_no_private_name_of_mrgrpo():
    """The study is a user of the product: only public names (no ``_x``) from mrgrpo's modules."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    bad = []
    for path in STUDY.rglob("*.py"):
        tree = ast.parse(path.read_text())
        modules = set()  # names bound to mrgrpo modules: import mrgrpo.x [as y]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("mrgrpo")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mrgrpo"):
                bad += [f"{path.relative_to(STUDY)}:{node.lineno}: {node.module}.{a.name}" for a in node.names
                        if private(a.name)]
                modules |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and private(node.attr):
                base = node.value
                while isinstance(base, ast.Attribute):
                    base = base.value
                if isinstance(base, ast.Name) and base.id in modules:
                    bad.append(f"{path.relative_to(STUDY)}:{node.lineno}: {base.id}...{node.attr}")
    assert bad == []
