"""The report: run every check into one dict (build_report), and render it as text (render_text)."""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterable
from typing import Any

from mrgrpo.upstream.checks import Check
from mrgrpo.upstream.core import (
    EXIT_DRIFT,
    EXIT_OK,
    PIN_FILE,
    VERL_DEFAULT_CONFIG,
    Context,
    Problem,
    Unresolved,
    _select,
    dotted,
    location,
    resolve,
)
from mrgrpo.upstream.delta import config_delta, version_problems, versions
from mrgrpo.upstream.points import EXTENSION_POINTS, FORK_EDITS, ExtensionPoint

# --------------------------------------------------------------------------------------------------------------------
# the report


def _run_checks(checks: Iterable[Check], ctx: Context) -> tuple[list[dict[str, Any]], list[Problem]]:
    rows, problems = [], []
    for check in checks:
        found = check.run(ctx)
        problems.extend(found)
        rows.append({"check": check.description, "ok": not found, "problems": [p.as_dict() for p in found]})
    return rows, problems


def _dedupe(problems: Iterable[Problem]) -> list[Problem]:
    seen, out = set(), []
    for p in problems:
        if (p.side, p.where, p.message) not in seen:
            seen.add((p.side, p.where, p.message))
            out.append(p)
    return out


def _status(problems: list[Problem]) -> str:
    if not problems:
        return "ok"
    if any(p.side == "verl" for p in problems):
        return "drift"
    if any(p.side == "mrgrpo" and p.missing for p in problems):
        return "missing"
    if any(p.side == "mrgrpo" for p in problems):
        return "broken"
    return "recipe"


def _recipe_values(ep: ExtensionPoint, ctx: Context) -> dict[str, Any]:
    if ctx.recipe is None:
        return {}
    keys = [c.key for c in ep.recipe_checks if hasattr(c, "key")]
    if not keys and ep.key.count(".") and not ep.key.startswith(("entry point", "hydra")):
        keys = [ep.key]
    return {k: _select(ctx.recipe, k) for k in keys}


def build_report(ctx: Context, allow_version_mismatch: bool = False, resolve_values: bool = False) -> dict[str, Any]:
    ver = versions(ctx.repo_root)
    all_problems = version_problems(ver, allow_version_mismatch)

    points = []
    for ep in EXTENSION_POINTS:
        v_rows, v_problems = _run_checks(ep.verl_checks, ctx)
        o_rows, o_problems = _run_checks(ep.ours_checks, ctx)
        r_rows, r_problems = _run_checks(ep.recipe_checks, ctx)
        problems = _dedupe(v_problems + o_problems + r_problems)
        all_problems += problems
        verl_where = ep.verl
        if re.fullmatch(r"[\w.]+(:[\w.]+)?", ep.verl):
            try:
                verl_where = location(resolve(ep.verl))
            except Unresolved:
                verl_where = "missing"
        points.append(
            {
                "key": ep.key,
                "ours": dotted(ep.ours) if ep.ours else None,
                "verl": dotted(ep.verl),
                "verl_location": verl_where,
                "how": ep.how,
                "status": _status(problems),
                "verl_ok": not any(p.side == "verl" for p in problems),
                "ours_ok": not any(p.side == "mrgrpo" for p in problems),
                "recipe_ok": not any(p.side == "recipe" for p in problems),
                "recipe": _recipe_values(ep, ctx),
                "checks": v_rows + o_rows + r_rows,
                "problems": [p.as_dict() for p in problems],
            }
        )

    edits = []
    for fe in FORK_EDITS:
        rows, problems = _run_checks(fe.checks, ctx)
        problems = _dedupe(problems)
        all_problems += problems
        upstream = []
        for path in fe.upstream:
            try:
                upstream.append({"object": dotted(path), "location": location(resolve(path))})
            except Unresolved as e:
                upstream.append({"object": dotted(path), "location": "missing"})
                problems.append(e.problem)
                all_problems.append(e.problem)
        edits.append(
            {
                "number": fe.number,
                "fork_change": fe.fork_change,
                "replacement": fe.replacement,
                "upstream": upstream,
                "status": _status(problems),
                "checks": rows,
                "problems": [p.as_dict() for p in problems],
            }
        )

    delta = config_delta(ctx, resolve_values)
    if delta["status"] == "error":
        all_problems.append(Problem("recipe", "config delta", str(delta.get("reason"))))

    all_problems = _dedupe(all_problems)
    code = EXIT_DRIFT if all_problems else EXIT_OK
    return {
        "ok": not all_problems,
        "exit_code": code,
        "verl": ver,
        "extension_points": points,
        "fork_edits": edits,
        "config_delta": delta,
        "problems": [p.as_dict() for p in all_problems],
    }


