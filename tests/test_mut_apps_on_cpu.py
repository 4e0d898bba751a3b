"""`mrgrpo.apps`: the APPS+ / APPS record rules and the file reader (issue 17), on hand-written records.
Found by mutation testing (docs/testing.md); one rule of the module docstring per test."""

from __future__ import annotations

import json

import pytest

from mrgrpo.apps import (
    InputFileError,
    Problem,
    ProblemFormatError,
    RecordError,
    bundled_sample_path,
    call_outputs,
    problem_from_apps,
    problem_from_apps_plus,
    problem_from_record,
    read_problems,
)
from mrgrpo.testset import TestSet

STDIO_PROMPT = 'def solve():\n    """\n    Read n and print n squared.\n    """\n'
STDIO = {"prompt": STDIO_PROMPT, "starter_code": "def solve():\n    ", "inputs": ["2\n", "3\n"],
         "outputs": ["4\n", "9\n"], "canonical_solution": "def solve():\n    n = int(input())\n    print(n * n)\n\n",
         "difficulty": "interview"}
CALL_PROMPT = 'def add(a, b):\n    """Add a and b."""\n'
CALL = {"prompt": CALL_PROMPT, "starter_code": "def add(a, b):\n    ", "inputs": [[1, 2], ["'x'", "'y'"]],
        "outputs": [[3], ["'xy'"]], "canonical_solution": "def add(a, b):\n    return a + b\n\n\n"}
APPS = {"question": "  Print the sum.\n", "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]}),
        "solutions": json.dumps(["print(sum(map(int, input().split())))", "x"]), "difficulty": "introductory",
        "problem_id": 42, "starter_code": ""}


# ---------------------------------------------------------------------------------------------- APPS+ records


def test_an_apps_plus_stdio_record():
    p = problem_from_apps_plus(STDIO, "f:1")
    assert (p.source_id, p.data_source, p.io_mode, p.fn_name, p.class_name) == ("f:1", "apps_plus", "stdio", None, None)
    assert p.statement == "Read n and print n squared."
    assert (p.inputs, p.outputs, p.difficulty, p.notes) == (["2\n", "3\n"], ["4\n", "9\n"], "interview", ())
    assert p.starter_code == ""  # the zero-argument function is an artifact of the data set, not the task


def test_a_stdio_reference_calls_its_zero_argument_function():
    ref = problem_from_apps_plus(STDIO, "f:1").reference_solution
    assert ref == "def solve():\n    n = int(input())\n    print(n * n)\n\nsolve()\n"


def test_an_apps_plus_call_record_decodes_quoted_literals_and_unwraps_outputs():
    p = problem_from_apps_plus(CALL, "f:1")
    assert (p.io_mode, p.fn_name, p.class_name, p.starter_code) == ("call", "add", None, "def add(a, b):\n    ")
    assert p.inputs == [[1, 2], ["x", "y"]] and p.outputs == [3, "xy"]
    assert p.reference_solution == "def add(a, b):\n    return a + b\n" and p.notes == ()


def test_a_class_solution_method_is_call_mode_with_its_class():
    rec = {**CALL, "starter_code": "class Solution:\n    def add(self, a, b):\n        "}
    p = problem_from_apps_plus(rec, "f:1")
    assert (p.io_mode, p.fn_name, p.class_name) == ("call", "add", "Solution")


def test_the_record_id_wins_over_the_file_position():
    assert problem_from_apps_plus({**STDIO, "id": 17}, "f:1").source_id == "17"


@pytest.mark.parametrize("raw,expected", [("Interview", "interview"), (" competition ", "competition"),
                                          ("hard", "unknown"), (None, "unknown"), ("", "unknown")])
def test_difficulty_is_normalised(raw, expected):
    assert problem_from_apps_plus({**STDIO, "difficulty": raw}, "f:1").difficulty == expected


@pytest.mark.parametrize("solution", [None, "", "   \n", 3])
def test_no_usable_canonical_solution_means_no_reference(solution):
    assert problem_from_apps_plus({**STDIO, "canonical_solution": solution}, "f:1").reference_solution is None


