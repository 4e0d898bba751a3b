"""`mrgrpo upstream`: the command line (main)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from mrgrpo.upstream.core import DEFAULT_ROLLOUT_NAME, PIN_FILE, RECIPE_CONFIG_DIR, RECIPE_CONFIG_NAME, Context
from mrgrpo.upstream.report import build_report, render_text


def default_repo_root() -> Path | None:
    """The checkout mrgrpo runs from (editable install, or the image's /opt/mrgrpo), else the cwd if it is one."""
    here = Path(__file__).resolve().parents[2]  # mrgrpo/upstream/cli.py -> the checkout
    for root in (here, Path.cwd()):
        if (root / PIN_FILE).is_file() or (root / RECIPE_CONFIG_DIR).is_dir():
            return root
    return None


def default_recipe_dir(repo_root: Path | None) -> Path | None:
    env = os.getenv("MRGRPO_RECIPE_DIR")
    candidates = [Path(env)] if env else []
    candidates += [root / RECIPE_CONFIG_DIR for root in (Path.cwd(), repo_root) if root is not None]
    return next((c.resolve() for c in candidates if (c / f"{RECIPE_CONFIG_NAME}.yaml").is_file()), None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrgrpo upstream",
        description=(
            "Report how mrgrpo plugs into the installed verl: the pinned and installed verl versions; every "
            "extension point (verl config key -> our object), each checked against the installed verl; the "
            "original fork's in-place edits and what replaces each; and the recipe config's delta against "
            "verl's default ppo_trainer. Exit 0 when everything fits, 1 on any drift."
        ),
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON (for machines)")
    p.add_argument("--full", action="store_true", help="text: list every check and do not shorten values")
    p.add_argument(
        "--recipe-dir",
        type=Path,
        default=None,
        help=f"directory with {RECIPE_CONFIG_NAME}.yaml (default: $MRGRPO_RECIPE_DIR, ./{RECIPE_CONFIG_DIR}, "
        "or the checkout's)",
    )
    p.add_argument(
        "--rollout-name",
        default=DEFAULT_ROLLOUT_NAME,
        help="actor_rollout_ref.rollout.name for composing both configs (ppo_trainer leaves it ???; default vllm)",
    )
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a hydra override applied to the recipe side of the delta (repeatable), e.g. the run script's",
    )
    p.add_argument("--resolve", action="store_true", help="compare resolved values instead of raw interpolations")
    p.add_argument(
        "--allow-version-mismatch",
        action="store_true",
        help="do not fail when the installed verl differs from the pin (to check another verl's extension points)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    repo_root = default_repo_root()
    recipe_dir = args.recipe_dir.resolve() if args.recipe_dir else default_recipe_dir(repo_root)
    if args.recipe_dir and not (recipe_dir / f"{RECIPE_CONFIG_NAME}.yaml").is_file():
        parser.error(f"--recipe-dir {args.recipe_dir}: no {RECIPE_CONFIG_NAME}.yaml there")
    ctx = Context(
        repo_root=repo_root,
        recipe_dir=recipe_dir,
        rollout_name=args.rollout_name,
        overrides=tuple(args.override),
    )
    report = build_report(ctx, allow_version_mismatch=args.allow_version_mismatch, resolve_values=args.resolve)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_text(report, full=args.full))
    if not report["ok"]:
        print(f"mrgrpo upstream: {len(report['problems'])} problem(s); first: {_first(report)}", file=sys.stderr)
    return int(report["exit_code"])


def _first(report: dict[str, Any]) -> str:
    p = report["problems"][0]
    return f"[{p['side']}] {p['where']}: {p['message']}"


if __name__ == "__main__":
    raise SystemExit(main())
