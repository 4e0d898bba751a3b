"""What the sandbox worker reports, pinned in this process (the mutation runs of the worker's modules: protocol.py,
forkserver.py, watch.py, testproc.py).

The worker normally runs as `python -I -S worker.py`, which cannot import a mutated copy of its modules (mutmut's
trampoline lives in site-packages), so these tests import them here: the program runner `testproc._run_program` on
file descriptors 0-3 pointed at files for the call (its exit and the process state it changes are restored); the
fork server's fork-and-watch loop with every isolation layer disabled (the test is a child of this process); and the
pure helpers. The runner turns these reports into verdicts (runner._judge): status and signal, the control
message's kind (`result`, `badtype`, `exc`, `memory`), and the `tle` / `ole` / `oom` flags. One property per test.

Safety: the fork server here runs as this process's user with no PID namespace, so its init-of-a-test code
(`_reap_all`, which kills every process it can signal) must never run: it is replaced by a stub that fails the
test, and the configuration leaves every mount and cgroup path unreachable even with one condition inverted.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import gc
import json
import marshal
import os
import random
import re
import signal
import sys
import tempfile
import threading
import time

import pytest

from mrgrpo.sandbox import cgroups, forkserver, protocol, testproc, watch

# ---- _run_program in this process


class _Exited(BaseException):
    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


class _Os:
    """The worker's `os`, except that `_exit` raises (the program's own `os` is the real one)."""

    def __getattr__(self, name):
        return getattr(os, name)

    def _exit(self, status):
        raise _Exited(status)


_SYS_STATE = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__", "argv")


def _high_fd(fd: int) -> int:
    """A copy of `fd` numbered 100 or more (so that pointing 0-3 elsewhere never clobbers it)."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)


@pytest.fixture
def program(monkeypatch, tmp_path):
    """program(code, stdin="", fn_name=None, args=()) -> (status, ctl, stdout, stderr) of one `_run_program`.

    Everything the call changes in this process is put back before it returns (pytest reports through
    sys.__stdout__ between a test and its teardown)."""
    monkeypatch.setattr(testproc, "os", _Os())
    before = set(threading.enumerate()) - {threading.main_thread()}
    real_enumerate = threading.enumerate  # only the program's threads (and the main one) are waited for
    monkeypatch.setattr(threading, "enumerate", lambda: [t for t in real_enumerate() if t not in before])
    preamble = {"deque": __import__("collections").deque}

    def run(code: str, stdin: str = "", fn_name: str | None = None, args=()):
        files = {}
        for fd in (0, 1, 2, 3):
            low = os.open(tmp_path / f"fd{fd}", os.O_RDWR | os.O_CREAT | os.O_TRUNC)
            files[fd] = _high_fd(low)
            os.close(low)
        os.write(files[0], stdin.encode())
        os.lseek(files[0], 0, os.SEEK_SET)
        saved = {}
        for fd in (0, 1, 2, 3):
            try:
                saved[fd] = _high_fd(fd)
            except OSError:
                saved[fd] = None
        req = {"mode": "call" if fn_name else "stdio", "fn_name": fn_name, "args": marshal.dumps(list(args))}
        compiled = compile(code, "solution.py", "exec")
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        state = {name: getattr(sys, name) for name in _SYS_STATE}
        main, quitters, env = sys.modules["__main__"], (builtins.exit, builtins.quit), dict(os.environ)
        digits, xfsz = sys.get_int_max_str_digits(), signal.getsignal(signal.SIGXFSZ)
        try:
            for fd in (0, 1, 2, 3):
                os.dup2(files[fd], fd)
            streams = testproc.program_streams()  # as the fork server makes them (over pipes on 0-2), here over files
            with pytest.raises(_Exited) as exited, _no_hang():
                testproc.program_process_state(str(tmp_path))  # as the fork server sets it, once, for every test
                testproc.reseed()  # as the fork server does before each fork
                testproc._run_program(compiled, req, testproc.fresh_main(fn_name is not None, preamble), streams)
        finally:
            for fd in (0, 1, 2, 3):
                if saved[fd] is None:
                    os.close(fd)
                else:
                    os.dup2(saved[fd], fd)
                    os.close(saved[fd])
            for name, value in state.items():
                setattr(sys, name, value)
            sys.modules["__main__"], (builtins.exit, builtins.quit) = main, quitters
            os.environ.clear()
            os.environ.update(env)
            sys.set_int_max_str_digits(digits)
            signal.signal(signal.SIGXFSZ, xfsz)
        out = {}
        for fd in (1, 2, 3):
            os.lseek(files[fd], 0, os.SEEK_SET)
            out[fd] = os.read(files[fd], 1 << 24)
        for fd in files.values():
            os.close(fd)
        ctl = json.loads(out[3]) if out[3] else None
        return exited.value.status, ctl, out[1].decode("utf-8", "replace"), out[2].decode("utf-8", "replace")

    return run


def test_stdio_program_exits_0_with_its_output(program):
    """A stdio program that ends normally exits 0, reports kind ok, and its stdout is what it printed."""
    assert program("print(int(input()) * 2)", stdin="21\n") == (0, {"kind": "ok"}, "42\n", "")


def test_an_exception_exits_1_with_the_traceback_on_stderr(program):
    """An uncaught exception exits 1, reports kind exc with its type and message, and prints its traceback
    as the interpreter would, without the worker's own frame."""
    status, ctl, out, err = program("print('a')\nraise KeyError('k')")
    assert (status, ctl, out) == (1, {"kind": "exc", "detail": "KeyError: 'k'"}, "a\n")
    assert err == "Traceback (most recent call last):\n  File \"solution.py\", line 2, in <module>\nKeyError: 'k'\n"


def test_exception_details_keep_300_characters(program):
    """The detail of an exception, or of a return value that is not JSON, keeps 300 characters of the message."""
    assert program("raise ValueError('v' * 400)")[1]["detail"] == "ValueError: " + "v" * 300
    ctl = program("def f():\n    return type('C' * 400, (), {})()", fn_name="f")[1]
    assert ctl == {"kind": "badtype", "detail": ("return value of type " + "C" * 400)[:300]}


def test_closing_the_standard_streams_keeps_the_descriptors(program):
    """Closing sys.stdin/stdout/stderr leaves fds 0, 1 and 2 open (the program can still use them)."""
    code = "import os, sys\nfor s in (sys.stdin, sys.stdout, sys.stderr):\n    s.close()\n"
    code += "os.write(1, os.read(0, 100).upper())\nos.write(2, b'e')"
    assert program(code, stdin="abc") == (0, {"kind": "ok"}, "ABC", "e")


def test_stderr_is_line_buffered(program):
    """A line written to sys.stderr is on fd 2 at once, before later raw writes (and before a kill)."""
    code = "import os, sys\nsys.stderr.write('first line\\n')\nos.write(2, b'second line\\n')"
    assert program(code)[3] == "first line\nsecond line\n"


