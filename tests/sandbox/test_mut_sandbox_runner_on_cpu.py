"""The runner's verdicts, pinned in this process (the mutation run of mrgrpo/sandbox/runner.py).

`_judge` turns a worker's reply into a test's verdict and `run` turns the tests into the job's; both are tested
here on replies written by hand (a fake slot and pool stand in for the worker), so every precedence rule is
checked without a sandbox: OLE before TLE before MLE before RE before the comparison; an OOM kill reads as MLE; the
job's verdict is the first failing test's; INFRA only when the sandbox fails twice. One property per test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import marshal
import os
import signal
import threading
import time

import pytest

from mrgrpo.sandbox import runner
from mrgrpo.sandbox.pool import SandboxFailure
from mrgrpo.sandbox.schema import Job, Limits, Verdict

LIMITS = Limits(time_s=2.0, wall_s=4.0, memory_mb=256, output_bytes=1000, file_bytes=2000, nproc=8)


def reply(out=b"", err=b"", ctl=b"", cpu=0.01, sig=None, exit=0, **flags):  # noqa: A002
    return {
        "out": out,
        "err": err,
        "ctl": ctl,
        "cpu": cpu,
        "sig": sig,
        "exit": exit,
        "ole": False,
        "tle": False,
        "oom": False,
        **flags,
    }


def result_ctl(value) -> bytes:
    return json.dumps({"kind": "result", "value": json.dumps(value)}).encode()


def stdio(outputs=("1\n",), **kw) -> Job:
    return Job(code="print(1)", inputs=[""] * len(outputs), outputs=list(outputs), limits=LIMITS, **kw)


def call(outputs=(1,), **kw) -> Job:
    return Job(
        code="def f(): return 1", inputs=[[]] * len(outputs), outputs=list(outputs), fn_name="f", limits=LIMITS, **kw
    )


def judge(job: Job, rep: dict, index: int = 0) -> Verdict:
    return runner._judge(job, index, rep).verdict


# ---- _judge: the precedence of the verdicts


def test_ole_comes_first():
    """Output over the limit is OLE, whatever else happened (CPU over, killed, exit status)."""
    assert judge(stdio(), reply(ole=True, tle=True, cpu=9.0, sig=signal.SIGKILL, oom=True)) is Verdict.OLE


def test_tle_flag_and_cpu_over_the_limit_are_tle():
    """The worker's tle flag, CPU over time_s, or SIGXCPU is TLE, before MLE and RE."""
    assert judge(stdio(), reply(tle=True, exit=None, sig=signal.SIGKILL)) is Verdict.TLE
    assert judge(stdio(), reply(cpu=2.01, exit=1)) is Verdict.TLE
    assert judge(stdio(), reply(cpu=2.0, exit=1)) is Verdict.RE  # at the limit: not over it
    assert judge(stdio(), reply(exit=None, sig=signal.SIGXCPU)) is Verdict.TLE
    assert judge(stdio(), reply(cpu=3.0, ctl=b'{"kind": "memory"}', exit=1)) is Verdict.TLE


def test_sigkill_after_half_the_cpu_limit_is_tle():
    """A SIGKILL nobody sent, with at least half of the (rounded up) CPU limit used, is RLIMIT_CPU's: TLE."""
    assert judge(stdio(), reply(cpu=1.0, exit=None, sig=signal.SIGKILL)) is Verdict.TLE  # ceil(2.0) / 2
    assert judge(stdio(), reply(cpu=0.99, exit=None, sig=signal.SIGKILL)) is Verdict.MLE
    job = Job(code="x", inputs=[""], outputs=[""], limits=Limits(time_s=1.5))  # RLIMIT_CPU is 2 s
    assert judge(job, reply(cpu=0.9, exit=None, sig=signal.SIGKILL)) is Verdict.MLE
    assert judge(job, reply(cpu=1.0, exit=None, sig=signal.SIGKILL)) is Verdict.TLE


def test_an_oom_kill_is_mle():
    """A kill by the OOM killer is MLE, even with most of the CPU limit used."""
    assert judge(stdio(), reply(cpu=1.5, exit=None, sig=signal.SIGKILL, oom=True)) is Verdict.MLE
    assert judge(stdio(), reply(exit=0, oom=True, out=b"1\n")) is Verdict.MLE


