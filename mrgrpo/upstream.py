"""`mrgrpo upstream`: how mrgrpo plugs into the installed verl, whether it still fits, and how the recipe differs.

The original mrGRPO was a fork of verl; its users diffed the fork against upstream to see what they changed.
mrgrpo keeps verl pinned and unedited, so that diff becomes this report:

1. the pinned verl version (REQUIRED_VERL.txt and mrgrpo's package metadata) and the installed one;
2. every extension point mrgrpo uses (verl config key -> our object), each checked against the installed verl:
   the verl object exists, has the signature mrgrpo relies on, and still makes the call mrgrpo expects;
3. the three in-place edits of the original fork and the upstream mechanism that replaces each;
4. the recipe config's delta against verl's default ``ppo_trainer`` (keys changed, added, removed).

Any drift (a missing verl symbol, a changed signature, our object missing or not fitting, a pin that disagrees)
makes the command exit 1 with a message naming the symbol. The checks are data (``EXTENSION_POINTS``,
``FORK_EDITS``): add a row when mrgrpo starts using another verl hook.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata as metadata
import inspect
import json
import os
import re
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable
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


# --------------------------------------------------------------------------------------------------------------------
# checks: small objects with a description and run(ctx) -> list[Problem]


@dataclass(frozen=True)
class Sig:
    """What mrgrpo relies on in a callable's signature."""

    positional: tuple[str, ...] = ()  # the leading parameters (after self/cls), in this order
    keywords: tuple[str, ...] = ()  # named parameters (a **kwargs that would swallow a renamed one does not count)
    defaults: tuple[tuple[str, Any], ...] = ()  # parameters that must have exactly this default
    var_kw: bool = False  # must take **kwargs
    coroutine: bool = False  # must be `async def`

    def describe(self) -> str:
        parts = list(self.positional) + [f"{k}=" for k in self.keywords if k not in self.positional]
        if self.var_kw:
            parts.append("**kwargs")
        return ("async " if self.coroutine else "") + "(" + ", ".join(parts) + ")"


def signature_problems(obj: Any, sig: Sig) -> list[str]:
    """Human messages for every way obj's signature departs from sig (empty when it fits)."""
    func = obj.__init__ if inspect.isclass(obj) else obj
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError) as e:
        return [f"signature not readable: {e}"]
    if params and params[0].name in ("self", "cls") and not inspect.ismethod(func):
        params = params[1:]
    out: list[str] = []
    names = [p.name for p in params]
    kinds = {p.name: p.kind for p in params}
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(positional[: len(sig.positional)]) != sig.positional:
        out.append(f"expected leading parameters {sig.positional}, found {tuple(positional)}")
    for kw in sig.keywords:
        if kw in names and kinds[kw] is not inspect.Parameter.POSITIONAL_ONLY:
            continue
        out.append(f"no keyword parameter {kw!r}")
    for name, default in sig.defaults:
        p = next((q for q in params if q.name == name), None)
        if p is not None and p.default != default:
            shown = "none" if p.default is inspect.Parameter.empty else repr(p.default)
            out.append(f"parameter {name!r} default is {shown}, expected {default!r}")
    if sig.var_kw and not has_var_kw:
        out.append("does not take **kwargs")
    if sig.coroutine and not inspect.iscoroutinefunction(inspect.unwrap(func)):
        out.append("is not `async def`")
    if out:
        out.append(f"expected {sig.describe()}, found {inspect.signature(func)}")
    return out


class Check:
    description: str = ""

    def run(self, ctx: Context) -> list[Problem]:  # pragma: no cover - interface
        raise NotImplementedError


def _guard(path: str, body: Callable[[Any], list[Problem]]) -> list[Problem]:
    try:
        obj = resolve(path)
    except Unresolved as e:
        return [e.problem]
    return body(obj)


@dataclass(frozen=True)
class Exists(Check):
    path: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"{dotted(self.path)} exists"

    def run(self, ctx: Context) -> list[Problem]:
        return _guard(self.path, lambda obj: [])


@dataclass(frozen=True)
class HasSignature(Check):
    path: str
    sig: Sig

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"{dotted(self.path)}{self.sig.describe()}"

    def run(self, ctx: Context) -> list[Problem]:
        side = _side_of(self.path)
        return _guard(
            self.path,
            lambda obj: [Problem(side, dotted(self.path), m) for m in signature_problems(obj, self.sig)],
        )


