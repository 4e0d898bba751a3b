"""Run a Job on a pool slot test by test, turn worker reports into verdicts, compare in the parent."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import marshal
import math
import signal
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

from .admission import admitted
from .compare import json_size, parse_json_value, stdout_equal, value_too_long, values_equal
from .pool import SandboxFailure, Slot, get_pool
from .protocol import CTL_OK
from .schema import ExecResult, Job, TestResult, Verdict

logger = logging.getLogger("mrgrpo.sandbox")

_FEEDBACK_CHARS = 4096
_STDERR_CHARS = 2000
_REPLY_GRACE_S = 20.0  # on top of the wall cap before a silent worker counts as dead
# The wall limit is a backstop (CPU decides TLE): the worker gives a test back the time it waited for a CPU, up to
# wall_s x this factor of real time (`wall_cap_s`), one factor per attempt. A test still starved at the cap of the
# last attempt is INFRA (the node is overloaded), never TLE.
_WALL_STRETCH = (4.0, 8.0)
_code_ids = itertools.count(1)


def _limits_dict(job: Job) -> dict:
    lim = job.limits
    return {"time_s": float(lim.time_s), "wall_s": float(lim.wall_s), "memory_mb": int(lim.memory_mb),
            "output_bytes": int(lim.output_bytes), "file_bytes": int(lim.file_bytes), "nproc": int(lim.nproc),
            "wall_cap_s": float(lim.wall_s) * _WALL_STRETCH[0]}


def _request(job: Job, code_id: int, index: int, slot: Slot, limits: dict | None = None) -> dict:
    req = {"code_id": code_id, "limits": limits or _limits_dict(job), "fn_name": job.fn_name}
    if slot.code_id != code_id:
        req["code"] = job.code
    test_input = job.inputs[index]
    if job.fn_name is None:
        if not isinstance(test_input, str):
            raise TypeError(f"stdio test input {index} must be a str, got {type(test_input).__name__}")
        req["mode"] = "stdio"
        req["stdin"] = test_input.encode("utf-8", "surrogatepass")
    else:
        if not isinstance(test_input, (list, tuple)):
            raise TypeError(f"call-mode test input {index} must be an argument list, got {type(test_input).__name__}")
        req["mode"] = "call"
        req["args"] = marshal.dumps(_plain_args(test_input))
    return req


def _plain_args(value):
    """Arguments as plain data (tuples become lists); raises TypeError for anything JSON could not hold."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain_args(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_args(v) for k, v in value.items()}
    raise TypeError(f"test arguments must be plain JSON values, got {type(value).__name__}")


def _starved(job: Job, reply: dict) -> bool:
    """The worker's wall backstop fired on a test the node kept from running (it had less than wall_s of time not
    spent waiting for a CPU by the wall cap) and its CPU stayed within time_s: load's doing, not a verdict."""
    return ("starved" in reply and not reply["ole"] and not reply["cpu"] > job.limits.time_s
            and reply["sig"] != signal.SIGXCPU)


def _ask_unstarved(slot: Slot, job: Job, code_id: int, index: int, limits: dict) -> dict:
    """`_ask`, run again with a longer wall cap while the test is starved (`_WALL_STRETCH`); a test starved in
    every attempt is INFRA: under load, never TLE."""
    reply = _ask(slot, job, code_id, index, limits)
    for stretch in _WALL_STRETCH[1:]:
        if not _starved(job, reply):
            return reply
        logger.warning("mrgrpo.sandbox: test %d waited %.1f s for a CPU (node overloaded); running it again with a "
                       "wall cap of %.0f s", index, reply["starved"], limits["wall_s"] * stretch)
        reply = _ask(slot, job, code_id, index, dict(limits, wall_cap_s=limits["wall_s"] * stretch))
    if _starved(job, reply):
        return {"infra": f"test {index} was starved of CPU in {len(_WALL_STRETCH)} attempts (it waited "
                         f"{reply['starved']:.1f} s for a CPU and used {reply['cpu']:.2f} CPU-s): node overloaded"}
    return reply


