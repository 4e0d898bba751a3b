"""The pinned and installed verl versions, and the recipe config's delta against verl's default ppo_trainer."""

from __future__ import annotations

import importlib.metadata as metadata
import re
from pathlib import Path
from typing import Any

from mrgrpo.upstream.core import PIN_FILE, VERL_DEFAULT_CONFIG, VERL_SEARCHPATH, Context, Problem, Unresolved, resolve

# --------------------------------------------------------------------------------------------------------------------
# versions


def _parse_pin(text: str) -> str | None:
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.fullmatch(r"verl(?:\[[^\]]*\])?\s*==\s*([\w.+-]+)", line)
        if m:
            return m.group(1)
    return None


def versions(repo_root: Path | None) -> dict[str, Any]:
    out: dict[str, Any] = {"pin_file": None, "pin_file_version": None, "metadata_version": None}
    if repo_root is not None and (repo_root / PIN_FILE).is_file():
        out["pin_file"] = str(repo_root / PIN_FILE)
        out["pin_file_version"] = _parse_pin((repo_root / PIN_FILE).read_text(encoding="utf-8"))
    try:
        reqs = metadata.requires("mrgrpo") or []
    except metadata.PackageNotFoundError:
        reqs = []
    for req in reqs:
        pin = _parse_pin(req.split(";", 1)[0])
        if pin:
            out["metadata_version"] = pin
            break
    out["pinned"] = out["pin_file_version"] or out["metadata_version"]
    try:
        out["installed"] = metadata.version("verl")
    except metadata.PackageNotFoundError:
        out["installed"] = None
    try:
        out["location"] = str(Path(resolve("verl").__file__).parent)
    except Unresolved:
        out["location"] = None
    return out


def version_problems(info: dict[str, Any], allow_mismatch: bool) -> list[Problem]:
    out = []
    a, b = info["pin_file_version"], info["metadata_version"]
    if a and b and a != b:
        out.append(Problem("pin", PIN_FILE, f"pins verl=={a} but mrgrpo's package metadata pins verl=={b}"))
    if not info["pinned"]:
        out.append(Problem("pin", "mrgrpo", f"no verl pin found ({PIN_FILE} or package metadata)"))
    if info["installed"] is None:
        out.append(Problem("verl", "verl", "not installed", True))
    elif info["pinned"] and info["installed"] != info["pinned"] and not allow_mismatch:
        out.append(
            Problem(
                "pin",
                "verl",
                f"installed {info['installed']} but mrgrpo pins {info['pinned']} "
                "(--allow-version-mismatch to check the extension points of another verl anyway)",
            )
        )
    return out


# --------------------------------------------------------------------------------------------------------------------
# config delta


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists are leaves; an empty dict is a leaf {}."""
    if isinstance(node, dict):
        if not node and prefix:
            return {prefix: {}}
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


def _filled(key: str, value: Any, other: dict[str, Any]) -> bool:
    """An empty dict on one side whose keys the other side fills in is not a removal (the keys show as added)."""
    return value == {} and any(k.startswith(key + ".") for k in other)


def config_delta(ctx: Context, resolve_values: bool = False) -> dict[str, Any]:
    from omegaconf import OmegaConf

    info: dict[str, Any] = {
        "recipe_config": str(ctx.recipe_yaml) if ctx.recipe_yaml else None,
        "against": f"{VERL_SEARCHPATH}/{VERL_DEFAULT_CONFIG}.yaml",
        "overrides": [f"actor_rollout_ref.rollout.name={ctx.rollout_name}", *ctx.overrides],
        "resolved": resolve_values,
    }
    if ctx.default is None:
        return {**info, "status": "error", "reason": f"verl's {VERL_DEFAULT_CONFIG}: {ctx.default_error}"}
    if ctx.recipe is None:
        missing = ctx.recipe_dir is None or not (ctx.recipe_yaml and ctx.recipe_yaml.is_file())
        status = "skipped" if missing else "error"
        reason = "recipe config not found (pass --recipe-dir)" if missing else ctx.recipe_error
        return {**info, "status": status, "reason": reason}

    def plain(cfg: Any) -> dict[str, Any]:
        if resolve_values:
            try:
                return flatten(OmegaConf.to_container(cfg, resolve=True))
            except Exception:
                info["resolved"] = False
        return flatten(OmegaConf.to_container(cfg, resolve=False))

    old, new = plain(ctx.default), plain(ctx.recipe)
    changed = {k: [old[k], new[k]] for k in sorted(old.keys() & new.keys()) if old[k] != new[k]}
    added = {k: new[k] for k in sorted(new.keys() - old.keys()) if not _filled(k, new[k], old)}
    removed = {k: old[k] for k in sorted(old.keys() - new.keys()) if not _filled(k, old[k], new)}
    return {**info, "status": "ok", "changed": changed, "added": added, "removed": removed}
