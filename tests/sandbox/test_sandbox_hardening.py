"""Sandbox round two (issue 11): one adversarial property per test, by class of hole.

1 state that survives a test (SysV IPC, POSIX message queues, kernel keyrings), 2 CPU of every process of a test,
3 one memory budget per test, 5 cleanup that cannot fail, 6 the parent's work bounded by the expected answer,
7 a uid per live slot, 8 host sockets and host paths. (Class 4, float_tol, is in test_sandbox_compare.py.)
A state probe prints "none" when it finds nothing an earlier test left, and plants its own object otherwise, so
AC on every test (and on a second submission) means nothing crossed.
"""

from __future__ import annotations

import os
import socket
import textwrap
import threading
import time

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run, run_batch
from mrgrpo.sandbox import pool as pool_mod

FAST = Limits(time_s=2, wall_s=4)
_layers_cache: dict = {}


def layers() -> dict:
    if not _layers_cache:
        run(Job(code="print(1)", inputs=[""], outputs=["1"]))
        _layers_cache.update(pool_mod.get_pool()._slots[0].layers)
    return _layers_cache


def judge(code: str, n: int = 3, expected: str = "none\n", limits: Limits = FAST):
    return run(Job(code=textwrap.dedent(code), inputs=[""] * n, outputs=[expected] * n, limits=limits))


def assert_no_state_crosses(code: str) -> None:
    """Two submissions of three tests each: every test must find nothing (AC), none may be INFRA."""
    for _ in range(2):
        result = judge(code)
        assert result.verdict is Verdict.AC, result


_LIBC = """
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    KEY = 0x4D5247
    IPC_CREAT = 0o1000
"""


# ---------------------------------------------------------------- 1. state that survives a test


@pytest.fixture
def no_seccomp(monkeypatch):
    """Without the seccomp filter (as where it is unavailable): programs can make SysV IPC objects and POSIX
    message queues, and each test gets a fresh IPC namespace instead."""
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", {"seccomp"})
    yield
    pool_mod.shutdown()


@pytest.fixture(params=["seccomp", "ipc_ns_per_test"])
def ipc_guard(request):
    """Both ways the IPC state is kept from crossing: the filter denies every IPC call (the default), or a fresh
    IPC namespace per test (without the filter)."""
    if request.param == "seccomp":
        if not layers()["seccomp"]:
            pytest.skip("no seccomp filter on this architecture")
        yield "seccomp"
    else:
        request.getfixturevalue("no_seccomp")
        yield "ipc_ns_per_test"


def test_sysv_shared_memory_does_not_survive_a_test(ipc_guard):
    assert_no_state_crosses(_LIBC + """
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(KEY, 4096, 0)
    if shmid >= 0:
        print("found", ctypes.string_at(libc.shmat(shmid, None, 0), 6))
    else:
        shmid = libc.shmget(KEY, 4096, IPC_CREAT | 0o666)
        if shmid >= 0:
            ctypes.memmove(libc.shmat(shmid, None, 0), b"secret", 6)
        print("none")
    """)
    with open("/proc/sysvipc/shm") as f:  # and nothing is left in the host's IPC namespace
        assert not [line for line in f.read().splitlines()[1:] if int(line.split()[0]) == 0x4D5247]


def test_sysv_semaphores_do_not_survive_a_test(ipc_guard):
    assert_no_state_crosses(_LIBC + """
    if libc.semget(KEY, 1, 0) >= 0:
        print("found")
    else:
        libc.semget(KEY, 1, IPC_CREAT | 0o666)
        print("none")
    """)


def test_sysv_message_queues_do_not_survive_a_test(ipc_guard):
    assert_no_state_crosses(_LIBC + """
    class Msg(ctypes.Structure):
        _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * 16)]
    q = libc.msgget(KEY, 0)
    if q >= 0:
        print("found")
    else:
        q = libc.msgget(KEY, IPC_CREAT | 0o666)
        libc.msgsnd(q, ctypes.byref(Msg(1, b"expected output")), 16, 0)
        print("none")
    """)


def test_posix_message_queues_do_not_survive_a_test(ipc_guard):
    assert_no_state_crosses(_LIBC + """
    try:
        mq_open = libc.mq_open
    except AttributeError:
        mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
    if mq_open(b"/mrgrpo-probe", os.O_RDONLY) >= 0:
        print("found")
    else:
        mq_open(b"/mrgrpo-probe", os.O_RDWR | os.O_CREAT, 0o666, None)
        print("none")
    """)


_KEYS = _LIBC + """
    import platform
    add_key, keyctl = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
    libc.syscall.restype = ctypes.c_long
    found = False
    for ring in (-4, -5, -3, -2):  # user, user session, session, process keyrings
        found |= libc.syscall(keyctl, 10, ring, b"user", b"mrgrpo-probe", 0) >= 0  # KEYCTL_SEARCH
        libc.syscall(add_key, b"user", b"mrgrpo-probe", b"expected", 8, ring)
    print("found" if found else "none")
"""


