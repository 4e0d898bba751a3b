"""mrgrpo.apps: every record of a file becomes a Problem or a RecordError naming where and why."""

from __future__ import annotations

import json

import pytest

from mrgrpo.apps import Problem, RecordError, read_problems


def test_bundled_sample_parses_completely(sample_path):
    items = list(read_problems(sample_path))
    assert len(items) == 150
    assert all(isinstance(p, Problem) for p in items)
    modes = {(p.io_mode, p.class_name) for p in items}
    assert modes == {("stdio", None), ("call", None), ("call", "Solution")}


def test_stdio_reference_calls_the_zero_argument_function(sample_path):
    p = next(p for p in read_problems(sample_path) if p.io_mode == "stdio")
    name = p.reference_solution.strip().splitlines()[-1]
    assert name.endswith("()") and f"def {name[:-2]}(" in p.reference_solution
    assert all(isinstance(x, str) for x in p.inputs + p.outputs)


def test_call_based_quoted_literals_are_decoded(sample_path):
    p = next(p for p in read_problems(sample_path) if p.fn_name == "meters")
    assert p.inputs == [[1], [999], [123456]]
    assert p.outputs == ["1m", "999m", "123.456km"]
    assert p.ground_truth()["outputs"] == [["1m"], ["999m"], ["123.456km"]]
    assert p.ground_truth()["fn_name"] == "meters"


def test_bad_records_become_errors_not_crashes(tmp_path):
    good = {"prompt": 'def f():\n    """Print 1."""\n', "starter_code": "def f():\n", "inputs": ["\n"],
            "outputs": ["1\n"], "canonical_solution": "def f():\n    print(1)\n", "difficulty": "introductory"}
    lines = [json.dumps(good), "{not json", json.dumps({"prompt": "x"}),
             json.dumps({**good, "outputs": ["1\n", "2\n"]}), json.dumps([1, 2])]
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n")
    items = list(read_problems(path))
    assert isinstance(items[0], Problem)
    errors = items[1:]
    assert all(isinstance(e, RecordError) for e in errors)
    assert [e.where for e in errors] == [f"{path}:{i}" for i in (2, 3, 4, 5)]
    assert "not valid JSON" in errors[0].reason
    assert "starter_code" in errors[1].reason
    assert "1 inputs but 2 outputs" in errors[2].reason


def test_original_apps_record(tmp_path):
    rec = {"problem_id": 7, "question": "Add two numbers.", "difficulty": "interview", "starter_code": "",
           "solutions": json.dumps(["a,b=map(int,input().split())\nprint(a+b)\n"]),
           "input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    path = tmp_path / "apps.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    (p,) = list(read_problems(path))
    assert (p.data_source, p.io_mode, p.source_id, p.difficulty) == ("apps", "stdio", "7", "interview")


def test_missing_file_raises_with_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        list(read_problems(tmp_path / "nope.jsonl"))
