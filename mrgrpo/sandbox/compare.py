"""Pure output comparison, run in the trusted parent only.

stdio: line endings are normalised (CRLF/CR -> LF), trailing whitespace of each line and trailing blank lines
are ignored; then the outputs must have the same lines, and each line the same whitespace-separated tokens.
There is no permutation, set, prefix, rounding or whitespace-erasure leniency ("12" != "1 2"). With an opt-in
`float_tol`, two tokens that both parse as floats also match when |a - e| <= tol * max(1, |e|).

call: return values arrive as JSON text written by the child and are parsed here (arbitrarily large ints are
supported); they must equal the expected value structurally: lists (tuples become lists) element-wise,
dicts by key set and values, strings exactly, None only with None, numbers by exact
value (int 2 equals float 2.0; bools equal 0/1 as in Python's ==) or within `float_tol` when given.
"""

from __future__ import annotations

import json
import math

_SMALL_INT_DIGITS = 4000  # below Python's default int<->str limit (4300 digits)


def normalize_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_equal(expected: str, actual: str, float_tol: float | None) -> bool:
    if expected == actual:
        return True
    if float_tol is None:
        return False
    try:
        e, a = float(expected), float(actual)
    except ValueError:
        return False
    return _floats_close(e, a, float_tol)


def _floats_close(e: float, a: float, float_tol: float) -> bool:
    """The one tolerance rule (stdout tokens and call results): |a - e| <= tol * max(1, |e|); NaN never equal."""
    if math.isnan(e) or math.isnan(a):
        return False
    return abs(a - e) <= float_tol * max(1.0, abs(e))


def stdout_equal(expected: str, actual: str, float_tol: float | None = None) -> bool:
    exp_lines, act_lines = normalize_lines(expected), normalize_lines(actual)
    if len(exp_lines) != len(act_lines):
        return False
    for exp_line, act_line in zip(exp_lines, act_lines, strict=True):
        exp_tokens, act_tokens = exp_line.split(), act_line.split()
        if len(exp_tokens) != len(act_tokens):
            return False
        if not all(_tokens_equal(e, a, float_tol) for e, a in zip(exp_tokens, act_tokens, strict=True)):
            return False
    return True


def _decimal_to_int(digits: str) -> int:
    """int(digits) without Python's int/str digit limit (divide and conquer, no global state touched)."""
    if len(digits) <= _SMALL_INT_DIGITS:
        return int(digits)
    negative = digits.startswith("-")
    body = digits[1:] if negative else digits
    half = len(body) // 2
    high, low = body[: len(body) - half], body[len(body) - half :]
    value = _decimal_to_int(high) * 10**half + _decimal_to_int(low)
    return -value if negative else value


def parse_json_value(text: str):
    """Parse the child's JSON return value. Raises ValueError on malformed or absurdly nested input."""
    try:
        return json.loads(text, parse_int=_decimal_to_int)
    except RecursionError as exc:
        raise ValueError("return value nested too deeply") from exc


def values_equal(expected, actual, float_tol: float | None = None) -> bool:
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):  # Python's ==, as Codewars judges: False == 0
        return isinstance(expected, (bool, int)) and isinstance(actual, (bool, int)) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if expected == actual:
            return True
        if float_tol is None or (isinstance(expected, int) and isinstance(actual, int)):
            return False
        try:
            e, a = float(expected), float(actual)
        except OverflowError:
            return False
        return _floats_close(e, a, float_tol)
    if isinstance(expected, str) or isinstance(actual, str):
        return isinstance(expected, str) and isinstance(actual, str) and expected == actual
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(
            values_equal(e, a, float_tol) for e, a in zip(expected, actual, strict=True)
        )
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(map(_json_key, expected)) != set(actual):
            return False
        return all(values_equal(v, actual[_json_key(k)], float_tol) for k, v in expected.items())
    return False


def _json_key(key) -> str:
    """The string JSON makes of a dict key (expected values may carry int keys; the child's JSON has strings)."""
    if isinstance(key, str):
        return key
    return json.dumps(key)
