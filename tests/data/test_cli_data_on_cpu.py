"""`mrgrpo data` off the happy path (issue 16): one-line errors with the documented exit codes, checks before any
work, a lock per --out, no 0-row parquet, the closing summary, and Ctrl-C during validate (SIGINT to a child)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mrgrpo.data import store
from mrgrpo.data.cli import main

REPO = Path(__file__).resolve().parents[2]


def record(i: int, sleep_s: float = 0.0, **changes) -> dict:
    """A small stdio APPS+ record whose reference doubles a number (optionally sleeping first)."""
    pre = f"import time\ntime.sleep({sleep_s})\n" if sleep_s else ""
    rec = {
        "prompt": f'\ndef f():\n    """Problem {i}: print twice the number N read from standard input."""\n',
        "canonical_solution": pre + "\ndef f():\n    print(int(input()) * 2)\n",
        "starter_code": "\ndef f():\n",
        "inputs": ["1\n", "2\n", str(i) + "\n"],
        "outputs": ["2\n", "4\n", str(2 * i) + "\n"],
        "difficulty": "introductory",
        "id": f"t{i}",
    }
    rec.update(changes)
    return rec


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(argv, capsys) -> tuple[int, str, str]:
    """main(argv) in process: (exit status, stdout, stderr); argparse errors exit through SystemExit."""
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


# ---------------------------------------------------------------- item 2: one clear line per error


def test_truncated_json_array_is_one_line_naming_the_file(tmp_path, capsys):
    text = json.dumps([record(1), record(2)])
    bad = tmp_path / "cut.json"
    bad.write_text(text[: len(text) // 2])
    rc, _, err = run(["validate", "--input", bad, "--out", tmp_path / "o", "--no-run-reference"], capsys)
    assert rc == 1
    assert str(bad) in one_line(err) and "truncated" in err


def test_a_non_utf8_byte_costs_one_record_named_by_line(tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    good = [json.dumps(record(i)).encode() for i in (1, 2)]
    path.write_bytes(good[0] + b"\n" + b'{"prompt": "\xff"}\n' + good[1] + b"\n")
    rc, out, err = run(["prepare", "--input", path, "--out", tmp_path / "o", "--no-run-reference"], capsys)
    assert rc == 0, err
    assert "records 3: kept 2, quarantined 1" in out
    (q,) = store.read_jsonl(tmp_path / "o" / "quarantine.jsonl")
    assert q["where"] == f"{path}:2" and "UTF-8" in q["detail"]


def test_a_first_jsonl_line_that_is_an_array_is_quarantined_not_taken_for_the_file(tmp_path, capsys):
    path = tmp_path / "in.jsonl"
    path.write_text("[1, 2]\n" + json.dumps(record(1)) + "\n" + json.dumps(record(2)) + "\n")
    rc, out, err = run(["prepare", "--input", path, "--out", tmp_path / "o", "--no-run-reference"], capsys)
    assert rc == 0, err
    assert "kept 2, quarantined 1" in out


def test_a_directory_as_input_is_a_usage_error(tmp_path, capsys):
    rc, _, err = run(["validate", "--input", tmp_path, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "is a directory" in one_line(err)
    rc, _, err = run(["validate", "--input", tmp_path / "missing.jsonl", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "not found" in one_line(err)


def test_an_output_directory_that_cannot_be_created_is_a_usage_error(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    rc, _, err = run(["prepare", "--out", blocker / "sub", "--no-run-reference"], capsys)
    assert rc == 2 and "--out" in one_line(err) and "cannot create" in err
    rc, _, err = run(["prepare", "--out", blocker, "--no-run-reference"], capsys)
    assert rc == 2 and "not a directory" in one_line(err)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["build", "--val-fraction", "2"], "--val-fraction"),
        (["prepare", "--public-tests", "-3"], "--public-tests"),
        (["prepare", "--ref-time-s", "0"], "--ref-time-s"),
        (["plans", "--concurrency", "0"], "--concurrency"),
        (["plans", "--extra-body", "[1]"], "--extra-body"),
        (["prepare", "--val-fraction", "nan"], "--val-fraction"),
    ],
)
def test_option_ranges_are_checked_by_the_parser(tmp_path, capsys, argv, option):
    rc, _, err = run([*argv, "--out", tmp_path / "o"], capsys)
    assert rc == 2 and option in one_line(err) and "--help" in err
    assert not (tmp_path / "o").exists()  # refused before anything was created


def test_a_record_whose_prompt_is_a_list_is_quarantined_and_the_run_goes_on(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [record(1, prompt=["not", "a", "string"]), record(2)])
    rc, out, err = run(["prepare", "--input", path, "--out", tmp_path / "o", "--no-run-reference"], capsys)
    assert rc == 0, err
    assert "kept 1, quarantined 1" in out


# ---------------------------------------------------------------- item 3: nothing to build is an error


def test_an_empty_input_is_an_error_not_a_0_row_parquet(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    rc, _, err = run(["prepare", "--input", empty, "--out", tmp_path / "o"], capsys)
    assert rc == 1 and "no records" in one_line(err)
    assert not (tmp_path / "o" / "train.parquet").exists()


def test_every_record_bad_is_an_error_naming_the_reasons(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n')
    rc, _, err = run(["prepare", "--input", path, "--out", tmp_path / "o"], capsys)
    line = one_line(err)
    assert rc == 1 and "all 2 quarantined" in line and "schema 2" in line and "quarantine.jsonl" in line
    assert not (tmp_path / "o" / "train.parquet").exists()
    assert len(list(store.read_jsonl(tmp_path / "o" / "quarantine.jsonl"))) == 2  # the reasons stay readable


def test_stages_before_validate_say_which_command_comes_first(tmp_path, capsys):
    rc, _, err = run(["build", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "mrgrpo data validate --out" in one_line(err)


# ---------------------------------------------------------------- item 4: checks before expensive work


def test_a_missing_api_key_is_found_before_any_reference_run(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MRGRPO_TEST_NO_SUCH_KEY", raising=False)
    out = tmp_path / "o"
    rc, _, err = run(["prepare", "--out", out, "--plans", "sync", "--api-key-env", "MRGRPO_TEST_NO_SUCH_KEY"], capsys)
    assert rc == 2 and "MRGRPO_TEST_NO_SUCH_KEY is not set" in one_line(err)
    assert not (out / "cache").exists() and not (out / "problems.jsonl").exists()
    rc, _, err = run(["prepare", "--out", out, "--plans", "batch", "--base-url", "dashscope.example"], capsys)
    assert rc == 2 and "--base-url" in one_line(err)


def test_an_unreachable_api_is_found_before_any_reference_run(tmp_path, capsys, monkeypatch):
    import socket

    with socket.socket() as s:  # a local port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MRGRPO_TEST_KEY", "sk-test")
    for proxy in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
        monkeypatch.delenv(proxy, raising=False)
    out = tmp_path / "o"
    rc, _, err = run(["prepare", "--out", out, "--plans", "sync", "--api-key-env", "MRGRPO_TEST_KEY",
                      "--base-url", f"http://127.0.0.1:{port}/v1"], capsys)
    assert rc == 2 and f"cannot connect to 127.0.0.1:{port}" in one_line(err)
    assert not (out / "problems.jsonl").exists()


def test_another_input_on_the_same_out_is_refused_unless_forced(tmp_path, capsys):
    a = write_jsonl(tmp_path / "a.jsonl", [record(1), record(2)])
    b = write_jsonl(tmp_path / "b.jsonl", [record(3), record(4), record(5)])
    out = tmp_path / "o"
    assert run(["prepare", "--input", a, "--out", out, "--no-run-reference"], capsys)[0] == 0
    rc, _, err = run(["prepare", "--input", b, "--out", out, "--no-run-reference"], capsys)
    line = one_line(err)
    assert rc == 2 and str(a) in line and str(b) in line and "--force" in line
    assert json.loads((out / "report.json").read_text())["counts"]["records"] == 2  # untouched
    rc, out_text, err = run(["prepare", "--input", b, "--out", out, "--no-run-reference", "--force"], capsys)
    assert rc == 0 and "records 3" in out_text, err
    # the same input again (even through another path with the same bytes) is fine
    copy = tmp_path / "b_copy.jsonl"
    copy.write_bytes(b.read_bytes())
    assert run(["prepare", "--input", copy, "--out", out, "--no-run-reference"], capsys)[0] == 0


def test_a_second_run_on_a_locked_out_is_refused(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a running `mrgrpo data` holds
        rc, _, err = run(["prepare", "--out", out, "--no-run-reference"], capsys)
        assert rc == 2 and "in use by another mrgrpo data run" in one_line(err)
        assert not (out / "problems.jsonl").exists()
    finally:
        os.close(fd)
    assert run(["prepare", "--out", out, "--no-run-reference"], capsys)[0] == 0  # released: it runs


# ---------------------------------------------------------------- item 6: help, summary


def test_help_shows_defaults_examples_and_exit_codes(capsys):
    rc, out, _ = run(["prepare", "--help"], capsys)
    assert rc == 0
    flat = " ".join(out.split())
    for text in ("(default: 0.1)", "(default: 1)", "48 h", "examples:", "mrgrpo data prepare --out", "130"):
        assert text in flat, text
    for cmd in ("validate", "plans", "build", "report"):
        rc, out, _ = run([cmd, "--help"], capsys)
        assert rc == 0 and "example" in out and "--quiet" in out, cmd
    # the synthetic problems are the learnability study's (python -m learnability synth), not a product command
    rc, _, err = run(["synth", "--help"], capsys)
    assert rc == 2 and "invalid choice: 'synth'" in err


def test_the_summary_names_the_files_written_and_the_next_command(tmp_path, capsys):
    path = write_jsonl(tmp_path / "in.jsonl", [record(i) for i in range(1, 6)])
    out = tmp_path / "o"
    rc, stdout, err = run(["prepare", "--input", path, "--out", out, "--no-run-reference", "--quiet"], capsys)
    assert rc == 0
    assert "records 5" in stdout
    wrote, nxt = err.strip().splitlines()[-2:]
    assert "train.parquet" in wrote and "val.parquet" in wrote and "report.json" in wrote
    assert nxt.startswith(f"next: DATA_DIR={out} bash recipe/mrgrpo/run_qwen3_apps.sh")


# ---------------------------------------------------------------- item 1: Ctrl-C during validate


def test_ctrl_c_during_reference_runs_keeps_finished_ones_and_exits_130(tmp_path):
    """SIGINT to a real `mrgrpo data validate` while slow references run: exit 130, the one-line message, every
    finished run in the cache; the rerun runs only the rest."""
    n = 24
    path = write_jsonl(tmp_path / "slow.jsonl", [record(i, sleep_s=0.3) for i in range(1, n + 1)])
    out = tmp_path / "o"
    cmd = [sys.executable, "-m", "mrgrpo", "data", "validate", "--input", str(path), "--out", str(out), "--quiet"]
    cache = out / "cache" / "reference_runs.jsonl"
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if cache.is_file() and len(cache.read_text().splitlines()) >= 2:
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        else:
            pytest.fail("no reference run was saved")
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
    keys = [row["key"] for row in store.read_jsonl(cache)]
    assert saved == len(keys) == len(set(keys)) and 2 <= saved < n
    assert not (out / "problems.jsonl").exists()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"({n - saved} reference runs)" in r.stdout and f"records {n}: kept {n}" in r.stdout
    keys = [row["key"] for row in store.read_jsonl(cache)]
    assert len(keys) == len(set(keys)) == n  # one line per job
