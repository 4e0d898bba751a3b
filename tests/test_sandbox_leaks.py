"""Nothing is left behind: processes, files, descriptors. A short check always; 10,000 executions as `slow`."""

from __future__ import annotations

import gc
import os

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run_batch, shutdown
from mrgrpo.sandbox import pool as pool_mod

MIX = [
    ("print(input())", Verdict.AC),
    ("print('wrong')", Verdict.WA),
    ("1/0", Verdict.RE),
    ("import os\nif os.fork() == 0:\n    os.setsid(); import time; time.sleep(30)\nprint(input())", Verdict.AC),
    ("open('f', 'w').write('x' * 1000)\nprint(input())", Verdict.AC),
    ("while True: pass", Verdict.TLE),
]


def _children() -> set[int]:
    me = str(os.getpid())
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[1] == me:
                    out.add(int(pid))
        except OSError:
            pass
    return out


def _open_fds() -> set[tuple[str, str]]:
    """(fd, target) pairs of this process, after collecting garbage that other tests may have left open."""
    gc.collect()
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
        except OSError:  # the descriptor listdir itself used
            pass
    return out


def _check_no_leaks(n_jobs: int) -> None:
    shutdown()
    fds_before, children_before = _open_fds(), _children()
    fast = Limits(time_s=1, wall_s=2)
    jobs, expected = [], []
    for i in range(n_jobs):
        code, verdict = MIX[i % len(MIX)] if i % 50 == 5 else MIX[i % 5]
        jobs.append(Job(code=code, inputs=[f"x{i}\n"], outputs=[f"x{i}\n"], limits=fast))
        expected.append(verdict)
    results = run_batch(jobs)
    assert [r.verdict for r in results] == expected
    base_dir = pool_mod.get_pool().base_dir
    assert os.path.isdir(base_dir)
    shutdown()
    assert _children() == children_before
    assert _open_fds() <= fds_before  # no descriptor the sandbox opened is still open
    assert not os.path.exists(base_dir)  # slot directories (tmpfs mount points) and test directories are gone
    assert pool_mod._pool is None


def test_no_leftover_processes_files_or_fds():
    _check_no_leaks(60)


@pytest.mark.slow
def test_no_leaks_after_10000_executions():
    _check_no_leaks(10_000)