def test_stdout_is_block_buffered_and_flushed_at_the_end(program):
    """Printed text reaches fd 1 when the program ends, after its raw writes to fd 1."""
    assert program("import os\nprint('printed')\nos.write(1, b'raw\\n')")[2] == "raw\nprinted\n"


def test_unencodable_stderr_is_escaped(program):
    """Text that UTF-8 cannot encode (a lone surrogate) is written to stderr escaped, not an error."""
    assert program("import sys\nsys.stderr.write('\\ud800\\n')\nprint('ok')") == (
        0,
        {"kind": "ok"},
        "ok\n",
        "\\ud800\n",
    )


def test_each_program_gets_a_fresh_random_seed(program):
    """The random module is reseeded for each program: the worker's own random state does not carry over."""
    state = random.getstate()
    try:
        random.seed(12345)
        out = program("import random\nprint(repr(random.random()))")[2]
    finally:
        random.setstate(state)
    assert out != repr(random.Random(12345).random()) + "\n"


def test_program_is_the_main_module(program):
    """The program's globals are the module sys.modules['__main__'] (pickle and dataclasses look it up)."""
    assert program("import sys\nx = 5\nprint(sys.modules['__main__'].x)")[:3] == (0, {"kind": "ok"}, "5\n")


def test_daemon_threads_are_not_waited_for(program):
    """A daemon thread still blocked when the program ends does not keep it from ending."""
    code = "import builtins, threading\nbuiltins.mrgrpo_release = threading.Event()\n"
    code += "threading.Thread(target=builtins.mrgrpo_release.wait, daemon=True).start()\nprint('done')"
    try:
        assert program(code)[:3] == (0, {"kind": "ok"}, "done\n")
    finally:
        builtins.__dict__.pop("mrgrpo_release").set()


def test_memory_error_is_reported_as_memory(program):
    """A MemoryError exits 1 with kind memory (the runner's MLE), not as an ordinary exception."""
    assert program("raise MemoryError()")[:2] == (1, {"kind": "memory"})


def test_system_exit_codes(program):
    """sys.exit(n) exits n & 0xFF; None and 0 exit 0; a message exits 1 and is printed on stderr."""
    assert program("import sys\nsys.exit(3)")[0] == 3
    assert program("import sys\nsys.exit(259)")[0] == 3
    assert program("import sys\nsys.exit(-1)")[0] == 255
    assert program("import sys\nsys.exit()")[:2] == (0, {"kind": "ok"})
    assert program("exit(0)")[:2] == (0, {"kind": "ok"})
    assert program("quit(4)")[0] == 4
    status, _, _, err = program("import sys\nsys.exit('bye')")
    assert (status, err) == (1, "bye\n")


def test_exit_and_quit_are_the_site_quitters(program):
    """exit and quit exist without site, raise SystemExit, and print as the site module's do."""
    assert program("print(repr(exit), repr(quit))")[2] == (
        "Use exit() or Ctrl-D (i.e. EOF) to exit Use quit() or Ctrl-D (i.e. EOF) to exit\n"
    )


def test_program_runs_as_main_in_its_directory(program, tmp_path):
    """The program is __main__ with argv ['solution.py'], HOME and TMPDIR its directory, no int/str limit."""
    code = "import os, sys\nprint(__name__, sys.argv, os.environ['HOME'], os.environ['TMPDIR'], len(str(10**5000)))"
    assert program(code)[2] == f"__main__ ['solution.py'] {tmp_path} {tmp_path} 5001\n"


def test_over_the_file_size_limit_is_an_error_not_a_signal(program):
    """SIGXFSZ is ignored while the program runs (over RLIMIT_FSIZE a write fails instead of killing it)."""
    assert program("import signal\nprint(signal.getsignal(signal.SIGXFSZ) is signal.SIG_IGN)")[2] == "True\n"


def test_call_mode_reports_the_return_value_as_json(program):
    """Call mode calls the entry point with the arguments and reports kind result with the value's JSON."""
    status, ctl, out, _ = program(
        "def f(a, b):\n    print('log')\n    return [a + b, (a,), {1: None}]", fn_name="f", args=(1, 2)
    )
    assert (status, ctl, out) == (0, {"kind": "result", "value": '[3, [1], {"1": null}]'}, "log\n")


def test_call_mode_uses_the_preamble(program):
    """Call-mode programs see the preamble's names without importing them; stdio programs do not."""
    assert program("def f():\n    return len(deque([1, 2]))", fn_name="f")[1] == {"kind": "result", "value": "2"}
    assert program("print(deque)")[1]["kind"] == "exc"


def test_call_mode_non_json_value_is_badtype(program):
    """A return value that is not plain JSON exits 0 with kind badtype (the runner's WA)."""
    status, ctl, _, _ = program("def f():\n    return {1, 2}", fn_name="f")
    assert (status, ctl["kind"]) == (0, "badtype")
    assert ctl["detail"] == "return value of type set is not plain JSON"


def test_call_mode_nan_is_json(program):
    """NaN and infinities are written as JSON NaN/Infinity (the comparison then rejects NaN)."""
    assert program("def f():\n    return [float('nan'), float('inf')]", fn_name="f")[1] == {
        "kind": "result",
        "value": "[NaN, Infinity]",
    }


def test_call_mode_exit_before_returning_is_an_exception(program):
    """SystemExit inside the entry point is kind exc and exits non-zero, even sys.exit(0)."""
    for code, status in (("sys.exit(0)", 1), ("sys.exit(5)", 5), ("sys.exit()", 1)):
        got = program(f"import sys\ndef f():\n    {code}", fn_name="f")
        assert got[0] == status, code
        assert got[1]["kind"] == "exc" and got[1]["detail"].startswith("SystemExit("), code


def test_call_mode_threads_are_joined_after_the_return(program):
    """A thread still running when the entry point returns finishes before the exit; the result is kept."""
    code = (
        "import threading, time\ndef late():\n    time.sleep(0.05)\n    print('late')\n"
        "def f():\n    threading.Thread(target=late).start()\n    return 7"
    )
    assert program(code, fn_name="f")[:3] == (0, {"kind": "result", "value": "7"}, "late\n")


def test_threads_are_joined_before_the_exit(program):
    """The program's non-daemon threads finish (and their output is kept) before the program ends."""
    code = "import threading, time\ndef late():\n    time.sleep(0.05)\n    print('late')\n"
    code += "threading.Thread(target=late).start()"
    assert program(code)[:3] == (0, {"kind": "ok"}, "late\n")


