"""A verdict never depends on what ran before it on the same slot.

Each attack below ends (killed or not) leaving work for the kernel: processes to reap, memory and IPC objects to
free, files on a tmpfs, a full pipe. Right after it, on the same slot (sequential jobs from one thread reuse the
slot the last one released), an honest program that uses what a test may use (threads, child processes, most of its
memory, a file) must pass. One attack class per parameter; each pair runs twice to give a race a second chance.
CI once saw the honest program OOM-killed after a SysV flood, whose segment the kernel frees later.
"""

from __future__ import annotations

import textwrap

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run

LIMITS = Limits(time_s=1, wall_s=3, memory_mb=256)
HONEST_LIMITS = Limits(time_s=4, wall_s=10, memory_mb=256)

HONEST = """
import os, threading
b = bytearray(150 << 20)
b[::4096] = b"x" * len(b[::4096])
with open("scratch", "wb") as f:
    f.write(b"y" * (8 << 20))
threads = [threading.Thread(target=sum, args=(range(200000),)) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    pids.append(pid)
assert all(os.waitpid(p, 0)[1] == 0 for p in pids)
print("none")
"""

ATTACKS = {
    "fork_bomb": """
        import os, time
        while True:
            try:
                os.fork()
            except OSError:
                time.sleep(10)
        """,
    "memory_over_processes": """
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                break
        b = bytearray(200 << 20)
        b[::4096] = b"x" * len(b[::4096])
        time.sleep(10)
        """,
    "sysv_shared_memory": """
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmat.restype = ctypes.c_void_p
        addr = libc.shmat(libc.shmget(0, 600 << 20, 0o1000 | 0o600), None, 0)
        ctypes.memset(addr, 1, 600 << 20)
        """,
    "files_until_full": """
        import itertools, time
        for i in itertools.count():
            try:
                with open(f"f{i}", "wb") as f:
                    f.write(b"z" * (8 << 20))
            except OSError:
                time.sleep(10)
        """,
    "thread_flood": """
        import threading, time
        while True:
            try:
                threading.Thread(target=time.sleep, args=(10,), daemon=True).start()
            except RuntimeError:
                time.sleep(10)
        """,
    "orphans_spinning": """
        import os
        for _ in range(4):
            if os.fork() == 0:
                os.setsid()
                while True:
                    pass
        """,
    "output_flood": """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
        """,
    "sleeping_daemon_holding_the_pipes": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            time.sleep(30)
        print("none")
        """,
}


def _job(code: str, limits: Limits) -> Job:
    return Job(code=textwrap.dedent(code), inputs=[""], outputs=["none"], limits=limits)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_honest_program_passes_right_after_an_attack_on_the_same_slot(attack):
    verdicts = []
    for _ in range(2):
        first = run(_job(ATTACKS[attack], LIMITS))
        second = run(_job(HONEST, HONEST_LIMITS))
        verdicts.append((first.verdict is not Verdict.INFRA, second.verdict, second.detail))
    assert verdicts == [(True, Verdict.AC, "all tests passed")] * 2
