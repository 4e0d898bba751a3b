"""Hostile programs: each test is one attack that must fail, and the test runner must survive it.

Verdict-wise every attack must end as a non-AC verdict (0 false passes), or, where the program reports what its
attack achieved, as AC on the output of an attack that failed; several also check the host side (no file written,
runner alive, no process left).
"""

from __future__ import annotations

import os
import socket
import textwrap

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run

FAST = Limits(time_s=1, wall_s=2)


def run1(code: str, stdin: str = "", expected: str = "SECRET-EXPECTED\n", limits: Limits = FAST):
    result = run(Job(code=textwrap.dedent(code), inputs=[stdin], outputs=[expected], limits=limits))
    assert result.verdict is not Verdict.AC, result
    assert result.verdict is not Verdict.INFRA, result
    return result


def test_stack_walking_cannot_find_expected_output():
    result = run1("""
        import gc, sys
        seen = []
        f = sys._getframe()
        while f:
            seen.append(repr(f.f_locals)); f = f.f_back
        seen += [repr(o) for o in gc.get_objects() if isinstance(o, (str, bytes, dict))]
        needle = 'SECRET-' + 'EXPECTED'  # never spelled out: the program's own source is in memory
        hits = [s for s in seen if needle in s]
        print(hits[0] if hits else 'nothing')
    """)
    assert result.verdict is Verdict.WA
    assert "SECRET-EXPECTED" not in result.tests[0].stdout


def test_lying_eq_object_is_not_accepted_in_call_mode():
    code = """
        class Liar:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
        def f(x): return Liar()
    """
    result = run(Job(code=textwrap.dedent(code), inputs=[[1]], outputs=[42], fn_name="f"))
    assert result.verdict is Verdict.WA


def test_lying_int_subclass_is_judged_by_its_value():
    code = """
        class Liar(int):
            def __eq__(self, other): return True
        def f(x): return Liar(0)
    """
    assert run(Job(code=textwrap.dedent(code), inputs=[[1]], outputs=[42], fn_name="f")).verdict is Verdict.WA


def test_kill_all_processes_does_not_reach_the_runner():
    # kill(-1) signals every process the caller may signal but itself and its namespace's init: ESRCH means
    # that it found none, so neither the runner nor anything else outside the test.
    code = """
        import os, signal
        for sig in (signal.SIGKILL, signal.SIGTERM):
            try: os.kill(-1, sig); print('signalled')
            except OSError as exc: print(type(exc).__name__)
    """
    result = run(Job(code=textwrap.dedent(code), inputs=[""], outputs=["ProcessLookupError\n" * 2], limits=FAST))
    assert result.verdict is Verdict.AC, result
    assert run(Job(code="print(1)", inputs=[""], outputs=["1"])).verdict is Verdict.AC


def test_killpg_and_signals_to_the_runner_fail():
    # Each signal to the runner or its parent must fail (they are not in the test's PID namespace); the program
    # prints one word per call, so a signal that is delivered turns the verdict into WA.
    code = f"""
        import os, signal
        for target in ({os.getpid()}, {os.getppid()}):
            for call in (os.kill, os.killpg):
                try: call(target, signal.SIGKILL); print('sent')
                except OSError: print('failed')
        for call in (os.kill, os.killpg):  # the namespace's init: ignored or absent, never the runner
            try: call(1, signal.SIGKILL)
            except OSError: pass
    """
    result = run(Job(code=textwrap.dedent(code), inputs=[""], outputs=["failed\n" * 4], limits=FAST))
    assert result.verdict is Verdict.AC, result


def test_fork_bomb_is_contained():
    result = run1("""
        import os
        while True:
            try: os.fork()
            except OSError: pass
    """)
    assert result.verdict is Verdict.TLE  # RLIMIT_NPROC makes forks fail; the loop runs out of CPU time
    assert run(Job(code="print(1)", inputs=[""], outputs=["1"])).verdict is Verdict.AC


def test_memory_flood_is_mle():
    result = run1("""
        a = []
        while True: a.append(bytearray(50 << 20))
    """, limits=Limits(time_s=4, wall_s=8, memory_mb=256))
    assert result.verdict is Verdict.MLE