def test_memory_error_is_mle():
    """The worker's memory report (MemoryError) is MLE, before RE."""
    assert judge(stdio(), reply(ctl=b'{"kind": "memory"}', exit=1)) is Verdict.MLE
    assert judge(call(), reply(ctl=b'{"kind": "memory"}', exit=1)) is Verdict.MLE


def test_a_quick_sigkill_is_mle():
    """A SIGKILL we did not send, early (little CPU), is the memory limit's kill: MLE."""
    assert judge(stdio(), reply(cpu=0.1, exit=None, sig=signal.SIGKILL)) is Verdict.MLE


def test_other_signals_and_exit_statuses_are_re():
    """Any other signal, or a non-zero exit status, is RE even with the right output."""
    assert judge(stdio(), reply(out=b"1\n", exit=None, sig=signal.SIGSEGV)) is Verdict.RE
    assert judge(stdio(), reply(out=b"1\n", exit=3)) is Verdict.RE
    assert judge(call(), reply(ctl=result_ctl(1), exit=1)) is Verdict.RE


def test_stdio_output_is_compared_with_the_tolerance():
    """Exit 0 in stdio mode: AC iff the output equals the expected one (float_tol applied), else WA."""
    assert judge(stdio(), reply(out=b"1\n")) is Verdict.AC
    assert judge(stdio(), reply(out=b"2\n")) is Verdict.WA
    assert judge(stdio(["0.5\n"], float_tol=0.1), reply(out=b"0.55\n")) is Verdict.AC
    assert judge(stdio(["0.5\n"]), reply(out=b"0.55\n")) is Verdict.WA


def test_stdio_output_is_decoded_leniently():
    """Invalid UTF-8 in the output is replaced, not an error: a wrong answer, not a crash."""
    assert judge(stdio(["\ufffd\n"]), reply(out=b"\xff\n")) is Verdict.AC


def test_stdio_judges_the_index_given():
    """Each test is compared with its own expected output."""
    job = stdio(["1\n", "2\n"])
    assert judge(job, reply(out=b"2\n"), index=1) is Verdict.AC
    assert judge(job, reply(out=b"1\n"), index=1) is Verdict.WA


def test_call_result_is_compared_with_the_tolerance():
    """Call mode: a result equal to the expected value is AC (float_tol applied), else WA."""
    assert judge(call([[1, 2]]), reply(ctl=result_ctl([1, 2]))) is Verdict.AC
    assert judge(call([[1, 2]]), reply(ctl=result_ctl([2, 1]))) is Verdict.WA
    assert judge(call([0.5], float_tol=0.1), reply(ctl=result_ctl(0.55))) is Verdict.AC
    assert judge(call([0.5]), reply(ctl=result_ctl(0.55))) is Verdict.WA
    assert judge(call([1, 2]), reply(ctl=result_ctl(2)), index=1) is Verdict.AC


def test_call_badtype_is_wa():
    """A return value that is not plain JSON is WA."""
    assert judge(call(), reply(ctl=b'{"kind": "badtype", "detail": "set"}')) is Verdict.WA


def test_call_without_a_result_is_re():
    """Exit 0 without a result (ok, exc, nothing, a non-string value) is RE."""
    for ctl in (b'{"kind": "ok"}', b'{"kind": "exc"}', b"", b'{"kind": "result", "value": 1}', b'{"kind": "result"}'):
        assert judge(call(), reply(ctl=ctl)) is Verdict.RE, ctl


def test_a_scribbled_control_channel_is_re():
    """A control message that is not a JSON object (the program wrote on fd 3) counts as no result: RE."""
    for ctl in (b"{not json", b"[1, 2]", b'"result"', b"[" * 60_000):
        assert judge(call(), reply(ctl=ctl)) is Verdict.RE, ctl[:20]


def test_a_control_message_too_long_for_the_expected_value_is_wa():
    """A control message longer than 64 KiB + 8 x the expected JSON is WA without being parsed."""
    cap = (64 << 10) + 8 * len(json.dumps([1]))
    padded = json.dumps({"kind": "result", "value": "[1]", "pad": ""}).encode()
    fits = padded.replace(b'"pad": ""', b'"pad": "' + b" " * (cap - len(padded)) + b'"')
    assert len(fits) == cap and judge(call([[1]]), reply(ctl=fits)) is Verdict.AC
    over = fits.replace(b'"pad": "', b'"pad": " ')
    assert judge(call([[1]]), reply(ctl=over)) is Verdict.WA


