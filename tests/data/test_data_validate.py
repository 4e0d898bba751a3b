"""Stage 1 (validate): quarantine with reasons, reference runs (fake runner and the real sandbox),
special flags, the public/hidden split, and the reference-run cache."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from mrgrpo.apps import Problem, bundled_sample_path
from mrgrpo.data import pipeline, store
from mrgrpo.data.runner import RefOutcome
from mrgrpo.data.validate import (
    ValidateOptions,
    problem_from_dict,
    public_count,
    special_flags,
    undefined_preamble_names,
    validate,
)


class FakeRunner:
    """Answers by a rule on the job; counts what it was asked to run."""

    def __init__(self, rule=None):
        self.rule = rule or (lambda job: "AC")
        self.jobs = []

    def run_many(self, jobs, progress=False, on_result=None):
        self.jobs.extend(jobs)
        out = []
        for j in jobs:
            v = self.rule(j)
            n = len(j.inputs)
            out.append(RefOutcome(v, n if v == "AC" else 0, n, 0.01, "" if v == "AC" else f"test 0: {v}"))
        return out


def sample_lines() -> list[str]:
    return bundled_sample_path().read_text().splitlines()


def apps_plus(statement="Add two numbers.", inputs=("1 2\n",), outputs=("3\n",), solution=None, **extra) -> dict:
    rec = {
        "prompt": f'\ndef abcde():\n    """{statement}"""\n',
        "starter_code": "\ndef abcde():\n",
        "canonical_solution": solution or "def abcde():\n    a, b = map(int, input().split())\n    print(a + b)\n",
        "inputs": list(inputs),
        "outputs": list(outputs),
        "difficulty": "introductory",
    }
    rec.update(extra)
    return rec


def test_bad_records_are_quarantined_with_reasons(tmp_path):
    lines = sample_lines()[:5]
    lines += [
        "{not json",
        json.dumps({"prompt": "x"}),  # missing fields
        json.dumps(apps_plus(inputs=["1 2\n", "3 4\n"], outputs=["3\n"])),  # count mismatch
        json.dumps([1, 2, 3]),  # not an object
        sample_lines()[0],  # exact duplicate (same id-less record -> same statement and tests)
        json.dumps(apps_plus(statement="No solution here.", solution=" ")),
        json.dumps(apps_plus(statement="Wrong solution.", solution="def abcde():\n    print(0)\n")),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    runner = FakeRunner(lambda j: "WA" if "print(0)" in j.code else "AC")
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=runner)
    assert len(res.problems) == 5
    assert len(res.problems) + len(res.quarantined) == len(lines)
    reasons = Counter(q["reason"] for q in res.quarantined)
    assert reasons == {"schema": 4, "duplicate": 1, "no_reference": 1, "reference_failed": 1}
    by_where = {q["where"].rsplit(":", 1)[1]: q for q in res.quarantined}
    assert "not valid JSON" in by_where["6"]["detail"]
    assert "missing field" in by_where["7"]["detail"]
    assert "2 inputs but 1 outputs" in by_where["8"]["detail"]
    assert "WA" in by_where["12"]["detail"] and by_where["12"]["source_id"] == "in:12"


def test_special_flags_and_public_split():
    def P(io_mode="stdio", inputs=("1\n",), outputs=("1\n",), fn_name=None, ref="print(1)", difficulty="interview"):
        return Problem(
            "s:1", "apps_plus", "stmt", io_mode, fn_name, None, "", list(inputs), list(outputs), difficulty, ref
        )

    assert "single_test" in special_flags(P(), ["1\n"], ["1\n"])
    assert "float_output" in special_flags(P(outputs=["0.500000\n"]), [], [])
    assert "float_output" not in special_flags(P(outputs=["1 2\n"]), [], [])
    assert "output_whitespace" in special_flags(P(outputs=["3 \n"]), [], [])
    assert "output_whitespace" in special_flags(P(outputs=["3"]), [], [])
    assert "empty_output" in special_flags(P(outputs=[""]), [], [])
    assert "duplicate_tests" in special_flags(P(inputs=["1\n", "1\n"], outputs=["1\n", "1\n"]), [], [])
    call = P("call", [[1], [2]], [{1, 2}, (1, 2)], "f", ref="def f(x):\n    return List")
    flags = special_flags(call, [[1], [2]], [{1, 2}, (1, 2)])
    assert {"non_json_output", "needs_preamble"} <= set(flags) and "single_test" not in flags
    assert "float_output" in special_flags(P("call", [[1]], [0.5], "f"), [[1]], [0.5])
    assert "unknown_difficulty" in special_flags(P(difficulty="unknown"), [], [])
    assert public_count(3, 1) == 1 and public_count(1, 1) == 0 and public_count(3, 5) == 2 and public_count(2, 0) == 0
    assert undefined_preamble_names("from typing import List\ndef f(a: List[int]): return a") == set()
    assert undefined_preamble_names("def f(a: List[int]): return collections.Counter(a)") == {"List", "collections"}


def test_sample_with_fake_runner_cache_and_float_retry(tmp_path):
    def rule(job):
        if job.outputs[0] == "3.6568542494923806\n":  # a float-output problem whose exact check fails
            return "AC" if job.float_tol else "WA"
        return "INFRA" if job.fn_name == "how_many_bees" else "AC"

    runner = FakeRunner(rule)
    out = tmp_path / "out"
    res = validate(bundled_sample_path(), out, ValidateOptions(), runner=runner)
    assert len(res.problems) == 149 and [q["reason"] for q in res.quarantined] == ["sandbox_infra"]
    floaty = next(p for p in res.problems if p["source_id"] == "apps_plus_sample:21")
    assert "float_output" in floaty["special"] and "needs_float_tol" in floaty["special"]
    assert res.reference_runs == 151  # 150 + the float retry
    counts = Counter(len(p["inputs"]) for p in res.problems)
    assert sum(p["n_public"] for p in res.problems) == sum(c for n, c in counts.items() if n > 1)
    one = next(p for p in res.problems if len(p["inputs"]) == 3)
    assert one["public_tests"]["inputs"] == one["inputs"][:1]
    # second run: everything from the cache except the INFRA one (never cached)
    runner2 = FakeRunner(rule)
    validate(bundled_sample_path(), out, ValidateOptions(), runner=runner2)
    assert [j.fn_name for j in runner2.jobs] == ["how_many_bees"]


@pytest.mark.parametrize("verdict", ["TLE", "INFRA"])
def test_a_verdict_load_can_cause_is_never_cached_and_is_judged_again(tmp_path, verdict):
    """Issue 34 (8): a reference that was TLE (a busy machine) or INFRA is quarantined in that run, but its outcome
    is not cached: the next run judges it again and keeps the problem when it passes."""
    out = tmp_path / "out"
    first = FakeRunner(lambda job: verdict if job.fn_name == "how_many_bees" else "AC")
    res = validate(bundled_sample_path(), out, ValidateOptions(), runner=first)
    assert [q["reason"] for q in res.quarantined] == ["sandbox_infra" if verdict == "INFRA" else "reference_failed"]
    again = FakeRunner()
    res = validate(bundled_sample_path(), out, ValidateOptions(), runner=again)
    assert [j.fn_name for j in again.jobs] == ["how_many_bees"] and res.reference_runs == 1
    assert len(res.problems) == 150 and res.quarantined == []


@pytest.mark.parametrize("verdict", ["TLE", "INFRA"])
def test_a_stage_that_quarantined_a_load_verdict_is_not_up_to_date(tmp_path, verdict):
    """`prepare` again after a TLE or INFRA reference: the validate stage is not skipped as up to date; it runs, judges
    that reference again (one run, the rest from the cache) and keeps the problem; then it is up to date."""
    out = tmp_path / "out"
    first = FakeRunner(lambda job: verdict if job.fn_name == "how_many_bees" else "AC")
    assert pipeline.run_validate(out, None, ValidateOptions(), runner=first).info["kept"] == 149
    again = FakeRunner()
    outcome = pipeline.run_validate(out, None, ValidateOptions(), runner=again)
    assert not outcome.skipped and outcome.info["reference_runs"] == 1 and outcome.info["kept"] == 150
    third = FakeRunner()
    assert pipeline.run_validate(out, None, ValidateOptions(), runner=third).skipped and third.jobs == []


def test_a_stage_that_quarantined_a_wrong_answer_stays_up_to_date(tmp_path):
    """A WA (or RE) reference is a property of the data: the stage stays up to date and runs nothing."""
    out = tmp_path / "out"
    pipeline.run_validate(out, None, ValidateOptions(), runner=FakeRunner(
        lambda job: "RE" if job.fn_name == "how_many_bees" else "AC"))
    again = FakeRunner()
    assert pipeline.run_validate(out, None, ValidateOptions(), runner=again).skipped and again.jobs == []


def test_a_tle_in_an_older_cache_is_not_read_back(tmp_path):
    """A cache written before this rule may hold TLE lines: they are ignored (the job runs again), and a later
    line for the same job decides."""
    out = tmp_path / "out"
    validate(bundled_sample_path(), out, ValidateOptions(), runner=FakeRunner())
    cache = out / "cache" / "reference_runs.jsonl"
    rows = [json.loads(line) for line in cache.read_text().splitlines()]
    tle = {"verdict": "TLE", "passed": 0, "total": 1, "time_s": 9.0, "detail": "test 0: TLE"}
    rows[0]["outcome"] = tle  # the first job's only line says TLE
    rows.append({"key": rows[1]["key"], "outcome": tle})  # the second's last line says TLE after an AC
    rows.append({"key": rows[2]["key"], "outcome": tle})
    rows.append(dict(rows[2], outcome={**tle, "verdict": "AC", "passed": 1}))  # the third: TLE, then AC
    cache.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runner = FakeRunner()
    res = validate(bundled_sample_path(), out, ValidateOptions(), runner=runner)
    assert res.reference_runs == 2 and len(res.problems) == 150
    keys = {pipeline_key(j) for j in runner.jobs}
    assert keys == {rows[0]["key"], rows[1]["key"]}


def pipeline_key(job) -> str:
    from mrgrpo.data.validate import _ref_key

    return _ref_key(job)


def test_force_runs_every_reference_again(tmp_path):
    """`prepare --force` (run_validate(force=True)) runs every reference again, cached or not, and saves them."""
    out = tmp_path / "out"
    pipeline.run_validate(out, None, ValidateOptions(), runner=FakeRunner())
    second = FakeRunner()
    assert pipeline.run_validate(out, None, ValidateOptions(), runner=second).skipped and second.jobs == []
    forced = FakeRunner(lambda job: "RE" if job.fn_name == "how_many_bees" else "AC")
    outcome = pipeline.run_validate(out, None, ValidateOptions(), runner=forced, force=True)
    assert not outcome.skipped and outcome.info["reference_runs"] == len(forced.jobs) == 150
    assert outcome.info["kept"] == 149  # the fresh verdict counts, not the cached AC


def test_only_a_wa_reference_with_float_outputs_is_retried_with_a_tolerance(tmp_path):
    """The float-tolerance retry is for float answers only: a WA reference of a problem without float outputs
    (stdio integers, a call-mode int) is quarantined after one run, never run with float_tol; a TLE or RE
    reference with float outputs is not retried either."""
    call = {
        "prompt": '\ndef half(x):\n    """Halve it."""\n',
        "starter_code": "\ndef half(x):\n",
        "canonical_solution": "def half(x):\n    return x // 2\n",
        "inputs": [[4], [6]],
        "outputs": [[3], [3]],
        "difficulty": "introductory",
    }
    records = [
        apps_plus(statement="Integers.", inputs=["1 2\n", "2 2\n"], outputs=["4\n", "4\n"]),
        call,
        apps_plus(statement="Float, TLE.", inputs=["1 2\n", "3 4\n"], outputs=["1.5\n", "3.5\n"]),
        apps_plus(statement="Float, RE.", inputs=["2 2\n", "3 3\n"], outputs=["2.5\n", "3.5\n"]),
        apps_plus(statement="Float, WA.", inputs=["1 1\n", "2 3\n"], outputs=["0.5\n", "2.5\n"]),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    verdicts = {"1.5\n": "TLE", "2.5\n": "RE"}
    runner = FakeRunner(lambda job: "AC" if job.float_tol else verdicts.get(str(job.outputs[0]), "WA"))
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=runner)
    assert [j.outputs[0] for j in runner.jobs if j.float_tol] == ["0.5\n"]
    assert [p["statement"] for p in res.problems] == ["Float, WA."]
    assert "needs_float_tol" in res.problems[0]["special"]
    assert sorted(q["detail"].split(":")[0] for q in res.quarantined) == ["RE", "TLE", "WA", "WA"]


def test_stage_is_skipped_when_nothing_changed(tmp_path):
    runner = FakeRunner()
    out = tmp_path / "out"
    first = pipeline.run_validate(out, None, ValidateOptions(), runner=runner)
    assert not first.skipped and first.info["kept"] == 150
    mtime = (out / "problems.jsonl").stat().st_mtime_ns
    again = pipeline.run_validate(out, None, ValidateOptions(), runner=FakeRunner(lambda j: pytest.fail("ran")))
    assert again.skipped and (out / "problems.jsonl").stat().st_mtime_ns == mtime
    other = pipeline.run_validate(out, None, ValidateOptions(public_tests=2), runner=runner)
    assert not other.skipped
    rows = list(store.read_jsonl(out / "problems.jsonl"))
    assert max(r["n_public"] for r in rows) == 2


def _real_sandbox():
    try:
        from mrgrpo import sandbox

        return sandbox if hasattr(sandbox, "run_batch") else None
    except ImportError:
        return None


@pytest.mark.skipif(_real_sandbox() is None, reason="mrgrpo.sandbox.run_batch is not available yet")
def test_sample_references_in_the_real_sandbox(tmp_path):
    res = validate(bundled_sample_path(), tmp_path / "out", ValidateOptions())
    assert len(res.problems) + len(res.quarantined) == 150
    assert all(q["reason"] == "reference_failed" and q["detail"] for q in res.quarantined), res.quarantined
    assert len(res.problems) >= 140
    assert all(p["reference"]["verdict"] == "AC" for p in res.problems)


def test_original_apps_records_flow_through(tmp_path):
    rec = {
        "problem_id": 4001,
        "question": "Return double.",
        "difficulty": "interview",
        "starter_code": "",
        "solutions": json.dumps(["def double(x):\n    return 2 * x\n"]),
        "input_output": json.dumps({"inputs": [[1], [2]], "outputs": [[2], [4]], "fn_name": "double"}),
    }
    path = tmp_path / "apps.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "problem_id": 4002, "input_output": "{bad"}) + "\n")
    runner = FakeRunner()
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=runner)
    assert [p["data_source"] for p in res.problems] == ["apps"] and res.problems[0]["source_id"] == "4001"
    assert runner.jobs[0].fn_name == "double" and runner.jobs[0].outputs == [2, 4]
    assert res.problems[0]["public_tests"] == {"inputs": [[1]], "outputs": [[2]], "fn_name": "double"}
    assert [q["reason"] for q in res.quarantined] == ["schema"]


class SavingFakeRunner(FakeRunner):
    """Reports each outcome through on_result as it completes, as the sandbox runner does."""

    def run_many(self, jobs, progress=False, on_result=None):
        out = super().run_many(jobs, progress)
        for i, o in enumerate(out):
            on_result(i, o)
        return out


def test_reference_cache_holds_one_line_per_run_whether_or_not_the_runner_saves_as_it_goes(tmp_path):
    """A run is written to the cache once: by on_result as it completes, or after run_many for a runner that
    reports nothing along the way; INFRA is never written."""
    for runner in (FakeRunner(), SavingFakeRunner(lambda job: "INFRA" if job.fn_name == "how_many_bees" else "AC")):
        out = tmp_path / type(runner).__name__
        res = validate(bundled_sample_path(), out, ValidateOptions(), runner=runner)
        lines = (out / "cache" / "reference_runs.jsonl").read_text().splitlines()
        keys = [json.loads(line)["key"] for line in lines]
        assert len(keys) == len(set(keys)) == res.reference_runs - (isinstance(runner, SavingFakeRunner))


# ---- APPS's two call-mode conventions (issue 34, finding 9): prepare normalises to the wrapped form


def _apps_call(pid, code, inputs, outputs, fn="f"):
    io = {"inputs": inputs, "outputs": outputs, "fn_name": fn}
    return {"question": f"Problem {pid}.", "input_output": json.dumps(io), "solutions": json.dumps([code]),
            "difficulty": "introductory", "problem_id": pid, "starter_code": f"def {fn}(x):\n"}


CONVENTIONS = [
    # a function returning one-element lists, stored unwrapped: looks wrapped throughout; the reference decides
    _apps_call("lists", "def f(x):\n    return [2 * x]", [[1], [2], [3]], [[2], [4], [6]]),
    # mixed: 3 is 3; [12] is 12 or [12]: the reference returns 12
    _apps_call("mixed", "def f(a, b):\n    return a + b", [[1, 2], [5, 7], [1, 1]], [3, [12], 2]),
    # per test: [9] is the list, [2] the number
    _apps_call("per_test", "def f(x):\n    return [x] if x > 5 else x", [[1], [9], [2]], [1, [9], [2]]),
    # neither reading: the reference is wrong
    _apps_call("neither", "def f(a, b):\n    return a + b + 100", [[1, 2], [5, 7]], [3, [12]]),
    # unwrapped, nothing ambiguous
    _apps_call("plain", "def f(x):\n    return [x, x]", [[1], [2]], [[1, 1], [2, 2]]),
]


def _conventions_file(tmp_path):
    path = tmp_path / "apps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in CONVENTIONS))
    return path


def test_prepare_normalises_both_call_conventions_to_the_wrapped_form(tmp_path):
    """With the reference run (real sandbox), each call-mode problem ends in one form: its outputs as the reference
    passes them (per test where the readings differ), written wrapped; only a problem whose reference passes
    neither reading is quarantined, saying so. The ground truth then judges exactly: the reference is AC, the other
    reading WA."""
    from mrgrpo.reward import compute_score
    from mrgrpo.testset import OneOf, TestSet

    res = validate(_conventions_file(tmp_path), tmp_path / "out", ValidateOptions(public_tests=0))
    kept = {p["source_id"]: p for p in res.problems}
    assert sorted(kept) == ["lists", "mixed", "per_test", "plain"]
    assert kept["lists"]["outputs"] == [[2], [4], [6]] and "output_read_as_list" in kept["lists"]["special"]
    assert kept["mixed"]["outputs"] == [3, 12, 2] and "output_read_as_list" not in kept["mixed"]["special"]
    assert kept["per_test"]["outputs"] == [1, [9], 2] and "output_read_as_list" in kept["per_test"]["special"]
    assert kept["plain"]["outputs"] == [[1, 1], [2, 2]]
    assert all("ambiguous" not in p for p in res.problems)
    [bad] = res.quarantined
    assert (bad["source_id"], bad["reason"]) == ("neither", "reference_failed")
    assert "neither reading of its ambiguous outputs passes (call-mode outputs 1 are stored as [x]" in bad["detail"]
    for row in res.problems:
        truth = problem_from_dict(row).tests().to_json()
        decoded = TestSet.from_json(truth)
        assert all(isinstance(o, list) and len(o) == 1 for o in json.loads(truth)["outputs"])  # wrapped throughout
        assert not any(isinstance(o, OneOf) for o in decoded.outputs) and decoded.outputs == row["outputs"]
        assert compute_score("apps", "", truth, {"final_code": row["reference_solution"]})["verdict"] == "AC"
    other = "def f(x):\n    return 2 * x"  # the number where the reference returns the one-element list
    lists = problem_from_dict(kept["lists"]).tests().to_json()
    assert compute_score("apps", "", lists, {"final_code": other})["verdict"] == "WA"


def test_without_reference_runs_only_undecidable_call_outputs_are_quarantined(tmp_path):
    """--no-run-reference: no reference decides, so a set with ambiguous outputs is quarantined with the reason
    `ambiguous_call_output`; a set wrapped throughout (the rule decides: wrapped) and an unwrapped one without a
    one-element list are kept."""
    res = validate(_conventions_file(tmp_path), tmp_path / "out", ValidateOptions(run_reference=False))
    assert sorted(p["source_id"] for p in res.problems) == ["lists", "plain"]
    assert {q["source_id"]: q["reason"] for q in res.quarantined} == {
        "mixed": "ambiguous_call_output", "per_test": "ambiguous_call_output", "neither": "ambiguous_call_output"}
    detail = next(q["detail"] for q in res.quarantined if q["source_id"] == "per_test")
    assert detail.startswith("call-mode outputs 1, 2 are stored as [x] in a test set that is not wrapped throughout")


def test_a_wrong_reference_with_unknown_failing_tests_is_not_decided_per_test(tmp_path):
    """A runner that does not report which tests failed (an older cache) decides by whole readings only."""
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(CONVENTIONS[2]) + "\n")
    runner = FakeRunner(lambda job: "WA")
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=runner)
    assert [q["reason"] for q in res.quarantined] == ["reference_failed"] and len(runner.jobs) == 2
    assert runner.jobs[1].outputs == [1, [9], [2]]  # the list reading of the ambiguous tests 1 and 2


def test_a_records_own_time_limit_travels_to_the_test_json_and_scales_its_reference_run(tmp_path):
    """`time_limit` in a record (APPS+ or APPS) is the problem's own CPU limit: kept in problems.jsonl, written into
    the test JSON of both halves by the build, and its reference runs with REFERENCE_FACTOR x it; a record without
    one keeps the sandbox's default and the same problem hash as before the field existed."""
    import dataclasses

    from mrgrpo.data.build import make_row
    from mrgrpo.data.runner import REFERENCE_FACTOR
    from mrgrpo.data.validate import problem_from_dict, problem_hash

    recs = [apps_plus(statement="Slow.", inputs=["1 2\n", "3 4\n"], outputs=["3\n", "7\n"], time_limit="5 seconds"),
            apps_plus(statement="Default.")]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    runner = FakeRunner()
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=runner)
    slow, default = res.problems
    assert slow["time_s"] == 5.0 and "time_s" not in default
    assert slow["public_tests"]["time_s"] == 5.0
    assert [j.time_s for j in runner.jobs] == [REFERENCE_FACTOR * 5.0, None]
    row = make_row(problem_from_dict(slow), slow, "", "", "train", 0)
    assert json.loads(row["reward_model"]["ground_truth"])["time_s"] == 5.0
    assert json.loads(row["extra_info"]["public_tests"])["time_s"] == 5.0
    plain = problem_from_dict(default)
    before = {k: v for k, v in dataclasses.asdict(plain).items() if k not in ("notes", "ambiguous", "time_s")}
    assert problem_hash(plain) == store.stable_hash(before)


@pytest.mark.parametrize("value", ["fast", -2, 0, [1], True])
def test_a_malformed_time_limit_quarantines_the_record_naming_the_field(tmp_path, value):
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps(apps_plus(time_limit=value)) + "\n")
    res = validate(path, tmp_path / "out", ValidateOptions(), runner=FakeRunner())
    assert res.problems == [] and [q["reason"] for q in res.quarantined] == ["schema"]
    assert "`time_limit` must be" in res.quarantined[0]["detail"]