@dataclass(frozen=True)
class SourceMentions(Check):
    """The function's source still contains each token: how we know verl still makes the call we plug into."""

    path: str
    tokens: tuple[str, ...]
    what: str = ""

    @property
    def description(self) -> str:  # type: ignore[override]
        return self.what or f"{dotted(self.path)} mentions {', '.join(self.tokens)}"

    def run(self, ctx: Context) -> list[Problem]:
        side = _side_of(self.path)

        def body(obj: Any) -> list[Problem]:
            try:
                src = _source(obj)
            except (OSError, TypeError) as e:
                return [Problem(side, dotted(self.path), f"source not readable: {e}")]
            gone = [t for t in self.tokens if t not in src]
            if not gone:
                return []
            why = f" ({self.what})" if self.what else ""
            return [Problem(side, dotted(self.path), f"no longer mentions {', '.join(map(repr, gone))}{why}")]

        return _guard(self.path, body)


@dataclass(frozen=True)
class SubclassOf(Check):
    path: str
    base: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"{dotted(self.path)} subclasses {dotted(self.base)}"

    def run(self, ctx: Context) -> list[Problem]:
        try:
            base = resolve(self.base)
        except Unresolved as e:
            return [e.problem]

        def body(obj: Any) -> list[Problem]:
            if inspect.isclass(obj) and issubclass(obj, base):
                return []
            return [Problem("mrgrpo", dotted(self.path), f"is not a subclass of {dotted(self.base)}")]

        return _guard(self.path, body)


@dataclass(frozen=True)
class AcceptsCall(Check):
    """Our callable accepts the call verl makes (bound by name, as verl calls it)."""

    path: str
    kwargs: tuple[str, ...]
    args: int = 0
    coroutine: bool | None = None
    caller: str = ""

    @property
    def description(self) -> str:  # type: ignore[override]
        call = ", ".join(["<arg>"] * self.args + [f"{k}=" for k in self.kwargs])
        return f"{dotted(self.path)}({call}) as {self.caller or 'verl'} calls it"

    def run(self, ctx: Context) -> list[Problem]:
        def body(obj: Any) -> list[Problem]:
            try:
                inspect.signature(obj).bind(*([None] * self.args), **{k: None for k in self.kwargs})
            except TypeError as e:
                sig = inspect.signature(obj)
                return [Problem("mrgrpo", dotted(self.path), f"does not accept verl's call ({e}); signature {sig}")]
            except ValueError as e:
                return [Problem("mrgrpo", dotted(self.path), f"signature not readable: {e}")]
            if self.coroutine is not None and inspect.iscoroutinefunction(inspect.unwrap(obj)) != self.coroutine:
                want = "async def" if self.coroutine else "a plain def"
                return [Problem("mrgrpo", dotted(self.path), f"must be {want}")]
            return []

        return _guard(self.path, body)


@dataclass(frozen=True)
class HelpersExist(Check):
    """Every `self.<prefix>*` helper our class calls exists on verl's base with a readable signature."""

    path: str
    base: str
    prefix: str = "ct_"

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"the self.{self.prefix}* helpers {dotted(self.path)} calls exist on {dotted(self.base)}"

    def run(self, ctx: Context) -> list[Problem]:
        try:
            base = resolve(self.base)
        except Unresolved as e:
            return [e.problem]

        def body(obj: Any) -> list[Problem]:
            module = sys.modules.get(obj.__module__)
            try:
                src = inspect.getsource(module) if module is not None else _source(obj)
            except (OSError, TypeError):
                return []
            used = sorted(set(re.findall(rf"self\.({re.escape(self.prefix)}\w+)\s*\(", src)))
            own = {n for c in obj.__mro__ if c.__module__.split(".")[0] == "mrgrpo" for n in vars(c)}
            return [
                Problem("verl", f"{dotted(self.base)}.{name}", f"missing; {dotted(self.path)} calls it", True)
                for name in used
                if name not in own and not hasattr(base, name)
            ]

        return _guard(self.path, body)


