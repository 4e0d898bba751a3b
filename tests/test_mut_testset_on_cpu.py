"""`mrgrpo.testset`: the test-JSON codec and the public/hidden split (issue 17). One wire-format rule per test; the
split decides what the reward scores (hidden) and what the feedback shows (public). Found by mutation testing
(docs/testing.md)."""

from __future__ import annotations

import json

import pytest

from mrgrpo.sandbox.schema import Job, Limits
from mrgrpo.testset import OneOf, TestSet, TestSetError

CALL = {"inputs": [[1, 2], [3, 4]], "outputs": [[3], [7]], "fn_name": "add"}
STDIO = {"inputs": ["1\n", "2\n"], "outputs": ["1\n", "4\n"]}


def test_stdio_tests_decode_as_given_and_have_no_fn_name():
    ts = TestSet.from_dict(STDIO)
    assert (ts.inputs, ts.outputs, ts.fn_name, ts.float_tol) == (["1\n", "2\n"], ["1\n", "4\n"], None, None)
    assert ts.io_mode == "stdio" and len(ts) == 2


def test_call_outputs_are_unwrapped_and_the_entry_point_kept():
    ts = TestSet.from_dict(CALL)
    assert (ts.inputs, ts.outputs, ts.fn_name) == ([[1, 2], [3, 4]], [3, 7], "add")
    assert ts.io_mode == "call"


def test_a_wrapped_list_output_is_the_list():
    assert TestSet.from_dict({"inputs": [[]], "outputs": [[[1, 2]]], "fn_name": "f"}).outputs == [[1, 2]]


# ---- APPS's two call-mode conventions (issue 34, finding 9)


@pytest.mark.parametrize("outputs", [[5, 7], [[1, 2], [3, 4]], ["x", None], [[], {"a": 1}]])
def test_an_unwrapped_test_set_is_read_as_its_values(outputs):
    """A set with an output that is not a one-element list is UNWRAPPED: each such output is the value itself,
    lists of other lengths included (was: TestSetError "not wrapped as [value]")."""
    ts = TestSet.from_dict({"inputs": [[1], [2]], "outputs": outputs, "fn_name": "f"}, where="row 7")
    assert ts.outputs == outputs and all(not isinstance(o, OneOf) for o in ts.outputs)


def test_in_an_unwrapped_set_a_one_element_list_is_either_reading():
    """In a set not wrapped throughout, `[x]` is ambiguous: OneOf(x, [x]); the other outputs are plain."""
    ts = TestSet.from_dict({"inputs": [[1], [2], [3], [4]], "outputs": [3, [12], [[5]], [1, 2]], "fn_name": "f"})
    assert ts.outputs == [3, OneOf(12, [12]), OneOf([5], [[5]]), [1, 2]]


def test_a_set_wrapped_throughout_is_exact_even_for_list_values():
    """Every output a one-element list: WRAPPED, each exactly its element (no OneOf), `[[1, 2]]` the list."""
    ts = TestSet.from_dict({"inputs": [[1], [2]], "outputs": [[[1, 2]], [3]], "fn_name": "f"})
    assert ts.outputs == [[1, 2], 3] and all(not isinstance(o, OneOf) for o in ts.outputs)


def test_an_unwrapped_set_is_written_back_in_its_own_convention():
    """to_dict writes a set read unwrapped as it was read (ambiguous outputs as [x]): the same meaning again."""
    raw = {"inputs": [[1], [2], [3]], "outputs": [3, [12], [1, 2]], "fn_name": "f"}
    ts = TestSet.from_dict(raw)
    assert ts.to_dict() == raw and TestSet.from_json(ts.to_json()) == ts
    assert TestSet([[1]], [[1, 2]], "f").to_dict()["outputs"] == [[[1, 2]]]  # plain values: wrapped


def test_only_ambiguous_outputs_cannot_be_written():
    """A part holding only ambiguous outputs would read back as wrapped throughout (x only): an error, not a silent
    change of meaning."""
    head, tail = TestSet.from_dict({"inputs": [[1], [2]], "outputs": [3, [12]], "fn_name": "f"}, "row 7").split(1)
    assert head.to_dict()["outputs"] == [[3]]
    with pytest.raises(TestSetError, match=r"^row 7: only ambiguous call-mode outputs \(x or \[x\]\) cannot be "
                                           r"written in either convention without changing their meaning$"):
        tail.to_dict()