def test_threads_are_joined_after_system_exit(program):
    """sys.exit in the main thread still waits for the program's threads, and keeps its status."""
    code = (
        "import sys, threading, time\ndef late():\n    time.sleep(0.05)\n    print('late')\n"
        "threading.Thread(target=late).start()\nsys.exit(2)"
    )
    assert program(code)[0::2] == (2, "late\n")


def test_missing_entry_point_is_an_exception(program):
    """Call mode without the entry point is kind exc naming it."""
    ctl = program("def g():\n    return 1", fn_name="f")[1]
    assert ctl["kind"] == "exc" and ctl["detail"].startswith("NameError: entry point 'f' is not defined")


# ---- the pure helpers


def test_exit_status():
    """_exit_status: None is 0, an int is taken modulo 256, anything else is printed and is 1."""
    assert [testproc._exit_status(c) for c in (None, 0, 3, 256 + 3, -1, True)] == [0, 0, 3, 3, 255, 1]


def test_to_plain_keeps_json_types_exactly():
    """_to_plain: bools stay bools, subclasses of int/float/str become the base type, tuples become lists."""

    class Int(int):
        pass

    class Float(float):
        pass

    class Str(str):
        pass

    out = testproc._to_plain([True, False, None, Int(5), Float(0.5), Str("s"), (1, [2])])
    assert out == [True, False, None, 5, 0.5, "s", [1, [2]]]
    assert [type(v) for v in out] == [bool, bool, type(None), int, float, str, list]


def test_to_plain_dict_keys_follow_json():
    """_to_plain: dict keys that JSON allows become its strings ('2', 'null', 'true', '0.5'), others raise."""
    assert testproc._to_plain({2: 1, None: 2, True: 3, 0.5: 4, "k": (5,)}) == {
        "2": 1,
        "null": 2,
        "true": 3,
        "0.5": 4,
        "k": [5],
    }
    with pytest.raises(TypeError, match="^dict key of type tuple is not plain JSON$"):
        testproc._to_plain({(1,): 1})


def test_to_plain_refuses_other_types():
    """_to_plain: sets, list and dict subclasses and objects raise TypeError naming the type."""

    class L(list):
        pass

    class D(dict):
        pass

    for value, name in (({1}, "set"), (L(), "L"), (D(), "D"), (object(), "object"), (b"x", "bytes")):
        with pytest.raises(TypeError, match=f"^return value of type {name} is not plain JSON$"):
            testproc._to_plain([value])


def test_to_plain_nesting_limit():
    """_to_plain accepts 200 levels of nesting below the value and refuses 201."""

    def nested(levels):
        value = 0
        for _ in range(levels):
            value = [value]
        return value

    assert testproc._to_plain(nested(200)) == nested(200)
    with pytest.raises(TypeError, match="^return value nested too deeply$"):
        testproc._to_plain(nested(201))


def test_to_plain_nesting_limit_counts_dicts_too():
    """_to_plain counts dict levels like list levels: 200 accepted, 201 refused."""

    def nested(levels):
        value = 0
        for _ in range(levels):
            value = {"k": value}
        return value

    assert testproc._to_plain(nested(200)) == nested(200)
    with pytest.raises(TypeError, match="^return value nested too deeply$"):
        testproc._to_plain(nested(201))


def test_entry_point_prefers_the_solution_method():
    """entry_point: Solution().<name> when the class has it, else the top-level function."""

    class Solution:
        def f(self):
            return "method"

    def f():
        return "function"

    assert testproc.entry_point({"Solution": Solution, "f": f}, "f")() == "method"
    assert testproc.entry_point({"Solution": Solution, "g": f}, "g")() == "function"
    assert testproc.entry_point({"Solution": 5, "f": f}, "f")() == "function"  # not a class


def test_entry_point_missing_or_not_callable_is_a_name_error():
    """entry_point raises NameError naming the entry point when there is none, or it is not callable."""
    message = "^entry point 'f' is not defined \\(neither a function nor a method of class Solution\\)$"
    for namespace in ({}, {"f": 3}, {"Solution": type("Solution", (), {})}):
        with pytest.raises(NameError, match=message):
            testproc.entry_point(namespace, "f")


def _pipe_with(data: bytes):
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return r


@contextlib.contextmanager
def _no_hang(seconds: float = 10.0):
    """A read that never completes (a broken framing) fails the test instead of hanging it."""

    def expire(signum, frame):
        raise TimeoutError("blocked on a pipe")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_chunks_cap_marks_over_and_keeps_nothing_past_it():
    """_Chunks with a cap: reads up to the cap are kept; the read that passes it sets `over` and is not kept."""
    chunks = watch._Chunks(cap=5)
    r = _pipe_with(b"abcde")
    try:
        assert chunks.read_from(r) == 5 and not chunks.over and bytes(chunks.tail(10)) == b"abcde"
        assert chunks.read_from(r) == 0
    finally:
        os.close(r)
    chunks = watch._Chunks(cap=5)
    r = _pipe_with(b"abcdef")
    try:
        assert chunks.read_from(r) == 6 and chunks.over and chunks.parts == [] and chunks.n == 6
    finally:
        os.close(r)


def test_chunks_without_cap_keep_a_tail():
    """_Chunks without a cap (stderr) keep the newest bytes, at least the last 8 KiB, and drop the oldest."""
    chunks = watch._Chunks(cap=None)
    for i in range(6):
        r = _pipe_with(bytes([65 + i]) * 10_000)
        try:
            chunks.read_from(r)
        finally:
            os.close(r)
    kept = b"".join(chunks.parts)
    assert chunks.n == 60_000 and len(kept) <= 2 * 8192 + 10_000 and kept.endswith(b"F" * 10_000)
    assert len(kept) >= 8192 and b"A" not in kept


@pytest.mark.parametrize(
    ("reads", "kept"),
    [((5000, 5000), 10_000), ((8192, 8192), 16_384), ((10_000, 10_000), 10_000), ((8000, 8000, 8000), 16_000)],
)
def test_chunks_without_cap_drop_old_reads_past_16_kib(reads, kept):
    """_Chunks without a cap drop their oldest reads while more than 16 KiB is kept, never the newest read."""
    chunks = watch._Chunks(cap=None)
    for size in reads:
        r = _pipe_with(b"z" * size)
        try:
            chunks.read_from(r)
        finally:
            os.close(r)
    assert sum(len(p) for p in chunks.parts) == kept and chunks.n == sum(reads)


def test_chunks_tail_spans_reads():
    """_Chunks.tail(n) is the last n bytes of everything kept, across reads."""
    chunks = watch._Chunks(cap=100)
    for data in (b"abc", b"def"):
        r = _pipe_with(data)
        try:
            chunks.read_from(r)
        finally:
            os.close(r)
    assert chunks.tail(5) == bytearray(b"bcdef") and chunks.tail(10) == bytearray(b"abcdef")