_IPC_CALLS = _LIBC + """
    try:
        mq_open = libc.mq_open
    except AttributeError:
        mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
    calls = {"shmget": lambda: libc.shmget(0, 4096, IPC_CREAT | 0o600),
             "semget": lambda: libc.semget(0, 1, IPC_CREAT | 0o600),
             "msgget": lambda: libc.msgget(0, IPC_CREAT | 0o600),
             "mq_open": lambda: mq_open(b"/mrgrpo-probe", os.O_RDWR | os.O_CREAT, 0o600, None)}
    for name, call in calls.items():
        ctypes.set_errno(0)
        print(name, "made" if call() >= 0 else ctypes.get_errno())
    """


def test_ipc_calls_are_denied():
    """With the filter, no program can make an object in the IPC namespace at all (EPERM for each kind)."""
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    assert layers()["ipc_ns"] == "slot"  # the slot's own namespace, and no fresh one per test
    result = judge(_IPC_CALLS, n=1, expected="shmget 1\nsemget 1\nmsgget 1\nmq_open 1\n")
    assert result.verdict is Verdict.AC, result


def test_without_seccomp_ipc_calls_work_in_a_namespace_of_the_test(no_seccomp):
    """The fallback is a fresh IPC namespace per test, where honest SysV IPC calls still work (mq_open may still
    fail there, with EACCES: the slot uid may not create in that namespace's mqueue root)."""
    result = judge(_IPC_CALLS, n=1, expected="")
    assert pool_mod.get_pool()._slots[0].layers["ipc_ns"] == "test"
    assert result.tests[0].stdout.startswith("shmget made\nsemget made\nmsgget made\nmq_open "), result
    assert not result.tests[0].stdout.endswith("mq_open 1\n"), result


def test_kernel_keyrings_do_not_survive_a_test():
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    assert_no_state_crosses(_KEYS)


def test_keyring_calls_are_denied():
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    result = judge(_LIBC + """
    import platform
    add_key = {"x86_64": 248, "aarch64": 217}[platform.machine()]
    libc.syscall.restype = ctypes.c_long
    ok = libc.syscall(add_key, b"user", b"k", b"v", 1, -4) >= 0
    print("added" if ok else "denied", ctypes.get_errno())
    """, n=1, expected="denied 1\n")
    assert result.verdict is Verdict.AC, result


def test_a_foreign_syscall_abi_is_denied():
    """x86_64 only: the 32-bit entry (int 0x80) would bypass a filter written for x86_64 numbers."""
    import platform

    if platform.machine() != "x86_64" or not layers()["seccomp"]:
        pytest.skip("x86_64 with seccomp only")
    result = judge("""
    import ctypes, mmap
    # mov eax, 20 (getpid, i386); int 0x80; ret  -> -EPERM under the filter
    code = bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3])
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(buf))
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(addr)
    print("denied" if fn() == -1 else "allowed")
    """, n=1, expected="denied\n")
    assert result.verdict is Verdict.AC, result


def test_io_uring_is_denied():
    """io_uring's operations make and connect sockets with no system call the filter sees: it is denied outright."""
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    result = judge(_LIBC + """
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    ctypes.set_errno(0)
    fd = libc.syscall(425, 4, params)  # io_uring_setup(4 entries)
    print("made" if fd >= 0 else ctypes.get_errno())
    """, n=1, expected="1\n")
    assert result.verdict is Verdict.AC, result


# ---------------------------------------------------------------- 2. CPU of every process of a test


_SPREAD = """
    import os, time
    r, w = os.pipe()
    for _ in range(4):
        if os.fork() == 0:
            t = time.process_time()
            while time.process_time() - t < {each}:
                pass
            os.write(w, b"x")
            while True:  # still running when PID 1 exits: killed with the namespace
                pass
    for _ in range(4):
        os.read(r, 1)
    print("none")
"""


def test_cpu_of_children_alive_when_pid1_exits_is_charged():
    if not layers()["cgroup_cpu"]:
        pytest.skip("no cgroup CPU accounting here")
    result = judge(_SPREAD.format(each=0.4), n=1, limits=Limits(time_s=1, wall_s=6))
    assert result.verdict is Verdict.TLE, result
    assert result.tests[0].time_s >= 1.0


def test_cpu_of_children_is_enforced_while_the_test_runs():
    """Children spin forever while PID 1 sleeps: the cgroup check kills at time_s, long before the wall limit."""
    if not layers()["cgroup_cpu"]:
        pytest.skip("no cgroup CPU accounting here")
    code = """
    import os, time
    for _ in range(3):
        if os.fork() == 0:
            while True:
                pass
    time.sleep(100)
    print("none")
    """
    start = time.monotonic()
    result = judge(code, n=1, limits=Limits(time_s=1, wall_s=60))
    assert result.verdict is Verdict.TLE, result
    assert time.monotonic() - start < 40  # far below the 60 s wall limit: the CPU limit fired


