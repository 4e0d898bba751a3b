"""The test process: the set-up calls the fork server plans for it before the fork, and what it runs after.

Each test is a process forked from the fork server (forkserver.py), PID 1 of a PID namespace of its own. Before the
fork, the fork server works out every set-up call the test process makes, as (call, arguments) pairs
(`ChildSide._setup_calls`): the slot cgroup, a fresh IPC namespace (only without seccomp, which denies every IPC
call), a proc of its PID namespace, rlimits, Landlock, the uid or capability drop. The test process makes them,
closes every other descriptor and runs the program (`_run_program`): as a script (stdio mode), or it calls the
entry point (`entry_point`) and writes the return value as plain JSON to descriptor 3 (call mode). Without cgroup
CPU accounting its PID 1 is an init of ours (`_reap_all`) and the program its child.

What every test process would set up the same way is made once in the fork server and passed on by the fork: the
modules a program gets for free (PRELOAD, and call mode's PREAMBLE_*), the program's process state
(`program_process_state`), its standard streams (`program_streams`), a pristine __main__ per submission (`fresh_main`),
the random state, reseeded before each fork (`reseed`).
"""

from __future__ import annotations

import _random
import _signal
import _thread
import json
import marshal
import math
import os
import signal
import struct
import sys
import traceback
import types

from .landlock import ALL_FS_RIGHTS, open_path, restrict_self
from .libc import (
    CLONE_NEWIPC,
    close_fds_from,
    drop_capabilities,
    drop_to_user_calls,
    mount,
    prepare_drop_to_user,
    rlimit_calls,
    unshare,
)
from .protocol import CTL_OK, OK
from .rootfs import PROC_FLAGS

# Imported once here so that each forked test gets them for free.
PRELOAD = ("math", "collections", "heapq", "bisect", "itertools", "functools", "typing", "string", "re",
           "operator", "random", "fractions", "decimal", "copy", "array", "datetime", "threading", "statistics")

_thread_count = getattr(_thread, "_count", None)  # threads started and still running, but for the main one

# Names a LeetCode-style judge provides to call-mode programs without an import (docs/sandbox.md).
PREAMBLE_MODULES = ("collections", "heapq", "bisect", "itertools", "functools", "math", "string", "re",
                    "operator", "random", "sys", "typing")
PREAMBLE_FROM = {
    "typing": ("List", "Dict", "Tuple", "Set", "FrozenSet", "Optional", "Union", "Any", "Callable", "Iterable",
               "Iterator", "Generator", "Deque", "DefaultDict", "Sequence", "Mapping"),
    "collections": ("deque", "defaultdict", "Counter", "OrderedDict", "namedtuple"),
    "heapq": ("heappush", "heappop", "heapify", "heapreplace", "heappushpop", "nlargest", "nsmallest"),
    "bisect": ("bisect", "bisect_left", "bisect_right", "insort", "insort_left", "insort_right"),
    "itertools": ("accumulate", "chain", "combinations", "combinations_with_replacement", "count", "cycle",
                  "groupby", "islice", "permutations", "product", "repeat", "starmap", "zip_longest"),
    "functools": ("lru_cache", "cache", "reduce", "cmp_to_key", "partial"),
    "math": ("inf", "gcd", "sqrt", "ceil", "floor", "log", "log2", "comb", "factorial"),
}

_SETUP_FAILED = 70  # exit status of a child whose isolation setup failed (it never wrote the ready byte)


