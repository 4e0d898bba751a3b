"""Pure output comparison, run in the trusted parent only.

stdio: line endings are normalised (CRLF/CR -> LF), trailing whitespace of each line and trailing blank lines
are ignored; then the outputs must have the same lines, and each line the same whitespace-separated tokens.
There is no permutation, set, prefix, rounding or whitespace-erasure leniency ("12" != "1 2"). With an opt-in
`float_tol`, an expected token written as a non-integer decimal (a '.' or an exponent: "0.5", "2.0", "1e-9") also
matches an actual token within |a - e| <= tol * max(1, |e|), when both are plain ASCII decimals (no "1_000", no
non-ASCII digits, no "inf"/"nan"); integers are always compared exactly. The comparison walks the expected lines
and touches the actual output only with C-speed scans beyond them, so a flood of output costs the parent time
and memory in proportion to the expected answer, not to the flood.

call: return values arrive as JSON text written by the child and are parsed here (arbitrarily large ints are
supported); they must equal the expected value structurally: lists (tuples become lists) element-wise,
dicts by key set and values, strings exactly, None only with None, numbers by exact
value (int 2 equals float 2.0; bools equal 0/1 as in Python's ==) or, when the expected value is a float and
`float_tol` is given, within the tolerance. A return value whose JSON is much longer than the expected value's
is not parsed at all (`value_too_long`): parsing is bounded by the size of the expected answer. An expected value
may be a `OneOf` (a call-mode output that APPS's conventions leave ambiguous): a result equal to any
of its readings passes.
"""

from __future__ import annotations

import json
import math
import re


class OneOf:
    """An expected call-mode value with more than one reading, each plain JSON: a result equal to any of them passes.
    Made by `mrgrpo.testset.TestSet.from_dict` for an output `[x]` in a test set not wrapped throughout:
    `OneOf(x, [x])`. Only ever the whole expected value (never inside one). It lives here so the sandbox package
    stays self-contained (standard library only)."""

    __slots__ = ("options",)

    def __init__(self, *options):
        if len(options) < 2:
            raise ValueError("OneOf needs at least two readings")
        self.options = options

    def __eq__(self, other) -> bool:
        return isinstance(other, OneOf) and self.options == other.options

    __hash__ = None

    def __repr__(self) -> str:
        return " or ".join(json.dumps(o, default=repr) for o in self.options)


_SMALL_INT_DIGITS = 4000  # below Python's default int<->str limit (4300 digits)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")  # plain ASCII decimals only
_NON_INTEGER = re.compile(r"[.eE]")
_TRAILING_SPACE = re.compile(r"\s*")
_LENGTH_SLACK = 1024  # characters a result may exceed twice the expected JSON by (spellings of floats, spaces)


def normalize_lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _tokens_equal(expected: str, actual: str, float_tol: float | None) -> bool:
    if expected == actual:
        return True
    if float_tol is None or not _NON_INTEGER.search(expected):
        return False
    if len(actual) > len(expected) + _LENGTH_SLACK or not (_DECIMAL.fullmatch(expected) and _DECIMAL.fullmatch(actual)):
        return False
    try:
        e, a = float(expected), float(actual)
    except (ValueError, OverflowError):
        return False
    return _floats_close(e, a, float_tol)


def _floats_close(e: float, a: float, float_tol: float) -> bool:
    """The one tolerance rule (stdout tokens and call results): |a - e| <= tol * max(1, |e|); NaN never equal."""
    if math.isnan(e) or math.isnan(a):
        return False
    return abs(a - e) <= float_tol * max(1.0, abs(e))


def stdout_equal(expected: str, actual: str, float_tol: float | None = None) -> bool:
    """normalize_lines(expected) == normalize_lines(actual) token-wise, without splitting `actual` into lines:
    Python-level work is bounded by the expected lines; the rest of `actual` is only scanned (must be blank)."""
    exp_lines = normalize_lines(expected)
    if "\r" in actual:
        actual = actual.replace("\r\n", "\n").replace("\r", "\n")
    pos = 0
    for exp_line in exp_lines:
        if pos > len(actual):
            return False
        end = actual.find("\n", pos)
        if end < 0:
            end = len(actual)
        exp_tokens = exp_line.split()
        # at most one token more than expected is split off (the rest of a flood stays one string)
        act_tokens = actual[pos:end].split(maxsplit=len(exp_tokens))
        if len(exp_tokens) != len(act_tokens):
            return False
        if not all(_tokens_equal(e, a, float_tol) for e, a in zip(exp_tokens, act_tokens, strict=True)):
            return False
        pos = end + 1
    # after the expected lines: only trailing whitespace and blank lines
    return pos >= len(actual) or _TRAILING_SPACE.fullmatch(actual, pos) is not None


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


def json_size(value, depth: int = 0) -> int:
    """An upper bound of len(json.dumps(value)) that also works for ints past Python's int/str digit limit (of a
    `OneOf`: its longest reading)."""
    if isinstance(value, OneOf):
        return max(json_size(v) for v in value.options)  # (only ever the whole expected value: depth 0)
    try:
        return len(json.dumps(value, default=str))
    except ValueError:  # an int of more than 4300 digits somewhere inside
        pass
    if depth > 200:
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() * 30103 // 100000 + 3
    if isinstance(value, (list, tuple)):
        return 2 + sum(json_size(v, depth + 1) + 2 for v in value)
    if isinstance(value, dict):
        return 2 + sum(json_size(str(k), depth + 1) + json_size(v, depth + 1) + 4 for k, v in value.items())
    return len(json.dumps(value, default=str))


def value_too_long(expected, text: str) -> bool:
    """True when `text` (the child's JSON) is too long to equal `expected`: more than twice the expected JSON
    plus a slack. The parent then skips parsing it (parsing a huge int costs super-linear CPU)."""
    if len(text) <= _LENGTH_SLACK:
        return False
    try:
        size = json_size(expected)
    except (TypeError, ValueError, RecursionError):
        return False
    return len(text) > 2 * size + _LENGTH_SLACK


def parse_json_value(text: str):
    """Parse the child's JSON return value. Raises ValueError on malformed or absurdly nested input."""
    try:
        return json.loads(text, parse_int=_decimal_to_int)
    except RecursionError as exc:
        raise ValueError("return value nested too deeply") from exc


def values_equal(expected, actual, float_tol: float | None = None) -> bool:
    if isinstance(expected, OneOf):
        return any(values_equal(e, actual, float_tol) for e in expected.options)
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):  # Python's ==, as Codewars judges: False == 0
        return isinstance(expected, (bool, int)) and isinstance(actual, (bool, int)) and expected == actual
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if expected == actual:
            return True
        if float_tol is None or not isinstance(expected, float):  # integers are never loosened
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
