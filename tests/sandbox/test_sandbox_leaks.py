"""Nothing is left behind: processes, files, descriptors, SysV IPC objects, kernel keys, processes of sandbox uids,
slot cgroups. A short check always; 10,000 executions as `slow`."""

from __future__ import annotations

import gc
import os

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, admission, run_batch, shutdown
from mrgrpo.sandbox import pool as pool_mod

MIX = [
    ("print(input())", Verdict.AC),
    ("print('wrong')", Verdict.WA),
    ("1/0", Verdict.RE),
    ("import os\nif os.fork() == 0:\n    os.setsid(); import time; time.sleep(30)\nprint(input())", Verdict.AC),
    ("open('f', 'w').write('x' * 1000)\nprint(input())", Verdict.AC),
    ("while True: pass", Verdict.TLE),
]
# Tries to leave state in the kernel: SysV shared memory, a semaphore, a message queue, a key in its user keyring.
STATE = ("""import ctypes, platform
libc = ctypes.CDLL(None)
libc.syscall.restype = ctypes.c_long
for make in (libc.shmget, libc.semget, libc.msgget):
    make(0, 1, 0o1666)
nr = {"x86_64": 248, "aarch64": 217}.get(platform.machine())
if nr:
    libc.syscall(nr, b"user", b"leak", b"x", 1, -4)
print(input())""", Verdict.AC)
_SANDBOX_UIDS = range(1_000_000_000, 2_000_000_000)


def _sysv_objects() -> set[tuple[str, str]]:
    out = set()
    for kind in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{kind}") as f:
            out |= {(kind, line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()}
    return out


def _key_users() -> set[int]:
    """Uids of the sandbox range that own kernel keys."""
    try:
        with open("/proc/key-users") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    return {int(line.split(":")[0]) for line in lines if int(line.split(":")[0]) in _SANDBOX_UIDS}


def _processes_of(uids: set[int]) -> list[int]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid_line = next(line for line in f if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uid_line.split()[1]) in uids:
            out.append(int(pid))
    return out


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
    sysv_before, keys_before = _sysv_objects(), _key_users()
    fast = Limits(time_s=1, wall_s=2)
    jobs, expected = [], []
    for i in range(n_jobs):
        code, verdict = MIX[i % len(MIX)] if i % 50 == 5 else STATE if i % 50 == 17 else MIX[i % 5]
        jobs.append(Job(code=code, inputs=[f"x{i}\n"], outputs=[f"x{i}\n"], limits=fast))
        expected.append(verdict)
    results = run_batch(jobs)
    assert [r.verdict for r in results] == expected
    pool = pool_mod.get_pool()
    base_dir = pool.base_dir
    assert os.path.isdir(base_dir)
    uids = [slot.uid for slot in pool._slots if slot.uid is not None]
    assert len(uids) == len(set(uids))  # every slot its own uid
    cgroup_dirs = [(slot.uid, d) for slot in pool._slots if slot.cgroup is not None for d in slot.cgroup.dirs]
    cgroup_dirs += [(None, slot.cgroup.auto_parent) for slot in pool._slots if slot.cgroup and slot.cgroup.auto_parent]
    shutdown()
    assert _sysv_objects() <= sysv_before  # nothing created in the host's IPC namespace
    assert _key_users() <= keys_before  # no sandbox uid owns a kernel key
    # Other sandbox users on the node (another training job, a test run beside this one) may lease our indices
    # once we let them go: what is under an index leased elsewhere now is theirs.
    # (after our shutdown, a uid index leased at all is leased by another process)
    ours = {uid for uid in uids if not admission.uid_index_leased(uid - pool_mod._UID_BASE)}
    assert _processes_of(ours) == []  # no process left under our slots' uids
    # slot cgroups (named after their slot's uid index) and a parent we made are removed
    assert not [d for uid, d in cgroup_dirs if os.path.exists(d) and (uid is None or uid in ours)]
    assert _children() == children_before
    assert _open_fds() <= fds_before  # no descriptor the sandbox opened is still open
    assert not os.path.exists(base_dir)  # slot directories (tmpfs mount points) and test directories are gone
    assert pool_mod._pool is None


def test_no_leftover_processes_files_or_fds():
    _check_no_leaks(60)


@pytest.mark.slow
def test_no_leaks_after_10000_executions():
    _check_no_leaks(10_000)