def test_honest_multiprocess_program_within_the_limit_passes():
    result = judge(_SPREAD.format(each=0.05).replace("while True:  # still", "os._exit(0)\n            if 0:  #"),
                   n=1, limits=Limits(time_s=2, wall_s=6))
    assert result.verdict is Verdict.AC, result


# ---------------------------------------------------------------- 3. one memory budget per test


def test_memory_spread_over_processes_is_one_budget():
    """4 processes x 200 MiB under memory_mb=256: each is within RLIMIT_DATA, together they are not."""
    if not layers()["cgroup_memory"]:
        pytest.skip("no cgroup memory limit here")
    code = """
    import os, select
    r, w = os.pipe()
    for _ in range(4):
        if os.fork() == 0:
            block = bytearray(200 << 20)
            block[::4096] = b"x" * len(block[::4096])
            os.write(w, b"x")
            import time; time.sleep(30)
    got = b""
    while len(got) < 4 and select.select([r], [], [], 5)[0]:
        got += os.read(r, 4)
    print("none" if len(got) == 4 else "partial")
    """
    result = judge(code, n=1, limits=Limits(time_s=4, wall_s=10, memory_mb=256))
    assert result.verdict is Verdict.MLE, result


def test_sysv_shared_memory_counts_against_the_budget(request):
    # Only programs without the seccomp filter can make a SysV segment (a fresh IPC namespace per test holds it).
    if not layers()["cgroup_memory"]:
        pytest.skip("no cgroup memory limit here")
    request.getfixturevalue("no_seccomp")
    code = _LIBC + """
    libc.shmat.restype = ctypes.c_void_p
    shmid = libc.shmget(0, 600 << 20, IPC_CREAT | 0o600)
    addr = libc.shmat(shmid, None, 0)
    ctypes.memset(addr, 1, 600 << 20)
    print("none")
    """
    result = judge(code, n=1, limits=Limits(time_s=4, wall_s=10, memory_mb=256))
    assert result.verdict is Verdict.MLE, result


def test_memory_an_earlier_test_held_is_not_charged_to_the_next(request):
    # Without the seccomp filter, the kernel frees a killed test's SysV segment later, with its IPC namespace (from
    # a workqueue); meanwhile the slot's cgroup still holds it. The next test on that slot (sequential jobs reuse the
    # same slot) must get its whole budget all the same: a verdict must not depend on what ran before it.
    if not layers()["cgroup_memory"]:
        pytest.skip("no cgroup memory limit here")
    request.getfixturevalue("no_seccomp")
    flood = _LIBC + """
    libc.shmat.restype = ctypes.c_void_p
    addr = libc.shmat(libc.shmget(0, 600 << 20, IPC_CREAT | 0o600), None, 0)
    ctypes.memset(addr, 1, 600 << 20)
    print("none")
    """
    honest = "b = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('none')"
    limits = Limits(time_s=4, wall_s=10, memory_mb=256)
    verdicts = []
    for _ in range(8):
        verdicts.append((judge(flood, n=1, limits=limits).verdict, judge(honest, n=1, limits=limits).verdict))
    assert verdicts == [(Verdict.MLE, Verdict.AC)] * 8


def test_honest_program_using_its_memory_passes():
    code = "b = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('none')"
    assert judge(code, n=2, limits=Limits(time_s=4, wall_s=10, memory_mb=256)).verdict is Verdict.AC


# ---------------------------------------------------------------- 5. cleanup cannot fail


def test_a_deep_directory_tree_is_cleaned_and_never_infra():
    code = """
    import os
    for i in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("leaf", "w").write("x")
    print("none")
    """
    result = judge(code, n=3, limits=Limits(time_s=4, wall_s=10))
    assert result.verdict is Verdict.AC, result  # three tests in a row on the same slot: cleaned each time


def test_a_test_directory_is_pristine_and_tells_nothing_of_earlier_tests():
    # Each test gets a fresh tmpfs on the slot's one mount point: what a test does to its directory (mode,
    # times, files created and removed) is gone, and the path is the same in every test, so it does not count
    # the tests that ran on the slot before.
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    st = os.stat(".")
    print(os.getcwd(), oct(st.st_mode & 0o7777), st.st_mtime != 12345, st.st_nlink, os.listdir("."))
    open("f", "w").write("x")
    os.remove("f")
    os.mkdir("d")
    os.chmod(".", 0o777)
    os.utime(".", (12345, 12345))
    """
    first = run(Job(code="import os\nprint(os.getcwd())", inputs=[""], outputs=[""]))
    cwd = first.tests[0].stdout.strip()
    expected = f"{cwd} 0o700 True 2 []"
    assert judge(code, n=4, expected=expected).verdict is Verdict.AC


def _fresh_tmpfs_output(code: str) -> str:
    """What `code` prints as the first test of a slot's first tmpfs: the answer for a directory nobody used."""
    pool_mod.shutdown()
    return run(Job(code=textwrap.dedent(code), inputs=[""], outputs=[""])).tests[0].stdout