@pytest.mark.parametrize("key", ["prompt", "starter_code", "inputs", "outputs"])
def test_a_missing_apps_plus_field_is_named(key):
    rec = {k: v for k, v in STDIO.items() if k != key}
    with pytest.raises(ProblemFormatError, match=f"^missing field `{key}`$"):
        problem_from_apps_plus(rec, "f:1")


def test_starter_code_without_an_entry_point_is_an_error():
    with pytest.raises(ProblemFormatError, match="starter_code has no `def NAME\\(` entry point"):
        problem_from_apps_plus({**STDIO, "starter_code": "x = 1\n"}, "f:1")


def test_inputs_and_outputs_may_be_list_literals_in_strings():
    p = problem_from_apps_plus({**STDIO, "inputs": "['2\\n']", "outputs": '["4\\n"]'}, "f:1")
    assert (p.inputs, p.outputs) == (["2\n"], ["4\n"])


@pytest.mark.parametrize("value,match", [("[1, 2", "`inputs` is a string that is not a Python/JSON list literal"),
                                         ("{'a': 1}", "`inputs` must be a list, got dict"),
                                         (5, "`inputs` must be a list, got int")])
def test_inputs_that_are_not_a_list_are_an_error(value, match):
    with pytest.raises(ProblemFormatError, match=match):
        problem_from_apps_plus({**STDIO, "inputs": value}, "f:1")


def test_a_count_mismatch_or_no_tests_is_an_error():
    with pytest.raises(ProblemFormatError, match="^2 inputs but 1 outputs$"):
        problem_from_apps_plus({**STDIO, "outputs": ["4\n"]}, "f:1")
    with pytest.raises(ProblemFormatError, match="^no tests$"):
        problem_from_apps_plus({**STDIO, "inputs": [], "outputs": []}, "f:1")


@pytest.mark.parametrize("inputs,outputs", [(["2\n", 3], ["4\n", "9\n"]), (["2\n", "3\n"], ["4\n", 9])])
def test_stdio_tests_must_be_strings(inputs, outputs):
    with pytest.raises(ProblemFormatError, match="^stdio test 1: input and output must be strings$"):
        problem_from_apps_plus({**STDIO, "inputs": inputs, "outputs": outputs}, "f:1")


def test_a_call_input_must_be_an_argument_list():
    with pytest.raises(ProblemFormatError, match="^call test 1: the input must be an argument list$"):
        problem_from_apps_plus({**CALL, "inputs": [[1, 2], 5]}, "f:1")


def test_an_unwrapped_call_output_is_kept_and_noted():
    p = problem_from_apps_plus({**CALL, "inputs": [[1, 2], [2, 2]], "outputs": [3, [4, 5]]}, "f:1")
    assert p.outputs == [3, [4, 5]] and p.notes == ("unwrapped_output",)


def test_a_call_set_wrapped_throughout_has_no_ambiguous_output():
    p = problem_from_apps_plus({**CALL, "inputs": [[1, 2], [2, 2]], "outputs": [[3], [[4]]]}, "f:1")
    assert (p.outputs, p.ambiguous, p.notes) == ([3, [4]], (), ())


def test_in_an_unwrapped_call_set_a_one_element_list_is_ambiguous_and_read_as_its_element():
    """`[x]` in a set not wrapped throughout is x or [x]: read as x (decoded), its index in `ambiguous`."""
    p = problem_from_apps_plus({**CALL, "inputs": [[1], [2], [3], [4]], "outputs": [3, ["'ab'"], [5, 6], []]}, "f:1")
    assert (p.outputs, p.ambiguous, p.notes) == ([3, "ab", [5, 6], []], (1,), ("unwrapped_output",))


@pytest.mark.parametrize("outputs,values,ambiguous,notes", [
    ([[5], [7]], [5, 7], (), ()),
    ([3, [12]], [3, 12], (1,), ("unwrapped_output",)),
    ([3, 12], [3, 12], (), ("unwrapped_output",)),
])
def test_original_apps_call_outputs_follow_the_same_rule(outputs, values, ambiguous, notes):
    io = {"inputs": [[1], [2]], "outputs": outputs, "fn_name": "f"}
    p = problem_from_apps({**APPS, "input_output": json.dumps(io)}, "f:1")
    assert (p.outputs, p.ambiguous, p.notes) == (values, ambiguous, notes)


