"""`mrgrpo score`: canonical check of an APPS+ file and scoring of (problem, solution) pairs."""

from __future__ import annotations

import json

import pytest

from mrgrpo.score_cli import main

GT = {"inputs": ["1 2\n"], "outputs": ["3\n"]}


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    assert "--pairs" in capsys.readouterr().out


def test_input_checks_canonical_solutions(tmp_path, sample_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["--input", str(sample_path), "--limit", "12", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all(r["verdict"] == "AC" for r in rows)
    assert "AC" in capsys.readouterr().out


def test_pairs_with_every_kind_of_line(tmp_path, capsys):
    pairs = tmp_path / "pairs.jsonl"
    lines = [
        {"id": "good", "ground_truth": GT, "code": "a, b = map(int, input().split())\nprint(a + b)"},
        {"id": "wrong", "ground_truth": json.dumps(GT), "response": "```python\nprint(4)\n```"},
        {"id": "nocode", "ground_truth": GT, "response": "no code"},
        {"id": "bad"},
    ]
    pairs.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    out = tmp_path / "out" / "r.jsonl"
    assert main(["--pairs", str(pairs), "--out", str(out), "--all-tests", "--workers", "2"]) == 0
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["good"]["verdict"] == "AC"
    assert rows["wrong"]["verdict"] == "WA" and rows["wrong"]["first_failure"]["stdout"] == "4\n"
    assert rows["nocode"]["verdict"] == "NO_CODE"
    assert rows["pairs.jsonl:4"]["verdict"] == "BAD_RECORD"
    table = capsys.readouterr().out
    assert "WA" in table and "failing items" in table


def test_pairs_with_an_apps_plus_problem_record(tmp_path, sample_path):
    record = json.loads(sample_path.read_text().splitlines()[0])
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"problem": record, "code": record["canonical_solution"] + "\nprint('x')"}) + "\n")
    out = tmp_path / "r.jsonl"
    assert main(["--pairs", str(pairs), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["verdict"] == "WA"


def test_missing_file_is_a_usage_error(tmp_path):
    assert main(["--input", str(tmp_path / "nope.jsonl")]) == 2