def _ask(slot: Slot, job: Job, code_id: int, index: int, limits: dict) -> dict:
    """One test on `slot` with `limits` (`_limits_dict`, its wall cap set); on a sandbox failure restart the slot and
    retry once, then report INFRA."""
    last = ""
    for attempt in range(2):
        try:
            reply = slot.request(_request(job, code_id, index, slot, limits), limits["wall_cap_s"] + _REPLY_GRACE_S)
            slot.code_id = code_id
            if "infra" not in reply:
                return reply
            last = reply["infra"]
        except SandboxFailure as exc:
            last = str(exc)
        logger.warning("mrgrpo.sandbox: slot %d failed (attempt %d): %s", slot.index, attempt + 1, last[:500])
        slot.stop(force=True)
    return {"infra": last}


def _decode(data: bytes, limit: int) -> str:
    text = data[: limit * 4].decode("utf-8", "replace")
    return text[:limit]


def _judge(job: Job, index: int, reply: dict) -> TestResult:
    lim = job.limits
    ctl = {}
    # The control message is a small dict, or in call mode a dict holding the result's JSON as a string (escaped:
    # up to 7 characters per character). Anything longer cannot hold a matching result: not parsed at all.
    ctl_cap = 64 << 10
    if job.fn_name is not None:
        try:
            ctl_cap += 8 * json_size(job.outputs[index])
        except (TypeError, ValueError, RecursionError):
            ctl_cap = len(reply["ctl"])
    if reply["ctl"] == CTL_OK:  # a stdio program that ran to its end: the usual message, not parsed again
        ctl = {"kind": "ok"}
    elif reply["ctl"] and len(reply["ctl"]) <= ctl_cap:
        try:
            ctl = json.loads(reply["ctl"])
            if not isinstance(ctl, dict):
                ctl = {}
        except (ValueError, RecursionError):  # the program scribbled on fd 3
            ctl = {}
    elif reply["ctl"]:
        ctl = {"kind": "badtype"}  # too long to be the expected value
    kind = ctl.get("kind")
    stderr = _decode(reply["err"][-_STDERR_CHARS * 4:], 10**9)[-_STDERR_CHARS:]
    cpu, sig, status = reply["cpu"], reply["sig"], reply["exit"]
    call_mode = job.fn_name is not None
    shown = reply["out"]
    if call_mode and kind == "result" and isinstance(ctl.get("value"), str):
        shown = ctl["value"].encode()
    stdout = _decode(shown, _FEEDBACK_CHARS)

    def result(verdict: Verdict) -> TestResult:
        return TestResult(index=index, verdict=verdict, time_s=cpu, stdout=stdout, stderr=stderr)

    if reply["ole"]:
        return result(Verdict.OLE)
    if reply["tle"] or cpu > lim.time_s or sig == signal.SIGXCPU or (
        # A SIGKILL we did not send with most of the CPU limit used is RLIMIT_CPU's kill. The kernel enforces the
        # limit on its scheduler clock; the rusage reported afterwards was seen 10-20% lower on a loaded VM.
        sig == signal.SIGKILL and cpu >= 0.5 * math.ceil(lim.time_s) and not reply.get("oom")
    ):
        return result(Verdict.TLE)
    if kind == "memory" or reply.get("oom") or sig == signal.SIGKILL:  # SIGKILL we did not send: OOM killer
        return result(Verdict.MLE)
    if sig is not None or status != 0:
        return result(Verdict.RE)
    if not call_mode:
        actual = reply["out"].decode("utf-8", "replace")
        ok = stdout_equal(job.outputs[index], actual, job.float_tol)
        return result(Verdict.AC if ok else Verdict.WA)
    if kind == "badtype":
        return result(Verdict.WA)
    if kind != "result" or not isinstance(ctl.get("value"), str):
        return result(Verdict.RE)  # exited 0 without returning (e.g. os._exit(0) inside the function)
    if value_too_long(job.outputs[index], ctl["value"]):
        return result(Verdict.WA)
    try:
        actual = parse_json_value(ctl["value"])
    except ValueError:
        return result(Verdict.WA)
    return result(Verdict.AC if values_equal(job.outputs[index], actual, job.float_tol) else Verdict.WA)