def test_one_of_needs_two_readings_and_compares_by_them():
    with pytest.raises(ValueError, match="^OneOf needs at least two readings$"):
        OneOf(1)
    assert OneOf(1, [1]) == OneOf(1, [1]) and OneOf(1, [1]) != OneOf(1, [2]) and OneOf(1, [1]) != 1
    assert repr(OneOf("a", ["a"])) == '"a" or ["a"]'
    assert repr(OneOf({1}, [{1}])) == '"{1}" or ["{1}"]'  # what JSON cannot hold shows as its repr


def test_a_call_input_that_is_not_an_argument_list_is_an_error():
    with pytest.raises(TestSetError, match=r"^row 7: call-mode input 1 is not an argument list"):
        TestSet.from_dict({"inputs": [[1], 5], "outputs": [[1], [2]], "fn_name": "f"}, where="row 7")


def test_stdio_lines_given_as_a_list_are_joined_with_a_final_newline():
    ts = TestSet.from_dict({"inputs": [["3", "1 2 3"]], "outputs": [["6"]]})
    assert ts.inputs == ["3\n1 2 3\n"] and ts.outputs == ["6\n"]


@pytest.mark.parametrize("field,data,kind", [
    ("input 0", {"inputs": [5], "outputs": ["5\n"]}, "int"),
    ("output 1", {"inputs": ["a", "b"], "outputs": ["a", ["x", 3]]}, "list"),
])
def test_stdio_data_that_is_not_text_is_an_error_naming_the_test(field, data, kind):
    with pytest.raises(TestSetError, match=rf"^row 7 {field}: stdio test data must be a string or a list of strings, "
                                           rf"got {kind}$"):
        TestSet.from_dict(data, where="row 7")


def test_errors_name_tests_when_no_place_is_given():
    with pytest.raises(TestSetError, match="^tests: must be a JSON object"):
        TestSet.from_dict([])
    with pytest.raises(TestSetError, match="^tests: not valid JSON"):
        TestSet.from_json("{")
    with pytest.raises(TestSetError, match="^tests: 1 inputs but 0 outputs"):
        TestSet.from_json({"inputs": ["1"], "outputs": []})
    with pytest.raises(TestSetError, match="^tests: float_tol"):
        TestSet.from_json({"inputs": [], "outputs": []}).with_float_tol(-1)


def test_the_offending_value_is_quoted_in_the_message_cut_to_a_bounded_length():
    with pytest.raises(TestSetError) as exc:
        TestSet.from_dict("x" * 500)
    assert str(exc.value).endswith(f"got {'x' * 200!r}")
    with pytest.raises(TestSetError) as exc:
        TestSet.from_dict({"inputs": ["y" * 500], "outputs": [[1]], "fn_name": "f"})
    assert str(exc.value).endswith(f"argument list: {'y' * 100!r}")


def test_an_empty_fn_name_means_stdio():
    ts = TestSet.from_dict({**STDIO, "fn_name": ""})
    assert ts.fn_name is None and ts.io_mode == "stdio"


@pytest.mark.parametrize("data", [[1], "x", None, {"inputs": []}, {"outputs": []}])
def test_not_an_object_with_inputs_and_outputs_is_an_error(data):
    with pytest.raises(TestSetError, match=r"^row 7: must be a JSON object with 'inputs' and 'outputs'"):
        TestSet.from_dict(data, where="row 7")


@pytest.mark.parametrize("data", [{"inputs": "1", "outputs": ["1"]}, {"inputs": ["1"], "outputs": "1"}])
def test_inputs_and_outputs_must_be_lists(data):
    with pytest.raises(TestSetError, match=r"^row 7: 'inputs' and 'outputs' must be lists"):
        TestSet.from_dict(data, where="row 7")


def test_a_count_mismatch_is_an_error_in_the_codec_and_the_constructor():
    with pytest.raises(TestSetError, match=r"^row 7: 2 inputs but 1 outputs"):
        TestSet.from_dict({"inputs": ["a", "b"], "outputs": ["a"]}, where="row 7")
    with pytest.raises(TestSetError, match=r"^row 7: 1 inputs but 2 outputs"):
        TestSet(["a"], ["a", "b"], where="row 7")


@pytest.mark.parametrize("fn_name", ["not a name", "1abc", 3, ["f"]])
def test_fn_name_must_be_an_identifier(fn_name):
    with pytest.raises(TestSetError, match="^row 7: fn_name must be an identifier"):
        TestSet([[1]], [1], fn_name, where="row 7")


@pytest.mark.parametrize("tol", [-1e-9, "1e-6", [0.1]])
def test_float_tol_must_be_a_number_at_least_zero(tol):
    with pytest.raises(TestSetError, match="^row 7: float_tol must be a number >= 0"):
        TestSet(["1"], ["1"], float_tol=tol, where="row 7")