def test_chunks_wipe_zeroes_the_bytes():
    """_Chunks.wipe zeroes every kept buffer (no later test can find the output in memory) and forgets them."""
    chunks = watch._Chunks(cap=100)
    r = _pipe_with(b"secret")
    try:
        chunks.read_from(r)
    finally:
        os.close(r)
    part = chunks.parts[0]
    chunks.wipe()
    assert bytes(part) == bytes(6) and chunks.parts == []


def test_chunks_keep_exact_sizes_and_leave_no_copy_in_the_scratch_buffer():
    """A read keeps exactly the bytes read, and the shared scratch buffer it went through is zeroed again (over the
    cap too): the only copy of a test's output is in parts that wipe() zeroes."""
    for cap, data in ((100, b"secret"), (3, b"secret")):
        chunks = watch._Chunks(cap=cap)
        r = _pipe_with(data)
        try:
            assert chunks.read_from(r) == 6
        finally:
            os.close(r)
        assert [bytes(p) for p in chunks.parts] == ([data] if cap > 6 else [])
        assert bytes(watch._Chunks._scratch) == bytes(watch._Chunks._SIZE)


def test_send_and_recv_round_trip_with_raw_buffers():
    """send frames a message and appends each buffer's bytes (lengths in `raw`), then wipes them; recv reads it."""
    r, w = os.pipe()
    try:
        out = watch._Chunks(cap=100)
        src = _pipe_with(b"hello")
        out.read_from(src)
        os.close(src)
        part = out.parts[0]
        with _no_hang():
            protocol.send(w, {"exit": 0}, [out, watch._Chunks(cap=100)])
        assert bytes(part) == bytes(5) and out.parts == []
        os.close(w)
        w = -1
        with _no_hang():
            assert protocol.recv(r) == {"exit": 0, "raw": [5, 0]}
            assert os.read(r, 100) == b"hello"
            assert protocol.recv(r) is None  # EOF between messages
    finally:
        os.close(r)
        if w != -1:
            os.close(w)


def test_send_goes_on_after_partial_writes_and_past_iov_max(monkeypatch):
    """send delivers every byte in order when writev writes only part of what it is given, and with more pieces than
    one writev takes (IOV_MAX, 1024); empty pieces are skipped, and each buffer is wiped."""
    pieces = [bytes([i % 251]) * (1 + i % 3) for i in range(3000)]
    bufs = []
    for i in range(0, 3000, 1000):
        b = watch._Chunks(cap=None)
        b.parts = [bytearray(x) for x in pieces[i:i + 1000]] + [bytearray()]
        bufs.append(b)
    calls = []
    real_writev = os.writev

    def short_writev(fd, views):
        calls.append(len(views))
        assert len(views) <= 1024 and all(len(v) for v in views)
        first = bytes(views[0])[:7] if len(calls) % 2 else b"".join(bytes(v) for v in views[:5])[:11]
        return real_writev(fd, [first])

    monkeypatch.setattr(protocol.os, "writev", short_writev)
    with tempfile.TemporaryFile() as f:
        protocol.send(f.fileno(), {"exit": 0}, bufs)
        f.seek(0)
        data = f.read()
    body_len = protocol.HEADER.unpack(data[:8])[0]
    msg = marshal.loads(data[8:8 + body_len])
    assert msg == {"exit": 0, "raw": [sum(map(len, pieces[i:i + 1000])) for i in range(0, 3000, 1000)]}
    assert data[8 + body_len:] == b"".join(pieces)
    assert max(calls) == 1024 and len(calls) > 1
    assert all(b.parts == [] for b in bufs)


def test_recv_of_a_truncated_message_raises():
    """recv raises EOFError when the stream ends inside a header or a body."""
    body = marshal.dumps({"a": 1})
    for data in (protocol.HEADER.pack(len(body)) + body[:-1], protocol.HEADER.pack(len(body))[:3]):
        r = _pipe_with(data)
        try:
            with pytest.raises(EOFError, match="^truncated message$"):
                protocol.recv(r)
        finally:
            os.close(r)


def test_recv_of_a_header_without_its_body_raises():
    """recv raises EOFError when the stream ends right after a header."""
    r = _pipe_with(protocol.HEADER.pack(10))
    try:
        with pytest.raises(EOFError, match="^truncated message$"):
            protocol.recv(r)
    finally:
        os.close(r)


def test_large_messages_are_read_in_full_and_alone():
    """recv reads a body larger than one read (1 MiB) completely, and not a byte of the next message."""
    r, w = os.pipe()
    payloads = [{"v": "x" * (3 << 20)}, {"next": 1}]

    def write():
        try:
            for payload in payloads:
                protocol.send(w, payload)
        except OSError:  # the reader gave up
            pass
        finally:
            os.close(w)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with _no_hang():
            assert [protocol.recv(r), protocol.recv(r), protocol.recv(r)] == [*payloads, None]
    finally:
        os.close(r)  # a writer still blocked on the pipe gets EPIPE and ends
        writer.join()


def test_recv_reads_exactly_one_message_from_a_file(tmp_path):
    """recv on a descriptor that returns every byte asked for (a file) stops at the message's end."""
    path = tmp_path / "messages"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        protocol.send(fd, {"v": "x" * (3 << 20)})
        protocol.send(fd, {"next": 1})
        os.lseek(fd, 0, os.SEEK_SET)
        assert protocol.recv(fd) == {"v": "x" * (3 << 20)}
        assert protocol.recv(fd) == {"next": 1} and protocol.recv(fd) is None
    finally:
        os.close(fd)


# ---- the fork server's fork-and-watch loop, in a child of this process with every layer disabled


class _SafeOs:
    """The worker's `os`, refusing to signal every process (pid -1) or a process group below 2."""

    def __getattr__(self, name):
        return getattr(os, name)

    def kill(self, pid, sig):
        if pid <= 0:
            raise PermissionError(f"test guard: kill({pid}) refused")
        return os.kill(pid, sig)

    def killpg(self, pgid, sig):
        if pgid <= 1:
            raise PermissionError(f"test guard: killpg({pgid}) refused")
        return os.killpg(pgid, sig)


def _no_init(main_pid, status_fd):
    """Stands in for `_reap_all`: without a PID namespace an init of the test would signal the whole machine."""
    os._exit(99)


class FakeCgroup:
    """A slot cgroup that reports the CPU and OOM-kill counters given (the last value repeats)."""

    cpu_kind = mem_kind = "fake"

    def __init__(self, cpu_ns=(0,), oom_kills=(0,), held=(0,)):
        self._cpu, self._oom, self._held = list(cpu_ns), list(oom_kills), list(held)
        self.memory = []
        self.held_reads = 0

    def held_bytes(self, below):
        self.held_reads += 1
        return self._next(self._held)

    @staticmethod
    def _next(values):
        return values.pop(0) if len(values) > 1 else values[0]

    def cpu_ns(self):
        return self._next(self._cpu)

    def oom_kills(self):
        return self._next(self._oom)

    def set_memory(self, limit):
        self.memory.append(limit)

    def join_calls(self):
        return []


