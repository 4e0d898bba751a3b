"""The one seam between the data pipeline and the sandbox: run reference programs against their tests.

``SandboxRunner`` uses ``mrgrpo.sandbox`` (imported lazily); tests may pass any object with the same
``run_many`` method. Results are cached by the caller (``on_result`` saves each one as it completes), so a second
run of the pipeline runs nothing, and a Ctrl-C loses no finished run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class RefJob:
    code: str
    inputs: list
    outputs: list  # stdio: strings; call: plain JSON values (unwrapped)
    fn_name: str | None = None  # None -> stdio
    float_tol: float | None = None
    time_s: float | None = None  # per-test CPU limit; None -> REFERENCE_TIME_S


@dataclass(frozen=True)
class RefOutcome:
    verdict: str  # a mrgrpo.sandbox.Verdict value: "AC", "WA", "RE", "TLE", ..., "INFRA"
    passed: int
    total: int
    time_s: float
    detail: str  # short message: the first failing test's verdict and stderr tail, or the INFRA reason
    failed: list[int] | None = None  # indices of the tests that did not pass (None: not reported)


OnResult = Callable[[int, "RefOutcome"], None]

# The CPU limit of a reference run without an explicit one: 3x the reward's default (4 s). A reference is trusted
# code, run to check the data, not to time it: on a loaded machine the CPU time of the same program grows 2-3x
# (the bundled sample's problem 130: ~2 CPU-s a test when idle, 4.3-6.5 at load 6-9 on a 2-core VM), and a
# reference slowed past the reward's limit says nothing about its tests.
REFERENCE_TIME_S = 12.0
# A problem with its own time limit (`mrgrpo.apps.Problem.time_s`) runs its reference with this many times it
# (never less than REFERENCE_TIME_S), for the same reason.
REFERENCE_FACTOR = 3.0


def reference_time_s(given: float | None, problem_time_s: float | None) -> float | None:
    """The CPU limit of one reference run: ``given`` (``--ref-time-s``) when set, else ``REFERENCE_FACTOR`` x the
    problem's own limit (at least ``REFERENCE_TIME_S``), else None (``REFERENCE_TIME_S`` when run).

        >>> reference_time_s(5.0, 1.0), reference_time_s(None, 1.0), reference_time_s(None, 10.0)
        (5.0, 12.0, 30.0)
        >>> reference_time_s(None, None) is None
        True
    """
    if given is not None:
        return given
    if problem_time_s is None:
        return None
    return max(REFERENCE_TIME_S, REFERENCE_FACTOR * problem_time_s)


class ReferenceRunner(Protocol):
    def run_many(
        self, jobs: Sequence[RefJob], progress: bool = False, on_result: OnResult | None = None
    ) -> list[RefOutcome]:
        """Outcomes in job order; ``on_result(i, outcome)``, if given, runs in the calling thread as job ``i``
        completes. Ctrl-C: queued jobs are dropped, running ones finish and reach ``on_result``, then
        KeyboardInterrupt propagates."""
        ...


def _reference_failure(result) -> str:
    """The sandbox's own message plus the stderr tail of the first failing test (if not already in it)."""
    detail = getattr(result, "detail", "") or ""
    for t in result.tests:
        if str(getattr(t.verdict, "value", t.verdict)) != "AC":
            tail = (t.stderr or "").strip().splitlines()[-1:]
            if tail and tail[0][:200] not in detail:
                detail += f" ({tail[0][:200]})"
            if not detail:
                detail = f"test {t.index}: {getattr(t.verdict, 'value', t.verdict)}"
            if str(getattr(t.verdict, "value", t.verdict)) == "WA":
                detail += f" (got {t.stdout[:120]!r})"
            break
    return detail.strip()[:500]


class SandboxRunner:
    """Runs reference programs in ``mrgrpo.sandbox`` with ``stop_on_first_failure=False`` (all tests run), one job per
    sandbox slot at a time."""

    def __init__(self, workers: int | None = None):
        try:
            from mrgrpo import sandbox
        except ImportError as e:
            from mrgrpo.data.store import DataError

            raise DataError(
                "mrgrpo.data: cannot import mrgrpo.sandbox to run the reference solutions "
                f"({e}); use --no-run-reference to skip that check"
            ) from e
        self._sandbox = sandbox
        self.workers = workers

    def _job(self, job: RefJob):
        sb = self._sandbox
        kwargs = dict(
            code=job.code,
            inputs=job.inputs,
            outputs=job.outputs,
            fn_name=job.fn_name,
            float_tol=job.float_tol,
            stop_on_first_failure=False,
        )
        time_s = REFERENCE_TIME_S if job.time_s is None else job.time_s
        kwargs["limits"] = sb.Limits(time_s=time_s)  # the wall: the sandbox's one rule from the CPU limit
        return sb.Job(**kwargs)

    def _run_one(self, job: RefJob) -> RefOutcome:
        r = self._sandbox.run(self._job(job))
        verdict = str(getattr(r.verdict, "value", r.verdict))
        return RefOutcome(
            verdict=verdict,
            passed=int(r.passed),
            total=int(r.total),
            time_s=float(r.time_s),
            detail="" if verdict == "AC" else _reference_failure(r),
            failed=[int(t.index) for t in r.tests if str(getattr(t.verdict, "value", t.verdict)) != "AC"],
        )

    def run_many(
        self, jobs: Sequence[RefJob], progress: bool = False, on_result: OnResult | None = None
    ) -> list[RefOutcome]:
        from mrgrpo.jobs import map_saving
        from mrgrpo.sandbox.pool import get_pool

        pool = get_pool(self.workers)  # grown to `workers` slots if asked for more than the default
        workers = self.workers or pool.size
        done = on_result if on_result is not None else (lambda i, outcome: None)
        return map_saving(self._run_one, list(jobs), done, workers, progress=progress, desc="reference runs")