@dataclass(frozen=True)
class EntryPoint(Check):
    group: str
    name: str
    value: str

    @property
    def description(self) -> str:  # type: ignore[override]
        return f"entry point [{self.group}] {self.name} = {self.value}, loaded by `import verl`"

    def run(self, ctx: Context) -> list[Problem]:
        where = f"entry point {self.group}:{self.name}"
        eps = [ep for ep in metadata.entry_points(group=self.group) if ep.name == self.name]
        if not eps:
            return [Problem("mrgrpo", where, "not registered (is mrgrpo pip-installed? `pip install -e .`)", True)]
        if eps[0].value != self.value:
            return [Problem("mrgrpo", where, f"points at {eps[0].value!r}, expected {self.value!r}")]
        resolve("verl")  # loads the plugins, once per process
        loaded_by_verl = self.value in sys.modules
        try:
            resolve(self.value)
        except Unresolved as e:
            return [e.problem]
        policy = os.getenv("VERL_USE_EXTERNAL_PLUGINS", "auto").strip().lower()
        if policy == "auto" and not loaded_by_verl:
            # verl logs a plugin's load failure at DEBUG only: say it plainly.
            return [Problem("verl", "verl/__init__.py", f"`import verl` did not load {self.value}")]
        return []


@dataclass(frozen=True)
class Behaviour(Check):
    """A small runnable probe of upstream behaviour (no GPU, no Ray)."""

    name: str
    probe: Callable[[], list[Problem]]

    @property
    def description(self) -> str:  # type: ignore[override]
        return self.name

    def run(self, ctx: Context) -> list[Problem]:
        try:
            return self.probe()
        except Unresolved as e:
            return [e.problem]
        except Exception as e:
            return [Problem("verl", self.name, f"probe raised {type(e).__name__}: {e}")]


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


# --------------------------------------------------------------------------------------------------------------------
# behaviour probes of the upstream replacements for the fork's edits


def _run_in_fresh_loop_thread(fn: Callable[[], Any]) -> Any:
    """verl's managers grab `asyncio.get_event_loop()` in __init__: give them a thread of their own."""
    box: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    t = threading.Thread(target=target, name="mrgrpo-upstream-probe")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def probe_score_on_last_valid_token() -> list[Problem]:
    """RewardManagerBase.assemble_rm_scores puts each scalar on the last valid (unpadded) response token."""
    import torch

    base = resolve("verl.experimental.reward_loop.reward_manager.base:RewardManagerBase")
    data_proto = resolve("verl.protocol:DataProto")
    prompts = torch.tensor([[1, 2, 3], [0, 4, 5]])
    responses = torch.tensor([[6, 7, 0, 0], [8, 9, 10, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]])
    data = data_proto.from_dict(tensors={"prompts": prompts, "responses": responses, "attention_mask": attention})
    got = base.assemble_rm_scores(data, [0.5, 1.0])
    want = torch.zeros(2, 4)
    want[0, 1] = 0.5
    want[1, 2] = 1.0
    if tuple(got.shape) != (2, 4) or not torch.equal(got.float(), want):
        where = "verl.experimental.reward_loop.reward_manager.base.RewardManagerBase.assemble_rm_scores"
        return [Problem("verl", where, f"score not on the last valid response token: got {got.tolist()}")]
    return []