@pytest.fixture
def fork_server(tmp_path, monkeypatch):
    monkeypatch.setattr(testproc, "_reap_all", _no_init)
    for module in (forkserver, watch, testproc):
        monkeypatch.setattr(module, "os", _SafeOs())
    monkeypatch.setattr(forkserver, "fork", os.fork)  # this process may have threads: CPython's fork, not libc's
    cfg = {
        "slot_dir": str(tmp_path),
        "uid": None,
        "tmpfs_bytes": 1 << 20,
        "tmpfs_inodes": 64,
        "extra_sys_path": [],
        "disable": [
            "namespaces",
            "landlock",
            "seccomp",
            "cgroup_v1",
            "cgroup_v2",
            "ipc_ns",
            "minimal_root",
            "test_tmpfs",
        ],
        # a slot cgroup that cannot be opened: the fork server runs without one, and never makes one of its own
        "cgroup": {"procs": [str(tmp_path / "none" / "cgroup.procs")], "cpu": None, "mem": None},
        "cgroup_name": None,
    }
    layers = {
        "pid_ns": False,
        "net_ns": False,
        "tmpfs": False,
        "user_ns": False,
        "landlock": 0,
        "per_slot_uid": False,
        "ipc_ns": False,
        "seccomp": False,
        "cgroup_cpu": None,
        "cgroup_memory": None,
    }
    z = forkserver.ForkServer(cfg, layers, [], False)
    assert z.cg is None and not z.reaper and z.pidns_fd is None and z.uid is None
    yield z
    gc.unfreeze()


_LIMITS = {"time_s": 2.0, "wall_s": 4.0, "memory_mb": 512, "output_bytes": 1 << 16, "file_bytes": 1 << 20, "nproc": 32}


def _run_test(z, req):
    me = os.getpid()
    try:
        with _no_hang(30.0):
            reply, buffers = z.run_test(req)
            z.clean_up()  # as the fork server's loop does once the reply is sent
    finally:
        if os.getpid() != me:  # a forked test process that came back here (a broken fork): never run pytest twice
            os._exit(70)
    out, err, ctl = (b"".join(b.parts) for b in buffers) if buffers else (b"", b"", b"")
    return reply, out, err, ctl


def _test(z, code, stdin=b"", code_id=1, **limits):
    req = {"code_id": code_id, "code": code, "limits": dict(_LIMITS, **limits), "fn_name": None, "mode": "stdio"}
    req["stdin"] = stdin
    return _run_test(z, req)


def test_fork_server_reports_status_output_and_stdin(fork_server):
    """A test's reply: exit status, no signal, no tle/ole/oom, its stdout, and all of a large stdin was fed."""
    stdin = b"x" * (1 << 18) + b"\n"
    reply, out, err, ctl = _test(fork_server, "import sys\nprint(len(sys.stdin.read()))\nsys.exit(3)", stdin)
    assert (reply["exit"], reply["sig"], reply["tle"], reply["ole"], reply["oom"]) == (3, None, False, False, False)
    assert out == b"%d\n" % len(stdin) and json.loads(ctl) == {"kind": "ok"} and "infra" not in reply
    assert 0 <= reply["cpu"] < _LIMITS["time_s"]


def test_fork_server_call_mode_has_an_empty_stdin(fork_server):
    """A call-mode request carries no stdin: the program reads end-of-file at once."""
    req = {
        "code_id": 1,
        "code": "import sys\ndef f():\n    return sys.stdin.read()",
        "limits": _LIMITS,
        "fn_name": "f",
        "mode": "call",
        "args": marshal.dumps([]),
    }
    reply, _, _, ctl = _run_test(fork_server, req)
    assert reply["exit"] == 0 and json.loads(ctl) == {"kind": "result", "value": '""'}


def test_fork_server_reports_the_killing_signal(fork_server):
    """A program killed by a signal has no exit status and that signal."""
    reply, *_ = _test(fork_server, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert (reply["exit"], reply["sig"], reply["tle"]) == (None, signal.SIGSEGV, False)


def test_fork_server_wall_clock_is_tle(fork_server):
    """A program still running at wall_s is killed and flagged tle (not ole)."""
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.5)
    assert (reply["tle"], reply["ole"], reply["sig"]) == (True, False, signal.SIGKILL)
    assert 0.5 <= reply["wall"] and "infra" not in reply


def test_fork_server_output_over_the_cap_is_ole(fork_server):
    """stdout past output_bytes is flagged ole and the program is killed; nothing of the flood is kept."""
    reply, out, *_ = _test(fork_server, "while True:\n    print('x' * 1000)", output_bytes=1 << 14)
    assert (reply["ole"], reply["tle"], reply["sig"]) == (True, False, signal.SIGKILL)
    assert len(out) <= 1 << 14


def test_fork_server_result_channel_over_the_cap_is_ole(fork_server):
    """A control message past output_bytes + 4 KiB (a huge return value) is ole too."""
    code = "import os\nos.write(3, b'x' * 30000)\nimport time\ntime.sleep(30)"
    reply, *_ = _test(fork_server, code, output_bytes=1 << 14)
    assert (reply["ole"], reply["tle"], reply["sig"]) == (True, False, signal.SIGKILL)


def test_fork_server_output_exactly_at_the_caps_is_not_ole(fork_server):
    """Exactly output_bytes of stdout, and exactly output_bytes + 4 KiB on the result channel, are within the limit."""
    ok = len(b'{"kind": "ok"}')  # the worker's own message follows the program's bytes on the channel
    code = f"import os\nos.write(1, b'x' * 16384)\nos.write(3, b'y' * {16384 + 4096 - ok})"
    reply, out, _, ctl = _test(fork_server, code, output_bytes=1 << 14)
    assert (reply["ole"], reply["exit"], len(out), len(ctl)) == (False, 0, 16384, 16384 + 4096)


def test_fork_server_stderr_flood_is_not_ole(fork_server):
    """A flood on stderr is no OLE: only its tail is kept and the program ends normally."""
    reply, out, err, _ = _test(fork_server, "import sys\nsys.stderr.write('e' * (1 << 20))\nprint('ok')")
    assert (reply["ole"], reply["exit"], out) == (False, 0, b"ok\n")
    assert 8192 <= len(err) < 1 << 20


def test_fork_server_setup_failure_is_infra_with_the_error(fork_server):
    """A test process that fails before the program starts (no ready byte) is reported as infra with its error."""
    reply, *_ = _test(fork_server, "print(1)", memory_mb=1 << 50)  # an rlimit too large for setrlimit: the child fails
    assert reply["infra"].startswith("test process setup failed: Traceback (most recent call last):\n")
    assert reply["infra"].endswith("OverflowError: Python int too large to convert to C long\n")


