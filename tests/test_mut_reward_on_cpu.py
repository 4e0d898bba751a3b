"""mrgrpo.reward against its surviving mutants (docs/testing.md): the score's terms and their defaults, the
program an answer is scored on, the INFRA streak, the job the reward builds, and the fields of the reward dict.

Where a test needs a sandbox verdict the real sandbox cannot give (INFRA) or checks the job it is handed, it
replaces ``reward.run`` with a stand-in that records the job and answers with the real result type.
"""

from __future__ import annotations

import asyncio
import logging
import os

import pytest

from mrgrpo import marker, reward
from mrgrpo.reward import build_job, compute_score, compute_score_async
from mrgrpo.sandbox import ExecResult, Limits, Verdict
from mrgrpo.testset import LimitsOverride

GT = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
GOOD = "a, b = map(int, input().split())\nprint(a + b)"
BAD = "a, b = map(int, input().split())\nprint(a - b)"
# Wrong on the first test, right on the second: a stop-at-first-failure run passes 0 tests, a full run 1.
SECOND_ONLY = "a, b = map(int, input().split())\nprint(12 if a == 5 else 0)"


def fenced(code: str) -> str:
    return f"Plan: add.\n```python\n{code}\n```\n"


def loop_fields(**over) -> dict:
    """The agent loop's extra_fields as the reward receives them (one attempt that passed the public tests)."""
    fields = {
        "final_code": GOOD,
        "plan": "",
        "plan_source": "none",
        "attempts": 1,
        "public_pass": [True],
        "public_verdicts": ["AC"],
        "stop_reason": "passed",
        "error": "",
        "model_tokens": 100,
        "injected_tokens": 0,
        "plan_tokens": 0,
        "sandbox_s": [0.01],
    }
    return {**fields, **over}


class Recorder:
    """Stands in for `mrgrpo.sandbox.run`: records each job and answers ``verdicts`` in turn (the real types)."""

    def __init__(self, *verdicts: Verdict, detail: str = "boom"):
        self.verdicts = list(verdicts)
        self.detail = detail
        self.jobs = []

    def __call__(self, job):
        self.jobs.append(job)
        verdict = self.verdicts.pop(0) if self.verdicts else Verdict.AC
        n = len(job.inputs)
        passed = n if verdict is Verdict.AC else 0
        return ExecResult(verdict, passed, n, (), 0.1, self.detail if verdict is Verdict.INFRA else "")


@pytest.fixture
def fresh_streak(monkeypatch):
    monkeypatch.setattr(reward, "_consecutive_infra", 0)


def sandbox(monkeypatch, *verdicts: Verdict, detail: str = "boom") -> Recorder:
    rec = Recorder(*verdicts, detail=detail)
    monkeypatch.setattr(reward, "run", rec)
    return rec


# ------------------------------------------------------------------ the score's terms
def test_default_correctness_is_acc_not_the_pass_rate():
    """Without partial_credit a program that passes some hidden tests but not all scores 0 (acc), not the pass rate."""
    r = compute_score("apps_plus", fenced(SECOND_ONLY), GT, all_tests=True)
    assert (r["score"], r["acc"], r["pass_rate"], r["num_passed"]) == (0.0, 0.0, 0.5, 1)


def test_partial_credit_runs_every_test():
    """partial_credit scores the pass rate over ALL tests, so a failure on the first test does not end the run."""
    r = compute_score("apps_plus", fenced(SECOND_ONLY), GT, partial_credit=True)
    assert (r["score"], r["pass_rate"], r["num_passed"], r["acc"]) == (0.5, 0.5, 1, 0.0)


def test_all_tests_runs_every_test_without_changing_the_score():
    """all_tests counts the passes after the first failure but leaves the score at acc."""
    default = compute_score("apps_plus", fenced(SECOND_ONLY), GT)
    every = compute_score("apps_plus", fenced(SECOND_ONLY), GT, all_tests=True)
    assert (default["num_passed"], every["num_passed"]) == (0, 1)
    assert default["score"] == every["score"] == 0.0


