"""Comparison strictness (pure functions, no processes): one leniency of some grader per test."""

from __future__ import annotations

from mrgrpo.sandbox.compare import parse_json_value, stdout_equal, values_equal


def test_trailing_spaces_newlines_and_crlf_are_normalised():
    assert stdout_equal("1 2\n3\n", "1 2   \r\n3\r\n\r\n")
    assert stdout_equal("1 2 \n", "1 2")


def test_inner_spacing_between_tokens_is_ignored():
    assert stdout_equal("1 2\n", "1  2\n")


def test_whitespace_erasure_is_not_accepted():
    assert not stdout_equal("1 2\n", "12\n")
    assert not stdout_equal("12\n", "1 2\n")


def test_permuted_tokens_or_lines_are_not_accepted():
    assert not stdout_equal("1 2\n", "2 1\n")
    assert not stdout_equal("a\nb\n", "b\na\n")


def test_collapsed_duplicates_are_not_accepted():
    assert not stdout_equal("1\n1\n2\n", "1\n2\n")


def test_prefix_is_not_accepted():
    assert not stdout_equal("1\n2\n3\n", "1\n2\n")
    assert not stdout_equal("1\n", "1\n2\n")
    assert not stdout_equal("1 2 3\n", "1 2\n")


def test_line_structure_matters():
    assert not stdout_equal("1 2\n", "1\n2\n")
    assert not stdout_equal("1\n\n2\n", "1\n2\n")


def test_no_float_rounding_without_tolerance():
    assert not stdout_equal("0.333\n", "0.3333333\n")
    assert not stdout_equal("50000000000000001\n", "50000000000000000\n")


def test_float_tolerance_when_opted_in():
    assert stdout_equal("0.333333\n", "0.3333331\n", float_tol=1e-6)
    assert not stdout_equal("0.3\n", "0.4\n", float_tol=1e-6)
    assert not stdout_equal("nan\n", "nan0\n", float_tol=1e-6)
    assert stdout_equal("1000000\n", "1000000.5\n", float_tol=1e-6)  # relative to max(1, |expected|)


def test_call_values_exact_and_structural():
    assert values_equal([1, [2, 3]], [1, [2, 3]])
    assert values_equal([1, 2], (1, 2))
    assert not values_equal([1, 2], [2, 1])
    assert not values_equal({"a": 1}, {"a": 1, "b": 2})
    assert values_equal({1: "x"}, {"1": "x"})  # JSON turns keys into strings
    assert not values_equal("1", 1)
    assert not values_equal(None, 0)
    assert values_equal(2, 2.0)
    assert not values_equal(2**60 + 1, float(2**60))
    assert not values_equal(0.1 + 0.2, 0.3)
    assert values_equal(0.1 + 0.2, 0.3, float_tol=1e-9)


def test_bools_follow_python_equality():
    assert values_equal(0, False) and values_equal(True, 1)
    assert not values_equal(True, "True") and not values_equal(False, None)


def test_nan_never_equals():
    assert not values_equal(float("nan"), float("nan"))
    assert not values_equal(float("nan"), float("nan"), float_tol=1.0)


def test_big_ints_parse_without_the_digit_limit():
    assert parse_json_value("1" + "0" * 10000) == 10**10000
    assert parse_json_value("-" + "9" * 5000) == -(10**5000 - 1)