def test_fork_server_syntax_error_is_se_with_the_line(fork_server):
    """A program that does not compile is answered with se naming the error and its line, without a fork."""
    req = {"code_id": 7, "code": "x = 1\ndef f(:\n", "limits": _LIMITS, "fn_name": None, "mode": "stdio", "stdin": b""}
    reply, buffers = fork_server.run_test(req)
    assert buffers == [] and reply == {"se": "SyntaxError: invalid syntax (line 2)"}


def test_fork_server_compiles_once_per_code_id(fork_server):
    """The same code_id reuses the compiled program (a request may leave the code out); a new id recompiles."""
    assert _test(fork_server, "print(1)", code_id=1)[1] == b"1\n"
    assert _test(fork_server, None, code_id=1)[1] == b"1\n"
    assert _test(fork_server, "print(2)", code_id=2)[1] == b"2\n"


def test_fork_server_removes_each_test_directory(fork_server, tmp_path):
    """Each test gets a fresh directory, gone after the test."""
    reply, out, *_ = _test(fork_server, "import os\nopen('f', 'w').write('x')\nprint(os.getcwd())")
    assert out.decode().startswith(str(tmp_path / "t")) and os.listdir(tmp_path) == []


def test_fork_server_closes_every_pipe_of_a_test(fork_server):
    """No descriptor of a finished test stays open in the fork_server."""
    _test(fork_server, "print(1)")
    before = sorted(os.listdir("/proc/self/fd"))
    _test(fork_server, "print(input())", stdin=b"fed\n")
    _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.3)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_fork_server_oom_kill_in_the_slot_cgroup_is_reported(fork_server):
    """The slot cgroup's OOM-kill counter rising during a test sets oom (the runner's MLE); the memory limit is
    memory_mb plus the tmpfs."""
    fork_server.cg = FakeCgroup(oom_kills=(3, 4))
    reply, *_ = _test(fork_server, "print(1)")
    assert reply["oom"] is True and fork_server.cg.memory == [(512 << 20) + (1 << 20)]
    fork_server.cg = FakeCgroup(oom_kills=(3, 3))
    assert _test(fork_server, "print(1)")[0]["oom"] is False


def test_fork_server_waits_for_an_earlier_tests_memory_to_be_freed(fork_server):
    """A test starts only once the slot cgroup holds less than _HELD_SLACK of earlier tests' memory."""
    fork_server.cg = FakeCgroup(held=(300 << 20, 300 << 20, forkserver._HELD_SLACK, forkserver._HELD_SLACK - 1))
    reply, out, *_ = _test(fork_server, "print(1)")
    assert (reply["exit"], out, fork_server.cg.held_reads) == (0, b"1\n", 4)


def test_fork_server_memory_never_freed_is_infra_and_runs_nothing(fork_server, monkeypatch, tmp_path):
    monkeypatch.setattr(forkserver, "_HELD_WAIT_S", 0.05)
    fork_server.cg = FakeCgroup(held=(300 << 20,))
    flag = tmp_path / "ran"
    reply, *rest = _test(fork_server, f"open({str(flag)!r}, 'w').write('x')")
    assert reply == {"infra": "the slot cgroup still holds 300 MiB of an earlier test's memory 0 s after it ended"}
    assert not flag.exists() and fork_server.cg.memory == [] and fork_server.cg.held_reads > 2


def _cgroup_files(tmp_path, kind: str, usage: int, stat: str) -> cgroups.CgroupHandle:
    names = {"v1": ("memory.usage_in_bytes", "memory.stat"), "v2": ("memory.current", "memory.stat")}[kind]
    (tmp_path / names[0]).write_text(f"{usage}\n")
    (tmp_path / names[1]).write_text(stat)
    return cgroups.CgroupHandle({"procs": [], "cpu": None, "mem": (str(tmp_path), kind)})


@pytest.mark.parametrize("kind,stat", [
    ("v1", "cache 900000000\nrss 3000\nrss_huge 0\nshmem 40000\nmapped_file 40000\ntotal_rss 999999999\n"),
    ("v2", "anon 3000\nfile 900000000\nkernel 77\nshmem 40000\nanon_thp 0\n"),
])
def test_held_bytes_counts_anonymous_and_shared_memory_not_page_cache(tmp_path, kind, stat):
    assert _cgroup_files(tmp_path, kind, 900_043_077, stat).held_bytes(8 << 20) == 43000


def test_held_bytes_under_the_threshold_is_the_usage_without_parsing(tmp_path):
    assert _cgroup_files(tmp_path, "v1", 5000, "not parsed").held_bytes(5001) == 5000


def test_fork_server_cgroup_cpu_over_the_limit_is_tle(fork_server):
    """With a slot cgroup, the CPU of all the test's processes is checked while it runs: over time_s, tle and
    killed; the reported CPU is the cgroup's."""
    fork_server.cg = FakeCgroup(cpu_ns=(5_000_000_000, 7_500_000_000))  # 2.5 s used since the test started
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)")
    assert (reply["tle"], reply["sig"], reply["cpu"]) == (True, signal.SIGKILL, 2.5)


def test_fork_server_cgroup_cpu_under_the_limit_is_reported(fork_server):
    """With a slot cgroup under the CPU limit the test runs to its end, and reports the cgroup's CPU when larger."""
    fork_server.cg = FakeCgroup(cpu_ns=(5_000_000_000, 6_500_000_000))
    reply, out, *_ = _test(fork_server, "print(1)")
    assert (reply["tle"], reply["exit"], reply["cpu"], out) == (False, 0, 1.5, b"1\n")


def test_fork_server_cpu_check_kills_a_test_process_before_its_setsid(fork_server, monkeypatch):
    """Without a PID namespace a test is killed by process group: a test process the CPU check kills before its
    setsid() (a loaded node starts it late) has no group yet, and is killed by its pid. Seen under load as "did not
    die 10 s after SIGKILL"."""
    fork_server.cg = FakeCgroup(cpu_ns=(5_000_000_000, 7_500_000_000))
    setup = fork_server._setup_calls
    monkeypatch.setattr(fork_server, "_setup_calls", lambda *a: [(time.sleep, (1.0,)), *setup(*a)])  # late to setsid
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)")
    assert (reply["tle"], reply["sig"], reply["cpu"]) == (True, signal.SIGKILL, 2.5)


# ---- the wall backstop gives a test back the time it waited for a CPU (`_stretch`)


def _waited(fork_server, monkeypatch, wait):
    """Make the fork server's CPU-wait reading `wait(seconds since the test started)`."""
    started = []
    real = fork_server._cpu_wait

    def fake(pid):
        real(pid)  # the real reading runs too (and must not fail)
        return wait(time.monotonic() - started[0])

    monkeypatch.setattr(fork_server, "_cpu_wait", fake)
    fork = forkserver.fork

    def forking():
        started.append(time.monotonic())
        return fork()

    monkeypatch.setattr(forkserver, "fork", forking)


