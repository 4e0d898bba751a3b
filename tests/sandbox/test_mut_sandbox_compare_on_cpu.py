"""Properties of the parent's output comparison that the mutation run of mrgrpo/sandbox/compare.py found unpinned.

One property per test (docs/testing.md). The comparison decides AC/WA, so every loosening here is a false pass.
"""

from __future__ import annotations

import json

import pytest

from mrgrpo.sandbox.compare import (
    json_size,
    normalize_lines,
    parse_json_value,
    stdout_equal,
    value_too_long,
    values_equal,
)

NINES = 10**5000 - 1  # 5,000 digits: past Python's int/str limit, so json_size takes its fallback
NINES_BOUND = 5003  # its bound: 5,000 digits + 3


def _nested(value, levels: int, in_dict: bool = False):
    for _ in range(levels):
        value = {"k": value} if in_dict else [value]
    return value


# ---- stdio


def test_expected_crlf_lines_are_one_line_each():
    """CRLF in the expected output ends a line once (not a line and an empty line)."""
    assert stdout_equal("1\r\n2\r\n", "1\n2\n")


def test_lone_cr_ends_a_line_on_both_sides():
    """A lone CR ends a line, in the expected output and in the program's output."""
    assert stdout_equal("1\r2\n", "1\n2\n")
    assert stdout_equal("1\n2\n", "1\r2\n")
    assert not stdout_equal("1 2\n", "1\r2\n")


def test_normalize_lines_drops_trailing_whitespace_only():
    """normalize_lines keeps leading whitespace, drops trailing whitespace and trailing blank lines."""
    assert normalize_lines("  a \t\r\n b\r\n\r\n  \n") == ["  a", " b"]


def test_missing_lines_are_wrong():
    """Output with fewer lines than expected is wrong, with or without a final newline."""
    assert not stdout_equal("1\n2\n", "1")
    assert not stdout_equal("1\n2\n", "1\n")
    assert not stdout_equal("1\n\n2\n", "1\n")


def test_a_leading_blank_line_is_a_line():
    """A blank first line must be matched by a blank first line of the output."""
    assert stdout_equal("\n5\n", "\n5\n")
    assert not stdout_equal("\n5\n", "5\n")
    assert not stdout_equal("5\n", "\n5\n")


def test_float_tolerance_bound_is_inclusive():
    """|a - e| equal to tol * max(1, |e|) is accepted (exact binary values: 0.75 - 0.5 == 0.25)."""
    assert stdout_equal("0.5\n", "0.75\n", float_tol=0.25)
    assert values_equal(0.5, 0.75, float_tol=0.25)
    assert not values_equal(0.5, 0.75, float_tol=0.125)


def test_float_tolerance_is_absolute_below_one():
    """Below |e| = 1 the tolerance is absolute: 1.5 * tol away from 1.0 is rejected."""
    assert not stdout_equal("1.0\n", "1.0000015\n", float_tol=1e-6)
    assert not values_equal(1.0, 1.0000015, float_tol=1e-6)
    assert not values_equal(0.5, 0.5000015, float_tol=1e-6)


def test_a_long_token_is_compared_up_to_the_slack():
    """An actual token up to 1,024 characters longer than the expected one is still compared as a number."""
    assert stdout_equal("1.0\n", "1." + "0" * 1025 + "\n", float_tol=1e-6)  # 3 + 1,024 characters
    assert not stdout_equal("1.0\n", "1." + "0" * 1026 + "\n", float_tol=1e-6)


# ---- call mode


def test_different_integers_are_not_equal():
    """Two different ints (or an int and a different float) never compare equal."""
    assert not values_equal(3, 4)
    assert not values_equal(-1, 1)
    assert not values_equal(3, 3.5)


def test_different_strings_are_not_equal():
    """Two different strings never compare equal (nor differently cased or spaced ones)."""
    assert not values_equal("a", "b")
    assert not values_equal("abc", "ABC")
    assert not values_equal(["x"], ["x "])


def test_an_int_too_large_for_a_float_is_not_within_a_tolerance():
    """An int beyond the float range returned for a float never matches, whatever the tolerance."""
    assert not values_equal(1.5, 10**400, float_tol=1.0)
    assert not values_equal([1.5], [-(10**400)], float_tol=1e300)


def test_a_bool_never_equals_a_float():
    """A bool equals only a bool or an int, never a float (not 0.0/1.0, not within a tolerance)."""
    assert not values_equal(True, 1.0)
    assert not values_equal(False, 0.0)
    assert not values_equal(1.0, True)
    assert not values_equal(0.5, True, float_tol=1.0)


def test_a_string_is_not_a_number_under_a_tolerance():
    """A returned string that spells the expected float is wrong, with or without a tolerance."""
    assert not values_equal(1.5, "1.5", float_tol=0.1)
    assert not values_equal(1.5, [1.5], float_tol=0.1)