@pytest.mark.parametrize("tol", [0, 0.0, 1e-6, 2])
def test_float_tol_zero_or_positive_travels_through_the_wire_format(tol):
    ts = TestSet.from_dict({**CALL, "float_tol": tol})
    assert ts.float_tol == tol
    assert json.loads(ts.to_json())["float_tol"] == tol
    assert TestSet.from_json(ts.to_json()) == ts


def test_without_float_tol_the_wire_format_has_no_such_key():
    assert "float_tol" not in TestSet.from_dict(STDIO).to_dict()


def test_call_mode_encodes_outputs_wrapped_with_the_entry_point():
    assert TestSet([[1, 2]], [[3, 4]], "f").to_dict() == {"inputs": [[1, 2]], "outputs": [[[3, 4]]], "fn_name": "f"}


def test_stdio_mode_encodes_outputs_as_they_are_without_fn_name():
    assert TestSet(["1\n"], ["2\n"]).to_dict() == {"inputs": ["1\n"], "outputs": ["2\n"]}


@pytest.mark.parametrize("data", [CALL, STDIO, {**STDIO, "float_tol": 1e-6}])
def test_json_round_trip(data):
    assert json.loads(TestSet.from_dict(data).to_json()) == data
    assert TestSet.from_json(json.dumps(data)) == TestSet.from_dict(data)


def test_non_ascii_text_stays_text_in_the_json():
    raw = TestSet(["é\n"], ["ü\n"]).to_json()
    assert "é" in raw and "\\u" not in raw


def test_from_json_takes_bytes_or_a_parsed_dict():
    assert TestSet.from_json(json.dumps(CALL).encode()) == TestSet.from_dict(CALL)
    assert TestSet.from_json(CALL) == TestSet.from_dict(CALL)


def test_invalid_json_is_a_testset_error_naming_the_place():
    with pytest.raises(TestSetError, match="^row 7: not valid JSON"):
        TestSet.from_json("{inputs", where="row 7")


def test_split_gives_the_first_k_tests_as_public_and_the_rest_as_hidden():
    ts = TestSet([[1], [2], [3]], [1, 4, 9], "sq", 0.5)
    public, hidden = ts.split(1)
    assert public == TestSet([[1]], [1], "sq", 0.5)
    assert hidden == TestSet([[2], [3]], [4, 9], "sq", 0.5)


def test_split_at_the_ends():
    ts = TestSet.from_dict(STDIO)
    assert ts.split(0) == (TestSet([], []), ts)
    assert ts.split(5) == (ts, TestSet([], []))


def test_split_with_a_negative_count_is_an_error():
    with pytest.raises(ValueError, match="k must be >= 0"):
        TestSet.from_dict(STDIO).split(-1)


def test_split_keeps_where_for_later_error_messages():
    public, hidden = TestSet(["1"], ["1"], where="prob 9").split(0)
    with pytest.raises(TestSetError, match="^prob 9: float_tol"):
        hidden.with_float_tol(-1)
    with pytest.raises(TestSetError, match="^prob 9: float_tol"):
        public.with_float_tol(-1)


def test_with_float_tol_changes_only_the_tolerance():
    ts = TestSet.from_dict(CALL)
    assert ts.with_float_tol(1e-3) == TestSet(ts.inputs, ts.outputs, "add", 1e-3)
    assert ts.with_float_tol(1e-3).with_float_tol(None) == ts


def test_where_does_not_take_part_in_equality():
    assert TestSet(["1"], ["1"], where="a") == TestSet(["1"], ["1"], where="b")


def test_job_runs_the_code_on_exactly_these_tests():
    ts = TestSet([[1, 2]], [3], "add", 1e-6)
    job = ts.job("def add(a, b): return a + b")
    assert job == Job(code="def add(a, b): return a + b", inputs=[[1, 2]], outputs=[3], fn_name="add",
                      float_tol=1e-6, stop_on_first_failure=True, limits=Limits())


def test_job_passes_the_run_options():
    limits = Limits(time_s=0.5)
    job = TestSet.from_dict(STDIO).job("print(1)", stop_on_first_failure=False, limits=limits)
    assert job.stop_on_first_failure is False and job.limits == limits and job.fn_name is None


def test_a_decoded_test_set_keeps_its_place_for_later_errors():
    ts = TestSet.from_json(json.dumps(STDIO), where="row 7")
    with pytest.raises(TestSetError, match="^row 7: float_tol"):
        ts.with_float_tol(-1)
