"""Checks of the recipe config and of verl's default config (they read ctx.recipe / ctx.default)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from mrgrpo.upstream.checks import Check
from mrgrpo.upstream.core import (
    VERL_DEFAULT_CONFIG,
    VERL_SEARCHPATH,
    Context,
    Problem,
    Unresolved,
    _select,
    dotted,
    resolve,
)


@dataclass(frozen=True)
class RecipeValue(Check):
    """The recipe config sets key to value (the pointer from verl's config to our object)."""

    key: str
    value: Any

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"recipe sets {self.key}={self.value}"

    def run(self, ctx: Context) -> list[Problem]:
        if ctx.recipe is None:
            return []
        got = _select(ctx.recipe, self.key)
        if got == self.value:
            return []
        return [Problem("recipe", self.key, f"is {got!r}, expected {self.value!r}")]


@dataclass(frozen=True)
class RecipeLoads(Check):
    """What the recipe names ({path, name} keys) loads through verl's own loader and is an mrgrpo object."""

    path_key: str
    name_key: str
    call_kwargs: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.name_key

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"verl's load_extern_object(<recipe {self.path_key}>, <recipe {self.name_key}>) gives an mrgrpo object"

    def run(self, ctx: Context) -> list[Problem]:
        if ctx.recipe is None:
            return []
        path, name = _select(ctx.recipe, self.path_key), _select(ctx.recipe, self.name_key)
        try:
            loader = resolve("verl.utils.import_utils:load_extern_object")
        except Unresolved as e:
            return [e.problem]
        try:
            obj = loader(module_path=path, object_name=name)
        except Exception as e:
            return [Problem("recipe", f"{self.path_key}={path} {self.name_key}={name}", f"{type(e).__name__}: {e}")]
        if not str(getattr(obj, "__module__", "")).startswith("mrgrpo"):
            return [Problem("recipe", self.name_key, f"{path}:{name} is {obj!r}, not an mrgrpo object")]
        if self.call_kwargs:
            try:
                inspect.signature(obj).bind(**{k: None for k in self.call_kwargs})
            except (TypeError, ValueError) as e:
                return [Problem("mrgrpo", f"{path}:{name}", f"does not accept verl's call: {e}")]
        return []


@dataclass(frozen=True)
class RecipeHasKey(Check):
    """The recipe config declares key (verl's config is struct: an undeclared key is rejected on the command line)."""

    key: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"recipe declares {self.key}"

    def run(self, ctx: Context) -> list[Problem]:
        from omegaconf import OmegaConf

        if ctx.recipe is None:
            return []
        parent, _, leaf = self.key.rpartition(".")
        node = OmegaConf.select(ctx.recipe, parent, throw_on_missing=False) if parent else ctx.recipe
        if node is None or not hasattr(node, "keys") or leaf not in node:
            return [Problem("recipe", self.key, "not declared in the recipe config")]
        return []


@dataclass(frozen=True)
class RecipeKeyExists(Check):
    """verl's default config still has the key (so the recipe's setting is not silently ignored)."""

    key: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"verl's {VERL_DEFAULT_CONFIG} has {self.key}"

    def run(self, ctx: Context) -> list[Problem]:
        from omegaconf import OmegaConf

        if ctx.default is None:
            return [Problem("verl", VERL_DEFAULT_CONFIG, f"does not compose: {ctx.default_error}")]
        parent, _, leaf = self.key.rpartition(".")
        node = OmegaConf.select(ctx.default, parent, throw_on_missing=False) if parent else ctx.default
        if node is None or not hasattr(node, "keys") or leaf not in node:
            return [Problem("verl", self.key, f"not a key of verl's {VERL_DEFAULT_CONFIG} any more", True)]
        return []


@dataclass(frozen=True)
class RecipeAgentLoopYaml(Check):
    """The agent loop yaml the recipe names exists and has an entry whose _target_ is our class."""

    key: str
    target: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"the yaml at {self.key} lists _target_: {dotted(self.target)}"

    def run(self, ctx: Context) -> list[Problem]:
        from omegaconf import OmegaConf

        if ctx.recipe is None:
            return []
        value = _select(ctx.recipe, self.key)
        if not value:
            return [Problem("recipe", self.key, "is not set")]
        path = ctx.find_file(str(value))
        if path is None:
            return [Problem("recipe", self.key, f"{value!r} is not a file (relative paths: cwd, repo root)")]
        entries = OmegaConf.to_container(OmegaConf.load(path))
        targets = [e.get("_target_") for e in entries or [] if isinstance(e, dict)]
        if dotted(self.target) not in targets:
            return [Problem("recipe", str(path), f"no entry with _target_: {dotted(self.target)} (found {targets})")]
        return []


@dataclass(frozen=True)
class RecipeSearchpath(Check):
    @property
    def description(self) -> str:  # type: ignore[override]
        return f"recipe yaml: hydra.searchpath has {VERL_SEARCHPATH}, defaults has {VERL_DEFAULT_CONFIG}"

    def run(self, ctx: Context) -> list[Problem]:
        from omegaconf import OmegaConf

        path = ctx.recipe_yaml
        if path is None or not path.is_file():
            return []
        raw = OmegaConf.load(path)
        out = []
        searchpath = list(OmegaConf.select(raw, "hydra.searchpath") or [])
        if VERL_SEARCHPATH not in searchpath:
            out.append(Problem("recipe", f"{path.name}: hydra.searchpath", f"{searchpath} lacks {VERL_SEARCHPATH}"))
        defaults = [str(d) for d in (raw.get("defaults") or [])]
        if VERL_DEFAULT_CONFIG not in defaults:
            out.append(Problem("recipe", f"{path.name}: defaults", f"{defaults} lacks {VERL_DEFAULT_CONFIG}"))
        if ctx.recipe_error:
            out.append(Problem("recipe", path.name, f"does not compose: {ctx.recipe_error}"))
        return out


@dataclass(frozen=True)
class RecipeResolves(Check):
    """The recipe's value for key names something verl can resolve (e.g. a registered estimator)."""

    key: str
    resolver: str  # verl function taking the value
    fallback: Any = None

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"{dotted(self.resolver)}(<recipe {self.key}>) resolves"

    def run(self, ctx: Context) -> list[Problem]:
        cfg = ctx.recipe if ctx.recipe is not None else None
        value = _select(cfg, self.key) if cfg is not None else self.fallback
        if value is None:
            value = self.fallback
        try:
            fn = resolve(self.resolver)
        except Unresolved as e:
            return [e.problem]
        try:
            fn(value)
        except Exception as e:
            return [Problem("verl", dotted(self.resolver), f"{value!r} does not resolve: {type(e).__name__}: {e}")]
        return []