def test_length_term_slope_through_compute_score():
    """length_term is 1 up to the target, then falls linearly: 1250 of 1000 tokens -> 0.75, 2000 -> 0.0."""
    kw = {"correctness_weight": 0.0, "length_weight": 1.0, "length_target_tokens": 1000}
    values = [compute_score("apps_plus", fenced(GOOD), GT, {"model_tokens": n}, **kw) for n in (1000, 1250, 2000, 3000)]
    assert [r["length_term"] for r in values] == [1.0, 0.75, 0.0, 0.0]
    assert [r["score"] for r in values] == [1.0, 0.75, 0.0, 0.0]


def test_length_term_is_one_when_not_measured():
    """Without model_tokens (and length_weight 0) the reported length_term is 1.0."""
    assert compute_score("apps_plus", fenced(GOOD), GT)["length_term"] == 1.0


def test_length_weight_without_model_tokens_says_what_is_missing():
    """A nonzero length_weight without extra_info['model_tokens'] raises, naming the key and why."""
    with pytest.raises(
        ValueError,
        match=r"length_weight needs extra_info\['model_tokens'\] \(set by mrgrpo's agent "
        r"loop\): the length term counts the model's own tokens only",
    ):
        compute_score("apps_plus", fenced(GOOD), GT, {"index": 0}, length_weight=0.1)


def test_format_weight_pays_for_a_program_even_when_wrong():
    """format_term adds its weight for any program, right or wrong, and nothing without one."""
    kw = {"correctness_weight": 0.0, "format_weight": 0.5}
    assert compute_score("apps_plus", fenced(BAD), GT, **kw)["score"] == 0.5
    assert compute_score("apps_plus", "no code", GT, **kw)["score"] == 0.0


def test_pass_rate_of_a_result_without_tests_is_zero():
    """pass_rate is 0.0 (not a division by zero, not 1.0) for a result with no tests."""
    assert reward.pass_rate(ExecResult(Verdict.NO_CODE, 0, 0, (), 0.0, "no code")) == 0.0


# ------------------------------------------------------------------ the program
def test_empty_final_code_is_no_program_even_with_a_fence_in_the_response():
    """The loop's empty final_code means no program: the response's fence is not scored instead."""
    r = compute_score("apps_plus", fenced(GOOD), GT, {"final_code": ""})
    assert (r["verdict"], r["has_code"], r["acc"]) == ("NO_CODE", 0.0, 0.0)


def test_whitespace_final_code_is_no_program():
    """A final_code of whitespace only is no program: has_code and format_ok are 0."""
    r = compute_score("apps_plus", fenced(GOOD), GT, {"final_code": " \n\t"}, format_weight=0.5)
    assert (r["verdict"], r["has_code"], r["format_ok"], r["score"]) == ("NO_CODE", 0.0, 0.0, 0.0)


def test_an_answer_without_a_program_never_reaches_the_sandbox(monkeypatch):
    """NO_CODE is decided without running anything."""
    rec = sandbox(monkeypatch)
    compute_score("apps_plus", "no code at all", GT)
    compute_score("apps_plus", None, GT)
    assert rec.jobs == []


def test_async_answer_without_a_program_never_reaches_the_sandbox(monkeypatch):
    """compute_score_async decides NO_CODE without running anything either."""

    async def refuse(job):
        raise AssertionError("the sandbox must not run an answer without a program")

    monkeypatch.setattr(reward, "run_async", refuse)
    r = asyncio.run(compute_score_async("apps_plus", "no code at all", GT))
    assert (r["verdict"], r["time_s"]) == ("NO_CODE", 0.0)