def test_a_file_made_and_removed_again_leaves_no_trace_in_the_next_tests_inode_numbers():
    # The tmpfs counts inodes it hands out: a file made and removed leaves the counts of files and blocks as they
    # were, but the next file made gets a higher inode number. Every test gets a fresh tmpfs.
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    open("a", "w").close()
    print(os.stat("a").st_ino)
    os.remove("a")
    for i in range(5):
        open(str(i), "w").close()
        os.remove(str(i))
    """
    expected = _fresh_tmpfs_output(code)
    assert expected.strip().isdigit()
    assert judge(code, n=3, expected=expected).verdict is Verdict.AC


def test_times_set_on_the_test_directory_do_not_reach_the_next_test():
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    st = os.stat(".")
    print(st.st_mtime_ns != 12345 * 10**9, st.st_atime_ns != 12345 * 10**9)
    os.utime(".", (12345, 12345))
    """
    assert judge(code, n=3, expected="True True\n").verdict is Verdict.AC


def test_an_extended_attribute_on_the_test_directory_does_not_reach_the_next_test():
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    print(os.listxattr(".") or "none")
    try:
        os.setxattr(".", "user.secret", b"42")
    except OSError:
        pass
    """
    assert judge(code, n=3).verdict is Verdict.AC


def test_a_test_that_wrote_a_file_gets_a_fresh_tmpfs_next():
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    print(os.stat(".").st_ctime_ns, os.listdir("."))
    open("x", "w").write("x")
    """
    result = run(Job(code=textwrap.dedent(code), inputs=[""] * 3, outputs=[""] * 3, stop_on_first_failure=False))
    assert len(result.tests) == 3 and len({t.stdout for t in result.tests}) == 3, result
    assert all(t.stdout.endswith(" []\n") for t in result.tests), result


def test_the_directory_above_a_test_is_read_only_and_holds_nothing_but_its_mount_point():
    # With a tmpfs per test, one Landlock ruleset (made once per slot) covers the slot directory above the test's
    # mount point: that directory must give a program nowhere to leave anything for a later test. (As root the
    # test process's own uid cannot write there either; test_sandbox_unprivileged.py checks the case where only
    # the read-only mount stands in the way.)
    code = """
    import os
    try:
        names = os.listdir("..")
    except OSError:
        names = []
    made = []
    for name, make in (("x", lambda: open("../x", "w")), ("y", lambda: os.mkdir("../y")),
                       ("z", lambda: os.symlink(".", "../z")), ("w", lambda: os.rename("..", "../../w"))):
        try:
            make()
            made.append(name)
        except OSError:
            pass
    print("none" if not made and names in ([], [os.path.basename(os.getcwd())]) else f"{names} {made}")
    """
    assert_no_state_crosses(code)


# A program that finds a descriptor of a Landlock ruleset tries to add a rule to it (write access to /).
_WIDEN_PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