def test_a_result_too_long_for_the_expected_value_is_wa():
    """A result whose JSON is far longer than the expected value's is WA without being parsed."""
    assert judge(call([1]), reply(ctl=result_ctl([0] * 2000))) is Verdict.WA


def test_a_malformed_result_is_wa():
    """A result string that is not JSON is WA."""
    ctl = json.dumps({"kind": "result", "value": "[1,"}).encode()
    assert judge(call([[1]]), reply(ctl=ctl)) is Verdict.WA


def test_an_unsizable_expected_value_still_reads_the_control_message():
    """An expected value whose size cannot be computed still lets a normal control message through."""
    deep = []
    for _ in range(100_000):
        deep = [deep]
    assert judge(call([deep]), reply(ctl=b'{"kind": "badtype"}')) is Verdict.WA
    assert judge(call([deep]), reply(ctl=b'{"kind": "ok"}')) is Verdict.RE


def test_feedback_holds_output_stderr_and_cpu():
    """A test result carries its CPU time, the output (the result's JSON in call mode) and stderr's tail."""
    test = runner._judge(stdio(), 0, reply(out=b"1\n", err=b"warning\n", cpu=0.25))
    assert (test.index, test.time_s, test.stdout, test.stderr) == (0, 0.25, "1\n", "warning\n")
    test = runner._judge(call([[1]]), 0, reply(out=b"printed", ctl=result_ctl([1])))
    assert test.stdout == "[1]"
    assert runner._judge(call([[1]]), 0, reply(out=b"printed", ctl=b'{"kind": "ok"}')).stdout == "printed"


def test_feedback_is_truncated():
    """Feedback keeps the first 4,096 characters of stdout and the last 2,000 of stderr."""
    test = runner._judge(stdio(), 0, reply(out=b"a" * 5000 + b"b", err=b"c" + b"d" * 3000, exit=1))
    assert test.stdout == "a" * 4096 and test.stderr == "d" * 2000
    test = runner._judge(stdio(), 0, reply(out="é".encode() * 5000, err="é".encode() * 3000, exit=1))
    assert test.stdout == "é" * 4096 and test.stderr == "é" * 2000


def test_decode_cuts_characters_not_bytes():
    """_decode keeps `limit` characters, decoding invalid bytes as replacement characters."""
    assert runner._decode("é".encode() * 10, 3) == "ééé"
    assert runner._decode(b"\xffab", 2) == "\ufffda"


def test_failure_detail_names_the_test_and_the_last_stderr_line():
    """The job's detail names the failing test, its verdict and stderr's last non-blank line (300 characters)."""
    test = runner._judge(stdio(), 0, reply(err=b"Traceback\n  x\nValueError: " + b"v" * 400 + b"\n\n", exit=1))
    assert runner.failure_detail(test) == "test 0: RE: ValueError: " + "v" * 288
    assert runner.failure_detail(runner._judge(stdio(), 0, reply(out=b"2\n"))) == "test 0: WA"


# ---- _request and _plain_args


class FakeSlot:
    """A pool slot whose worker answers with the replies given (an exception is raised instead)."""

    def __init__(self, replies=(), start_failures=0):
        self.index, self.proc, self.code_id = 0, None, None
        self.replies, self.start_failures = list(replies), start_failures
        self.requests, self.starts, self.stops, self.threads = [], 0, [], set()

    def start(self):
        self.starts += 1
        if self.start_failures:
            self.start_failures -= 1
            raise SandboxFailure("cannot start")
        self.proc = object()

    def stop(self, force=False):
        self.stops.append(force)
        self.proc = None

    def request(self, req, timeout_s):
        self.requests.append((req, timeout_s))
        self.threads.add(threading.current_thread().name)
        answer = self.replies.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakePool:
    size = 1

    def __init__(self, slot):
        self._slot, self.started = slot, []

    @contextlib.contextmanager
    def slot(self):
        yield self._slot

    def note_started(self, slot):
        self.started.append(slot)


@pytest.fixture
def fake(monkeypatch):
    """fake(replies, start_failures=0) -> the FakeSlot that `runner.run` will use."""

    def make(replies, start_failures=0):
        slot = FakeSlot(replies, start_failures)
        pool = FakePool(slot)
        monkeypatch.setattr(runner, "get_pool", lambda workers=None: pool)
        monkeypatch.setattr(runner, "admitted", contextlib.nullcontext)
        slot.pool = pool
        return slot

    return make


