"""Checks of verl and mrgrpo objects: small objects with a description and run(ctx) -> list[Problem]."""

from __future__ import annotations

import importlib.metadata as metadata
import inspect
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mrgrpo.upstream.core import Context, Problem, Unresolved, _side_of, _source, dotted, resolve


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