# --------------------------------------------------------------------------------------------------------------------
# text rendering


def _short(value: Any, width: int = 90) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else value
    return text if len(text) <= width else text[: width - 3] + "..."


def _wrap(prefix: str, text: str, width: int = 116) -> list[str]:
    indent = " " * len(prefix)
    return textwrap.wrap(text, width=width, initial_indent=prefix, subsequent_indent=indent, break_on_hyphens=False)


def render_text(report: dict[str, Any], full: bool = False) -> str:
    width = 10_000 if full else 90
    v = report["verl"]
    lines = ["mrgrpo upstream: how mrgrpo plugs into the installed verl", ""]
    pin_src = []
    if v["pin_file_version"]:
        pin_src.append(f"{PIN_FILE}: {v['pin_file_version']}")
    if v["metadata_version"]:
        pin_src.append(f"mrgrpo metadata: {v['metadata_version']}")
    lines.append(f"verl pinned:    {v['pinned'] or '?'}  ({'; '.join(pin_src) or 'no pin found'})")
    lines.append(f"verl installed: {v['installed'] or 'not installed'}  ({v['location'] or '-'})")
    lines += ["", "Extension points (config key -> our object)"]
    for ep in report["extension_points"]:
        ours = ep["ours"] or "(upstream, as is)"
        lines.append(f"  [{ep['status'].upper():7}] {ep['key']} -> {ours}")
        where = "" if ep["verl_location"] == ep["verl"] else f"  [{ep['verl_location']}]"
        lines.append(f"            verl: {ep['verl']}{where}")
        lines += _wrap("            how:  ", ep["how"])
        for k, val in ep["recipe"].items():
            lines.append(f"            recipe: {k} = {_short(val, width)}")
        for p in ep["problems"]:
            lines.append(f"            !! [{p['side']}] {p['where']}: {p['message']}")
        if full:
            for row in ep["checks"]:
                lines.append(f"            {'ok ' if row['ok'] else 'BAD'} {row['check']}")
    lines += ["", "The original fork's in-place edits, and what replaces each"]
    for fe in report["fork_edits"]:
        lines += _wrap(f"  {fe['number']}. [{fe['status'].upper()}] fork: ", fe["fork_change"])
        lines += _wrap("     now:  ", fe["replacement"])
        for up in fe["upstream"]:
            lines.append(f"     upstream: {up['location']}")
        for p in fe["problems"]:
            lines.append(f"     !! [{p['side']}] {p['where']}: {p['message']}")
    d = report["config_delta"]
    lines += ["", f"Recipe config vs verl's {VERL_DEFAULT_CONFIG} ({d['status']})"]
    if d["status"] != "ok":
        lines.append(f"  {d.get('reason')}")
    else:
        lines.append(f"  recipe: {d['recipe_config']}")
        values = "resolved" if d["resolved"] else "raw (interpolations shown as written)"
        lines.append(f"  both composed with: {' '.join(d['overrides'])}; values {values}")
        lines.append(f"  changed ({len(d['changed'])}):")
        lines += [f"    {k}: {_short(a, width // 2)} -> {_short(b, width // 2)}" for k, (a, b) in d["changed"].items()]
        lines.append(f"  added ({len(d['added'])}):")
        lines += [f"    {k} = {_short(val, width)}" for k, val in d["added"].items()]
        lines.append(f"  removed ({len(d['removed'])}):")
        lines += [f"    {k} (was {_short(val, width)})" for k, val in d["removed"].items()]
    lines.append("")
    if report["ok"]:
        lines.append("RESULT: OK - the installed verl has every extension point mrgrpo uses")
    else:
        lines.append(f"RESULT: FAILED - {len(report['problems'])} problem(s):")
        lines += [f"  - [{p['side']}] {p['where']}: {p['message']}" for p in report["problems"]]
    return "\n".join(lines)