def test_request_carries_the_limits_as_plain_numbers():
    """A request holds the code id, every limit (floats and ints) and the entry point."""
    job = Job(
        code="x",
        inputs=[""],
        outputs=[""],
        limits=Limits(time_s=3, wall_s=5, memory_mb=7, output_bytes=11, file_bytes=13, nproc=17),
    )
    req = runner._request(job, 4, 0, FakeSlot())
    assert req["code_id"] == 4 and req["fn_name"] is None
    assert req["limits"] == {
        "time_s": 3.0,
        "wall_s": 5.0,
        "memory_mb": 7,
        "output_bytes": 11,
        "file_bytes": 13,
        "nproc": 17,
        "wall_cap_s": 20.0,
    }
    assert [type(v) for v in req["limits"].values()] == [float, float, int, int, int, int, float]


def test_request_sends_the_code_only_when_the_slot_lacks_it():
    """The code travels only to a slot that has not compiled this code id yet."""
    job, slot = stdio(), FakeSlot()
    assert runner._request(job, 4, 0, slot)["code"] == "print(1)"
    slot.code_id = 4
    assert "code" not in runner._request(job, 4, 0, slot)


def test_request_in_stdio_mode_sends_the_input_bytes():
    """A stdio request holds mode stdio and the input as UTF-8 (lone surrogates kept)."""
    job = Job(code="x", inputs=["a", "é\ud800"], outputs=["", ""])
    req = runner._request(job, 1, 1, FakeSlot())
    assert req["mode"] == "stdio" and req["stdin"] == "é\ud800".encode("utf-8", "surrogatepass")
    assert "args" not in req


def test_request_in_call_mode_sends_plain_arguments():
    """A call request holds mode call and the arguments of that test, tuples made lists, marshalled."""
    job = Job(code="x", inputs=[[1], [(2, {"k": (3, None)}), 1.5, "s", True]], outputs=[0, 0], fn_name="f")
    req = runner._request(job, 1, 1, FakeSlot())
    assert req["mode"] == "call" and req["fn_name"] == "f" and "stdin" not in req
    assert marshal.loads(req["args"]) == [[2, {"k": [3, None]}], 1.5, "s", True]


def test_request_refuses_inputs_of_the_wrong_shape():
    """A stdio input that is not a str, or call arguments that are not a list, are caller errors."""
    with pytest.raises(TypeError, match="^stdio test input 0 must be a str, got int$"):
        runner._request(Job(code="x", inputs=[1], outputs=[""]), 1, 0, FakeSlot())
    with pytest.raises(TypeError, match="^call-mode test input 0 must be an argument list, got str$"):
        runner._request(Job(code="x", inputs=["a"], outputs=[""], fn_name="f"), 1, 0, FakeSlot())


def test_plain_args_refuses_objects():
    """Arguments must be plain JSON values: anything else is a TypeError naming its type."""
    with pytest.raises(TypeError, match="^test arguments must be plain JSON values, got set$"):
        runner._plain_args([1, {2}])


# ---- _ask and run: the job's verdict


def test_job_verdict_is_the_first_failing_test_not_the_last(fake):
    """The job's verdict is its first failing test's (RE here), not a later one's (WA), with its detail."""
    fake([reply(out=b"1\n"), reply(exit=3, err=b"boom\n"), reply(out=b"x\n"), reply(out=b"1\n")])
    result = runner.run(stdio(["1\n"] * 4, stop_on_first_failure=False))
    assert result.verdict is Verdict.RE and result.detail == "test 1: RE: boom"
    assert [t.verdict for t in result.tests] == [Verdict.AC, Verdict.RE, Verdict.WA, Verdict.AC]
    assert (result.passed, result.total) == (2, 4)


def test_job_stops_at_the_first_failure(fake):
    """With stop_on_first_failure (the default) no test runs after the first failing one."""
    slot = fake([reply(out=b"1\n"), reply(out=b"2\n")])
    result = runner.run(stdio(["1\n", "1\n", "1\n"]))
    assert result.verdict is Verdict.WA and len(result.tests) == 2 and slot.replies == []