class ChildSide:
    """The test process's side of the fork server (a base of forkserver.ForkServer, whose attributes it reads): the
    set-up calls it plans before each fork, and `_child`, which runs in the forked process."""

    def _plan_rlimits(self, lim) -> None:
        """The rlimits of a test with limits `lim`, worked out here (once per set of limits) for the test process."""
        key = (lim["time_s"], lim["memory_mb"], lim["file_bytes"], lim["nproc"])
        if self.rlimits[0] == key:
            return
        mem = lim["memory_mb"] << 20
        user_ns_slack = 3 if self.layers["user_ns"] else 0  # launcher and fork server share our ns uid
        user_ns_slack += 1 if self.reaper else 0
        self.rlimits = key, rlimit_calls(
            cpu_s=max(1, math.ceil(lim["time_s"])), data_bytes=mem, as_bytes=mem + (1 << 30), stack_bytes=mem,
            fsize_bytes=lim["file_bytes"], nofile=64,
            nproc=lim["nproc"] + user_ns_slack if (self.uid is not None or self.layers["user_ns"]) else None)

    def _setup_calls(self, tmp, in_r, out_w, err_w, ctl_w, ready_w) -> list:
        """Everything a test process does to set itself up before the program, in order, as (call, arguments)
        pairs made here before the fork: the test process only makes the calls, running no code of its own for them
        and looking nothing up (each page of the fork server's memory a test process writes is copied for it)."""
        if self.fixed_calls is None:
            fixed = self.cg.join_calls() if self.cg is not None else []
            if self.layers["ipc_ns"] == "test":
                fixed.append((unshare, (CLONE_NEWIPC,)))
            if self.proc_dev is not None:  # a proc of the test's own PID namespace (before Landlock: no mounts then)
                fixed.append((mount, (b"proc", b"/proc", b"proc", PROC_FLAGS, self.proc_options)))
            self.fixed_calls = (fixed, self._isolation_calls())
        before_rlimits, after_rlimits = self.fixed_calls
        calls = [] if self.pidns_fd is not None else [(os.setsid, ())]
        if self.allowed is not None:
            calls.append((os.sched_setaffinity, (0, self.allowed)))
        calls += [(os.dup2, (in_r, 0)), (os.dup2, (out_w, 1)), (os.dup2, (err_w, 2)), (os.dup2, (ctl_w, 3))]
        if self.uid is not None:  # the fork server's pipes, reopened as /dev/stdin etc.: the test's uid must own them
            calls += [(os.fchown, (0, self.uid, self.uid)), (os.fchown, (1, self.uid, self.uid)),
                      (os.fchown, (2, self.uid, self.uid))]
        calls += before_rlimits
        calls += self.rlimits[1]
        if self.ruleset is None and self.landlock is not None:  # a ruleset of its own, for its own directory
            calls.append((self._restrict_to, (tmp,)))
        calls += after_rlimits
        calls.append((os.chdir, (tmp,)))
        if tmp != self.env_dir:
            calls += [(os.environ.__setitem__, ("HOME", tmp)), (os.environ.__setitem__, ("TMPDIR", tmp))]
        calls.append((os.write, (ready_w, b"R")))
        return calls

    def _isolation_calls(self) -> list:
        """The Landlock domain (the one shared ruleset, closed at once: no process of a test ever holds it, nor
        can add rules) and the uid or capability drop, in that order."""
        calls = []
        if self.ruleset is not None:
            calls += [(restrict_self, (self.ruleset,)), (os.close, (self.ruleset,))]
        if self.uid is not None:
            # No capability at all. Only without the minimal tree (where an interpreter under /root, mode 0700, must
            # stay importable) CAP_DAC_READ_SEARCH stays; seccomp denies the file-handle calls it would open.
            keep = not self.layers.get("minimal_root")
            prepare_drop_to_user(keep_read_search=keep)
            calls += drop_to_user_calls(self.uid, self.uid, keep_read_search=keep)
        elif self.layers["user_ns"]:
            calls.append((drop_capabilities, ()))
        return calls

    def _restrict_to(self, tmp: str) -> None:
        tmp_fd, _ = open_path(tmp)
        self.landlock.restrict(tmp_fd, ALL_FS_RIGHTS)

    def _child(self, calls, req, ready_w) -> None:
        try:
            for call, args in calls:  # `_setup_calls`
                call(*args)
            if self.reaper:  # no cgroup CPU accounting: an init of our own charges every process of the test
                main_pid = os.fork()
                if main_pid != 0:
                    _reap_all(main_pid, ready_w)  # never returns
                os.close(ready_w)
            close_fds_from(4)
        except BaseException:
            try:
                os.write(2, traceback.format_exc().encode())
            finally:
                os._exit(_SETUP_FAILED)
        _run_program(self.code, req, self.main[1], self.streams)


def program_streams() -> tuple:
    """sys.stdin, sys.stdout and sys.stderr for every test, made once here and never used here: each test process
    gets a pristine copy of them at its fork (building three text streams per test cost it ~100 copy-on-write page
    faults). They stand for descriptors 0-2 by number, so they are built while 0-2 are pipes, as in a test (where
    they are the test's pipes): what a stream learns at construction (block size, seekable, a terminal or not) is
    then what it would have learnt in the test. The fork server's own 0-2 are put back afterwards."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    r, w = os.pipe()
    try:
        os.dup2(r, 0)
        os.dup2(w, 1)
        os.dup2(w, 2)
        streams = (open(0, encoding="utf-8", closefd=False),  # noqa: SIM115
                   open(1, "w", encoding="utf-8", closefd=False),  # noqa: SIM115
                   open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1))  # noqa: SIM115
    finally:
        for fd, copy in zip((0, 1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(r)
        os.close(w)
    return streams


def _reap_all(main_pid: int, status_fd: int) -> None:
    """PID 1 of a test without cgroup accounting: reap every process (orphans come to us, and their CPU adds to
    our rusage, which the fork server reads), kill whatever is left once the program exits, then report the program's
    wait status on `status_fd` and exit. Signals from inside the namespace cannot kill us (we are its init)."""
    try:
        os.dup2(status_fd, 0)
        close_fds_from(1)
        main_status = None
        while True:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == main_pid:
                main_status = status
            if main_status is not None:
                try:
                    os.kill(-1, signal.SIGKILL)
                except OSError:
                    pass
        os.write(0, b"S" + struct.pack("<i", main_status if main_status is not None else 0))
    finally:
        os._exit(0)


class _Quitter:
    """`exit()` / `quit()` as the site module defines them (we run without site)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"Use {self.name}() or Ctrl-D (i.e. EOF) to exit"

    def __call__(self, code=None):
        raise SystemExit(code)


