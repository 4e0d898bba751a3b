"""The run script's pre-flight: what can be checked in seconds, before Ray starts.

``recipe/mrgrpo/run_qwen3_apps.sh`` calls ``python -m mrgrpo.preflight`` once, with the interpreter the run will
use. It checks, in this order, and stops at the first problem with one line on stderr and exit 2:

1. the data: with plan source ``teacher``, every row of each parquet whose effective plan source is teacher
   (its own ``extra_info.plan_source``, else the run's) has a plan;
2. the GPU stack: torch, verl and the rollout engine (``vllm``, or ``sglang`` for ``ROLLOUT=sglang``) are
   installed, at the versions mrgrpo's ``gpu`` extra pins (read from mrgrpo's own package metadata, so the pins
   live in ``pyproject.toml`` alone; a checkout that is not installed is read from its ``pyproject.toml``), and the
   engine imports; the line names the install command that fixes it.

On success it prints one line of versions (``torch 2.11.0 | verl 0.9.1 | vllm 0.24.0``) to stdout.

    python -m mrgrpo.preflight --rollout vllm --plan-source teacher --data train.parquet --data val.parquet

``--no-import`` checks versions from metadata only (the run script's ``DRY_RUN``: fast, no CUDA needed), and
``--warn-only`` reports problems as warnings with exit 0 (a dry run may be printed for another machine).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mrgrpo.config import recipe_settings
from mrgrpo.first_turn import PLAN_SOURCES

ENGINES = ("vllm", "sglang")
GPU_INSTALL = "pip install -e '.[gpu]' (from the mrgrpo checkout; README, Install)"
SGLANG_INSTALL = "pip install sglang (see docs/install.md: SGLang is optional and not pinned by mrgrpo)"


class PreflightError(Exception):
    """A problem found before the launch: one line, exit 2."""


def installed_version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def gpu_pins(requires: Sequence[str] | None = None) -> dict[str, str]:
    """``{dist: version}`` for the ``==`` pins of mrgrpo's ``gpu`` extra, plus the base verl pin.

    >>> gpu_pins(['verl[verl-core]==0.9.1', 'vllm==0.24.0; extra == "gpu"', 'matplotlib>=3.7; extra == "eval"'])
    {'verl': '0.9.1', 'vllm': '0.24.0'}
    """
    if requires is None:
        try:
            requires = metadata.requires("mrgrpo") or []
        except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed: its pyproject.toml
            requires = checkout_requires(Path(__file__).resolve().parents[1] / "pyproject.toml")
    pins: dict[str, str] = {}
    for line in requires:
        spec, _, marker = line.partition(";")
        if marker and not re.search(r"""extra\s*==\s*["']gpu["']""", marker):
            continue
        m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*==\s*([\w.+!-]+)\s*", spec)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def checkout_requires(pyproject: Path) -> list[str]:
    """The requirement lines of a checkout's pyproject.toml, with the ``gpu`` extra marked as metadata marks it;
    [] when there is none (nothing to compare against)."""
    if not pyproject.is_file():
        return []
    import tomllib  # Python 3.11+; the GPU images have 3.12

    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    gpu = project.get("optional-dependencies", {}).get("gpu", [])
    return list(project["dependencies"]) + [f'{r}; extra == "gpu"' for r in gpu]


def base_version(version: str) -> str:
    """``2.11.0+cu130`` -> ``2.11.0`` (a local build tag does not break a pin)."""
    return version.split("+", 1)[0]


def stack_problem(rollout: str, pins: dict[str, str], version: Callable[[str], str | None] = installed_version) -> str:
    """The first missing or mismatched piece of the GPU stack as one line, or ``""``."""
    fix = SGLANG_INSTALL if rollout == "sglang" else GPU_INSTALL
    for dist in ("torch", "verl", rollout):
        have = version(dist)
        if have is None:
            return f"{dist} is not installed (ROLLOUT={rollout} needs it): {fix}"
        want = pins.get(dist)
        if want and base_version(have) != base_version(want):
            return f"{dist} {have} is installed but mrgrpo pins {dist}=={want}: {fix}"
    return ""


def import_problem(rollout: str, importer: Callable[[str], object] = importlib.import_module) -> str:
    """The rollout engine must import (a CUDA or ABI mismatch shows here, not minutes later inside Ray)."""
    try:
        importer(rollout)
    except Exception as e:  # any import failure is the user's environment: report it, do not launch
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return f"import {rollout} failed ({type(e).__name__}: {msg[:200]}): {GPU_INSTALL}"
    return ""


def rows_without_plans(path: Path, plan_source: str) -> tuple[int, list[str]]:
    """(rows, ids of rows whose effective plan source is teacher but whose ``extra_info.plan`` is empty)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=["extra_info"])
    except FileNotFoundError:
        raise PreflightError(f"data file {path} not found") from None
    except KeyError:
        raise PreflightError(f"{path} has no extra_info column: build it with `mrgrpo data prepare`") from None
    except Exception as e:  # pyarrow raises several types for a file that is not parquet
        raise PreflightError(f"{path} is not a readable parquet file ({type(e).__name__})") from None
    missing = []
    rows = table.column("extra_info").to_pylist()
    for i, info in enumerate(rows):
        info = info or {}
        if (info.get("plan_source") or plan_source) == "teacher" and not str(info.get("plan") or "").strip():
            missing.append(str(info.get("source_id") or f"row {i}"))
    return len(rows), missing


def plans_problem(files: Sequence[Path], plan_source: str) -> str:
    for path in files:
        rows, missing = rows_without_plans(Path(path), plan_source)
        if missing:
            shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
            return (f"PLAN_SOURCE=teacher but {len(missing)} of {rows} rows of {path} have no plan ({shown}): "
                    "prepare the data with plans (`mrgrpo data prepare --plans batch|vllm`) or use "
                    "PLAN_SOURCE=self or none")
    return ""


def versions_line(rollout: str, version: Callable[[str], str | None] = installed_version) -> str:
    return " | ".join(f"{d} {version(d) or 'missing'}" for d in ("torch", "verl", rollout, "transformers"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mrgrpo.preflight", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--rollout", choices=ENGINES, default="vllm", help="the rollout engine the run uses")
    p.add_argument("--plan-source", choices=PLAN_SOURCES, default=recipe_settings()["plan_source"],
                   help="the run's plan source (default: the recipe's mrgrpo.agent_loop.plan_source)")
    p.add_argument("--data", type=Path, action="append", default=[], help="a parquet the run reads (repeatable)")
    p.add_argument("--no-import", action="store_true", help="check versions only; do not import the engine")
    p.add_argument("--warn-only", action="store_true", help="print problems as warnings and exit 0")
    args = p.parse_args(argv)
    problems = []
    try:  # the data first: it is the user's own, and checking it needs no GPU stack
        problems.append(plans_problem(args.data, args.plan_source))
    except PreflightError as e:
        problems.append(str(e))
    problems.append(stack_problem(args.rollout, gpu_pins()))
    if not problems[-1] and not args.no_import:
        problems.append(import_problem(args.rollout))
    problems = [m for m in problems if m]
    if problems and not args.warn_only:
        print(f"run_qwen3_apps.sh: {problems[0]}", file=sys.stderr)
        return 2
    for m in problems:
        print(f"run_qwen3_apps.sh: warning: {m}", file=sys.stderr)
    print(versions_line(args.rollout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