def test_job_of_passing_tests_is_ac(fake):
    """Every test AC: the job is AC, all passed, detail 'all tests passed'; the code is sent once."""
    slot = fake([reply(out=b"1\n")] * 3)
    result = runner.run(stdio(["1\n"] * 3))
    assert (result.verdict, result.passed, result.total, result.detail) == (Verdict.AC, 3, 3, "all tests passed")
    assert [("code" in req) for req, _ in slot.requests] == [True, False, False]
    assert [t.index for t in result.tests] == [0, 1, 2]


def test_requests_wait_for_the_wall_cap_plus_grace(fake):
    """Each test waits for its reply up to its wall cap (4 x wall_s: the wall backstop stretched by the time the
    test waited for a CPU) + 20 s before the worker counts as dead."""
    slot = fake([reply(out=b"1\n")])
    runner.run(stdio())
    assert slot.requests[0][1] == 4 * LIMITS.wall_s + 20.0
    assert slot.requests[0][0]["limits"]["wall_cap_s"] == 4 * LIMITS.wall_s


# ---- load is not a verdict: a starved test runs again, and is INFRA when starved every time


def starved(cpu=0.3, waited=14.0, sig=signal.SIGKILL, **kw):
    """What the worker says when its wall backstop fired at the cap on a test the node kept from a CPU."""
    return reply(tle=True, exit=None, sig=sig, cpu=cpu, starved=waited, **kw)


def test_a_starved_test_runs_again_with_a_longer_wall_cap(fake, caplog):
    """A starved test is not TLE: it runs again (same slot, no restart, same code id) with the wall cap doubled,
    logging why, and the verdict is the new run's."""
    slot = fake([starved(), reply(out=b"1\n")])
    with caplog.at_level("WARNING", logger="mrgrpo.sandbox"):
        result = runner.run(stdio())
    assert (result.verdict, result.passed, slot.stops) == (Verdict.AC, 1, [])
    assert [req["limits"]["wall_cap_s"] for req, _ in slot.requests] == [16.0, 32.0]
    assert [timeout for _, timeout in slot.requests] == [36.0, 52.0]
    assert all(req["limits"]["wall_s"] == LIMITS.wall_s for req, _ in slot.requests)
    assert slot.requests[0][0]["code_id"] == slot.requests[1][0]["code_id"] == slot.code_id
    assert "code" in slot.requests[0][0] and "code" not in slot.requests[1][0]
    assert caplog.messages == ["mrgrpo.sandbox: test 0 waited 14.0 s for a CPU (node overloaded); running it again "
                               "with a wall cap of 32 s"]


def test_a_starved_test_at_its_cpu_limit_is_run_again():
    """At time_s exactly (not over it) a starved test is starved, as `_judge` calls CPU at the limit not TLE."""
    assert runner._starved(stdio(), starved(cpu=2.0)) and not runner._starved(stdio(), starved(cpu=2.001))
    assert not runner._starved(stdio(), reply(tle=True, cpu=0.1))


def test_a_test_starved_in_every_attempt_is_infra_not_tle(fake):
    """Two starved runs in a row: INFRA (the job stops there), naming the wait; never a second TLE-looking retry."""
    slot = fake([starved(), starved(cpu=1.5, waited=30.5), reply(out=b"1\n")])
    result = runner.run(stdio(["1\n", "1\n"]))
    assert (result.verdict, len(slot.requests), [t.verdict for t in result.tests]) == (
        Verdict.INFRA, 2, [Verdict.INFRA])
    assert result.detail == ("sandbox failed: test 0 was starved of CPU in 2 attempts (it waited 30.5 s for a CPU "
                             "and used 1.50 CPU-s): node overloaded")


def test_a_starved_test_over_its_cpu_limit_is_tle_at_once(fake):
    """Starved or not, a test that used more than time_s of CPU (or got SIGXCPU) is TLE without a retry."""
    for over in (starved(cpu=2.01), starved(sig=signal.SIGXCPU)):
        slot = fake([over])
        assert (runner.run(stdio()).verdict, len(slot.requests)) == (Verdict.TLE, 1)


def test_a_wall_kill_that_is_not_starved_is_tle(fake):
    """The wall backstop on a test that had its wall time (sleeping, blocked) is TLE at once, however little CPU."""
    slot = fake([reply(tle=True, exit=None, sig=signal.SIGKILL, cpu=0.0)])
    assert (runner.run(stdio()).verdict, len(slot.requests)) == (Verdict.TLE, 1)