class Rule(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

root = os.open("/", os.O_PATH)
rule = Rule((1 << 16) - 1, root)
added = [fd for fd in range(1024) if libc.syscall(ctypes.c_long(445), fd, 1, ctypes.byref(rule), 0) == 0]
print("none" if not added else f"added a rule through {added}")
"""


def test_no_test_can_widen_the_landlock_ruleset_of_later_tests():
    # The slot's one Landlock ruleset is applied in each test process before the program runs; a program that
    # found its descriptor could add rules (say, write access to /) that every later test would get.
    if not layers()["landlock"]:
        pytest.skip("no Landlock here")
    assert_no_state_crosses(_WIDEN_PROBE)


def test_no_test_can_widen_the_landlock_ruleset_with_our_init_either(no_cgroups):
    # Without a slot cgroup a test's PID 1 is an init of ours that forks the program: neither holds the ruleset.
    if not layers()["landlock"]:
        pytest.skip("no Landlock here")
    assert_no_state_crosses(_WIDEN_PROBE)


def test_unremovable_looking_leftovers_are_cleaned():
    code = """
    import os, stat
    os.makedirs("a/b/c")
    open("a/b/c/f", "w").write("x")
    os.mkfifo("a/fifo")
    os.symlink("/etc/passwd", "a/link")
    for d in ("a/b/c", "a/b", "a"):
        os.chmod(d, 0)
    print("none")
    """
    assert judge(code, n=3).verdict is Verdict.AC


def test_remove_tree_handles_any_depth(tmp_path):
    from mrgrpo.sandbox.rootfs import remove_tree

    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(3000):  # deeper than the recursion limit, built relative to a descriptor
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
    os.chmod(tmp_path / "d", 0)
    assert remove_tree(str(tmp_path / "d"))
    assert not (tmp_path / "d").exists()
    assert remove_tree(str(tmp_path / "missing"))


# ---------------------------------------------------------------- 6. the parent's work is bounded


def test_a_million_digit_result_is_not_parsed_by_the_parent():
    from mrgrpo.sandbox import compare

    code = """
    import os, json
    def f(x):
        os.write(3, json.dumps({"kind": "result", "value": "9" * 4_000_000}).encode())
        os._exit(0)
    """
    calls = []
    real = compare.parse_json_value

    def spy(text):
        calls.append(len(text))
        return real(text)

    from mrgrpo.sandbox import runner

    orig = runner.parse_json_value
    runner.parse_json_value = spy
    try:
        result = run(Job(code=textwrap.dedent(code), inputs=[[1]], outputs=[5], fn_name="f", limits=FAST))
    finally:
        runner.parse_json_value = orig
    assert result.verdict is Verdict.WA
    assert calls == []


def test_a_flood_of_short_lines_is_judged_wa():
    code = "import sys\nsys.stdout.write('1\\n' * (15 << 20))"
    result = run(Job(code=code, inputs=[""], outputs=["1\n"], limits=Limits(time_s=4, wall_s=10)))
    assert result.verdict is Verdict.WA


# ---------------------------------------------------------------- 7. a uid per live slot


def test_slots_64_apart_get_different_uids():
    if os.geteuid() != 0:
        pytest.skip("per-slot uids are for root")
    base = pool_mod.Pool(1).base_dir
    slots = [pool_mod.Slot(i, base) for i in (0, 64, 128)]
    try:
        for slot in slots:
            slot.start()
        uids = [slot.uid for slot in slots]
        assert len(set(uids)) == 3 and None not in uids
    finally:
        for slot in slots:
            slot.stop()
        from mrgrpo.sandbox.rootfs import remove_tree

        assert remove_tree(base)


def test_uid_leases_are_unique_across_many_holders_and_reused_after_release(tmp_path):
    from mrgrpo.sandbox import admission

    held = [admission.lease_uid_index(str(tmp_path)) for _ in range(200)]
    try:
        assert len({k for k, _ in held}) == 200
    finally:
        freed = held[5][0]
        for _, fd in held:
            admission.release_uid_lease(fd)
    k, fd = admission.lease_uid_index(str(tmp_path))
    admission.release_uid_lease(fd)
    assert k == 0 <= freed


def test_concurrent_slots_run_tests_as_distinct_uids():
    if os.geteuid() != 0:
        pytest.skip("per-slot uids are for root")
    code = "import os, time\ntime.sleep(0.3)\nprint(os.getuid())"
    results = run_batch([Job(code=code, inputs=[""], outputs=["x"])] * 6, workers=6)
    uids = {r.tests[0].stdout.strip() for r in results}
    assert len(uids) == 6


# ---------------------------------------------------------------- 8. host sockets and host paths


def test_host_unix_socket_is_unreachable(tmp_path):
    path = tmp_path / "host.sock"
    os.chmod(tmp_path, 0o755)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    os.chmod(path, 0o777)
    server.listen(4)
    server.settimeout(0.1)
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append(conn)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        result = judge(f"""
        import socket
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect({str(path)!r})
            print("connected")
        except OSError:
            print("none")
        """, n=1)
    finally:
        stop.set()
        t.join()
        server.close()
    assert result.verdict is Verdict.AC, result
    assert accepted == []


def test_host_paths_cannot_even_be_stat(tmp_path):
    if not layers().get("minimal_root"):
        pytest.skip("no minimal file tree here")
    secret = tmp_path / "host-file"
    secret.write_text("x")
    paths = [str(secret), "/etc/passwd", "/etc/hostname", "/proc/2", "/home", "/var/run", "/run",
             "/dev/shm", "/sys/fs/cgroup", os.path.abspath(__file__)]
    result = judge(f"""
    import os
    seen = []
    for p in {paths!r}:
        try:
            os.stat(p)
            seen.append(p)
        except OSError:
            pass
    print("none" if not seen else seen)
    """, n=1)
    assert result.verdict is Verdict.AC, result


def test_the_file_tree_still_has_what_programs_need():
    code = """
    import datetime, decimal, fractions, json, zoneinfo
    open("scratch.txt", "w").write("ok")
    print(open("scratch.txt").read() == "ok" and zoneinfo.ZoneInfo("Europe/Paris") is not None and "none")
    """
    assert judge(code, n=1).verdict is Verdict.AC


# ---------------------------------------------------------------- without cgroups or without namespaces


@pytest.fixture
def no_cgroups(monkeypatch):
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", {"cgroup_v1", "cgroup_v2"})
    yield
    pool_mod.shutdown()


def test_without_cgroups_our_init_charges_children_alive_at_exit(no_cgroups):
    result = judge(_SPREAD.format(each=0.4), n=1, limits=Limits(time_s=1, wall_s=6))
    assert pool_mod.get_pool()._slots[0].layers["reaper_init"]
    assert result.verdict is Verdict.TLE, result
    assert result.tests[0].time_s >= 1.0


def test_without_cgroups_exit_status_and_signals_still_come_through(no_cgroups):
    assert judge("import sys\nprint('none')\nsys.exit(3)", n=1).verdict is Verdict.RE
    assert judge("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", n=1).verdict is Verdict.RE
    assert judge("print('none')", n=2).verdict is Verdict.AC
    assert judge("while True:\n    pass", n=1, limits=Limits(time_s=1, wall_s=4)).verdict is Verdict.TLE


def test_without_namespaces_a_deep_tree_is_cleaned_and_never_infra(monkeypatch):
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", {"namespaces"})
    try:
        code = """
        import os
        for i in range(2000):
            os.mkdir("d")
            os.chdir("d")
        print("none")
        """
        assert judge(code, n=2, limits=Limits(time_s=4, wall_s=10)).verdict is Verdict.AC
    finally:
        pool_mod.shutdown()


def test_read_only_host_cgroups_still_give_cpu_accounting(monkeypatch):
    """As in a default Docker container: the parent cannot make the slot cgroup (simulated), the worker mounts
    cgroup2 in its private mount namespace and makes it there."""
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "DISABLE", {"parent_cgroup"})
    try:
        result = judge(_SPREAD.format(each=0.4), n=1, limits=Limits(time_s=1, wall_s=6))
        if pool_mod.get_pool()._slots[0].layers["cgroup_cpu"] is None:
            pytest.skip("cgroup2 cannot be mounted here")
        assert result.verdict is Verdict.TLE, result
    finally:
        pool_mod.shutdown()


# ---------------------------------------------------------------- issue 34 (round three), one test per class


def _handle_of(path: str) -> tuple[int, bytes] | None:
    """(handle type, handle bytes) of `path` as name_to_handle_at gives it here (root), or None if unsupported."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint.from_buffer(buf, 0).value = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, path.encode(), buf, ctypes.byref(mount_id), 0) != 0:
        return None
    size = ctypes.c_uint.from_buffer(buf, 0).value
    return ctypes.c_int.from_buffer(buf, 4).value, buf.raw[8:8 + size]


def test_a_host_file_cannot_be_read_by_its_handle(tmp_path):
    """Finding 34.1: a file only a handle reaches (a 0600 file in a 0700 directory, outside every path a test may
    read) holds the expected answer; the program opens it with open_by_handle_at through a directory of the
    interpreter on the same file system. No AC, whether the handle came from name_to_handle_at or was built by
    hand (the test passes the real one, as an attacker would guess it: ext4's inode and generation)."""
    from mrgrpo.reward import compute_score

    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    secret = hidden / "answer.txt"
    secret.write_text("31415926\n")
    secret.chmod(0o600)
    handle = _handle_of(str(secret))
    if handle is None or os.stat(os.__file__).st_dev != os.stat(secret).st_dev:
        pytest.skip("no file handles here, or the interpreter is on another file system")
    code = textwrap.dedent("""
    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    kind, raw = input().split()
    raw = bytes.fromhex(raw)
    buf = ctypes.create_string_buffer(8 + len(raw))
    ctypes.c_uint.from_buffer(buf, 0).value = len(raw)
    ctypes.c_int.from_buffer(buf, 4).value = int(kind)
    ctypes.memmove(ctypes.addressof(buf) + 8, raw, len(raw))
    mount_fd = os.open(os.path.dirname(os.__file__), os.O_RDONLY)
    probe = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint.from_buffer(probe, 0).value = 128
    named = libc.name_to_handle_at(mount_fd, b"", probe, ctypes.byref(ctypes.c_int()), 0x1000)  # AT_EMPTY_PATH
    fd = libc.open_by_handle_at(mount_fd, buf, os.O_RDONLY)
    if fd >= 0:
        print(os.read(fd, 100).decode(), end="")
    else:
        print("denied", named, ctypes.get_errno())
    """)
    gt = {"inputs": [f"{handle[0]} {handle[1].hex()}\n"], "outputs": ["31415926\n"]}
    result = compute_score("apps_plus", f"```python\n{code}\n```", gt)
    assert result["acc"] == 0.0 and result["verdict"] != "AC" and result["infra"] == 0.0, result
    out = judge(code.replace("input()", repr(gt["inputs"][0].strip())), n=1, expected="x\n").tests[0].stdout
    assert out.startswith("denied -1 1"), out  # both calls EPERM (seccomp), not EACCES/EBADF from elsewhere


def test_a_test_process_has_no_capabilities_at_all():
    """Finding 34.1, the class: the per-slot uid keeps no capability (CAP_DAC_READ_SEARCH was kept for an
    interpreter under /root; the minimal tree makes every path to it traversable)."""
    code = """
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)
    data = (ctypes.c_uint32 * 6)()
    assert libc.capget(header, data) == 0
    ambient = [libc.prctl(47, 2, cap, 0, 0) for cap in range(41)]  # PR_CAP_AMBIENT_IS_SET
    print(sum(data), sum(a == 1 for a in ambient))
    """
    result = judge(code, n=2, expected="0 0\n")
    assert result.verdict is Verdict.AC, result


def test_no_test_sees_the_inode_counter_earlier_tests_moved():
    """Finding 34.2: O_TMPFILE files move a tmpfs's inode counter without touching its root; every test must get
    the numbers of a fresh tmpfs."""
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = """
    import os
    fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
    print(os.fstat(fd).st_ino)
    os.close(fd)
    for _ in range(50):
        os.close(os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600))
    """
    expected = _fresh_tmpfs_output(code)
    assert expected.strip().isdigit()
    assert judge(code, n=4, expected=expected).verdict is Verdict.AC


def test_the_test_directory_was_mounted_for_this_test():
    """Finding 34.2: a reused tmpfs told a test when it was mounted (its root's times), so how long earlier tests
    ran; every test's directory must be newer than the job that runs it."""
    if not layers()["tmpfs"]:
        pytest.skip("no per-test tmpfs here")
    code = "import os\nprint(os.stat('.').st_ctime_ns > int(input()) and 'none')"
    judge(code.replace("int(input())", "0"), n=1)  # the slot is up and has run a test
    for _ in range(3):
        time.sleep(0.05)  # the mount clock is coarse (a tick): a fresh mount is still well after this
        made = time.time_ns() - 20_000_000
        result = run(Job(code=code, inputs=[f"{made}\n"], outputs=["none\n"], limits=FAST))
        assert result.verdict is Verdict.AC, result


def test_pids_are_those_of_the_tests_own_namespace():
    """Finding 34.2: /proc showed PIDs of the slot's namespace, which every fork of every earlier test moved; a
    test's /proc must be of its own PID namespace (PID 1, its children 2, 3, ...)."""
    code = """
    import os
    def me():  # (the files under /proc are not readable: Landlock)
        return os.readlink("/proc/self")
    r, w = os.pipe()
    if os.fork() == 0:
        os.write(w, me().encode())
        os._exit(0)
    os.wait()
    print(me(), os.read(r, 100).decode(), [n for n in range(1, 100) if os.path.exists(f"/proc/{n}")])
    """
    for _ in range(2):
        result = judge(code, n=3, expected="1 2 [1]\n")
        assert result.verdict is Verdict.AC, result


def test_socket_cookies_and_netlink_are_denied():
    """Finding 34.2: socket cookies (SO_COOKIE, and a NETLINK_SOCK_DIAG dump) come from one kernel counter that
    every earlier test moved."""
    code = """
    import errno, socket
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out = []
    for opt in (57, 71):  # SO_COOKIE, SO_NETNS_COOKIE
        try:
            s.getsockopt(socket.SOL_SOCKET, opt, 8)
            out.append("cookie")
        except OSError as exc:
            out.append(errno.errorcode[exc.errno])
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
        out.append("netlink")
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
    print(*out)
    """
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    assert judge(code, n=2, expected="EPERM EPERM EPERM\n").verdict is Verdict.AC


def test_user_namespaces_cannot_be_made():
    """Finding 34.3: unshare/clone with CLONE_NEWUSER (then mount namespaces in a loop) moved the node-wide mount
    ID that a test in another slot reads. unshare and clone with the flag fail with EPERM, clone3 with ENOSYS (its
    flags are in memory, out of the filter's sight; libc falls back to clone); threads and fork still work."""
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    code = """
    import ctypes, errno, os, threading
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
    def attempt(ret):
        if ret == 0:
            os._exit(0)
        if ret > 0:
            os.waitpid(ret, 0)
            return "made"
        return errno.errorcode[ctypes.get_errno()]
    out = [attempt(libc.unshare(CLONE_NEWUSER)), attempt(libc.syscall(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0))]
    args = (ctypes.c_uint64 * 11)(CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0, 0, 0, 0)
    out.append(attempt(libc.syscall(435, args, ctypes.sizeof(args))))
    t = threading.Thread(target=out.append, args=("thread",))
    t.start()
    t.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out.append(str(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])))
    print(*out)
    """
    if os.uname().machine != "x86_64":
        pytest.skip("the raw syscall numbers above are x86_64's")
    assert judge(code, n=1, expected="EPERM EPERM ENOSYS thread 7\n").verdict is Verdict.AC


def test_no_program_can_be_executed_not_even_from_a_memfd():
    """Finding 34.6 (with 3): the dynamic linker copied into a memfd and run with execveat (no path, so no
    Landlock rule applies); execve of the memfd through /proc/self/fd too."""
    if not layers()["seccomp"]:
        pytest.skip("no seccomp filter on this architecture")
    code = """
    import ctypes, errno, glob, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ld = sorted(glob.glob("/lib64/ld-linux*") + glob.glob("/lib/*/ld-linux*") + glob.glob("/lib/ld-linux*"))[0]
    fd = os.memfd_create("x", 0)
    os.write(fd, open(ld, "rb").read())
    argv = (ctypes.c_char_p * 3)(b"ld.so", b"--version", None)
    nr = {"x86_64": 322, "aarch64": 281}[os.uname().machine]
    out = []
    for how in ("execveat", "execve"):
        pid = os.fork()
        if pid == 0:
            if how == "execveat":
                libc.syscall(nr, fd, b"", argv, None, 0x1000)  # AT_EMPTY_PATH
            else:
                libc.execve(f"/proc/self/fd/{fd}".encode(), argv, None)
            os.write(1, (errno.errorcode[ctypes.get_errno()] + " ").encode())
            os._exit(0)
        os.waitpid(pid, 0)
    print()
    """
    result = judge(code, n=1, expected="EPERM EPERM\n")
    assert result.verdict is Verdict.AC, result


def _slot_cpu_limit(slot) -> float | None:
    """CPUs the slot's cgroup may use (its quota over its period), read from the host's cgroup files."""
    cg = slot.cgroup
    if cg is None or cg.cpu_max is None:
        return None
    kind, path = cg.cpu_max
    if kind == "v2":
        quota, period = open(path).read().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int(open(os.path.join(path, "cpu.cfs_quota_us")).read())
    return None if quota < 0 else quota / int(open(os.path.join(path, "cpu.cfs_period_us")).read())


def test_a_slot_gets_one_cpu_whatever_its_test_forks():
    """Finding 34.4: 31 processes that setsid() (leaving the scheduler's autogroup) and spin took every CPU of the
    node, and an honest test in another slot ran out of wall time. Each slot's cgroup has a quota of one CPU, and
    the spinners together get no more than that. (A load on the machine can only lower what they get: nothing
    here depends on how busy it is.)"""
    if not layers()["cgroup_cpu"]:
        pytest.skip("no cgroup CPU accounting here")
    code = """
    import os, time
    start = time.monotonic()
    for _ in range(31):
        if os.fork() == 0:
            os.setsid()
            while time.monotonic() - start < 1.5:
                pass
            os._exit(0)
    for _ in range(31):
        os.wait()
    wall = time.monotonic() - start
    t = os.times()
    cpu = t.children_user + t.children_system
    print("none" if cpu <= 1.2 * wall + 0.1 else f"{cpu:.2f} CPU-s in {wall:.2f} s")
    """
    result = judge(code, n=1, limits=Limits(time_s=6, wall_s=20))
    limit = _slot_cpu_limit(pool_mod.get_pool()._slots[0])
    assert limit is not None and limit <= 1.0, limit
    assert result.verdict is Verdict.AC, result


def test_a_trickle_of_stderr_costs_the_judge_little_cpu(monkeypatch):
    """Finding 34.5: stderr written a byte at a time made the fork server sum its whole kept tail at every read
    (CPU-s outside any slot's cgroup for each CPU-s of the test's own). The fork server's CPU must stay a small
    multiple of the program's, whatever the number of reads."""
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "default_workers", lambda: 1)
    code = """
    import os, select
    for i in range(30000):
        os.write(2, b"x")
        if i % 2 == 0:
            select.select([], [], [], 0.00005)
    print("none")
    """
    judge("print('none')", n=1)  # the slot is up
    fork_server = _fork_server_pid()
    before = _cpu_of(fork_server)
    result = judge(code, n=1, limits=Limits(time_s=4, wall_s=30))
    judge_cpu = _cpu_of(fork_server) - before
    assert result.verdict is Verdict.AC and result.tests[0].stderr.endswith("x" * 100), result
    program_cpu = result.tests[0].time_s
    assert judge_cpu <= 2 * program_cpu + 0.2, (judge_cpu, program_cpu)