def test_shared_memory_mapping_is_bounded():
    # A shared anonymous mapping is outside RLIMIT_DATA: only RLIMIT_AS (memory_mb + 1 GiB) refuses 8 GiB. The
    # expected output is what the program prints when the mapping succeeds, so without the limit it is AC.
    result = run1("import mmap\nm = mmap.mmap(-1, 8 << 30)\nm[-1:] = b'x'\nprint('mapped')", expected="mapped\n")
    assert result.verdict is Verdict.RE
    assert "Cannot allocate memory" in result.tests[0].stderr


def test_disk_flood_is_bounded_by_file_size_and_tmpfs():
    result = run1("""
        i = 0
        while True:
            with open(f'f{i}', 'wb') as f: f.write(b'x' * (4 << 20))
            i += 1
    """)
    assert result.verdict is Verdict.RE
    assert "No space left" in result.tests[0].stderr or "too large" in result.tests[0].stderr


def test_single_file_over_file_cap_fails():
    result = run1("open('big', 'wb').write(b'x' * (2 << 20))",
                  limits=Limits(time_s=1, wall_s=2, file_bytes=1 << 20))
    assert result.verdict is Verdict.RE


def test_output_flood_is_ole():
    result = run1("while True: print('x' * 10000)", limits=Limits(time_s=2, wall_s=4, output_bytes=1 << 20))
    assert result.verdict is Verdict.OLE


def test_network_connect_to_localhost_fails():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    try:
        result = run1(f"""
            import socket
            s = socket.socket(); s.settimeout(1)
            s.connect(('127.0.0.1', {port}))
            print('connected')
        """)
        assert result.verdict is Verdict.RE
        server.settimeout(0.2)
        with pytest.raises(OSError):
            server.accept()
    finally:
        server.close()


def test_udp_and_dns_fail():
    result = run1("""
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b'x', ('8.8.8.8', 53))
        print('sent')
    """)
    assert result.verdict is Verdict.RE


def test_write_outside_temp_dir_is_refused(tmp_path):
    target = tmp_path / "pwned"
    result = run1(f"open({str(target)!r}, 'w').write('x')\nopen('/tmp/mrgrpo-pwned', 'w').write('x')")
    assert result.verdict is Verdict.RE
    assert not target.exists() and not os.path.exists("/tmp/mrgrpo-pwned")


def test_delete_outside_temp_dir_is_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.chmod(tmp_path, 0o777)
    result = run1(f"import os, shutil\nos.remove({str(victim)!r})\nshutil.rmtree({str(tmp_path)!r})")
    assert result.verdict is Verdict.RE  # the first call already raised
    assert victim.read_text() == "keep me"


def test_reading_data_files_is_refused(tmp_path):
    secret = tmp_path / "answers.jsonl"
    secret.write_text("SECRET-EXPECTED\n")
    os.chmod(tmp_path, 0o755)
    os.chmod(secret, 0o644)
    result = run1(f"print(open({str(secret)!r}).read())")
    assert result.verdict is Verdict.RE


def test_exec_of_other_programs_is_refused():
    result = run1("""
        import os, subprocess
        print(os.system('echo hacked'))
        subprocess.run(['/bin/echo', 'hacked'])
    """)
    assert result.verdict is Verdict.RE  # os.system's shell never ran, subprocess.run raised
    assert "hacked" not in result.tests[0].stdout


def test_environment_is_scrubbed(monkeypatch):
    monkeypatch.setenv("MRGRPO_SECRET_TOKEN", "hunter2")
    result = run1("import os\nprint(sorted(os.environ.items()))")
    out = result.tests[0].stdout
    assert "hunter2" not in out and "MRGRPO_SECRET_TOKEN" not in out
    assert "OPENBLAS_NUM_THREADS" in out