def probe_naive_manager_call() -> list[Problem]:
    """The naive reward manager calls compute_score(data_source=, solution_str=, ground_truth=, extra_info=) and
    returns {"reward_score", "reward_extra_info"}; extra_info carries the agent loop's extra_fields."""
    import numpy as np
    import torch

    where = "verl.experimental.reward_loop.reward_manager.naive.NaiveRewardManager.run_single"
    registry = resolve("verl.experimental.reward_loop.reward_manager:get_reward_manager_cls")
    naive = resolve("verl.experimental.reward_loop.reward_manager.naive:NaiveRewardManager")
    data_proto = resolve("verl.protocol:DataProto")
    problems: list[Problem] = []
    if registry("naive") is not naive:
        problems.append(Problem("verl", "reward manager 'naive'", f"is {registry('naive')!r}, not NaiveRewardManager"))

    calls: list[dict[str, Any]] = []

    def fake_score(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"score": 0.75, "acc": 1.0, "verdict": "AC"}

    class FakeTokenizer:
        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return "|".join(str(int(i)) for i in ids)

    probe_cls = type("_MrgrpoProbeNaive", (naive,), {})  # keeps class-level state off verl's own class
    data = data_proto.from_dict(
        tensors={
            "prompts": torch.tensor([[1, 2]]),
            "responses": torch.tensor([[3, 4, 0]]),
            "attention_mask": torch.tensor([[1, 1, 1, 1, 0]]),
        },
        non_tensors={
            "data_source": np.array(["apps_plus"], dtype=object),
            "reward_model": np.array([{"ground_truth": "GT", "style": "rule"}], dtype=object),
            "extra_info": np.array([{"index": 7}], dtype=object),
            "tool_extra_fields": np.array([{"final_code": "print(1)"}], dtype=object),
        },
    )

    def run() -> Any:
        manager = probe_cls(config=None, tokenizer=FakeTokenizer(), compute_score=fake_score)
        return manager.loop.run_until_complete(manager.run_single(data))

    result = _run_in_fresh_loop_thread(run)
    if len(calls) != 1:
        return problems + [Problem("verl", where, f"called compute_score {len(calls)} times, expected once")]
    call = calls[0]
    want = {"data_source", "solution_str", "ground_truth", "extra_info"}
    if not want <= set(call):
        problems.append(Problem("verl", where, f"compute_score called with {sorted(call)}, expected {sorted(want)}"))
    else:
        if call["data_source"] != "apps_plus" or call["ground_truth"] != "GT" or call["solution_str"] != "3|4":
            problems.append(Problem("verl", where, f"unexpected compute_score arguments {call}"))
        if (call["extra_info"] or {}).get("final_code") != "print(1)":
            problems.append(Problem("verl", where, "the agent loop's extra_fields no longer reach extra_info"))
    if not isinstance(result, dict) or set(result) != {"reward_score", "reward_extra_info"}:
        problems.append(Problem("verl", where, f"returned {result!r}, expected reward_score + reward_extra_info"))
    elif result["reward_score"] != 0.75 or result["reward_extra_info"].get("verdict") != "AC":
        problems.append(Problem("verl", where, f"score dict not passed through: {result!r}"))
    return problems


# --------------------------------------------------------------------------------------------------------------------
# the tables


@dataclass(frozen=True)
class ExtensionPoint:
    key: str  # the verl config key (or mechanism) that names our object
    ours: str | None  # our object, 'module:qualname'; None when mrgrpo uses the upstream object as is
    verl: str  # the verl object it plugs into
    how: str  # one line: how verl reaches it
    verl_checks: tuple[Check, ...] = ()
    ours_checks: tuple[Check, ...] = ()
    recipe_checks: tuple[Check, ...] = ()


@dataclass(frozen=True)
class ForkEdit:
    number: int
    fork_change: str  # what the original fork edited in place
    replacement: str  # how mrgrpo gets the same behaviour from pinned, unedited verl
    upstream: tuple[str, ...]  # the verl objects that now provide it ('module:qualname'), reported as file:function
    checks: tuple[Check, ...] = ()


RLHF = "verl.utils.dataset.rl_dataset:RLHFDataset"
AGENT_BASE = "verl.experimental.agent_loop.agent_loop:AgentLoopBase"
AGENT_WORKER = "verl.experimental.agent_loop.agent_loop:AgentLoopWorker"
NAIVE = "verl.experimental.reward_loop.reward_manager.naive:NaiveRewardManager"
OUR_DATASET = "mrgrpo.dataset:MrGRPODataset"
OUR_SCORE = "mrgrpo.reward:compute_score"
OUR_LOOP = "mrgrpo.agent_loop:PlanCodeAgentLoop"
OUR_PLUGIN = "mrgrpo.plugin"

# The keyword arguments verl passes when it builds an agent loop (AgentLoopWorker._run_agent_loop).
AGENT_LOOP_INIT_KWARGS = (
    "trainer_config",
    "server_manager",
    "tokenizer",
    "processor",
    "hf_model_type",
    "dataset_cls",
    "data_config",
    "tools",
)
DATASET_CALL_KWARGS = ("data_files", "tokenizer", "processor", "config", "max_samples")
SCORE_CALL_KWARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# A few of the dataset columns verl passes to AgentLoopBase.run as keywords (every column of the row is passed).
ROW_KWARGS = ("raw_prompt", "extra_info", "reward_model", "data_source", "uid")