def test_a_longer_list_is_wrong():
    """A returned list longer or shorter than the expected one is wrong, even when it starts the same."""
    assert not values_equal([1, 2], [1, 2, 3])
    assert not values_equal([1, 2, 3], [1, 2])
    assert not values_equal([0.5], [0.5, 0.5], float_tol=1.0)


def test_float_tolerance_reaches_inside_lists_and_dicts():
    """float_tol applies to floats nested in lists and dict values."""
    assert values_equal([0.5, [2.5]], [0.50001, [2.50001]], float_tol=1e-3)
    assert values_equal({"a": 0.5, "b": {"c": 2.5}}, {"a": 0.50001, "b": {"c": 2.50001}}, float_tol=1e-3)


def test_a_dict_is_not_a_list():
    """An expected dict never equals a list (of its keys or otherwise), nor the other way round."""
    assert not values_equal({"a": 1}, ["a"])
    assert not values_equal(["a"], {"a": 1})
    assert not values_equal({}, [])


def test_too_deep_json_is_a_value_error_naming_the_nesting():
    """A return value nested past the parser's recursion limit raises ValueError saying so."""
    with pytest.raises(ValueError, match="^return value nested too deeply$"):
        parse_json_value("[" * 100_000 + "]" * 100_000)


# ---- bounds on the parent's work


def test_too_long_is_more_than_twice_the_expected_json_plus_1024():
    """value_too_long is true exactly past 2 * len(expected JSON) + 1,024 characters."""
    expected = "x" * 600  # JSON: 602 characters
    assert not value_too_long(expected, "y" * (2 * 602 + 1024))
    assert value_too_long(expected, "y" * (2 * 602 + 1024 + 1))


def test_an_expected_value_that_cannot_be_sized_is_never_too_long():
    """An expected value too deep to serialise is not a reason to refuse a result (it is parsed and compared)."""
    assert not value_too_long(_nested(0, 100_000), "[" * 5000)


def test_json_size_of_a_huge_int_is_a_tight_int_bound():
    """Past the int/str limit an int's size is an int between its length and its length + 3."""
    for value, length in ((NINES, 5000), (-NINES, 5001), (NINES + 1, 5001), (10**21101 - 1, 21101)):
        size = json_size(value)
        assert isinstance(size, int)
        assert length <= size <= length + 3, (length, size)
    assert json_size(NINES) == NINES_BOUND


def test_json_size_of_a_list_adds_brackets_and_separators():
    """A list's fallback size is 2 for the brackets plus each item's size and 2 for its separator."""
    assert json_size([NINES]) == 2 + NINES_BOUND + 2
    assert json_size([NINES, 7, "ab"]) == 2 + (NINES_BOUND + 2) + (1 + 2) + (4 + 2)


def test_json_size_of_a_dict_adds_braces_keys_and_separators():
    """A dict's fallback size is 2 for the braces plus, per item, its quoted key, its value and 4 separators."""
    assert json_size({"k": NINES}) == 2 + (3 + NINES_BOUND + 4)
    assert json_size({"k": NINES, 5: None}) == 2 + (3 + NINES_BOUND + 4) + (3 + 4 + 4)


def test_json_size_counts_200_levels_and_stops_below():
    """The fallback counts values down to nesting level 200 and nothing deeper (its recursion guard)."""
    assert json_size(_nested(NINES, 200)) == 200 * 4 + NINES_BOUND
    assert json_size(_nested(NINES, 201)) == 201 * 4
    assert json_size(_nested(NINES, 200, in_dict=True)) == 200 * 9 + NINES_BOUND
    assert json_size(_nested(NINES, 201, in_dict=True)) == 201 * 9


# ---- an ambiguous call-mode output (mrgrpo.testset.OneOf): any reading passes


def test_one_of_passes_a_result_equal_to_any_reading_and_nothing_else():
    from mrgrpo.testset import OneOf

    either = OneOf(12, [12])
    assert values_equal(either, 12) and values_equal(either, [12]) and values_equal(either, 12.0)
    assert not values_equal(either, [[12]]) and not values_equal(either, 13) and not values_equal(either, [12, 12])
    assert values_equal(OneOf(0.5, [0.5]), [0.5000001], 1e-6) and not values_equal(OneOf(0.5, [0.5]), [0.5000001])


def test_one_of_is_sized_by_its_longest_reading():
    from mrgrpo.testset import OneOf

    assert json_size(OneOf("abc", ["abc"])) == len('["abc"]')
    assert json_size(OneOf(NINES, [NINES])) == NINES_BOUND + 4  # past the int/str limit: the fallback's bound
    assert not value_too_long(OneOf("x", ["x" * 3000]), json.dumps(["x" * 3000]))