def test_fork_server_a_sleeping_test_is_killed_at_the_wall_limit_even_with_a_cap(fork_server, monkeypatch):
    """A test that waited for no CPU had its wall time: killed at wall_s (tle), not starved, whatever the cap."""
    _waited(fork_server, monkeypatch, lambda elapsed: 0.0)
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.3, wall_cap_s=60.0)
    assert (reply["tle"], reply["sig"], "starved" in reply) == (True, signal.SIGKILL, False)


def test_fork_server_a_test_kept_from_a_cpu_gets_that_time_back(fork_server, monkeypatch):
    """A test that waited 20 s for a CPU by its wall deadline (0.3 s) runs on: it ends normally, no tle."""
    _waited(fork_server, monkeypatch, lambda elapsed: 20.0)
    reply, out, *_ = _test(fork_server, "import time\ntime.sleep(0.6)\nprint('done')", wall_s=0.3, wall_cap_s=60.0)
    assert (reply["tle"], reply["exit"], out, "starved" in reply) == (False, 0, b"done\n", False)


def test_fork_server_a_test_starved_up_to_the_cap_is_killed_and_marked_starved(fork_server, monkeypatch):
    """A test that waited for a CPU nearly all the time is killed at the wall cap and marked starved, with the wait
    it had: the runner runs it again instead of calling it TLE."""
    _waited(fork_server, monkeypatch, lambda elapsed: 0.99 * elapsed)
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.2, wall_cap_s=0.8)
    assert (reply["tle"], reply["sig"]) == (True, signal.SIGKILL)
    assert 0.99 * 0.8 - 0.01 <= reply["starved"] <= 30


def test_fork_server_a_test_that_had_its_wall_time_after_a_stretch_is_tle_not_starved(fork_server, monkeypatch):
    """Waiting half of the time stretches the deadline, but once the test has had wall_s of time not spent waiting
    it is TLE (not starved), before the cap."""
    _waited(fork_server, monkeypatch, lambda elapsed: 0.5 * elapsed)
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.3, wall_cap_s=60.0)
    assert (reply["tle"], reply["sig"], "starved" in reply) == (True, signal.SIGKILL, False)


def test_fork_server_an_unmeasurable_wait_is_not_stretched(fork_server, monkeypatch):
    """Where the wait cannot be read, the wall backstop is the verdict, as before (tle, not starved)."""
    monkeypatch.setattr(fork_server, "_cpu_wait", lambda pid: None)
    reply, *_ = _test(fork_server, "import time\ntime.sleep(30)", wall_s=0.3, wall_cap_s=60.0)
    assert (reply["tle"], "starved" in reply) == (True, False)


def test_stretch_decides_by_the_time_not_spent_waiting(fork_server, monkeypatch):
    """`_stretch` at a deadline: kill (returns now) when the test had wall_s not waiting or no cap; at the cap,
    kill and mark starved; else the new deadline start + wall_s + waited, at least 0.1 s ahead, at most the cap."""
    lim = {"wall_s": 4.0, "wall_cap_s": 16.0}
    wait = []
    monkeypatch.setattr(fork_server, "_cpu_wait", lambda pid: wait[-1])

    def at(now, waited, **kw):
        wait.append(waited)
        return fork_server._stretch(1, 100.0, 100.0 + now, dict(lim, **kw)), fork_server.starved

    assert at(4.0, 0.0) == (104.0, False)
    assert at(4.0, 0.01) == (104.0, False)  # short of wall_s by no more than the slack
    assert at(4.0, 3.0) == (107.0, False)
    assert at(7.0, 5.0) == (109.0, False)
    assert at(9.0, 4.99) == (109.0, False)
    assert at(15.0, 14.0) == (116.0, False)  # capped
    assert at(7.0, 3.05) == (107.1, False)  # at least a step ahead
    assert at(16.0, 14.0) == (116.0, True)
    assert at(16.0, 11.0) == (116.0, False)  # had its 4 s + 1 s: TLE, not starved
    assert at(4.0, 3.0, wall_cap_s=4.0) == (104.0, False)
    del lim["wall_cap_s"]
    assert at(4.0, 3.0) == (104.0, False)
    assert fork_server.waited == 11.0  # the last reading: without a cap the wait is not read at all


def test_cpu_pressure_is_read_from_the_cgroup_v2_file(tmp_path):
    """The wait counter is the "some" total of the slot cgroup's cpu.pressure (v2 only; None when unreadable)."""
    (tmp_path / "cpu.stat").write_text("usage_usec 5\n")
    (tmp_path / "cpu.pressure").write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\n"
                                           "full avg10=0.00 avg60=0.00 avg300=0.00 total=99\n")
    fd = cgroups.open_cpu_pressure({"cpu": [str(tmp_path / "cpu.stat"), "v2"]})
    try:
        assert cgroups.cpu_pressure_us(fd) == 123456
    finally:
        os.close(fd)
    assert cgroups.open_cpu_pressure({"cpu": [str(tmp_path / "cpu.stat"), "v1"]}) is None
    assert cgroups.open_cpu_pressure({"cpu": None}) is None
    assert cgroups.open_cpu_pressure(None) is None
    (tmp_path / "cpu.pressure").write_text("garbage\n")
    assert cgroups.open_cpu_pressure({"cpu": [str(tmp_path / "cpu.stat"), "v2"]}) is None


def test_cpu_wait_uses_the_cgroup_counter_since_the_test_started(fork_server, tmp_path):
    """With the cgroup's counter, the wait is its growth since the reading before the fork (microseconds)."""
    (tmp_path / "cpu.pressure").write_text("some avg10=0 avg60=0 avg300=0 total=7500000\n")
    fork_server.cpu_wait_fd = os.open(tmp_path / "cpu.pressure", os.O_RDONLY)
    try:
        fork_server.wait0 = 2_500_000
        assert fork_server._cpu_wait(12345) == 5.0
    finally:
        os.close(fork_server.cpu_wait_fd)
        fork_server.cpu_wait_fd = None


def test_cpu_wait_falls_back_to_the_run_delay_of_pid_1(fork_server):
    """Without the cgroup counter, the wait is the test PID 1's run delay from /proc/PID/schedstat (seconds), and
    None for a process that is gone."""
    with open(f"/proc/{os.getpid()}/schedstat", "rb") as f:
        before = int(f.read().split()[1]) / 1e9
    assert fork_server._cpu_wait(os.getpid()) >= before
    assert fork_server._cpu_wait(2**22 + 12345) is None