EXTENSION_POINTS: tuple[ExtensionPoint, ...] = (
    ExtensionPoint(
        key="data.custom_cls",
        ours=OUR_DATASET,
        verl=RLHF,
        how="verl.utils.dataset.rl_dataset.get_dataset_class loads data.custom_cls.{path,name}; "
        "verl.trainer.ppo.utils.create_rl_dataset instantiates it",
        verl_checks=(
            HasSignature(
                RLHF,
                Sig(
                    positional=("data_files", "tokenizer", "config", "processor", "max_samples"),
                    defaults=(("processor", None), ("max_samples", -1)),
                ),
            ),
            HasSignature("verl.utils.dataset.rl_dataset:get_dataset_class", Sig(positional=("data_config",))),
            SourceMentions(
                "verl.utils.dataset.rl_dataset:get_dataset_class",
                ("custom_cls", "load_extern_object"),
                "reads data.custom_cls and loads it",
            ),
            SourceMentions(
                "verl.trainer.ppo.utils:create_rl_dataset",
                tuple(f"{k}=" for k in DATASET_CALL_KWARGS),
                "instantiates the dataset class with these keywords",
            ),
            Exists(f"{RLHF}.maybe_filter_out_long_prompts"),
            Exists(f"{RLHF}._read_files_and_tokenize"),
            RecipeKeyExists("data.custom_cls.path"),
            RecipeKeyExists("data.custom_cls.name"),
        ),
        ours_checks=(
            SubclassOf(OUR_DATASET, RLHF),
            AcceptsCall(OUR_DATASET, DATASET_CALL_KWARGS, caller="create_rl_dataset"),
        ),
        recipe_checks=(
            RecipeValue("data.custom_cls.path", "pkg://mrgrpo.dataset"),
            RecipeValue("data.custom_cls.name", "MrGRPODataset"),
            RecipeLoads("data.custom_cls.path", "data.custom_cls.name", DATASET_CALL_KWARGS),
        ),
    ),
    ExtensionPoint(
        key="reward.custom_reward_function",
        ours=OUR_SCORE,
        verl="verl.trainer.ppo.reward:get_custom_reward_fn",
        how="get_custom_reward_fn reads reward.custom_reward_function.{path,name,reward_kwargs} and loads the "
        "function with verl.utils.import_utils.load_extern_object (pkg:// = plain import)",
        verl_checks=(
            HasSignature("verl.trainer.ppo.reward:get_custom_reward_fn", Sig(positional=("config",))),
            SourceMentions(
                "verl.trainer.ppo.reward:get_custom_reward_fn",
                ('"custom_reward_function"', '"path"', '"name"', '"reward_kwargs"', "load_extern_object"),
                "reads reward.custom_reward_function.{path,name,reward_kwargs}",
            ),
            HasSignature("verl.utils.import_utils:load_extern_object", Sig(positional=("module_path", "object_name"))),
            SourceMentions("verl.utils.import_utils:load_module", ("PKG_PATH_PREFIX",), "supports pkg:// paths"),
            RecipeKeyExists("reward.custom_reward_function.path"),
            RecipeKeyExists("reward.custom_reward_function.name"),
        ),
        ours_checks=(AcceptsCall(OUR_SCORE, SCORE_CALL_KWARGS, caller="NaiveRewardManager.run_single"),),
        recipe_checks=(
            # pkg:// (a plain, cached import); the name may be compute_score or its async twin.
            RecipeValue("reward.custom_reward_function.path", "pkg://mrgrpo.reward"),
            RecipeLoads("reward.custom_reward_function.path", "reward.custom_reward_function.name", SCORE_CALL_KWARGS),
        ),
    ),
    ExtensionPoint(
        key="reward.reward_manager.name",
        ours=None,
        verl=NAIVE,
        how="the reward loop builds the registered manager (upstream 'naive'), which calls our compute_score",
        verl_checks=(
            HasSignature(NAIVE, Sig(positional=("config", "tokenizer", "compute_score"))),
            HasSignature(f"{NAIVE}.run_single", Sig(positional=("data",), coroutine=True)),
            SourceMentions(
                f"{NAIVE}.run_single",
                tuple(f"{k}=" for k in SCORE_CALL_KWARGS) + ('"reward_score"', '"reward_extra_info"'),
                "calls compute_score by keyword and returns reward_score/reward_extra_info",
            ),
            RecipeResolves(
                "reward.reward_manager.name",
                "verl.experimental.reward_loop.reward_manager:get_reward_manager_cls",
                fallback="naive",
            ),
        ),
    ),
    ExtensionPoint(
        key="actor_rollout_ref.rollout.agent.agent_loop_config_path",
        ours=OUR_LOOP,
        verl=AGENT_BASE,
        how="AgentLoopWorker loads the yaml (entries name/_target_) and hydra-instantiates the loop per trajectory, "
        "then awaits loop.run(sampling_params, **row)",
        verl_checks=(
            HasSignature(f"{AGENT_BASE}.run", Sig(positional=("sampling_params",), var_kw=True, coroutine=True)),
            HasSignature(
                AGENT_BASE,
                Sig(
                    positional=(
                        "trainer_config",
                        "server_manager",
                        "tokenizer",
                        "processor",
                        "dataset_cls",
                        "data_config",
                        "hf_model_type",
                    ),
                    var_kw=True,
                ),
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_build_initial_tokens", Sig(positional=("messages", "tools"), coroutine=True)
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_merge_assistant_token",
                Sig(
                    positional=(
                        "runtime_token_ids",
                        "assistant_token_ids",
                        "response_mask",
                        "response_logprobs",
                        "assistant_logprobs",
                    ),
                    coroutine=True,
                ),
            ),
            HasSignature(
                f"{AGENT_BASE}.ct_merge_context_msg",
                Sig(
                    positional=(
                        "previous_messages",
                        "updated_messages",
                        "runtime_token_ids",
                        "response_mask",
                        "response_logprobs",
                        "tools",
                    ),
                    coroutine=True,
                ),
            ),
            HasSignature(
                "verl.workers.rollout.llm_server:LLMServerClient.generate",
                Sig(positional=("request_id",), keywords=("prompt_ids", "sampling_params"), coroutine=True),
            ),
            SourceMentions(f"{AGENT_WORKER}.__init__", ("agent_loop_config_path",), "loads the agent loop yaml"),
            SourceMentions(
                f"{AGENT_WORKER}._run_agent_loop",
                tuple(f"{k}=" for k in AGENT_LOOP_INIT_KWARGS) + (".run(sampling_params",),
                "instantiates the loop with these keywords and awaits run()",
            ),
            Exists("verl.experimental.agent_loop.agent_loop:AgentLoopOutput"),
            RecipeKeyExists("actor_rollout_ref.rollout.agent.agent_loop_config_path"),
            RecipeKeyExists("actor_rollout_ref.rollout.agent.default_agent_loop"),
        ),
        ours_checks=(
            SubclassOf(OUR_LOOP, AGENT_BASE),
            AcceptsCall(OUR_LOOP, AGENT_LOOP_INIT_KWARGS, caller="AgentLoopWorker._run_agent_loop"),
            # run is looked up on the class: the first positional is self, the second sampling_params.
            AcceptsCall(f"{OUR_LOOP}.run", ROW_KWARGS, args=2, coroutine=True, caller="AgentLoopWorker"),
            HelpersExist(OUR_LOOP, AGENT_BASE, "ct_"),
        ),
        recipe_checks=(RecipeAgentLoopYaml("actor_rollout_ref.rollout.agent.agent_loop_config_path", OUR_LOOP),),
    ),
    ExtensionPoint(
        key="entry point verl.plugins",
        ours=OUR_PLUGIN,
        verl="verl",
        how="every `import verl` (driver, TaskRunner, every Ray worker) imports the entry points of group "
        "verl.plugins unless VERL_USE_EXTERNAL_PLUGINS=none; failures are logged at DEBUG only",
        verl_checks=(
            Behaviour("verl/__init__.py loads group verl.plugins", lambda: _verl_init_mentions("verl.plugins")),
        ),
        ours_checks=(EntryPoint("verl.plugins", "mrgrpo", OUR_PLUGIN),),
    ),
    ExtensionPoint(
        key="hydra.searchpath",
        ours=f"{RECIPE_CONFIG_DIR / RECIPE_CONFIG_NAME}.yaml",
        verl=f"{VERL_SEARCHPATH}/{VERL_DEFAULT_CONFIG}.yaml",
        how=f"the recipe yaml adds {VERL_SEARCHPATH} to hydra.searchpath and lists {VERL_DEFAULT_CONFIG} "
        "in defaults; `python -m verl.trainer.main_ppo --config-path ... --config-name mrgrpo_trainer`",
        verl_checks=(
            Behaviour("verl.trainer.config ships ppo_trainer.yaml", lambda: _verl_config_file(VERL_DEFAULT_CONFIG)),
            Exists("verl.trainer.main_ppo:main"),
        ),
        recipe_checks=(RecipeSearchpath(),),
    ),
    ExtensionPoint(
        key="algorithm.adv_estimator",
        ours=None,
        verl="verl.trainer.ppo.core_algos:get_adv_estimator_fn",
        how="upstream GRPO (group-normalised outcome reward over the uid group); no custom estimator",
        verl_checks=(
            RecipeResolves(
                "algorithm.adv_estimator", "verl.trainer.ppo.core_algos:get_adv_estimator_fn", fallback="grpo"
            ),
        ),
    ),
)


