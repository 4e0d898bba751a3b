"""Verdict semantics, call mode, preamble, partial credit, INFRA, and the batch/async API."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap

import pytest

from mrgrpo.sandbox import Job, Limits, Verdict, run, run_async, run_batch
from mrgrpo.sandbox import pool as pool_mod

FAST = Limits(time_s=1, wall_s=2)


def job(code: str, inputs, outputs, **kw) -> Job:
    return Job(code=textwrap.dedent(code), inputs=inputs, outputs=outputs, **kw)


def test_exit_code_zero_is_not_a_pass_by_itself():
    assert run(job("pass", ["1\n"], ["1\n"])).verdict is Verdict.WA


def test_correct_output_then_crash_is_re():
    assert run(job("print(1)\nraise SystemExit(3)", [""], ["1"])).verdict is Verdict.RE


def test_exception_is_re_with_traceback_in_stderr():
    result = run(job("print(1)\n1/0", [""], ["1"]))
    assert result.verdict is Verdict.RE
    assert "ZeroDivisionError" in result.tests[0].stderr and "solution.py" in result.tests[0].stderr


def test_syntax_error_is_se_and_names_the_line():
    result = run(job("print(1)\ndef f(:\n", [""], ["1"]))
    assert result.verdict is Verdict.SE and "line 2" in result.detail


def test_empty_program_is_no_code():
    assert run(job("  \n", [""], ["1"])).verdict is Verdict.NO_CODE


def test_cpu_loop_is_tle():
    assert run(job("while True: pass", [""], ["1"], limits=FAST)).verdict is Verdict.TLE


def test_sleep_is_tle_by_wall_clock():
    assert run(job("import time\ntime.sleep(30)", [""], ["1"], limits=FAST)).verdict is Verdict.TLE


_STARVED = r"""
import json, os, subprocess, sys
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # the sandbox's workers and their tests inherit this one CPU ...
spin = "import os\nos.sched_setaffinity(0, {%d})\nwhile True: pass" % cpu
spinners = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(4)]  # ... which 4 spinners share
try:
    from mrgrpo.sandbox import Job, Limits, run
    lim = Limits(time_s=1, wall_s=2)
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.8: pass\nprint('ok')"
    verdicts = [run(Job(code=code, inputs=[""], outputs=["ok"], limits=lim)).verdict.value
                for code in (burn, "import time\ntime.sleep(60)", "while True: pass", burn)]
    print(json.dumps(verdicts))
finally:
    for p in spinners:
        p.kill()