def test_call_outputs_tells_the_conventions_apart():
    assert call_outputs([[1], [[2]]]) == ([1, [2]], (), True)
    assert call_outputs([[1], 2, [[3]], [4, 5]]) == ([1, 2, [3], [4, 5]], (0, 2), False)
    assert call_outputs([]) == ([], (), True)
    assert call_outputs(["'a'", ["'b'"]], lambda v: v.strip("'")) == (["a", "b"], (1,), False)


def test_an_undecodable_literal_is_kept_as_text_and_noted_once():
    p = problem_from_apps_plus({**CALL, "inputs": [["not a literal"], ["(("]], "outputs": [["'a'"], ["'b'"]]}, "f:1")
    assert p.inputs == [["not a literal"], ["(("]] and p.outputs == ["a", "b"]
    assert p.notes == ("undecoded_literal",)


def test_the_statement_is_the_first_docstring_cleaned():
    prompt = ('import sys\n\nclass Solution:\n    def f(self, x):\n'
              '        """\n        Line one.\n          Indented.\n        """\n')
    rec = {**CALL, "prompt": prompt, "starter_code": "class Solution:\n    def f(self, x):\n        "}
    assert problem_from_apps_plus(rec, "f:1").statement == "Line one.\n  Indented."


def test_a_prompt_that_does_not_parse_falls_back_to_its_first_triple_quoted_text():
    prompt = 'def solve(:\n    """\n    Print 1 \\le n.\n    """\n'
    assert problem_from_apps_plus({**STDIO, "prompt": prompt}, "f:1").statement == "Print 1 \\le n."
    cut = 'def solve(:\n    """  Cut off here'
    assert problem_from_apps_plus({**STDIO, "prompt": cut}, "f:1").statement == "Cut off here"


@pytest.mark.parametrize("prompt", ["def solve():\n    pass\n", 'def solve(:\n    """   """\n'])
def test_a_prompt_without_a_statement_is_an_error(prompt):
    with pytest.raises(ProblemFormatError, match="prompt has no docstring with the problem statement"):
        problem_from_apps_plus({**STDIO, "prompt": prompt}, "f:1")


def test_problem_tests_and_ground_truth_use_the_one_codec():
    p = problem_from_apps_plus(CALL, "f:1")
    assert p.tests(1e-6) == TestSet([[1, 2], ["x", "y"]], [3, "xy"], "add", 1e-6)
    assert p.ground_truth() == {"inputs": [[1, 2], ["x", "y"]], "outputs": [[3], ["xy"]], "fn_name": "add"}
    s = problem_from_apps_plus(STDIO, "f:1")
    assert s.tests().fn_name is None and s.ground_truth() == {"inputs": ["2\n", "3\n"], "outputs": ["4\n", "9\n"]}
    with pytest.raises(ValueError, match="^f:1: float_tol"):
        s.tests(-1.0)


# ---------------------------------------------------------------------------------------------- APPS records


def test_an_apps_stdio_record():
    p = problem_from_apps(APPS, "f:1")
    assert (p.source_id, p.data_source, p.statement, p.io_mode, p.fn_name) == ("42", "apps", "Print the sum.",
                                                                               "stdio", None)
    assert (p.inputs, p.outputs, p.difficulty) == (["1 2\n"], ["3\n"], "introductory")
    assert p.reference_solution == "print(sum(map(int, input().split())))"


def test_apps_stdio_lines_given_as_lists_are_joined():
    io = json.dumps({"inputs": [["1", "2"]], "outputs": [["3", "4"]]})
    p = problem_from_apps({**APPS, "input_output": io}, "f:1")
    assert (p.inputs, p.outputs) == (["1\n2\n"], ["3\n4\n"])


