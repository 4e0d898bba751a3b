"""Watching a running test, in the fork server: stdin fed, output read under its caps, CPU and wall clock checked.

`Watch` is a base of forkserver.ForkServer (it reads the fork server's attributes): from the fork of a test to the
reaping of its PID 1. Output is read into bytearrays that are zeroed once sent (`_Chunks`), so that no later program
forked from the fork server finds an earlier program's output in its memory. CPU decides TLE (the slot cgroup's, of
all the test's processes, checked while it runs; RLIMIT_CPU); the wall clock is a backstop that gives a test back the
time the node kept it waiting for a CPU (`_stretch`), up to the runner's `wall_cap_s`.
"""

from __future__ import annotations

import os
import select
import signal
import struct
import time

from .cgroups import cpu_pressure_us

_STDERR_KEEP = 8192
_STDERR_SMALL = 512  # a stderr read joins the previous one while that is shorter than this (`_Chunks.read_from`)
_QUIET_S = 0.01  # how long the fork server lets a test's output pipes fill before it reads them as output comes
_CPU_CHECK_S = 0.05  # how often the CPU of all processes of a running test is checked (with a slot cgroup)
_KILL_GRACE_S = 60.0  # a killed test whose processes are not all gone after this long breaks the fork server (INFRA)
_STRETCH_SLACK_S = 0.01  # a test short of its wall time by less than this has had it (`Watch._stretch`)
_STRETCH_STEP_S = 0.1  # a stretched deadline is at least this far ahead (no busy loop of tiny stretches)


class _Chunks:
    """Bytes read from one pipe, kept in bytearrays (zeroed by wipe()); at most `cap` bytes kept (None: keep a tail).

    Reads go through one scratch buffer per process, zeroed after each read, and are kept at their exact size: a
    test that prints a line costs a few bytes, not 64 KiB of fresh memory per read (which, with the test process
    alive, the fork server would pay for in copy-on-write faults).
    """

    __slots__ = ("cap", "parts", "n", "over", "kept")  # no instance dict: fewer objects written per test
    _SIZE = 1 << 16
    _scratch = bytearray(_SIZE)
    _view = memoryview(_scratch)
    _zeros = memoryview(bytes(_SIZE))

    def __init__(self, cap: int | None):
        self.cap = cap
        self.parts: list[bytearray] = []
        self.n = 0
        self.over = False
        self.kept = 0  # bytes in `parts` (stderr): a running total, never recomputed over the parts

    def read_from(self, fd: int) -> int:
        n = os.readv(fd, [self._view])
        if n == 0:
            return 0
        self.n += n
        if self.cap is not None and self.n > self.cap:
            self.over = True
        elif self.cap is None and self.parts and len(self.parts[-1]) < _STDERR_SMALL:
            # stderr read in small pieces (a program writing a byte at a time): grow the last part, so that the
            # parts stay few (at most ~2 * _STDERR_KEEP / _STDERR_SMALL) and dropping the oldest is cheap
            last = self.parts[-1]
            part = bytearray(len(last) + n)
            part[:len(last)] = last
            part[len(last):] = self._view[:n]
            last[:] = bytes(len(last))
            self.parts[-1] = part
        else:
            self.parts.append(bytearray(self._view[:n]))
        self._view[:n] = self._zeros[:n]
        if self.cap is None:  # keep only a tail (stderr), with a running total: a read costs O(its bytes + 1)
            self.kept += n
            while self.kept > 2 * _STDERR_KEEP and len(self.parts) > 1:
                old = self.parts.pop(0)
                self.kept -= len(old)
                old[:] = bytes(len(old))
        return n

    def tail(self, n: int) -> bytearray:
        return bytearray(b"".join(self.parts)[-n:])

    def wipe(self) -> None:
        for part in self.parts:
            part[:] = bytes(len(part))
        self.parts.clear()
        self.kept = 0


def _read_to_end(chunks: _Chunks, fd: int) -> int:
    """Read a pipe whose writers are all gone to its end (past the cap, `chunks` drops the bytes); returns 0."""
    while chunks.read_from(fd):
        pass
    return 0


