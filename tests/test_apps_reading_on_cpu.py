"""mrgrpo.apps file reading: JSON Lines framing, encodings and JSON array documents, one property per test."""

from __future__ import annotations

import json
import re

import pytest

from mrgrpo.apps import Problem, ProblemFormatError, RecordError, read_problems


def record(i: int, stdin: str = "\n") -> dict:
    return {
        "id": f"r{i}",
        "prompt": 'def f():\n    """Print 1."""\n',
        "starter_code": "def f():\n",
        "inputs": [stdin],
        "outputs": ["1\n"],
        "canonical_solution": "def f():\n    print(1)\n",
        "difficulty": "introductory",
    }


def line(rec: dict) -> str:
    return json.dumps(rec, ensure_ascii=False)


# Every character str.splitlines() ends a line at, except "\n" and "\r\n". JSON writers escape the control
# characters among them, but a record may still hold them raw (and U+2028/U+2029/U+0085 are raw by default).
SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\r"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
def test_a_record_is_one_newline_terminated_line_whatever_it_contains(tmp_path, sep):
    middle = line(record(2, stdin="a SEP b\n")).replace("SEP", sep)
    path = tmp_path / "in.jsonl"
    path.write_bytes("\r\n".join([line(record(1)), middle, line(record(3))]).encode() + b"\r\n")
    items = list(read_problems(path))
    assert [type(x) for x in items] == [Problem, Problem, Problem], items
    assert items[1].inputs == [f"a {sep} b\n"]


def test_a_byte_that_is_not_utf8_costs_only_its_line(tmp_path):
    path = tmp_path / "in.jsonl"
    bad = line(record(2, stdin="caf\x00\n")).encode().replace(b"\\u0000", b"\xff")
    path.write_bytes(b"\n".join([line(record(1)).encode(), bad, line(record(3)).encode()]) + b"\n")
    items = list(read_problems(path))
    assert [type(x) for x in items] == [Problem, RecordError, Problem]
    assert items[1].where == f"{path}:2"
    assert "not valid UTF-8" in items[1].reason and "0xff" in items[1].reason


@pytest.mark.parametrize("kind", ["jsonl", "json_array"])
def test_a_utf8_byte_order_mark_is_skipped(tmp_path, kind):
    recs = [record(1), record(2)]
    text = "".join(line(r) + "\n" for r in recs) if kind == "jsonl" else json.dumps(recs, indent=2)
    path = tmp_path / "in.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    items = list(read_problems(path))
    assert [p.source_id for p in items] == ["r1", "r2"]


def test_jsonl_whose_first_line_is_an_array_is_read_as_jsonl(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("[1, 2]\n" + line(record(2)) + "\n" + line(record(3)) + "\n")
    items = list(read_problems(path))
    assert [type(x) for x in items] == [RecordError, Problem, Problem]
    assert items[0].where == f"{path}:1" and "not an object" in items[0].reason


def test_a_byte_that_is_not_utf8_in_a_json_array_names_file_and_line(tmp_path):
    text = json.dumps([record(1), record(2, stdin="caf\x00\n")], indent=1)
    path = tmp_path / "in.json"
    path.write_bytes(text.encode().replace(b"\\u0000", b"\xff"))
    bad_line = text[: text.index("\\u0000")].count("\n") + 1
    with pytest.raises(
        ProblemFormatError, match=rf"{re.escape(str(path))}: byte 0xff at line {bad_line} column \d+ is not UTF-8"
    ):
        list(read_problems(path))


def test_a_directory_as_input_is_a_clear_error(tmp_path):
    with pytest.raises(ProblemFormatError, match=rf"{re.escape(str(tmp_path))} is a directory"):
        list(read_problems(tmp_path))


# Guards of the array/JSONL decision (these also held before the reader was rewritten).


@pytest.mark.parametrize("indent", [None, 2])
def test_json_array_documents_are_read_item_by_item(tmp_path, indent):
    path = tmp_path / "in.json"
    path.write_text(json.dumps([record(1), 7, record(3)], indent=indent))
    items = list(read_problems(path))
    assert [type(x) for x in items] == [Problem, RecordError, Problem]
    assert items[1].where == f"{path}:2" and "not an object: a JSON number" in items[1].reason


@pytest.mark.parametrize("indent", [None, 2])
def test_a_truncated_json_array_is_an_error_naming_file_and_position(tmp_path, indent):
    text = json.dumps([record(1), record(2)], indent=indent)
    cut = text[: len(text) - 40]
    path = tmp_path / "in.json"
    path.write_text(cut)
    lineno = cut.count("\n") + 1
    with pytest.raises(
        ProblemFormatError, match=rf"{re.escape(str(path))}: not a valid JSON array: .* at line {lineno} column \d+"
    ):
        list(read_problems(path))