def test_an_apps_call_record():
    io = {"inputs": [[1, 2], 5], "outputs": [[3], [4, 5]], "fn_name": "f"}
    rec = {**APPS, "input_output": io, "starter_code": "class Solution:\n    def f(self, a, b):\n"}
    p = problem_from_apps(rec, "f:1")
    assert (p.io_mode, p.fn_name, p.class_name, p.starter_code) == ("call", "f", "Solution", rec["starter_code"])
    assert p.inputs == [[1, 2], [5]] and p.outputs == [3, [4, 5]]
    assert problem_from_apps({**rec, "starter_code": "def f(a, b):\n"}, "f:1").class_name is None


@pytest.mark.parametrize("io", [{"inputs": [[1]], "outputs": [], "fn_name": "f"},
                                {"inputs": [], "outputs": [], "fn_name": "f"}])
def test_an_apps_call_record_needs_as_many_outputs_as_inputs_and_one_test(io):
    with pytest.raises(ProblemFormatError, match="inputs but"):
        problem_from_apps({**APPS, "input_output": io}, "f:1")


@pytest.mark.parametrize("key,value", [("question", None), ("question", ""), ("input_output", None),
                                       ("input_output", "")])
def test_a_missing_apps_field_is_named(key, value):
    with pytest.raises(ProblemFormatError, match=f"^missing field `{key}`$"):
        problem_from_apps({**APPS, key: value}, "f:1")
    with pytest.raises(ProblemFormatError, match=f"^missing field `{key}`$"):
        problem_from_apps({k: v for k, v in APPS.items() if k != key}, "f:1")


def test_input_output_must_be_a_json_object():
    with pytest.raises(ProblemFormatError, match="`input_output` is not valid JSON"):
        problem_from_apps({**APPS, "input_output": "{nope"}, "f:1")
    with pytest.raises(ProblemFormatError, match="^`input_output` must be a JSON object$"):
        problem_from_apps({**APPS, "input_output": "[1]"}, "f:1")


@pytest.mark.parametrize("solutions,reference,notes", [
    ("not json", None, ("bad_solutions_json",)), ("[]", None, ()), (None, None, ()), ([3], None, ()),
    (["a", "b"], "a", ()),
])
def test_the_apps_reference_is_the_first_solution_if_any(solutions, reference, notes):
    p = problem_from_apps({**APPS, "solutions": solutions}, "f:1")
    assert p.reference_solution == reference and p.notes == notes


def test_the_apps_source_id_is_problem_id_then_id_then_the_position():
    rec = {k: v for k, v in APPS.items() if k != "problem_id"}
    assert problem_from_apps({**rec, "id": "x7"}, "f:1").source_id == "x7"
    assert problem_from_apps(rec, "f:1").source_id == "f:1"


def test_the_format_is_told_by_input_output():
    assert problem_from_record(APPS, "f:1").data_source == "apps"
    assert problem_from_record(STDIO, "f:1").data_source == "apps_plus"
    with pytest.raises(ProblemFormatError, match="record must be a JSON object, got list"):
        problem_from_record([STDIO], "f:1")


# ---------------------------------------------------------------------------------------------- files


def write_lines(path, *items):
    path.write_bytes(b"".join((i if isinstance(i, bytes) else json.dumps(i).encode()) + b"\n" for i in items))
    return path


def test_each_jsonl_line_is_a_problem_named_by_file_stem_and_line(tmp_path):
    path = write_lines(tmp_path / "probs.jsonl", STDIO, b"", b"   ", CALL)
    out = list(read_problems(path))
    assert [type(x) for x in out] == [Problem, Problem]  # blank lines are skipped
    assert [x.source_id for x in out] == ["probs:1", "probs:4"]