"""


def test_a_program_kept_from_the_cpu_is_judged_by_its_cpu_time_not_the_wall_clock():
    """Issue 34 (8): load is not a verdict. A program needing 0.8 of its 1 CPU-s, on a CPU shared with 4 spinning
    processes (it gets about a fifth: ~4 s of wall for its 2 s wall limit), is AC: the wall backstop gives back the
    time it waited for the CPU. Under the same load a sleeping program is still TLE (at its wall limit), and a
    spinning one TLE by CPU. (Was TLE: the wall clock decided.)"""
    import json
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _STARVED], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["AC", "TLE", "TLE", "AC"]


def test_closing_stdout_then_spinning_is_still_tle():
    # the output pipe's end comes long before the program's: the wall clock and the CPU limit still hold it
    code = "import os\nprint(1, flush=True)\nos.close(1)\nos.close(2)\nwhile True:\n    pass"
    result = run(job(code, [""], ["1"], limits=Limits(time_s=1, wall_s=3)))
    assert result.verdict is Verdict.TLE, result


def test_blocking_on_stdin_is_impossible():
    result = run(job("import sys\nsys.stdin.read(); sys.stdin.read(); print('eof')", ["x"], ["eof"], limits=FAST))
    assert result.verdict is Verdict.AC


def test_last_test_does_not_decide():
    code = "n = int(input())\nprint(n if n != 1 else 99)"
    result = run(job(code, ["1\n", "2\n"], ["1\n", "2\n"], stop_on_first_failure=False))
    assert result.verdict is Verdict.WA and result.passed == 1 and len(result.tests) == 2


def test_stops_at_first_failure_by_default():
    result = run(job("print(input())", ["a", "b", "c"], ["a", "x", "c"]))
    assert result.verdict is Verdict.WA and [t.index for t in result.tests] == [0, 1]


def test_all_tests_give_partial_credit():
    result = run(job("print(input())", ["a", "b", "c"], ["a", "x", "c"], stop_on_first_failure=False))
    assert (result.passed, result.total, len(result.tests)) == (2, 3, 3)


def test_every_test_runs_in_a_fresh_process():
    code = "import os\nprint(os.getpid(), input())"
    result = run(job(code, ["a", "b"], ["1 a", "1 b"]))
    assert result.verdict is Verdict.AC  # PID 1 each time: a new PID namespace per test


def test_call_mode_plain_function():
    assert run(job("def add(a, b): return a + b", [[1, 2], [3, 4]], [3, 7], fn_name="add")).verdict is Verdict.AC


def test_call_mode_class_solution():
    code = """
        class Solution:
            def twoSum(self, nums: List[int], target: int) -> List[int]:
                seen = {}
                for i, x in enumerate(nums):
                    if target - x in seen: return [seen[target - x], i]
                    seen[x] = i
    """
    assert run(job(code, [[[2, 7, 11, 15], 9]], [[0, 1]], fn_name="twoSum")).verdict is Verdict.AC


def test_call_mode_leetcode_preamble():
    code = """
        class Solution:
            def f(self, xs: List[int]) -> int:
                h = list(xs); heapq.heapify(h)
                c = collections.Counter(xs); d = deque(xs); dd = defaultdict(int)
                return heappop(h) + bisect_left(sorted(xs), 3) + len(c) + len(d) + len(dd) + int(inf > 0)
    """
    assert run(job(code, [[[3, 1, 2]]], [1 + 2 + 3 + 3 + 0 + 1], fn_name="f")).verdict is Verdict.AC


def test_stdio_mode_has_no_preamble():
    assert run(job("print(List)", [""], ["x"])).verdict is Verdict.RE


def test_tuples_compare_as_lists():
    assert run(job("def f(): return (1, (2, 3))", [[]], [[1, [2, 3]]], fn_name="f")).verdict is Verdict.AC


def test_non_json_return_value_is_wa():
    for value in ("{1, 2}", "object()", "lambda: 1", "range(3)"):
        assert run(job(f"def f(): return {value}", [[]], [[1, 2]], fn_name="f")).verdict is Verdict.WA, value


def test_call_mode_big_ints_and_nested_dicts():
    code = "def f(n): return {'v': [3 * 10**n, None, True, 'ok']}"
    assert run(job(code, [[5000]], [{"v": [3 * 10**5000, None, True, "ok"]}], fn_name="f")).verdict is Verdict.AC


def test_call_mode_wrong_type_is_wa():
    assert run(job("def f(): return '3'", [[]], [3], fn_name="f")).verdict is Verdict.WA
    assert run(job("def f(): return [3]", [[]], [3], fn_name="f")).verdict is Verdict.WA
    assert run(job("def f(): return None", [[]], [0], fn_name="f")).verdict is Verdict.WA


def test_call_mode_missing_entry_point_is_re():
    assert run(job("def g(): return 1", [[]], [1], fn_name="f")).verdict is Verdict.RE


def test_call_mode_exit_before_return_is_re():
    # exit status 0 without a return value, and SystemExit(0) inside the entry point: neither returned None
    assert run(job("import os\ndef f(): os._exit(0)", [[]], [None], fn_name="f")).verdict is Verdict.RE
    assert run(job("import sys\ndef f(): sys.exit(0)", [[]], [None], fn_name="f")).verdict is Verdict.RE


def test_call_mode_arguments_are_fresh_copies():
    code = "def f(xs): xs.append(1); return len(xs)"
    assert run(job(code, [[[]], [[]]], [1, 1], fn_name="f")).verdict is Verdict.AC


def test_float_tolerance_is_opt_in():
    code = "print(0.3333333)"
    assert run(job(code, [""], ["0.3333333333\n"])).verdict is Verdict.WA
    assert run(job(code, [""], ["0.3333333333\n"], float_tol=1e-6)).verdict is Verdict.AC
    assert run(job("def f(): return 0.1 + 0.2", [[]], [0.3], fn_name="f")).verdict is Verdict.WA
    assert run(job("def f(): return 0.1 + 0.2", [[]], [0.3], fn_name="f", float_tol=1e-9)).verdict is Verdict.AC


def test_infra_is_retried_once_transparently():
    run(job("print(1)", [""], ["1"]))
    pool = pool_mod.get_pool()
    for slot in pool._slots:
        if slot.proc is not None:
            os.killpg(slot.proc.pid, signal.SIGKILL)  # the worker dies between two jobs
    assert run(job("print(1)", [""], ["1"])).verdict is Verdict.AC


def test_infra_verdict_when_the_sandbox_cannot_work(monkeypatch):
    pool_mod.shutdown()
    monkeypatch.setattr(pool_mod, "WORKER", "/nonexistent/worker.py")
    try:
        result = run(job("print(1)", [""], ["1"]))
        assert result.verdict is Verdict.INFRA and "sandbox failed" in result.detail
        assert result.passed == 0
    finally:
        pool_mod.shutdown()


def test_the_worker_starts_from_cached_bytecode():
    # a worker compiled from source at each start keeps the compiler's leftovers in the memory every test's fork
    # copies; the pool writes the worker's bytecode cache once and the worker loads it
    import importlib.util

    pool_mod.shutdown()
    cached = importlib.util.cache_from_source(pool_mod.WORKER)
    if os.path.exists(cached):
        os.remove(cached)
    pool_mod._cache_worker_bytecode.cache_clear()
    assert run(job("print(1)", [""], ["1"])).verdict is Verdict.AC
    assert os.path.exists(cached)
    with open(cached, "rb") as f:
        header = f.read(16)
    assert int.from_bytes(header[8:12], "little") == int(os.stat(pool_mod.WORKER).st_mtime) & 0xFFFFFFFF


def test_worker_dying_mid_test_is_infra_then_recovers(monkeypatch):
    calls = []
    real = pool_mod.Slot.request

    def flaky(self, req, timeout_s):
        calls.append(1)
        if self.proc is None:
            self.start()
        if len(calls) <= 2:  # first attempt and its retry both fail
            os.killpg(self.proc.pid, signal.SIGKILL)
        return real(self, req, timeout_s)

    monkeypatch.setattr(pool_mod.Slot, "request", flaky)
    result = run(job("print(1)", [""], ["1"]))
    assert result.verdict is Verdict.INFRA and result.tests[0].verdict is Verdict.INFRA
    assert run(job("print(1)", [""], ["1"])).verdict is Verdict.AC


def test_job_without_tests_is_a_caller_error():
    with pytest.raises(ValueError):
        run(job("print(1)", [], []))
    with pytest.raises(ValueError):
        Job(code="x", inputs=["a"], outputs=[])


def test_run_batch_keeps_order_and_mixes_verdicts():
    jobs = [job(f"print({i} if {i} % 3 else 'no')", [""], [str(i)]) for i in range(12)]
    results = run_batch(jobs, workers=3)
    assert [r.verdict for r in results] == [Verdict.AC if i % 3 else Verdict.WA for i in range(12)]


def test_run_async_does_not_block_the_event_loop():
    """While programs run, other coroutines on the same loop run too: a ticker that needs 20 turns of the loop
    has finished by the time the programs (0.5 s each) return. A run_async that blocked the loop would return
    before the ticker ever ran."""

    async def main():
        ticked = asyncio.Event()

        async def ticker():
            for _ in range(20):
                await asyncio.sleep(0)
            ticked.set()

        async def program_waiting_for_ticker():
            result = await run_async(job("import time\ntime.sleep(0.5)\nprint(1)", [""], ["1"]))
            return result, ticked.is_set()

        ticker_task = asyncio.create_task(ticker())
        outcomes = await asyncio.gather(*(program_waiting_for_ticker() for _ in range(2)))
        await ticker_task
        return outcomes

    outcomes = asyncio.run(main())
    assert all(r.verdict is Verdict.AC for r, _ in outcomes)
    assert all(seen for _, seen in outcomes)  # the loop served the ticker while the programs ran