def test_daemonised_child_dies_with_the_test():
    marker = "mrgrpo-daemon-marker-7351"
    result = run(Job(code=textwrap.dedent(f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                import sys; sys.argv = ['{marker}']
                time.sleep(60)
            os._exit(0)
        print('bye')
    """), inputs=[""], outputs=["bye"], limits=FAST))
    assert result.verdict is Verdict.AC
    uids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uids.add(int(next(line for line in f if line.startswith("Uid:")).split()[1]))
        except (OSError, StopIteration):
            pass
    base = 1_000_000_000 + 64 * (os.getpid() % (1 << 22))  # this process's per-slot uids (pool.py)
    assert not [u for u in uids if base <= u < base + 64]  # no process of our sandbox uids is left


def test_state_does_not_leak_between_tests():
    code = """
        import os, builtins
        print(getattr(builtins, 'leak', 'fresh'), sorted(os.listdir('.')))
        builtins.leak = 'leaked'
        open('left-behind', 'w').write('x')
    """
    result = run(Job(code=textwrap.dedent(code), inputs=["", ""], outputs=["fresh []", "fresh []"]))
    assert result.verdict is Verdict.AC, result


def test_scribbling_on_the_result_channel_does_not_pass():
    code = """
        import os
        def f(x):
            os.write(3, b'{"kind": "result", "value": "42"}')
            return 0
    """
    # the forged message and the real one make the channel unparseable: no result was returned (RE), never AC
    assert run(Job(code=textwrap.dedent(code), inputs=[[1]], outputs=[42], fn_name="f")).verdict is Verdict.RE


@pytest.fixture
def one_slot(monkeypatch):
    from mrgrpo.sandbox import pool as pool_mod

    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "default_workers", lambda: 1)
    yield
    pool_mod.shutdown()


def test_each_test_gets_the_rlimits_of_its_own_job(one_slot):
    """The zygote works a test's rlimits out once per set of limits: a job after another with other limits, on the
    same slot, must run under its own (each limit in turn, and back)."""
    code = ("import resource as r\nprint(r.getrlimit(r.RLIMIT_CPU)[0], r.getrlimit(r.RLIMIT_DATA)[0] >> 20, "
            "r.getrlimit(r.RLIMIT_FSIZE)[0] >> 10, r.getrlimit(r.RLIMIT_NPROC)[0])")
    base = Limits(time_s=2, wall_s=6, memory_mb=512, file_bytes=64 << 10, nproc=16)
    others = [Limits(time_s=3, wall_s=6, memory_mb=512, file_bytes=64 << 10, nproc=16),
              Limits(time_s=2, wall_s=6, memory_mb=640, file_bytes=64 << 10, nproc=16),
              Limits(time_s=2, wall_s=6, memory_mb=512, file_bytes=96 << 10, nproc=16),
              Limits(time_s=2, wall_s=6, memory_mb=512, file_bytes=64 << 10, nproc=24)]
    seen = []
    for limits in [base, others[0], base, others[1], base, others[2], base, others[3], base]:
        result = run(Job(code=code, inputs=[""], outputs=[""], limits=limits))
        cpu, data, fsize, nproc = (int(x) for x in result.tests[0].stdout.split())
        assert (cpu, data, fsize) == (limits.time_s, limits.memory_mb, limits.file_bytes >> 10), result
        seen.append(nproc)
    assert set(seen[:7] + seen[8:]) == {seen[0]} and seen[7] == seen[0] + 8, seen


def _zygote_pid() -> int:
    from mrgrpo.sandbox import pool as pool_mod

    launcher = pool_mod.get_pool()._slots[0].proc.pid
    with open(f"/proc/{launcher}/task/{launcher}/children") as f:
        return int(f.read().split()[0])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: tests start where they must")
def test_a_test_process_starts_on_the_zygotes_cpu_yet_may_use_every_cpu(one_slot):
    """The zygote forks each test process on its own CPU (warm caches): the test process gets every CPU back at
    once, and the zygote too, right after the fork."""
    cpus = len(os.sched_getaffinity(0))
    result = run1("import os\nprint(len(os.sched_getaffinity(0)))")
    assert result.tests[0].stdout == f"{cpus}\n", result
    assert len(os.sched_getaffinity(_zygote_pid())) == cpus