_QUITTERS = (_Quitter("exit"), _Quitter("quit"))  # made once in the fork server; each test process sets them
# The interpreter's own standard streams, referenced here so that a test process replacing them does not free them
# (freeing three text streams and their buffers cost it ~35 copy-on-write page faults). Nothing uses them after the
# replacement, and they never close their descriptors (CPython opens them with closefd=False).
_ORIGINAL_STREAMS = (sys.stdin, sys.stdout, sys.stderr)


def _to_plain(value, depth: int = 0):
    """The return value as plain JSON data; anything else (custom objects, sets, ...) raises TypeError."""
    if depth > 200:
        raise TypeError("return value nested too deeply")
    if value is None or type(value) is bool:
        return value
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if type(value) in (list, tuple):
        return [_to_plain(v, depth + 1) for v in value]
    if type(value) is dict:
        out = {}
        for key, v in dict.items(value):
            if type(key) is str:
                k = key
            elif key is None or type(key) in (bool, int, float):
                k = json.dumps(key)
            else:
                raise TypeError(f"dict key of type {type(key).__name__} is not plain JSON")
            out[k] = _to_plain(v, depth + 1)
        return out
    raise TypeError(f"return value of type {type(value).__name__} is not plain JSON")


def entry_point(namespace: dict, fn_name: str):
    cls = namespace.get("Solution")
    if isinstance(cls, type) and hasattr(cls, fn_name):
        return getattr(cls(), fn_name)
    fn = namespace.get(fn_name)
    if callable(fn):
        return fn
    raise NameError(f"entry point {fn_name!r} is not defined (neither a function nor a method of class Solution)")


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter does at exit. Most programs start none, and a C
    call says so: then the threading module's Python code is not run (never run in the fork server, its code objects and
    what they touch would be written, so copied, in every test process)."""
    if _thread_count is not None and _thread_count() == 0:
        return
    import threading

    main = threading.main_thread()
    while True:
        pending = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
        if not pending:
            return
        for t in pending:
            t.join()


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def program_process_state(test_dir: str | None) -> None:
    """The process state a program runs in, set once in the fork server (fork passes it on to every test process)."""
    sys.set_int_max_str_digits(0)  # programs print big integers; the fork server parses no text into integers
    # over RLIMIT_FSIZE, write() fails with EFBIG and no kill (`_signal`: `signal.signal` converts enums)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_IGN)
    sys.argv = ["solution.py"]
    import builtins

    builtins.exit, builtins.quit = _QUITTERS  # what the site module would add (the interpreter runs with -S)
    if test_dir is not None:
        os.environ["HOME"] = os.environ["TMPDIR"] = test_dir


def reseed() -> None:
    """A fresh random state for the next test process, set in the fork server just before it forks (the fork server
    itself never uses it): a 128-bit seed, not 2,496 bytes of it, through the C method (random.Random.seed adds type
    checks and resets gauss_next, which the fork server never set)."""
    if "random" in sys.modules:
        _random.Random.seed(sys.modules["random"]._inst, int.from_bytes(os.urandom(16), "little"))


def fresh_main(call_mode: bool, preamble: dict) -> types.ModuleType:
    """The module a program runs as: empty but for builtins, plus the LeetCode preamble in call mode. Made in the
    fork server once per submission; each test process runs in its own copy, and the fork server's is never run."""
    import builtins

    main_module = types.ModuleType("__main__")
    main_module.__builtins__ = builtins
    if call_mode:
        main_module.__dict__.update(preamble)
    return main_module


def _run_program(code, req, main_module, streams) -> None:
    """Runs the program in a test process whose set-up is done (and in the state `program_process_state` made,
    reseeded by `reseed`), as the module `main_module` (from `fresh_main`, used by this process alone)."""
    sys.stdin, sys.stdout, sys.stderr = streams  # pristine: made in the fork server, never used there
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
    sys.modules["__main__"] = main_module
    call_mode = req["mode"] == "call"
    status, ctl = 0, OK
    try:
        try:
            exec(code, main_module.__dict__)
            if call_mode:
                fn = entry_point(main_module.__dict__, req["fn_name"])
                value = fn(*marshal.loads(req["args"]))
                try:
                    ctl = {"kind": "result", "value": json.dumps(_to_plain(value), allow_nan=True)}
                except (TypeError, ValueError, RecursionError) as exc:
                    ctl = {"kind": "badtype", "detail": str(exc)[:300]}
            _join_threads()
        except SystemExit as exc:
            _join_threads()
            status = _exit_status(exc.code)
            if call_mode and ctl["kind"] == "ok":
                ctl = {"kind": "exc", "detail": f"SystemExit({exc.code!r}) before returning"}
                status = status or 1
    except MemoryError:
        status, ctl = 1, {"kind": "memory"}
    except BaseException as exc:  # the program's own exception: report it like the interpreter would
        status = 1
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        try:
            sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
        except BaseException:
            pass
        ctl = {"kind": "exc", "detail": f"{type(exc).__name__}: {str(exc)[:300]}"}
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    try:
        data = CTL_OK if ctl is OK else json.dumps(ctl).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(3, view):]
    except BaseException:
        pass
    os._exit(status)
