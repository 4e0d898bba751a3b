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

import json
from dataclasses import dataclass, field
from typing import Any

from mrgrpo.sandbox.compare import OneOf  # the sandbox's comparison type; re-exported here, where it is made


class TestSetError(ValueError):
    """A test JSON that does not follow the wire format; the message names the field and the place."""

    __test__ = False  # not a pytest test class


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
    where: str = field(default="tests", compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.inputs) != len(self.outputs):
            raise TestSetError(f"{self.where}: {len(self.inputs)} inputs but {len(self.outputs)} outputs")
        if self.fn_name is not None and not (isinstance(self.fn_name, str) and self.fn_name.isidentifier()):
            raise TestSetError(f"{self.where}: fn_name must be an identifier, got {self.fn_name!r}")
        if self.float_tol is not None and not (isinstance(self.float_tol, (int, float)) and self.float_tol >= 0):
            raise TestSetError(f"{self.where}: float_tol must be a number >= 0, got {self.float_tol!r}")

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
        return cls(list(inputs), list(outputs), fn_name, data.get("float_tol"), where)

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
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    # ------------------------------------------------------------------ views
    def split(self, k: int) -> tuple[TestSet, TestSet]:
        """(the first ``k`` tests, the rest): public and hidden tests."""
        if k < 0:
            raise ValueError(f"split: k must be >= 0, got {k}")
        head = TestSet(self.inputs[:k], self.outputs[:k], self.fn_name, self.float_tol, self.where)
        tail = TestSet(self.inputs[k:], self.outputs[k:], self.fn_name, self.float_tol, self.where)
        return head, tail

    def with_float_tol(self, float_tol: float | None) -> TestSet:
        return TestSet(self.inputs, self.outputs, self.fn_name, float_tol, self.where)

    def job(self, code: str, *, stop_on_first_failure: bool = True, limits=None):
        """The `mrgrpo.sandbox.Job` running ``code`` on these tests."""
        from mrgrpo.sandbox.schema import Job, Limits

        return Job(code=code, inputs=list(self.inputs), outputs=list(self.outputs), fn_name=self.fn_name,
                   float_tol=self.float_tol, stop_on_first_failure=stop_on_first_failure,
                   limits=limits or Limits())
