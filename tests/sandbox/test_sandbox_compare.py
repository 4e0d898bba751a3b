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
    assert stdout_equal("1000000.0\n", "1000000.5\n", float_tol=1e-6)  # relative to max(1, |expected|)


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


# ---- float_tol loosens only non-integer expected values, spelled as plain ASCII decimals (issue 11, class 4)


def test_float_tol_never_loosens_an_integer_token():
    assert not stdout_equal("1000000007\n", "1000000000\n", float_tol=1e-6)
    assert not stdout_equal("1000000007\n", "1000000007.0\n", float_tol=1e-6)


def test_float_tol_never_loosens_an_integer_return_value():
    assert not values_equal(1000000007, 1000000000, float_tol=1e-6)
    assert not values_equal(1000000007, 1000000000.0, float_tol=1e-6)
    assert values_equal(2.5, 2.5000001, float_tol=1e-6)  # a float expected value is loosened


def test_float_tol_rejects_underscored_numbers():
    assert not stdout_equal("1000.0\n", "1_000\n", float_tol=1e-6)
    assert not stdout_equal("1000.0\n", "1_000.0\n", float_tol=1e-6)


def test_float_tol_rejects_non_ascii_digits():
    assert not stdout_equal("12.5\n", "\uff11\uff12.5\n", float_tol=1e-6)  # fullwidth digits
    assert not stdout_equal("12.5\n", "\u0661\u0662.5\n", float_tol=1e-6)  # Arabic-Indic digits


def test_float_tol_rejects_special_spellings():
    for spelling in ("inf", "Infinity", "nan", "0x10", "1.0f", "+-1.0", "1.0.0"):
        assert not stdout_equal("1.0\n", spelling + "\n", float_tol=1.0), spelling


def test_float_tol_accepts_plain_decimal_spellings_of_a_float():
    for spelling in ("0.5", "0.50000001", ".5", "5e-1", "5E-1", "+0.5"):
        assert stdout_equal("0.5\n", spelling + "\n", float_tol=1e-6), spelling
    assert stdout_equal("2.0\n", "2\n", float_tol=1e-6)  # the expected value is a float; "2" is a plain decimal


# ---- the parent's work is bounded by the expected answer (issue 11, class 6)


def test_a_flood_of_short_lines_costs_memory_in_proportion_to_the_expected_answer():
    import tracemalloc

    flood = "1\n" * 5_000_000  # 10 MB of output against a one-line answer
    tracemalloc.start()
    try:
        assert not stdout_equal("1\n", flood)
        assert not stdout_equal("1\n2\n", flood)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(flood)  # a list of its lines would take ~30x the flood


def test_one_huge_line_of_tokens_is_not_split_into_millions_of_strings():
    import tracemalloc

    flood = "1 " * 3_000_000
    tracemalloc.start()
    try:
        assert not stdout_equal("1 1\n", flood)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * len(flood)


def test_trailing_blank_lines_after_the_answer_are_still_fine():
    assert stdout_equal("1\n2\n", "1\n2\n" + "\n" * 100_000 + "   \n")
    assert not stdout_equal("1\n2\n", "1\n2\n" + "\n" * 100_000 + "x\n")


def test_a_result_much_longer_than_the_expected_value_is_not_parsed():
    from mrgrpo.sandbox.compare import value_too_long

    assert value_too_long(5, "9" * 4_000_000)
    assert value_too_long([1, 2], "[" + "1, " * 100_000 + "1]")
    assert not value_too_long(5, "5.000000000000001")
    assert not value_too_long(2.0**100, str(2**100))  # an int equal to a float is never much longer
    big = 10**5000
    assert not value_too_long(big, "1" + "0" * 5000)
    assert value_too_long(big, "1" + "0" * 20000)