def test_no_code_result_fields():
    """NO_CODE reports every hidden test as not passed, no sandbox time, and scores 0."""
    r = compute_score("apps_plus", "no code", GT)
    assert (r["num_tests"], r["num_passed"], r["pass_rate"], r["time_s"], r["score"]) == (2, 0, 0.0, 0.0, 0.0)


def test_async_variant_scores_final_code():
    """compute_score_async reads extra_info's final_code as compute_score does."""
    r = asyncio.run(compute_score_async("apps_plus", fenced(BAD), GT, {"final_code": GOOD}))
    assert (r["acc"], r["verdict"]) == (1.0, "AC")


# ------------------------------------------------------------------ the job
def test_build_job_stops_at_the_first_failure_by_default():
    """build_job's job stops at the first failure unless all_tests."""
    assert build_job(GT, GOOD).stop_on_first_failure is True
    assert build_job(GT, GOOD, all_tests=True).stop_on_first_failure is False


def test_build_job_takes_the_override_over_the_ground_truths_own_limits():
    """build_job judges by the ground truth's own limits unless the run's override gives them."""
    own = {**GT, "time_s": 1.5}
    assert build_job(own, GOOD).limits == Limits(time_s=1.5, wall_s=3.0)
    assert build_job(own, GOOD, override=LimitsOverride(time_s=2.0, wall_s=5.0)).limits == Limits(time_s=2, wall_s=5)


def test_build_job_errors_name_the_ground_truth():
    """A malformed ground truth is reported as 'ground_truth: ...'."""
    with pytest.raises(ValueError, match=r"^ground_truth: 1 inputs but 0 outputs"):
        build_job({"inputs": ["1\n"], "outputs": []}, GOOD)


def test_the_limits_kwarg_sets_the_sandbox_limits(monkeypatch):
    """limits (the recipe's mrgrpo.limits) time_s / wall_s / memory_mb reach the job; unset ones keep the defaults."""
    rec = sandbox(monkeypatch)
    compute_score("apps_plus", fenced(GOOD), GT, limits={"time_s": 1.5, "wall_s": 3.0, "memory_mb": 256})
    compute_score("apps_plus", fenced(GOOD), GT, limits={"time_s": 2.0, "wall_s": None, "memory_mb": None})
    compute_score("apps_plus", fenced(GOOD), GT, limits=None)
    assert rec.jobs[0].limits == Limits(time_s=1.5, wall_s=3.0, memory_mb=256)
    assert rec.jobs[1].limits == Limits(time_s=2.0)
    assert rec.jobs[2].limits == Limits()


def test_job_runs_every_test_only_for_all_tests_or_partial_credit(monkeypatch):
    """The job stops at the first failure by default, and runs every test with all_tests or partial_credit."""
    rec = sandbox(monkeypatch)
    for kw in ({}, {"all_tests": True}, {"partial_credit": True}, {"all_tests": True, "partial_credit": True}):
        compute_score("apps_plus", fenced(GOOD), GT, **kw)
    assert [j.stop_on_first_failure for j in rec.jobs] == [True, False, False, False]


# ------------------------------------------------------------------ INFRA
def test_infra_streak_resets_on_a_judged_result(monkeypatch, fresh_streak):
    """Only INFRA results in a row count: a judged result in between resets the streak."""
    sandbox(
        monkeypatch,
        Verdict.INFRA,
        Verdict.INFRA,
        Verdict.AC,
        Verdict.INFRA,
        Verdict.INFRA,
        Verdict.WA,
        Verdict.INFRA,
        Verdict.INFRA,
    )
    for _ in range(8):  # 6 INFRA in all, never 3 in a row
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=3)


def test_judged_results_never_count_towards_the_streak(monkeypatch, fresh_streak):
    """Any number of judged results never raises SandboxBroken."""
    sandbox(monkeypatch)
    for _ in range(4):
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=2)