def _verl_init_mentions(token: str) -> list[Problem]:
    verl = resolve("verl")
    text = Path(verl.__file__).read_text(encoding="utf-8")
    if token in text and "entry_points" in text:
        return []
    return [Problem("verl", "verl/__init__.py", f"no longer loads entry points of group {token!r}", True)]


def _verl_config_file(name: str) -> list[Problem]:
    from importlib import resources

    if resources.files(VERL_CONFIG_MODULE).joinpath(f"{name}.yaml").is_file():
        return []
    return [Problem("verl", f"{VERL_SEARCHPATH}/{name}.yaml", "missing", True)]


FORK_EDITS: tuple[ForkEdit, ...] = (
    ForkEdit(
        number=1,
        fork_change="verl/experimental/agent_loop/agent_loop.py was edited so the reward loop's scalar score lands "
        "on the last valid response token of the trajectory",
        replacement="upstream behaviour in verl 0.9.1: the agent loop worker awaits the reward loop per trajectory "
        "and writes the score at attention_mask[:, prompt_len:].sum(1) - 1 (the last valid response token); "
        "nothing to patch",
        upstream=(
            f"{AGENT_WORKER}._compute_score",
            f"{AGENT_WORKER}._postprocess",
            "verl.experimental.reward_loop.reward_manager.base:RewardManagerBase.assemble_rm_scores",
        ),
        checks=(
            SourceMentions(
                f"{AGENT_WORKER}._compute_score",
                ('"reward_score"', '"reward_extra_info"'),
                "stores the reward loop's result on the trajectory",
            ),
            SourceMentions(
                f"{AGENT_WORKER}._postprocess", ("rm_scores", "reward_score"), "writes rm_scores from reward_score"
            ),
            Behaviour("assemble_rm_scores puts the score on the last valid token", probe_score_on_last_valid_token),
        ),
    ),
    ForkEdit(
        number=2,
        fork_change="the reward loop's naive manager was edited to call a custom compute_score(data_source, "
        'solution_str, ground_truth, extra_info) and return {"reward_score", "reward_extra_info"}',
        replacement="upstream NaiveRewardManager (reward.reward_manager.name=naive, the default) with "
        "reward.custom_reward_function.path=pkg://mrgrpo.reward, name=compute_score; a returned dict's "
        "'score' is the reward and every key goes to reward_extra_info",
        upstream=(f"{NAIVE}.run_single", "verl.trainer.ppo.reward:get_custom_reward_fn"),
        checks=(Behaviour("NaiveRewardManager.run_single calls compute_score as expected", probe_naive_manager_call),),
    ),
    ForkEdit(
        number=3,
        fork_change="verl/utils/dataset/rl_dataset.py was edited to add data.adjust_sys_prompt (rewrite the "
        "system prompt of every row)",
        replacement="mrgrpo.dataset.MrGRPODataset (a subclass of RLHFDataset) selected with data.custom_cls; "
        "data.adjust_sys_prompt is declared in the recipe yaml",
        upstream=("verl.utils.dataset.rl_dataset:get_dataset_class", RLHF),
        checks=(
            SourceMentions("verl.utils.dataset.rl_dataset:get_dataset_class", ("custom_cls",), "reads data.custom_cls"),
            SubclassOf(OUR_DATASET, RLHF),
            RecipeHasKey("data.adjust_sys_prompt"),
        ),
    ),
)


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


# --------------------------------------------------------------------------------------------------------------------
# CLI


def default_repo_root() -> Path | None:
    """The checkout mrgrpo runs from (editable install, or the image's /opt/mrgrpo), else the cwd if it is one."""
    here = Path(__file__).resolve().parent.parent
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