class Watch:
    """The fork server's watch over a test it forked (a base of forkserver.ForkServer, whose attributes it reads)."""

    def _cg_cpu(self, cg0) -> float | None:
        if cg0 is None or cg0[0] is None:
            return None
        now = self.cg.cpu_ns()
        return None if now is None else (now - cg0[0]) / 1e9

    def _watch(self, pid, pidfd, start, lim, stdin, in_w, out_r, err_r, ctl_r, ready_r, cg0, fds) -> dict:
        """Feed stdin, collect output under caps until the test's namespace is gone, enforce the deadline.
        `in_w` leaves `fds` (what run_test closes) when it is closed here: no second close, no OSError per test.

        Output is read straight into bytearrays that are zeroed after sending, so no later program forked
        from this process can find an earlier program's output in its (copied) memory.
        """
        cap = lim["output_bytes"]
        # The set-up's bytes on `ready_r` (at most 6, written before any program code runs) are read once the
        # test is over: the pipe holds them, and no wake-up is spent on them.
        bufs = {out_r: _Chunks(cap), ctl_r: _Chunks(cap + 4096), err_r: _Chunks(None)}
        tle = ole = exited = starved = False
        poller = select.poll()
        readers = set(bufs)
        # Quiet at first: the output pipes wake the fork server only when their last writer is gone (POLLHUP, which
        # poll reports unasked), not at each write, so a short test costs one or two wake-ups instead of one per
        # write. A test still running after _QUIET_S switches to reading as output comes (a program that fills a
        # pipe before then waits at most that long).
        for fd in readers:
            poller.register(fd, 0)
        quiet_until = start + _QUIET_S
        poller.register(pidfd, select.POLLIN)
        stdin_view = memoryview(stdin)
        if in_w != -1:  # a large stdin: fed while the test runs
            os.set_blocking(in_w, False)
            poller.register(in_w, select.POLLOUT)
        deadline = start + lim["wall_s"]
        killed_at = None
        # With a slot cgroup, the CPU of ALL the test's processes is checked while it runs (RLIMIT_CPU is per
        # process); the first check comes late enough that a quick test never pays for one. Whether the cgroup
        # counts CPU is known from the reading taken before the fork: no read here, after it.
        cpu_check = start + _CPU_CHECK_S if cg0 is not None and cg0[0] is not None else None

        try:
            while readers or not exited:
                now = time.monotonic()
                if killed_at is None and now >= deadline:
                    # The wall clock is a backstop for programs that sleep or block; CPU decides TLE. A test the
                    # node kept waiting for a CPU gets that time back (up to wall_cap_s, `_stretch`).
                    later = now if exited else self._stretch(pid, start, now, lim)
                    if later > now:
                        deadline = later
                    else:
                        if not exited:
                            tle, starved = True, self.starved
                        # also after the exit: without a PID namespace, daemonised children may still hold the
                        # pipes open
                        killed_at = self._kill(pid)
                if killed_at is not None and now - killed_at > _KILL_GRACE_S:
                    raise RuntimeError(f"test process did not die {_KILL_GRACE_S:.0f} s after SIGKILL")
                if cpu_check is not None and killed_at is None and now >= cpu_check:
                    cpu_check = now + _CPU_CHECK_S
                    if (self._cg_cpu(cg0) or 0.0) > lim["time_s"]:
                        if not exited:
                            tle = True
                        if killed_at is None:
                            killed_at = self._kill(pid)
                if quiet_until is not None and now >= quiet_until:
                    quiet_until = None
                    for fd in readers:
                        poller.modify(fd, select.POLLIN)
                wake = deadline if killed_at is None else now + 0.5
                if cpu_check is not None and killed_at is None:
                    wake = min(wake, cpu_check)
                if quiet_until is not None:
                    wake = min(wake, quiet_until)
                wait_ms = max(1, int((wake - now) * 1000))
                for fd, _event in poller.poll(wait_ms):
                    if fd == in_w:
                        try:
                            stdin_view = stdin_view[os.write(in_w, stdin_view[: 1 << 16]):]
                        except BrokenPipeError:
                            stdin_view = stdin_view[:0]
                        except BlockingIOError:
                            pass
                        if not stdin_view:
                            poller.unregister(in_w)
                            os.close(in_w)
                            fds.remove(in_w)
                            in_w = -1
                    elif fd == pidfd:
                        exited = True
                        poller.unregister(pidfd)
                    else:
                        chunks = bufs[fd]
                        n = chunks.read_from(fd)
                        if n and quiet_until is not None:  # woken by POLLHUP: no writer is left
                            n = _read_to_end(chunks, fd)
                        if n == 0:
                            poller.unregister(fd)
                            readers.discard(fd)
                        if chunks.over and (n or quiet_until is not None):
                            if fd in (out_r, ctl_r):
                                ole = True
                            if killed_at is None:
                                killed_at = self._kill(pid)
                if exited and readers and self.pidns_fd is not None:
                    # The PID namespace died with its PID 1 (the kernel kills and waits for every other process
                    # first): no process of the test holds a pipe any more, so each reads to its end without
                    # blocking, and no further poll (and wake-up) is needed.
                    for fd in readers:
                        _read_to_end(bufs[fd], fd)
                        if bufs[fd].over and fd in (out_r, ctl_r):
                            ole = True
                    readers.clear()
            if in_w != -1:
                os.close(in_w)
                fds.remove(in_w)
            _, status, usage = os.wait4(pid, 0)
            # The namespace is gone (its PID 1 reaped): every process of the test has exited and is accounted.
            cpu = usage.ru_utime + usage.ru_stime
            oom = False
            if cg0 is not None:
                cg1 = (self.cg.cpu_ns(), self.cg.oom_kills())
                if cg0[0] is not None and cg1[0] is not None:
                    cpu = max(cpu, (cg1[0] - cg0[0]) / 1e9)
                oom = cg1[1] > cg0[1]
                self.cg_last = cg1
            reply = {
                "exit": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
                "sig": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                "cpu": cpu,
                "wall": time.monotonic() - start,
                "tle": tle,
                "ole": ole,
                "oom": oom,
            }
            if starved:  # the wall backstop fired on a test the node kept from running: not a verdict (runner.py)
                reply["starved"] = self.waited
            # Every writer of `ready_r` is gone (the test's processes have all exited): this read cannot block.
            ready = os.read(ready_r, 64)
            if ready[1:2] == b"S" and len(ready) >= 6:  # the program's status, from our init
                (status,) = struct.unpack("<i", ready[2:6])
                reply["exit"] = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
                reply["sig"] = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            if ready[:1] != b"R" and not tle:
                reply["infra"] = "test process setup failed: " + bytes(bufs[err_r].tail(2000)).decode("utf-8",
                                                                                                   "replace")
            return reply, [bufs[out_r], bufs[err_r], bufs[ctl_r]]
        except BaseException:
            for chunks in bufs.values():
                chunks.wipe()
            raise

    def _kill(self, pid: int) -> float:
        """Kill every process of a test; returns the time the kill was sent (a method, not a closure made per test)."""
        try:
            if self.pidns_fd is not None:
                os.kill(pid, signal.SIGKILL)  # PID 1 of the namespace: everything in it dies
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)
                finally:  # a test process killed before its setsid() has no process group of its own yet
                    os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return time.monotonic()

    def _stretch(self, pid: int, start: float, now: float, lim) -> float:
        """At the wall deadline of a test still running: a later deadline, or `now` to kill it (TLE).

        The wall limit counts the time the test was not kept waiting for a CPU: a program that sleeps or blocks
        has had its wall_s and is killed, while one that waited `w` seconds for a CPU (the node saturated: its
        run delay) gets them back, up to `wall_cap_s` of real time. A test still kept from running at the cap is
        killed and marked starved (`self.starved`): the runner runs it again, and never calls that TLE."""
        self.starved = False
        wall, cap = lim["wall_s"], lim.get("wall_cap_s", 0.0)
        if cap <= wall:
            return now
        waited = self._cpu_wait(pid)
        if waited is None:  # unknown: the backstop is the verdict, as without stretching
            return now
        self.waited = round(waited, 3)
        if now - start - waited >= wall - _STRETCH_SLACK_S:  # it had its wall time: sleeping or blocked
            return now
        if now - start >= cap - _STRETCH_SLACK_S:
            self.starved = True
            return now
        return min(start + cap, max(start + wall + waited, now + _STRETCH_STEP_S))

    def _cpu_wait(self, pid: int) -> float | None:
        """Seconds the test's processes have waited for a CPU since it started (None: not measurable here)."""
        if self.cpu_wait_fd is not None and self.wait0 is not None:
            total = cpu_pressure_us(self.cpu_wait_fd)
            return None if total is None else (total - self.wait0) / 1e6
        try:
            if self.own_proc is None:
                return None
            if self.proc_is_ours is None:  # a /proc of another PID namespace would show another process
                self.proc_is_ours = os.readlink("self", dir_fd=self.own_proc) == str(os.getpid())
            if not self.proc_is_ours:
                return None
            # the run delay of the test's PID 1, born at `start` (in the slot's proc: a test mounts its own on /proc)
            fd = os.open(f"{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.own_proc)
            try:
                return int(os.read(fd, 256).split()[1]) / 1e9
            finally:
                os.close(fd)
        except (OSError, ValueError, IndexError):
            return None