def test_an_output_flood_cut_at_the_cap_is_ole_not_starved(fake):
    """OLE outranks starvation: a test over the output cap is OLE without a retry."""
    slot = fake([starved(ole=True)])
    assert (runner.run(stdio()).verdict, len(slot.requests)) == (Verdict.OLE, 1)


def test_syntax_error_is_se(fake):
    """A compile error reported by the worker makes the job SE with the message, and no test result."""
    fake([{"se": "SyntaxError: invalid syntax (line 2)"}])
    result = runner.run(stdio(["1\n", "1\n"]))
    assert (result.verdict, result.passed, result.total, result.tests) == (Verdict.SE, 0, 2, ())
    assert result.detail == "SyntaxError: invalid syntax (line 2)"


def test_blank_code_is_no_code_without_the_sandbox(fake):
    """Code of whitespace only is NO_CODE and never reaches a worker."""
    slot = fake([])
    result = runner.run(Job(code=" \n\t", inputs=["", ""], outputs=["", ""]))
    assert (result.verdict, result.total, result.detail, slot.starts) == (Verdict.NO_CODE, 2, "no code", 0)
    assert (result.passed, result.tests) == (0, ())


def test_a_job_without_tests_is_an_error(fake):
    """A job with no tests is a caller error."""
    fake([])
    with pytest.raises(ValueError, match="^Job has no tests$"):
        runner.run(Job(code="x", inputs=[], outputs=[]))


def test_one_sandbox_failure_is_retried_transparently(fake):
    """A worker failure is retried once on a restarted slot; the test's verdict is the retry's."""
    slot = fake([SandboxFailure("died"), reply(out=b"1\n")])
    result = runner.run(stdio())
    assert result.verdict is Verdict.AC and slot.stops == [True] and len(slot.requests) == 2


def test_two_sandbox_failures_are_infra(fake):
    """A test whose retry fails too is INFRA (the job stops there), with the failure in the detail."""
    slot = fake([reply(out=b"1\n"), SandboxFailure("died"), {"infra": "setup failed"}, reply(out=b"1\n")])
    result = runner.run(stdio(["1\n"] * 3))
    assert result.verdict is Verdict.INFRA and result.detail == "sandbox failed: setup failed"
    assert [t.verdict for t in result.tests] == [Verdict.AC, Verdict.INFRA]
    assert result.tests[1] == runner.TestResult(1, Verdict.INFRA, 0.0, "", "")
    assert result.passed == 1 and slot.stops == [True, True]


def test_infra_detail_keeps_1000_characters_of_the_failure(fake):
    """The INFRA detail quotes the worker's failure, cut to 1,000 characters."""
    fake([{"infra": "e" * 1500}, {"infra": "f" * 1500}])
    assert runner.run(stdio()).detail == "sandbox failed: " + "f" * 1000


def test_sandbox_failures_are_logged_per_attempt(fake, caplog):
    """Each failed attempt logs a warning naming the slot, the attempt and the failure (500 characters)."""
    fake([SandboxFailure("died"), {"infra": "x" * 600}])
    with caplog.at_level("WARNING", logger="mrgrpo.sandbox"):
        runner.run(stdio())
    assert [r.getMessage() for r in caplog.records if r.name == "mrgrpo.sandbox"] == [
        "mrgrpo.sandbox: slot 0 failed (attempt 1): died",
        "mrgrpo.sandbox: slot 0 failed (attempt 2): " + "x" * 500,
    ]


@pytest.mark.parametrize(
    "replies",
    [[reply(out=b"1\n"), reply(out=b"2\n")], [{"se": "SyntaxError"}], [SandboxFailure("a"), SandboxFailure("b")]],
    ids=["judged", "se", "infra"],
)
def test_job_time_is_the_wall_time_of_the_call(fake, replies):
    """A job's time_s is the wall time it took: between 0 and the time the call took, whatever its verdict."""
    fake(replies)
    start = time.monotonic()
    result = runner.run(stdio(["1\n", "1\n"]))
    took = time.monotonic() - start
    assert 0 <= result.time_s <= took


def test_no_code_time_is_the_wall_time_of_the_call(fake):
    """A NO_CODE job's time_s is between 0 and the time the call took."""
    fake([])
    start = time.monotonic()
    result = runner.run(Job(code="", inputs=[""], outputs=[""]))
    assert 0 <= result.time_s <= time.monotonic() - start


