"""`TestSet`: the one codec for APPS test JSON, used by the data build, the reward, the agent loop and `mrgrpo score`.

Wire format (a JSON object; the parquet stores it as a string, in ``reward_model.ground_truth`` for the hidden
tests and in ``extra_info.public_tests`` for the public ones)::

    {"inputs": [...], "outputs": [...], "fn_name": "name", "float_tol": 1e-06}

- standard input/output (no ``fn_name``): ``inputs[i]`` is the stdin text and ``outputs[i]`` the expected stdout
  text. A list of strings is accepted as lines (joined with ``"\\n"`` plus a final newline), as a few APPS
  records store them.
- call mode (``fn_name`` set): ``inputs[i]`` is the argument list and ``outputs[i]`` the expected return value,
  in either of APPS's conventions, told apart per test set (`mrgrpo.apps.call_outputs`):

  * WRAPPED, when every output is a one-element list: ``[[3], [12]]``; ``outputs[i] = [v]`` means exactly ``v``, so
    ``[[1, 2]]`` always means the list ``[1, 2]``. This is the form ``mrgrpo data`` writes, and the one
    ``to_dict`` writes for plain values.
  * UNWRAPPED (or mixed), when some output is not a one-element list: ``[3, 12]``, ``[3, [12]]``. An output that
    is not a one-element list is the value itself, compared directly (``3``; ``[]``; ``[1, 2]``, which APPS's
    checker would also pass for a result equal to its first element ``1``: under neither convention is that the
    answer, so that reading is not taken). An output ``[x]`` in such a set is AMBIGUOUS: the value ``x`` or the
    list ``[x]``, and a result equal to either passes, as in APPS's checker (decoded as
    ``OneOf(x, [x])``; `mrgrpo.sandbox.compare.values_equal` passes a result equal to any reading).

  So the one ambiguous case, ``[x]`` in a set that is not wrapped throughout, is judged leniently, and a set
  wrapped throughout is judged exactly (a result ``[x]`` does not pass for ``[[x]]`` read as ``x``).
- ``float_tol`` (optional, present only when validation found the reference's float answers need it): the
  tolerance for non-integer expected numbers. The same value judges the public tests (feedback) and the hidden
  tests (reward): it lives in the data, not in a run-time option.
- ``time_s`` / ``wall_s`` (optional, present only when the problem has its own limits, e.g. the dataset's time
  limit): the per-test CPU and wall seconds. Left out, the sandbox's defaults apply (`mrgrpo.sandbox.Limits`: 4 CPU
  seconds, and a wall of ``WALL_PER_CPU`` x the CPU limit). `TestSet.limits` is the one place they become
  `Limits`, under the run's `LimitsOverride` (the recipe's ``mrgrpo.limits`` section), which wins over the data;
  the agent loop (public tests) and the reward (hidden tests) both call it, so both judge a problem alike.

``TestSet`` holds the decoded form (call outputs unwrapped; an ambiguous one as a ``OneOf``), which is what
`mrgrpo.sandbox.Job` takes.

    >>> ts = TestSet.from_json('{"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}')
    >>> ts.outputs, ts.fn_name
    ([3], 'add')
    >>> ts.to_json()
    '{"inputs": [[1, 2]], "outputs": [[3]], "fn_name": "add"}'
    >>> pub, hid = TestSet(["1\\n", "2\\n", "3\\n"], ["1\\n", "4\\n", "9\\n"]).split(1)
    >>> len(pub), len(hid)
    (1, 2)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.sandbox.compare import OneOf  # the sandbox's comparison type; re-exported here, where it is made
from mrgrpo.sandbox.schema import Job, Limits

# The limits a problem's tests may carry in the wire format, and those a run may override (`LimitsOverride`).
DATA_LIMITS = ("time_s", "wall_s")
OVERRIDE_LIMITS = ("time_s", "wall_s", "memory_mb")


class TestSetError(ValueError):
    """A test JSON that does not follow the wire format; the message names the field and the place."""

    __test__ = False  # not a pytest test class


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _check_limits(values: Mapping[str, Any], where: str, error: type[Exception]) -> None:
    """Each of ``values`` None or a number > 0 (``memory_mb`` a whole number), and a wall no lower than the CPU."""
    for name, value in values.items():
        if value is None:
            continue
        if not _positive(value) or (name == "memory_mb" and value != int(value)):
            kind = "a whole number of megabytes" if name == "memory_mb" else "a number of seconds"
            raise error(f"{where}: {name} must be {kind} > 0, got {value!r}")
    time_s, wall_s = values.get("time_s"), values.get("wall_s")
    if time_s is not None and wall_s is not None and wall_s < time_s:
        raise error(f"{where}: wall_s ({wall_s!r}) is below time_s ({time_s!r}): the CPU limit could never be "
                    "reached; leave wall_s out for the sandbox's rule")


@dataclass(frozen=True)
class LimitsOverride:
    """A run's override of every problem's per-test limits (None: the problem's own, else the sandbox's default).

    One per run, read from the recipe's ``mrgrpo.limits`` section by the agent loop and the reward alike
    (`from_config`); ``mrgrpo score`` and ``mrgrpo eval`` fill it from ``--time-s`` / ``--wall-s`` / ``--memory-mb``.

        >>> LimitsOverride.from_config({"time_s": 1, "wall_s": None})
        LimitsOverride(time_s=1, wall_s=None, memory_mb=None)
    """

    time_s: float | None = None
    wall_s: float | None = None
    memory_mb: int | None = None

    def __post_init__(self) -> None:
        _check_limits(dataclasses.asdict(self), "limits override", ValueError)

    @classmethod
    def from_config(cls, section: Any, where: str = "mrgrpo.limits") -> LimitsOverride:
        """From a config section (a mapping, e.g. an OmegaConf node; None: no override). A key other than
        ``OVERRIDE_LIMITS`` or a value that is not a positive number raises, naming ``where``."""
        if section is None:
            return cls()
        if isinstance(section, LimitsOverride):
            return section
        if not isinstance(section, Mapping) and not hasattr(section, "items"):
            raise ValueError(f"{where} must be a mapping of {', '.join(OVERRIDE_LIMITS)}, got {section!r}")
        given = dict(section.items())
        unknown = sorted(set(given) - set(OVERRIDE_LIMITS))
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; known: {', '.join(OVERRIDE_LIMITS)}")
        _check_limits(given, where, ValueError)
        return cls(**given)


def _as_text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value) + "\n"
    raise TestSetError(f"{what}: stdio test data must be a string or a list of strings, got {type(value).__name__}")


@dataclass(frozen=True)
class TestSet:
    """Decoded tests: stdio strings, or call argument lists and UNWRAPPED return values."""

    __test__ = False  # not a pytest test class

    inputs: list
    outputs: list
    fn_name: str | None = None
    float_tol: float | None = None
    time_s: float | None = None  # the problem's own CPU seconds per test (None: the sandbox's default)
    wall_s: float | None = None  # the problem's own wall seconds per test (None: the sandbox's rule from the CPU)
    where: str = field(default="tests", compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.outputs):
            raise TestSetError(f"{self.where}: {len(self.inputs)} inputs but {len(self.outputs)} outputs")
        if self.fn_name is not None and not (isinstance(self.fn_name, str) and self.fn_name.isidentifier()):
            raise TestSetError(f"{self.where}: fn_name must be an identifier, got {self.fn_name!r}")
        if self.float_tol is not None and not (isinstance(self.float_tol, (int, float)) and self.float_tol >= 0):
            raise TestSetError(f"{self.where}: float_tol must be a number >= 0, got {self.float_tol!r}")
        _check_limits({"time_s": self.time_s, "wall_s": self.wall_s}, self.where, TestSetError)

    def __len__(self) -> int:
        return len(self.inputs)

    @property
    def io_mode(self) -> str:
        return "call" if self.fn_name else "stdio"

    # ------------------------------------------------------------------ codec
    @classmethod
    def from_dict(cls, data: Any, where: str = "tests") -> TestSet:
        if not isinstance(data, dict) or "inputs" not in data or "outputs" not in data:
            raise TestSetError(f"{where}: must be a JSON object with 'inputs' and 'outputs', got {str(data)[:200]!r}")
        inputs, outputs = data["inputs"], data["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list):
            raise TestSetError(f"{where}: 'inputs' and 'outputs' must be lists")
        if len(inputs) != len(outputs):
            raise TestSetError(f"{where}: {len(inputs)} inputs but {len(outputs)} outputs")
        fn_name = data.get("fn_name") or None
        if fn_name is None:
            inputs = [_as_text(v, f"{where} input {i}") for i, v in enumerate(inputs)]
            outputs = [_as_text(v, f"{where} output {i}") for i, v in enumerate(outputs)]
        else:
            for i, args in enumerate(inputs):
                if not isinstance(args, list):
                    raise TestSetError(f"{where}: call-mode input {i} is not an argument list: {str(args)[:100]!r}")
            wrapped = all(isinstance(out, list) and len(out) == 1 for out in outputs)
            if wrapped:
                outputs = [out[0] for out in outputs]
            else:  # unwrapped or mixed: `[x]` is x or [x] (see the module's docstring)
                outputs = [OneOf(out[0], out) if isinstance(out, list) and len(out) == 1 else out for out in outputs]
        return cls(list(inputs), list(outputs), fn_name, data.get("float_tol"), data.get("time_s"),
                   data.get("wall_s"), where)

    @classmethod
    def from_json(cls, raw: str | bytes | dict, where: str = "tests") -> TestSet:
        """Decode the wire format (a JSON string, or an already-parsed dict)."""
        if isinstance(raw, (str, bytes)):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise TestSetError(f"{where}: not valid JSON: {exc}") from None
        return cls.from_dict(raw, where)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"inputs": list(self.inputs)}
        if self.fn_name:
            if not any(isinstance(o, OneOf) for o in self.outputs):
                out["outputs"] = [[o] for o in self.outputs]
            elif all(isinstance(o, OneOf) for o in self.outputs):
                # written back as `[x]` each, the set would read as wrapped throughout: exactly x, not x or [x]
                raise TestSetError(f"{self.where}: only ambiguous call-mode outputs (x or [x]) cannot be written in "
                                   "either convention without changing their meaning")
            else:  # the unwrapped convention it was read in: ambiguous outputs as `[x]`, the rest as they are
                out["outputs"] = [o.options[1] if isinstance(o, OneOf) else o for o in self.outputs]
            out["fn_name"] = self.fn_name
        else:
            out["outputs"] = list(self.outputs)
        if self.float_tol is not None:
            out["float_tol"] = self.float_tol
        for name in DATA_LIMITS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    # ------------------------------------------------------------------ views
    def split(self, k: int) -> tuple[TestSet, TestSet]:
        """(the first ``k`` tests, the rest): public and hidden tests."""
        if k < 0:
            raise ValueError(f"split: k must be >= 0, got {k}")
        head = dataclasses.replace(self, inputs=self.inputs[:k], outputs=self.outputs[:k])
        tail = dataclasses.replace(self, inputs=self.inputs[k:], outputs=self.outputs[k:])
        return head, tail

    def with_float_tol(self, float_tol: float | None) -> TestSet:
        return dataclasses.replace(self, float_tol=float_tol)

    def limits(self, override: LimitsOverride | None = None) -> Limits:
        """The per-test `Limits` of these tests: the override's, else the problem's own (``time_s`` / ``wall_s``
        of the data), else the sandbox's defaults. A wall comes with its CPU limit: an override of ``time_s``
        without ``wall_s`` drops the problem's wall for the sandbox's rule (``WALL_PER_CPU`` x the CPU limit).

            >>> ts = TestSet(["1\\n"], ["1\\n"], time_s=2.0)
            >>> ts.limits().wall_s, ts.limits(LimitsOverride(time_s=1)).wall_s, TestSet([], []).limits().time_s
            (4.0, 2.0, 4.0)
        """
        o = override or LimitsOverride()
        time_s = o.time_s if o.time_s is not None else self.time_s
        wall_s = o.wall_s if o.wall_s is not None else (self.wall_s if o.time_s is None else None)
        try:
            return Limits.of(time_s=time_s, wall_s=wall_s, memory_mb=o.memory_mb)
        except ValueError as exc:  # e.g. an override's wall below the problem's own CPU limit
            raise TestSetError(f"{self.where}: {exc}") from None

    def job(self, code: str, *, stop_on_first_failure: bool = True, limits: Limits | None = None) -> Job:
        """The `mrgrpo.sandbox.Job` running ``code`` on these tests, under ``limits`` (default: `limits()`)."""
        return Job(code=code, inputs=list(self.inputs), outputs=list(self.outputs), fn_name=self.fn_name,
                   float_tol=self.float_tol, stop_on_first_failure=stop_on_first_failure,
                   limits=limits if limits is not None else self.limits())
