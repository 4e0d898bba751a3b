"""The shared pieces of `mrgrpo upstream`: constants, Problem, resolving 'module:qualname' paths, the Context."""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PIN_FILE = "REQUIRED_VERL.txt"
RECIPE_CONFIG_DIR = Path("recipe") / "mrgrpo" / "config"
RECIPE_CONFIG_NAME = "mrgrpo_trainer"
VERL_CONFIG_MODULE = "verl.trainer.config"
VERL_SEARCHPATH = "pkg://verl.trainer.config"
VERL_DEFAULT_CONFIG = "ppo_trainer"
# `compose("ppo_trainer")` fails while actor_rollout_ref.rollout.name is `???`; both sides get the same value.
DEFAULT_ROLLOUT_NAME = "vllm"

EXIT_OK = 0
EXIT_DRIFT = 1


# --------------------------------------------------------------------------------------------------------------------
# problems and objects


@dataclass(frozen=True)
class Problem:
    """One reason the report is not clean.

    side: "verl" (the installed verl no longer has what mrgrpo relies on), "mrgrpo" (our object is missing or does
    not fit), "recipe" (the recipe config does not point at our object, or does not compose), "pin" (versions).
    """

    side: str
    where: str
    message: str
    missing: bool = False  # the object does not exist at all (as opposed to: exists but does not fit)

    def as_dict(self) -> dict[str, Any]:
        return {"side": self.side, "where": self.where, "message": self.message, "missing": self.missing}

    def __str__(self) -> str:
        return f"[{self.side}] {self.where}: {self.message}"


class Unresolved(Exception):
    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


def _side_of(path: str) -> str:
    return "mrgrpo" if path.split(".", 1)[0].split(":", 1)[0] == "mrgrpo" else "verl"


def dotted(path: str) -> str:
    """'pkg.mod:Cls.attr' -> 'pkg.mod.Cls.attr' (anything else, e.g. a pkg:// or file path, as is)."""
    return path.replace(":", ".") if re.fullmatch(r"[\w.]+:[\w.]+", path) else path


def resolve(path: str) -> Any:
    """Import 'pkg.module:Qual.name' (or a bare module 'pkg.module'); raise Unresolved naming what is missing."""
    module_name, _, qualname = path.partition(":")
    side = _side_of(path)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        missing = e.name is not None and (module_name == e.name or module_name.startswith(e.name + "."))
        what = "module not found" if missing else f"import failed: {type(e).__name__}: {e}"
        raise Unresolved(Problem(side, module_name, what, missing=missing)) from e
    except Exception as e:  # an import-time error inside the module: report it, do not crash the report
        raise Unresolved(Problem(side, module_name, f"import failed: {type(e).__name__}: {e}")) from e
    seen = module_name
    for part in filter(None, qualname.split(".")):
        if not hasattr(obj, part):
            raise Unresolved(Problem(side, f"{seen}.{part}", f"missing (no attribute {part!r} on {seen})", True))
        obj = getattr(obj, part)
        seen = f"{seen}.{part}"
    return obj


def location(obj: Any) -> str:
    """'verl/experimental/agent_loop/agent_loop.py:AgentLoopWorker._postprocess (line 1057)' for a function/class."""
    if inspect.ismodule(obj):
        src = Path(obj.__file__ or "?")
        top = obj.__name__.split(".", 1)[0]
        return str(Path(*src.parts[src.parts.index(top) :])) if top in src.parts else str(src)
    target = inspect.unwrap(obj.__func__ if inspect.ismethod(obj) else obj)
    try:
        src = Path(inspect.getsourcefile(target) or "")
        line = inspect.getsourcelines(target)[1]
    except (TypeError, OSError):
        return getattr(target, "__qualname__", repr(target))
    top = getattr(target, "__module__", "").split(".", 1)[0]
    parts = src.parts
    rel = str(Path(*parts[parts.index(top) :])) if top in parts else str(src)
    return f"{rel}:{getattr(target, '__qualname__', '?')} (line {line})"


def _source(obj: Any) -> str:
    target = inspect.unwrap(obj.__func__ if inspect.ismethod(obj) else obj)
    return inspect.getsource(target)


# --------------------------------------------------------------------------------------------------------------------
# context: the recipe and verl's default config, composed once


@dataclass
class Context:
    repo_root: Path | None
    recipe_dir: Path | None
    rollout_name: str = DEFAULT_ROLLOUT_NAME
    overrides: tuple[str, ...] = ()
    _recipe: Any = None
    _recipe_error: str | None = None
    _default: Any = None
    _default_error: str | None = None
    _composed: bool = False

    def _compose(self) -> None:
        if self._composed:
            return
        self._composed = True
        from hydra import compose, initialize_config_dir, initialize_config_module

        base = [f"actor_rollout_ref.rollout.name={self.rollout_name}"]
        try:
            with initialize_config_module(config_module=VERL_CONFIG_MODULE, version_base=None):
                self._default = compose(VERL_DEFAULT_CONFIG, overrides=base)
        except Exception as e:
            self._default_error = f"{type(e).__name__}: {e}"
        if self.recipe_dir is None:
            self._recipe_error = "recipe config directory not found (pass --recipe-dir)"
            return
        try:
            with initialize_config_dir(config_dir=str(self.recipe_dir), version_base=None):
                self._recipe = compose(RECIPE_CONFIG_NAME, overrides=base + list(self.overrides))
        except Exception as e:
            self._recipe_error = f"{type(e).__name__}: {e}"

    @property
    def recipe(self) -> Any:
        self._compose()
        return self._recipe

    @property
    def recipe_error(self) -> str | None:
        self._compose()
        return self._recipe_error

    @property
    def default(self) -> Any:
        self._compose()
        return self._default

    @property
    def default_error(self) -> str | None:
        self._compose()
        return self._default_error

    @property
    def recipe_yaml(self) -> Path | None:
        return None if self.recipe_dir is None else self.recipe_dir / f"{RECIPE_CONFIG_NAME}.yaml"

    def find_file(self, value: str) -> Path | None:
        """A file path from the config: absolute, relative to cwd, the repo root or the recipe dir."""
        p = Path(value)
        candidates = [p] if p.is_absolute() else [Path.cwd() / p]
        if not p.is_absolute():
            candidates += [root / p for root in (self.repo_root, self.recipe_dir) if root is not None]
            if self.recipe_dir is not None:
                candidates.append(self.recipe_dir / p.name)
        return next((c for c in candidates if c.is_file()), None)


def _select(cfg: Any, key: str) -> Any:
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(cfg, key, throw_on_missing=False)
    except Exception:  # an interpolation that does not resolve: show it raw
        return OmegaConf.select(cfg, key, throw_on_resolution_failure=False)
