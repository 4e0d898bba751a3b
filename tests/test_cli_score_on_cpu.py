"""`mrgrpo score` off the happy path (issue 16): one-line errors, option ranges, bad pairs lines, nothing to run,
and Ctrl-C with --out (SIGINT to a child): results saved as they complete, the rerun scores only the rest."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrgrpo.score_cli import main

REPO = Path(__file__).resolve().parents[1]
GT = {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}
DOUBLE = "print(int(input()) * 2)"


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        rc = main([str(a) for a in argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def pairs_file(path: Path, lines) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


@pytest.mark.parametrize(("option", "value"), [("--time-s", "0"), ("--workers", "0"), ("--memory-mb", "-1"),
                                               ("--limit", "x")])
def test_option_ranges(tmp_path, capsys, option, value):
    pairs = pairs_file(tmp_path / "p.jsonl", [{"ground_truth": GT, "code": DOUBLE}])
    rc, _, err = run(["--pairs", pairs, option, value], capsys)
    assert rc == 2 and option in one_line(err)


def test_a_non_string_code_and_other_bad_lines_are_bad_records_not_tracebacks(tmp_path, capsys):
    pairs = pairs_file(tmp_path / "p.jsonl", [
        {"id": "ok", "ground_truth": GT, "code": DOUBLE},
        {"id": "int_code", "ground_truth": GT, "code": 123},
        {"id": "list_response", "ground_truth": GT, "response": ["x"]},
        "[1, 2]",
        "{not json",
    ])
    with open(pairs, "ab") as f:
        f.write(b'{"code": "\xff"}\n')
    out = tmp_path / "r.jsonl"
    rc, stdout, err = run(["--pairs", pairs, "--out", out], capsys)
    assert rc == 0 and "Traceback" not in err
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["ok"]["verdict"] == "AC"
    # a bad line is reported under its file:line, its id in the detail
    assert rows["p.jsonl:2"]["verdict"] == "BAD_RECORD"
    assert "`code` must be a string, got int (id int_code)" in rows["p.jsonl:2"]["detail"]
    assert rows["p.jsonl:3"]["verdict"] == "BAD_RECORD" and "`response` must be a string" in rows["p.jsonl:3"]["detail"]
    assert rows["p.jsonl:4"]["verdict"] == rows["p.jsonl:5"]["verdict"] == "BAD_RECORD"
    assert "UTF-8" in rows["p.jsonl:6"]["detail"]


def test_nothing_to_run_is_an_error(tmp_path, capsys):
    pairs = pairs_file(tmp_path / "p.jsonl", [{"ground_truth": GT, "code": 1}])
    rc, _, err = run(["--pairs", pairs], capsys)
    assert rc == 1 and "none of the 1 items" in one_line(err)
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    rc, _, err = run(["--input", empty], capsys)
    assert rc == 1 and "no items" in one_line(err)


def test_bad_files_are_one_line(tmp_path, capsys):
    rc, _, err = run(["--input", tmp_path], capsys)
    assert rc == 2 and "directory" in one_line(err)
    cut = tmp_path / "cut.json"
    cut.write_text('[{"prompt": "x", "inputs": [')
    rc, _, err = run(["--input", cut], capsys)
    assert rc == 1 and str(cut) in one_line(err)
    pairs = pairs_file(tmp_path / "p.jsonl", [{"ground_truth": GT, "code": DOUBLE}])
    rc, _, err = run(["--pairs", pairs, "--out", tmp_path], capsys)
    assert rc == 2 and "--out" in one_line(err)


def test_help_shows_defaults_and_examples(capsys):
    rc, out, _ = run(["--help"], capsys)
    flat = " ".join(out.split())
    assert rc == 0 and "(default: 20)" in flat and "examples:" in flat and "--quiet" in flat and "130" in flat


def test_ctrl_c_saves_results_as_they_complete_and_the_rerun_resumes(tmp_path):
    n = 24
    slow = "import time\ntime.sleep(0.3)\n" + DOUBLE
    pairs = pairs_file(tmp_path / "p.jsonl", [{"id": f"i{i}", "ground_truth": GT, "code": slow} for i in range(n)])
    out = tmp_path / "r.jsonl"
    partial = tmp_path / "r.jsonl.partial"
    cmd = [sys.executable, "-m", "mrgrpo", "score", "--pairs", str(pairs), "--out", str(out), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if partial.is_file() and len(partial.read_text().splitlines()) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("no result was saved")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    m = re.fullmatch(r"interrupted: (\d+) saved, re-run to resume", stderr.strip().splitlines()[-1])
    assert m, stderr
    saved = int(m.group(1))
    assert saved == len(partial.read_text().splitlines()) and 2 <= saved < n
    assert not out.exists()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{n - saved} run in" in r.stdout and f"{saved} from an interrupted run" in r.stdout
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["id"] for row in rows] == [f"i{i}" for i in range(n)] and all(row["verdict"] == "AC" for row in rows)
    assert not partial.exists()


def test_two_runs_on_one_out_are_refused_by_a_lock(tmp_path, capsys):
    import fcntl
    import os

    pairs = pairs_file(tmp_path / "p.jsonl", [{"ground_truth": GT, "code": DOUBLE}])
    out = tmp_path / "r.jsonl"
    fd = os.open(tmp_path / "r.jsonl.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running `mrgrpo score --out r.jsonl` holds
        rc, _, err = run(["--pairs", pairs, "--out", out], capsys)
        assert rc == 2 and "in use by another mrgrpo score run" in one_line(err) and not out.exists()
    finally:
        os.close(fd)
    assert run(["--pairs", pairs, "--out", out], capsys)[0] == 0 and out.exists()