def failure_detail(test: TestResult) -> str:
    """The job's detail for its first failing test: its index, verdict and the last line of its stderr."""
    last_line = next((line for line in reversed(test.stderr.strip().splitlines()) if line.strip()), "")
    text = f"test {test.index}: {test.verdict.value}"
    return f"{text}: {last_line[:300]}" if last_line else text


def run(job: Job) -> ExecResult:
    """Run `job` in the sandbox and return its verdict. Thread safe; blocks while all slots of this process's pool
    or of the node's admission (admission.py: at most one job per CPU on the machine, across processes) are busy."""
    start = time.monotonic()
    total = len(job.inputs)
    if total == 0:
        raise ValueError("Job has no tests")
    if not job.code.strip():
        return ExecResult(Verdict.NO_CODE, 0, total, (), time.monotonic() - start, "no code")
    code_id = next(_code_ids)
    limits = _limits_dict(job)  # the same for every test of the job: built once
    pool = get_pool()
    tests: list[TestResult] = []
    verdict, detail = Verdict.AC, ""
    # A slot of this process's pool, then one of the node's admission slots: limits count from admission.
    with pool.slot() as slot, admitted():
        for index in range(total):
            if slot.proc is None:
                try:
                    slot.start()
                    pool.note_started(slot)
                except SandboxFailure as exc:
                    slot.stop(force=True)
                    try:  # one retry, as for a test
                        slot.start()
                        pool.note_started(slot)
                    except SandboxFailure:
                        slot.stop(force=True)
                        tests.append(TestResult(index, Verdict.INFRA, 0.0, "", ""))
                        verdict, detail = Verdict.INFRA, f"sandbox failed: {exc}"
                        break
            reply = _ask_unstarved(slot, job, code_id, index, limits)
            if "se" in reply:
                return ExecResult(Verdict.SE, 0, total, (), time.monotonic() - start, reply["se"])
            if "infra" in reply:
                tests.append(TestResult(index, Verdict.INFRA, 0.0, "", ""))
                verdict, detail = Verdict.INFRA, f"sandbox failed: {reply['infra'][:1000]}"
                break
            test = _judge(job, index, reply)
            tests.append(test)
            if test.verdict is not Verdict.AC and verdict is Verdict.AC:
                verdict, detail = test.verdict, failure_detail(test)
                if job.stop_on_first_failure:
                    break
    passed = sum(t.verdict is Verdict.AC for t in tests)
    if verdict is Verdict.AC and len(tests) != total:
        raise AssertionError("AC without running every test")
    return ExecResult(verdict, passed, total, tuple(tests), time.monotonic() - start, detail or "all tests passed")


_executors: dict[int, ThreadPoolExecutor] = {}
_executor_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    import os

    with _executor_lock:
        pid = os.getpid()
        if pid not in _executors:
            _executors[pid] = ThreadPoolExecutor(max_workers=get_pool().size, thread_name_prefix="mrgrpo-sandbox")
        return _executors[pid]


async def run_async(job: Job) -> ExecResult:
    """`run` on a dedicated thread pool (one thread per slot): never blocks the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_executor(), run, job)


def run_batch(jobs: Iterable[Job], workers: int | None = None, progress: bool = False) -> list[ExecResult]:
    """Run many jobs on `workers` slots at once (default: one per CPU); results in input order."""
    jobs = list(jobs)
    pool = get_pool(workers)
    workers = workers or pool.size
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), file=sys.stderr, desc="sandbox", unit="job")
    results: list[ExecResult | None] = [None] * len(jobs)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mrgrpo-batch") as ex:
        futures = {ex.submit(run, job): i for i, job in enumerate(jobs)}
        from concurrent.futures import as_completed

        for fut in as_completed(futures):
            results[futures[fut]] = fut.result()
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    return results  # type: ignore[return-value]