def _fork_server_pid() -> int:
    launcher = pool_mod.get_pool()._slots[0].proc.pid
    with open(f"/proc/{launcher}/task/{launcher}/children") as f:
        return int(f.read().split()[0])


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_memory_held_by_descriptors_in_flight_does_not_hold_up_the_next_job(monkeypatch):
    """Finding 34.7: memfds sent with SCM_RIGHTS into a cycle of unix sockets, then closed, stay charged to the
    slot's cgroup until the kernel's unix garbage collector runs; the next job on the slot waited for it (10 s,
    then INFRA). It must run at once, with its whole budget."""
    if not layers()["cgroup_memory"]:
        pytest.skip("no cgroup memory limit here")
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "default_workers", lambda: 1)
    attack = """
    import mmap, os, socket
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    for _ in range(12):
        fd = os.memfd_create("held")
        os.ftruncate(fd, 15 << 20)
        with mmap.mmap(fd, 15 << 20) as m:
            m[::4096] = b"x" * len(m[::4096])
        socket.send_fds(a, [b"m"], [fd])
        os.close(fd)
    socket.send_fds(a, [b"s"], [b.fileno(), c.fileno(), d.fileno()])
    socket.send_fds(c, [b"s"], [a.fileno(), b.fileno(), d.fileno()])
    print("none")
    """
    honest = "b = bytearray(150 << 20)\nb[::4096] = b'x' * len(b[::4096])\nprint('none')"
    limits = Limits(time_s=4, wall_s=10, memory_mb=256)
    judge("print('none')", n=1)  # the slot is up
    launcher = pool_mod.get_pool()._slots[0].proc.pid
    for _ in range(3):
        assert judge(attack, n=1, limits=limits).verdict is Verdict.AC
        result = judge(honest, n=1, limits=limits)
        assert result.verdict is Verdict.AC, result  # before: it waited for the kernel up to 10 s, then INFRA
    assert pool_mod.get_pool()._slots[0].proc.pid == launcher  # the slot was never restarted