def test_the_streak_raises_at_the_limit_with_a_message(monkeypatch, fresh_streak):
    """The max_consecutive_infra-th INFRA in a row raises SandboxBroken naming the count and the last detail."""
    sandbox(monkeypatch, Verdict.AC, Verdict.INFRA, Verdict.INFRA, Verdict.INFRA, detail="slot died")
    for _ in range(3):
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=3)
    with pytest.raises(reward.SandboxBroken, match=r"^3 INFRA results in a row; last: slot died$"):
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=3)


def test_infra_is_logged_with_its_detail_and_score(monkeypatch, fresh_streak, caplog):
    """An INFRA result logs one warning with the detail (cut to 300 characters) and the score it got."""
    sandbox(monkeypatch, Verdict.INFRA, detail="x" * 299 + "yz")
    with caplog.at_level(logging.WARNING, logger="mrgrpo.reward"):
        r = compute_score("apps_plus", fenced(GOOD), GT, infra_score=0.25)
    assert r["score"] == 0.25
    assert [rec.getMessage() for rec in caplog.records] == [f"mrgrpo.reward: INFRA ({'x' * 299}y); scored 0.25"]


def test_a_judged_result_is_not_excluded():
    """A judged result (here WA) without loop fields is not excluded and not infra."""
    r = compute_score("apps_plus", fenced(BAD), GT)
    assert (r["excluded"], r["infra"]) == (0.0, 0.0)


def test_infra_result_is_excluded(monkeypatch, fresh_streak):
    """An INFRA result on the hidden tests is excluded (no gradient) and flagged infra."""
    sandbox(monkeypatch, Verdict.INFRA)
    r = compute_score("apps_plus", fenced(GOOD), GT)
    assert (r["excluded"], r["infra"]) == (1.0, 1.0)


# ------------------------------------------------------------------ the loop's statistics
def test_loop_fields_reach_the_sample_statistics():
    """The agent loop's extra_fields become the per-sample statistics of the reward dict."""
    info = loop_fields(attempts=2, public_pass=[False, True], public_verdicts=["WA", "AC"], model_tokens=321)
    r = compute_score("apps_plus", fenced(BAD), GT, info)
    assert (r["attempts"], r["fixed"], r["model_tokens"], r["failed_first"]) == (2.0, 1.0, 321.0, 1.0)


def test_public_pass_hidden_fail_uses_the_hidden_acc():
    """public_pass_hidden_fail is 1.0 when the public tests passed and the hidden ones did not."""
    passed = compute_score("apps_plus", "", GT, loop_fields(final_code=GOOD))
    failed = compute_score("apps_plus", "", GT, loop_fields(final_code=BAD))
    assert (passed["public_pass_hidden_fail"], failed["public_pass_hidden_fail"]) == (0.0, 1.0)


# ------------------------------------------------------------------ the marker line
@pytest.mark.parametrize("fn", ["compute_score", "compute_score_async"])
def test_marker_line_names_the_function_and_final_code(monkeypatch, capsys, fn):
    """The first call in a process writes one marker line naming the entry point and whether final_code came."""
    monkeypatch.setattr(marker, "_seen", set())
    call = getattr(reward, fn)
    for extra in ({"final_code": GOOD}, None):
        result = call("apps_plus", fenced(GOOD), GT, extra)
        if asyncio.iscoroutine(result):
            asyncio.run(result)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("MRGRPO_MARKER")]
    assert lines == [f"MRGRPO_MARKER component=reward pid={os.getpid()} fn={fn} has_final_code=True"]


def test_marker_without_final_code(monkeypatch, capsys):
    """has_final_code=False when extra_info has no final_code key."""
    monkeypatch.setattr(marker, "_seen", set())
    compute_score("apps_plus", fenced(GOOD), GT, {"index": 1})
    asyncio.run(compute_score_async("apps_plus", fenced(GOOD), GT, {"index": 1}))
    err = capsys.readouterr().err
    assert f"component=reward pid={os.getpid()} fn=compute_score has_final_code=False" in err
    assert "fn=compute_score_async" not in err  # one line per component and process
