"""The canonical solutions of the bundled APPS+ sample pass their own tests (all tests, not just the first)."""

from __future__ import annotations

from mrgrpo.apps import Problem, read_problems
from mrgrpo.sandbox import Job, Limits, Verdict, run_batch

# What this test checks is the judging (outputs, call mode, preamble), not speed: on a loaded 2-core VM the CPU
# time of the same program grows 2-3x (problem 130 measured 4.3-6.5 CPU-s a test at load 6-9, ~2 when idle), so the
# limits are generous backstops; the wall backstop also gives back the time a test waited for a CPU (runner.py).
GENEROUS = Limits(time_s=30, wall_s=60)

# Genuine data/environment errors, by source_id, with the reason. They are reported, not hidden.
KNOWN_DATA_ERRORS = {
    "apps_plus_sample:93": "canonical solution imports scipy, which is not part of the judge's environment",
}


def test_canonical_solutions_pass(sample_path):
    problems = [p for p in read_problems(sample_path) if isinstance(p, Problem) and p.reference_solution]
    assert len(problems) >= 140
    jobs = [Job(code=p.reference_solution, inputs=p.inputs, outputs=p.outputs, fn_name=p.fn_name,
                stop_on_first_failure=False, limits=GENEROUS) for p in problems]
    results = run_batch(jobs)
    assert not [r for r in results if r.verdict is Verdict.INFRA]
    failures = {p.source_id: f"{r.verdict.value} {r.passed}/{r.total}: {r.detail}"
                for p, r in zip(problems, results, strict=True) if r.verdict is not Verdict.AC}
    unexpected = {k: v for k, v in failures.items() if k not in KNOWN_DATA_ERRORS}
    assert not unexpected, unexpected
    valid = len(problems) - len(set(failures) & set(KNOWN_DATA_ERRORS))
    passed = sum(r.verdict is Verdict.AC for r in results)
    assert passed / valid >= 0.99, (passed, valid, failures)