def test_infra_is_the_job_verdict_even_after_a_failure(fake):
    """INFRA replaces an earlier failing verdict: the job's result cannot be trusted."""
    fake([reply(out=b"2\n"), SandboxFailure("a"), SandboxFailure("b")])
    result = runner.run(stdio(["1\n"] * 2, stop_on_first_failure=False))
    assert result.verdict is Verdict.INFRA and result.detail == "sandbox failed: b"


def test_a_slot_that_cannot_start_twice_is_infra(fake):
    """A slot that fails to start, and again on the retry, is INFRA for the job."""
    slot = fake([], start_failures=2)
    result = runner.run(stdio())
    assert result.verdict is Verdict.INFRA and result.detail == "sandbox failed: cannot start"
    assert result.tests == (runner.TestResult(0, Verdict.INFRA, 0.0, "", ""),)
    assert slot.starts == 2 and slot.stops == [True, True] and slot.pool.started == []


def test_a_slot_that_starts_on_the_retry_runs_the_job(fake):
    """A slot that fails to start once starts on the retry, and the job runs normally."""
    slot = fake([reply(out=b"1\n")], start_failures=1)
    result = runner.run(stdio())
    assert result.verdict is Verdict.AC and slot.starts == 2 and slot.pool.started == [slot]


def test_a_started_slot_is_not_restarted(fake):
    """A slot whose worker is running is used as it is; one that was never started is started and noted."""
    slot = fake([reply(out=b"1\n")] * 2)
    runner.run(stdio(["1\n"] * 2))
    assert slot.starts == 1 and slot.pool.started == [slot]


def test_the_slot_remembers_the_code_id(fake):
    """After a reply the slot records the job's code id, so the next test does not resend the code."""
    slot = fake([SandboxFailure("x"), reply(out=b"1\n"), reply(out=b"1\n")])
    runner.run(stdio(["1\n"] * 2))
    assert [("code" in req) for req, _ in slot.requests] == [True, True, False]


def test_each_job_gets_a_new_code_id(fake):
    """Two jobs never share a code id (the worker would reuse the first job's compiled program)."""
    slot = fake([reply(out=b"1\n")] * 2)
    runner.run(stdio())
    runner.run(stdio())
    assert slot.requests[0][0]["code_id"] != slot.requests[1][0]["code_id"]
    assert "code" in slot.requests[1][0]


def test_run_async_returns_runs_result(fake, monkeypatch):
    """run_async gives the same result as run, on one executor per process sized like the pool."""
    slot = fake([reply(out=b"2\n"), reply(out=b"1\n"), reply(out=b"1\n")])
    monkeypatch.setattr(runner, "_executors", {})  # this process's real executor stays as it is
    try:
        assert asyncio.run(runner.run_async(stdio())).verdict is Verdict.WA
        assert asyncio.run(runner.run_async(stdio())).verdict is Verdict.AC
        assert list(runner._executors) == [os.getpid()]  # one per process: a forked child makes its own
        executor = runner._executors[os.getpid()]
        assert runner._executor() is executor and executor._max_workers == FakePool.size
        assert asyncio.run(runner.run_async(stdio())).verdict is Verdict.AC
        assert slot.threads == {"mrgrpo-sandbox_0"}
    finally:
        for executor in runner._executors.values():
            executor.shutdown()


def test_run_batch_keeps_the_order(fake, monkeypatch):
    """run_batch returns one result per job, in the jobs' order."""
    fake([])
    monkeypatch.setattr(runner, "run", lambda job: job.outputs[0])
    jobs = [stdio([str(i)]) for i in range(7)]
    assert runner.run_batch(jobs, workers=3) == [str(i) for i in range(7)]
    assert runner.run_batch(iter(jobs)) == [str(i) for i in range(7)]


def _concurrency(monkeypatch):
    """Replace run with a short sleep that records the most jobs running at once and the threads' names."""
    seen = {"now": 0, "most": 0, "threads": set()}
    lock = threading.Lock()

    def fake_run(job):
        with lock:
            seen["now"] += 1
            seen["most"] = max(seen["most"], seen["now"])
            seen["threads"].add(threading.current_thread().name)
        time.sleep(0.02)
        with lock:
            seen["now"] -= 1
        return job.outputs[0]

    monkeypatch.setattr(runner, "run", fake_run)
    return seen