def test_fork_server_compiles_without_the_workers_future_flags(fork_server):
    """The program is compiled on its own: the worker's `from __future__ import annotations` does not leak in."""
    assert _test(fork_server, "def f(x: int):\n    pass\nprint(f.__annotations__['x'] is int)")[1] == b"True\n"


def test_fork_server_tracebacks_show_the_programs_lines(fork_server):
    """A program's traceback names solution.py and quotes its source line (the fork server fills linecache)."""
    reply, _, err, _ = _test(fork_server, "x = 1\nraise KeyError('k')")
    assert reply["exit"] == 1
    assert b"  File \"solution.py\", line 2, in <module>\n    raise KeyError('k')\n" in err
    assert err.endswith(b"KeyError: 'k'\n")


def test_fork_server_other_compile_errors_are_se_without_a_line(fork_server):
    """A compile error that is not a SyntaxError with a line (a NUL byte) is se with the error's type and text."""
    reply, buffers = fork_server.run_test(
        {"code_id": 9, "code": "print(1)\x00", "limits": _LIMITS, "fn_name": None, "mode": "stdio", "stdin": b""}
    )
    assert buffers == [] and re.fullmatch(
        r"(ValueError|SyntaxError): source code string cannot contain null bytes( \(line 1\))?", reply["se"]
    )


def test_fork_server_test_directory_is_private(fork_server):
    """The program's working directory is a directory of its own, mode 0700."""
    assert _test(fork_server, "import os\nprint(oct(os.stat('.').st_mode & 0o777))")[1] == b"0o700\n"


def test_fork_server_result_channel_one_byte_over_is_ole(fork_server):
    """One byte past output_bytes + 4 KiB on the result channel is ole."""
    ok = len(b'{"kind": "ok"}')
    code = f"import os\nos.write(3, b'y' * {16384 + 4096 - ok + 1})"
    assert _test(fork_server, code, output_bytes=1 << 14)[0]["ole"] is True


def test_fork_server_feeds_stdin_while_reading_output(fork_server):
    """A program that writes a lot before reading its (large) stdin does not deadlock the fork_server."""
    code = "import os\nos.write(1, b'o' * (1 << 20))\nprint(len(open(0, 'rb').read()))"
    reply, out, *_ = _test(fork_server, code, stdin=b"i" * (1 << 20), output_bytes=2 << 20)
    assert (reply["exit"], reply["ole"], out) == (0, False, b"o" * (1 << 20) + b"1048576\n")


def test_fork_server_stdin_left_unread_is_fine(fork_server):
    """A program that exits without reading its large stdin ends normally."""
    reply, out, *_ = _test(fork_server, "print('bye')", stdin=b"i" * (1 << 20))
    assert (reply["exit"], out) == (0, b"bye\n")


def test_fork_server_output_is_read_until_every_writer_is_gone(fork_server):
    """Without a PID namespace, output a child of the program writes after the program exits is still kept."""
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(0.2)\n    os.write(1, b'late\\n')\n    os._exit(0)\n"
    code += "print('main')"
    reply, out, *_ = _test(fork_server, code)
    assert (reply["exit"], out) == (0, b"main\nlate\n")


def test_fork_server_deadline_kills_the_whole_process_group(fork_server):
    """At the wall deadline the test's whole process group is killed (a child holding the pipes included)."""
    code = "import os, time\nos.fork()\ntime.sleep(30)"
    reply, *_ = _test(fork_server, code, wall_s=0.5)
    assert (reply["tle"], reply["sig"]) == (True, signal.SIGKILL)


def test_fork_server_wall_time_is_measured_from_the_start(fork_server):
    """A test's reported wall time lies between 0 and the time the call took."""
    start = time.monotonic()
    reply, *_ = _test(fork_server, "print(1)")
    assert 0 <= reply["wall"] <= time.monotonic() - start


def test_fork_server_cgroup_cpu_is_checked_while_the_test_runs(fork_server):
    """The cgroup's CPU is checked repeatedly while the test runs: crossing time_s on a later check still kills
    the test long before its (one hour) wall limit."""
    fork_server.cg = FakeCgroup(cpu_ns=(0, 1_000_000_000, 1_000_000_000, 2_500_000_000))
    reply, *_ = _test(fork_server, "import time\ntime.sleep(3600)", wall_s=3600.0)
    assert (reply["tle"], reply["sig"], reply["cpu"]) == (True, signal.SIGKILL, 2.5)


def test_fork_server_cgroup_cpu_at_the_limit_is_not_over_it(fork_server):
    """CPU exactly at time_s, or none at all under a limit below 1 s, never kills the test."""
    fork_server.cg = FakeCgroup(cpu_ns=(0, 2_000_000_000))
    reply, out, *_ = _test(fork_server, "import time\ntime.sleep(0.2)\nprint(1)")
    assert (reply["tle"], reply["exit"], out) == (False, 0, b"1\n")
    fork_server.cg = FakeCgroup(cpu_ns=(0,))
    reply, out, *_ = _test(fork_server, "import time\ntime.sleep(0.2)\nprint(1)", time_s=0.5)
    assert (reply["tle"], reply["exit"], out) == (False, 0, b"1\n")


def test_the_usual_control_message_is_the_bytes_the_runner_knows():
    """A stdio program that ran to its end writes bytes made once (protocol.CTL_OK); the runner matches the same
    bytes without parsing JSON."""
    from mrgrpo.sandbox import runner

    assert runner.CTL_OK is protocol.CTL_OK
    assert json.loads(protocol.CTL_OK) == protocol.OK == {"kind": "ok"}


@pytest.mark.parametrize("kind,cpu_text,events_name,events_text,cpu_ns,ooms", [
    ("v1", "1234567\n", "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 1234567, 3),
    ("v2", "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n", "memory.events",
     "low 0\nhigh 0\nmax 2\noom 2\noom_kill 5\noom_group_kill 0\n", 1234000, 5),
])
def test_cgroup_cpu_and_oom_kills_are_read_from_the_kernel_files(tmp_path, kind, cpu_text, events_name, events_text,
                                                                 cpu_ns, ooms):
    """CPU (v1 cpuacct.usage in ns, v2 cpu.stat usage_usec) and OOM kills (oom_kill, not oom_kill_disable nor
    oom_group_kill) as the kernel writes them."""
    cpu = tmp_path / ("cpuacct.usage" if kind == "v1" else "cpu.stat")
    cpu.write_text(cpu_text)
    (tmp_path / events_name).write_text(events_text)
    cg = cgroups.CgroupHandle({"procs": [], "cpu": (str(cpu), kind), "mem": (str(tmp_path), kind)})
    assert (cg.cpu_ns(), cg.oom_kills()) == (cpu_ns, ooms)
    (tmp_path / events_name).write_text("oom_kill_disable 0\nunder_oom 0\n" if kind == "v1" else "low 0\noom 0\n")
    assert cg.oom_kills() == 0