def test_a_crlf_line_reads_like_lf(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(json.dumps(STDIO).encode() + b"\r\n" + json.dumps(CALL).encode() + b"\r\n")
    assert [x.io_mode for x in read_problems(path)] == ["stdio", "call"]


@pytest.mark.parametrize("item,kind", [([1], "array"), ("s", "string"), (3, "number"), (2.5, "number"),
                                       (True, "boolean"), (None, "null")])
def test_a_record_that_is_not_an_object_is_a_record_error_naming_its_kind(tmp_path, item, kind):
    path = write_lines(tmp_path / "p.jsonl", STDIO, item)
    out = list(read_problems(path))
    assert isinstance(out[0], Problem) and isinstance(out[1], RecordError)
    assert out[1].where == f"{path}:2" and out[1].reason == f"record is not an object: a JSON {kind}"
    assert out[1].raw == json.dumps(item) and str(out[1]) == f"{path}:2: {out[1].reason}"


def test_a_line_that_is_not_json_is_a_record_error_with_its_text(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", STDIO, b"{broken")
    err = list(read_problems(path))[1]
    assert err.where == f"{path}:2" and err.reason.startswith("line is not valid JSON") and err.raw == "{broken"


def test_a_bad_record_keeps_its_raw_text_truncated(tmp_path):
    rec = {**STDIO, "prompt": "x" * 5000}
    path = write_lines(tmp_path / "p.jsonl", rec)
    err = next(read_problems(path))
    assert err.reason == "prompt has no docstring with the problem statement"
    assert len(err.raw) == 2000 and err.raw == json.dumps(rec)[:2000]


def test_a_bad_item_of_a_json_array_is_a_record_error_at_its_index(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([STDIO, {"prompt": "x"}, CALL]))
    out = list(read_problems(path))
    assert [type(x) for x in out] == [Problem, RecordError, Problem]
    assert out[1].where == f"{path}:2" and out[1].reason == "missing field `starter_code`"
    assert out[1].raw == json.dumps({"prompt": "x"})
    assert out[2].source_id == "p:3"


def test_a_json_object_document_spanning_lines_is_not_an_array(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(STDIO, indent=2))
    out = list(read_problems(path))
    assert out and all(isinstance(x, RecordError) for x in out)


def test_data_after_a_multi_line_json_array_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([STDIO], indent=1) + "\n[1]\n")
    lines = json.dumps([STDIO], indent=1).count("\n") + 1
    with pytest.raises(InputFileError, match=f"extra data after the JSON array that ends at line {lines}$"):
        list(read_problems(path))


def test_a_broken_multi_line_json_array_names_line_and_column(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[\n  {"a": 1},\n  {"b" 2}\n]\n')
    with pytest.raises(InputFileError, match=r"not a valid JSON array: Expecting ':' delimiter at line 3 column 8"):
        list(read_problems(path))


def test_a_json_array_on_one_line_followed_by_lines_is_json_lines(tmp_path):
    path = write_lines(tmp_path / "p.jsonl", [1, 2], STDIO)
    out = list(read_problems(path))
    assert isinstance(out[0], RecordError) and out[0].reason == "record is not an object: a JSON array"
    assert isinstance(out[1], Problem) and out[1].source_id == "p:2"


def test_leading_whitespace_before_a_json_array_is_allowed(tmp_path):
    path = tmp_path / "p.json"
    path.write_text("\n\n  " + json.dumps([STDIO, CALL]))
    assert [x.source_id for x in read_problems(path)] == ["p:1", "p:2"]


def test_a_parquet_file_gives_one_record_per_row(tmp_path):
    import pandas as pd

    path = tmp_path / "apps.parquet"
    pd.DataFrame([APPS, {**APPS, "problem_id": 43, "question": ""}]).to_parquet(path)
    out = list(read_problems(path))
    assert isinstance(out[0], Problem) and out[0].source_id == "42"
    assert isinstance(out[1], RecordError) and out[1].where == f"{path}:2"
    assert out[1].reason == "missing field `question`" and '"problem_id": 43' in out[1].raw


def test_a_missing_file_is_file_not_found_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="APPS/APPS\\+ file not found: .*nope.jsonl"):
        list(read_problems(tmp_path / "nope.jsonl"))


def test_the_bundled_sample_is_a_file_of_the_package():
    path = bundled_sample_path()
    assert path.name == "apps_plus_sample.jsonl" and path.is_file() and path.parent.name == "assets"


def test_a_stdio_problem_has_no_entry_point_in_its_tests():
    p = problem_from_apps_plus(STDIO, "f:1")
    hand_built = Problem(**{**p.__dict__, "fn_name": "solve"})
    assert hand_built.tests().fn_name is None and "fn_name" not in hand_built.ground_truth()


def test_a_non_utf8_jsonl_line_names_the_byte_and_keeps_its_text_escaped(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(json.dumps(STDIO).encode() + b"\n" + b'ab\xffcd\n')
    err = list(read_problems(path))[1]
    assert err.reason == "line is not valid UTF-8: byte 0xff at byte 3 of the line"
    assert err.raw == "ab\\xffcd"


def test_the_raw_text_of_a_crlf_line_has_no_carriage_return(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "x"}\r\n')
    err = next(read_problems(path))
    assert err.reason == "missing field `starter_code`" and err.raw == '{"prompt": "x"}'


def test_a_line_of_non_json_whitespace_is_a_record_not_a_blank_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(json.dumps(STDIO).encode() + b"\n\x0c\n")
    out = list(read_problems(path))
    assert isinstance(out[1], RecordError) and out[1].where == f"{path}:2"
    assert out[1].reason.startswith("line is not valid JSON")


def test_a_one_line_array_after_blank_lines_then_records_is_json_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n\n[1, 2]\n" + json.dumps(STDIO) + "\n")
    out = list(read_problems(path))
    assert [type(x) for x in out] == [RecordError, Problem]
    assert out[0].where == f"{path}:3" and out[0].reason == "record is not an object: a JSON array"


def test_a_file_of_one_line_without_newline_holding_two_values_is_json_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("[1] [2]")
    out = list(read_problems(path))
    assert len(out) == 1 and out[0].reason.startswith("line is not valid JSON")


def test_a_broken_first_line_followed_by_non_json_whitespace_is_json_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"[1, x\n\x0c\n")  # the error is on line 1, and \x0c is not JSON whitespace
    out = list(read_problems(path))
    assert [x.where for x in out] == [f"{path}:1", f"{path}:2"]


def test_a_cut_off_array_is_called_truncated_and_a_broken_one_is_not(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[\n {"a": 1},\n')
    with pytest.raises(InputFileError, match=r" \(the file ends inside the array: truncated\?\)$"):
        list(read_problems(path))
    path.write_text('[\n  {"a": 1},\n  {"b" 2}\n]\n')
    with pytest.raises(InputFileError) as exc:
        list(read_problems(path))
    assert str(exc.value).endswith("(char 21)")


def test_line_numbers_of_array_errors_count_leading_blank_lines(tmp_path):
    path = tmp_path / "p.json"
    body = json.dumps([STDIO], indent=1)
    path.write_text("\n" + body + "\n[1]\n")
    with pytest.raises(InputFileError, match=f"ends at line {body.count(chr(10)) + 2}$"):
        list(read_problems(path))


def test_a_non_utf8_byte_in_an_array_names_its_line_and_column(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(b'\n[\n  {"a": "x\xff"}\n]\n')
    with pytest.raises(InputFileError) as exc:
        list(read_problems(path))
    assert str(exc.value) == (f"{path}: byte 0xff at line 3 column 11 is not UTF-8 "
                              "(a JSON array file must be UTF-8 throughout)")


def test_a_statement_with_latex_escapes_reads_without_warnings():
    import warnings

    prompt = 'def solve():\n    """\n    Print 1 \\le n \\cdot 2.\n    """\n'
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = problem_from_apps_plus({**STDIO, "prompt": prompt}, "f:1")
    assert p.statement == "Print 1 \\le n \\cdot 2."


@pytest.mark.parametrize("key", ["prompt", "starter_code"])
def test_prompt_and_starter_code_must_be_text(key):
    with pytest.raises(ProblemFormatError, match=f"^`{key}` must be a string, got list$"):
        problem_from_apps_plus({**STDIO, key: ["def solve():"]}, "f:1")


def test_a_starter_without_entry_point_is_quoted_cut_to_80_characters():
    starter = "x = 1  # " + "y" * 200
    with pytest.raises(ProblemFormatError) as exc:
        problem_from_apps_plus({**STDIO, "starter_code": starter}, "f:1")
    assert str(exc.value).endswith(f"entry point: {starter[:80]!r}")


def test_outputs_that_are_not_a_list_are_named():
    with pytest.raises(ProblemFormatError, match="^`outputs` must be a list, got int$"):
        problem_from_apps_plus({**STDIO, "outputs": 4}, "f:1")


def test_an_apps_record_without_starter_code_has_an_empty_one():
    rec = {k: v for k, v in APPS.items() if k != "starter_code"}
    assert problem_from_apps(rec, "f:1").starter_code == ""


@pytest.mark.parametrize("io,message", [({"outputs": ["1\n"]}, "^0 inputs but 1 outputs$"),
                                        ({"inputs": ["1\n"]}, "^1 inputs but 0 outputs$"),
                                        ({}, "^no tests$")])
def test_an_apps_record_without_inputs_or_outputs_is_an_error(io, message):
    with pytest.raises(ProblemFormatError, match=message):
        problem_from_apps({**APPS, "input_output": json.dumps(io)}, "f:1")


def test_a_file_starting_with_non_json_whitespace_is_json_lines(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"\x0c[1]\n" + json.dumps(STDIO).encode() + b"\n")
    out = list(read_problems(path))
    assert [type(x) for x in out] == [RecordError, Problem]
    path.write_bytes(b"\x0c[1]\n")  # one line: still a record, not a broken array document
    assert [x.where for x in read_problems(path)] == [f"{path}:1"]


def test_raw_text_of_a_bad_array_item_keeps_non_ascii_text(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([{"prompt": "é"}], ensure_ascii=False), encoding="utf-8")
    assert next(read_problems(path)).raw == '{"prompt": "é"}'


def test_raw_text_is_the_line_as_written_and_at_most_2000_characters(tmp_path):
    path = tmp_path / "p.jsonl"
    long_string = json.dumps("s" * 3000)
    path.write_text("[1,2]\n" + "{" * 2500 + "\n" + long_string + "\n")
    out = list(read_problems(path))
    assert out[0].raw == "[1,2]"  # the line, not a re-encoding of the value
    assert out[1].reason.startswith("line is not valid JSON") and out[1].raw == "{" * 2000
    assert out[2].reason == "record is not an object: a JSON string" and out[2].raw == long_string[:2000]


def test_an_undecodable_output_literal_is_kept_and_noted():
    p = problem_from_apps_plus({**CALL, "inputs": [[1]], "outputs": [["(("]]}, "f:1")
    assert p.outputs == ["(("] and p.notes == ("undecoded_literal",)


def test_an_apps_record_without_any_id_is_named_by_its_position():
    rec = {k: v for k, v in APPS.items() if k != "problem_id"}
    assert problem_from_record(rec, "f:9").source_id == "f:9"


def test_a_bad_parquet_row_with_array_values_still_shows_its_text(tmp_path):
    import pandas as pd

    path = tmp_path / "apps.parquet"
    pd.DataFrame([{**APPS, "question": "", "tags": ["a", "b"]}]).to_parquet(path)
    err = next(read_problems(path))
    raw = json.loads(err.raw)  # JSON text, array values written as text
    assert err.reason == "missing field `question`" and raw["problem_id"] == 42 and isinstance(raw["tags"], str)


def test_an_array_cut_right_after_a_comma_is_called_truncated(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('[\n {"a": 1},')
    with pytest.raises(InputFileError, match=r"truncated\?\)$"):
        list(read_problems(path))


def test_non_json_whitespace_after_an_array_is_extra_data(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps([STDIO], indent=1) + "\n\x0c\n")
    with pytest.raises(InputFileError, match="extra data after the JSON array"):
        list(read_problems(path))


def test_a_non_utf8_byte_on_line_two_after_a_leading_newline(tmp_path):
    path = tmp_path / "p.json"
    path.write_bytes(b'\n["\xff"]\n')
    with pytest.raises(InputFileError, match="byte 0xff at line 2 column 3 is not UTF-8"):
        list(read_problems(path))
