"""Without namespaces or Landlock the sandbox still runs honest programs, warns once, and keeps the runner safe."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run
from mrgrpo.sandbox import pool as pool_mod


@pytest.fixture(params=[{"namespaces"}, {"landlock"}, {"namespaces", "landlock"}], ids=lambda d: "+".join(sorted(d)))
def degraded(request, monkeypatch):
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", set(request.param))
    yield request.param
    pool_mod.shutdown()


def test_degraded_mode_judges_and_warns_once(degraded, caplog):
    with caplog.at_level(logging.WARNING, logger="mrgrpo.sandbox"):
        assert run(Job(code="print(int(input()) + 1)", inputs=["1", "2"], outputs=["2", "3"])).verdict is Verdict.AC
        assert run(Job(code="print(2)", inputs=[""], outputs=["1"])).verdict is Verdict.WA
    warnings = [r.getMessage() for r in caplog.records if r.name == "mrgrpo.sandbox"]
    assert len(warnings) == len(degraded)  # one line per missing layer, once per process


def test_degraded_mode_contains_kill_all_and_writes(degraded, tmp_path):
    # A process of the runner's user outside the sandbox: kill(-1) must not reach it (nor the runner itself).
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    target = tmp_path / "pwned"
    code = f"""
        import os, signal
        try: os.kill(-1, signal.SIGKILL)
        except OSError: pass
        try: open({str(target)!r}, 'w').write('x')
        except OSError: pass
        print('done')
    """
    try:
        result = run(Job(code=textwrap.dedent(code), inputs=[""], outputs=["done"], limits=Limits(time_s=1, wall_s=2)))
        assert result.verdict is Verdict.AC, result  # the program ran to its end, then the write was refused
        assert not target.exists()
        assert bystander.poll() is None  # not signalled: a SIGKILL would have ended it (returncode -9)
        assert run(Job(code="print(1)", inputs=[""], outputs=["1"])).verdict is Verdict.AC  # the slot survived
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.parametrize("disable", [set(), {"test_tmpfs"}, {"namespaces"}], ids=["all", "no-tmpfs", "no-namespaces"])
def test_every_mode_runs_the_program_in_the_same_process_state(monkeypatch, disable):
    """The zygote sets the program's process state once for every test (the per-test directory in HOME and TMPDIR,
    argv, no int/str digit limit, SIGXFSZ ignored): it holds in every test of a job, whether each test runs in the
    same directory (a tmpfs per test) or in a new one (no tmpfs)."""
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", disable)
    code = ("import os, signal, sys\nprint(os.environ['HOME'] == os.environ['TMPDIR'] == os.getcwd(), sys.argv, "
            "len(str(10 ** 5000)), signal.getsignal(signal.SIGXFSZ) is signal.SIG_IGN)")
    try:
        result = run(Job(code=code, inputs=["", "", ""], outputs=["True ['solution.py'] 5001 True"] * 3))
        assert result.verdict is Verdict.AC, result
    finally:
        pool_mod.shutdown()