def test_run_batch_runs_at_most_workers_jobs_at_once(fake, monkeypatch):
    """run_batch never runs more jobs at once than `workers`, on threads named mrgrpo-batch."""
    pools = []
    monkeypatch.setattr(runner, "get_pool", lambda workers=None: pools.append(workers) or FakePool(None))
    seen = _concurrency(monkeypatch)
    runner.run_batch([stdio([str(i)]) for i in range(12)], workers=2)
    assert pools == [2] and seen["most"] <= 2
    assert all(name.startswith("mrgrpo-batch_") for name in seen["threads"])


def test_run_batch_defaults_to_one_worker_per_pool_slot(fake, monkeypatch):
    """Without `workers`, run_batch runs as many jobs at once as the pool has slots (one here)."""
    fake([])
    seen = _concurrency(monkeypatch)
    runner.run_batch([stdio([str(i)]) for i in range(8)])
    assert seen["most"] == 1


def test_run_batch_progress_bar_only_when_asked(fake, monkeypatch, capsys):
    """progress=True draws a 'sandbox' bar on stderr counting jobs to the total; by default nothing is printed."""
    fake([])
    monkeypatch.setattr(runner, "run", lambda job: job.outputs[0])
    jobs = [stdio([str(i)]) for i in range(7)]
    runner.run_batch(jobs, workers=2)
    assert capsys.readouterr() == ("", "")
    assert runner.run_batch(jobs, workers=2, progress=True) == [str(i) for i in range(7)]
    err = capsys.readouterr().err
    assert "sandbox: 100%" in err and "7/7" in err and "job/s" in err and "8/7" not in err


# ---- the judging process's reader of a worker's answers (pool.Slot._recv)


def _slot_reading(data_writes):
    """A Slot whose worker is a pipe fed with `data_writes` (one os.write each) from a thread."""
    from types import SimpleNamespace

    from mrgrpo.sandbox import pool

    r, w = os.pipe()
    slot = pool.Slot(0, "/nonexistent")
    slot.proc = SimpleNamespace(stdout=SimpleNamespace(fileno=lambda: r))

    def feed():
        try:
            for data in data_writes:
                os.write(w, data)
        except OSError:  # the reader gave up (a failed assertion): its end is closed
            pass
        finally:
            os.close(w)

    t = threading.Thread(target=feed)
    t.start()
    return slot, r, t


def _framed(msg: dict, *raw: bytes) -> bytes:
    if raw:
        msg = dict(msg, raw=[len(x) for x in raw])
    body = marshal.dumps(msg)
    return len(body).to_bytes(8, "little") + body + b"".join(raw)


def test_slot_reads_answers_written_in_one_piece_or_in_many_and_keeps_what_follows():
    """Two answers in one write, then one split into 1-byte writes, then a 3 MiB output: each comes back whole, the
    bytes of the next answer are kept for it, and the end of the stream after them is the worker gone."""
    big = b"y" * (3 << 20)
    first, second = _framed({"exit": 0}, b"out", b"", b"ctl"), _framed({"exit": 1}, b"", b"err", b"")
    third = _framed({"exit": 2}, big, b"", b"")
    writes = [first + second] + [bytes([b]) for b in third[:40]] + [third[40:]]
    slot, r, t = _slot_reading(writes)
    try:
        deadline = time.monotonic() + 30
        assert slot._recv(deadline) == {"exit": 0, "out": b"out", "err": b"", "ctl": b"ctl"}
        assert bytes(slot._rbuf[: len(second)]) == second  # one write of both (atomic on a pipe): the second is kept
        assert slot._recv(deadline) == {"exit": 1, "out": b"", "err": b"err", "ctl": b""}
        got = slot._recv(deadline)
        assert got["out"] == big and got["exit"] == 2 and slot._rbuf == bytearray()
        with pytest.raises(SandboxFailure, match="worker exited unexpectedly"):
            slot._recv(deadline)
    finally:
        os.close(r)  # a writer still blocked on the pipe gets EPIPE and ends
        t.join()


def test_slot_forgets_a_half_read_answer_when_stopped():
    """What a timed-out answer left in the reader does not leak into the next worker's answers."""
    slot, r, t = _slot_reading([_framed({"exit": 0}, b"a", b"", b"")[:12]])
    try:
        t.join()
        with pytest.raises(SandboxFailure):
            slot._recv(time.monotonic() + 5)
        assert slot._rbuf  # the 4 bytes of body read so far
        slot.proc = None
        slot.stop()
        assert slot._rbuf == bytearray()
    finally:
        os.close(r)
