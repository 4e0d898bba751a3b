"""mrgrpo.reward.compute_score: key set, program extraction, weights, INFRA handling, concurrency."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from mrgrpo import reward
from mrgrpo.reward import REWARD_KEYS, compute_score, compute_score_async
from mrgrpo.sandbox import ExecResult, Verdict

GT = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
GOOD = "a, b = map(int, input().split())\nprint(a + b)"
BAD = "a, b = map(int, input().split())\nprint(a - b)"


def fenced(code: str, tag: str = "python") -> str:
    return f"Plan: add.\n```{tag}\n{code}\n```\n"


def test_correct_answer_scores_one_with_fixed_keys():
    result = compute_score("apps_plus", fenced(GOOD), GT)
    assert tuple(result) == REWARD_KEYS
    assert (result["score"], result["acc"], result["pass_rate"], result["verdict"]) == (1.0, 1.0, 1.0, "AC")
    assert result["num_tests"] == 2 and result["infra"] == 0.0 and result["format_ok"] == 1.0


def test_every_verdict_returns_the_same_keys():
    for text in (fenced(GOOD), fenced(BAD), "no code", fenced("def f(:"), fenced("1/0")):
        assert tuple(compute_score("apps_plus", text, GT)) == REWARD_KEYS


def test_wrong_answer_scores_zero():
    result = compute_score("apps_plus", fenced(BAD), GT)
    assert (result["score"], result["acc"], result["verdict"]) == (0.0, 0.0, "WA")


def test_ground_truth_as_json_string():
    assert compute_score("apps", fenced(GOOD), json.dumps(GT))["acc"] == 1.0


def test_no_code_is_no_code_verdict():
    result = compute_score("apps_plus", "I would add the numbers.", GT)
    assert (result["verdict"], result["has_code"], result["format_ok"], result["score"]) == ("NO_CODE", 0.0, 0.0, 0.0)


def test_last_python_block_is_the_program():
    text = fenced(BAD) + "Actually:\n" + fenced(GOOD)
    assert compute_score("apps_plus", text, GT)["acc"] == 1.0
    assert compute_score("apps_plus", fenced(GOOD) + fenced(BAD), GT)["acc"] == 0.0


def test_code_inside_think_does_not_count():
    text = f"<think>\n{fenced(GOOD)}</think>\nDone."
    assert compute_score("apps_plus", text, GT)["verdict"] == "NO_CODE"


def test_final_code_in_extra_info_wins():
    result = compute_score("apps_plus", fenced(BAD), GT, extra_info={"final_code": GOOD, "index": 3})
    assert result["acc"] == 1.0


def test_call_mode_with_apps_wrapped_outputs():
    gt = {"inputs": [[1, 2], [[1], 2]], "outputs": [[3], [[1, 2]]], "fn_name": "f"}
    code = "def f(a, b):\n    return a + b if isinstance(a, int) else a + [b]"
    assert compute_score("apps_plus", fenced(code), gt)["acc"] == 1.0


# ---- APPS's other call-mode convention (issue 34, finding 9): outputs not wrapped, or mixed


ADD = "def add(a, b):\n    return a + b"


def test_call_mode_with_unwrapped_outputs_is_judged():
    """`[3, 12]` (APPS's unwrapped convention) is judged like `[[3], [12]]`: the right function is AC, a wrong one
    WA (was: engine raised TestSetError ... not wrapped as [value], acc -1)."""
    gt = {"inputs": [[1, 2], [5, 7]], "outputs": [3, 12], "fn_name": "add"}
    assert compute_score("apps", fenced(ADD), gt)["verdict"] == "AC"
    assert compute_score("apps", fenced("def add(a, b):\n    return a * b"), gt)["verdict"] == "WA"


def test_call_mode_with_unwrapped_list_outputs_compares_them_directly():
    """An unwrapped list output of two or more elements is the list: its first element alone does not pass (APPS's
    checker would pass it; under neither convention is it the answer)."""
    gt = {"inputs": [[1], [2]], "outputs": [[1, 2], [2, 3]], "fn_name": "f"}
    assert compute_score("apps", fenced("def f(x):\n    return [x, x + 1]"), gt)["verdict"] == "AC"
    assert compute_score("apps", fenced("def f(x):\n    return x"), gt)["verdict"] == "WA"


@pytest.mark.parametrize("code,verdict", [
    ("def add(a, b):\n    return a + b", "AC"),  # 12 for [12]
    ("def add(a, b):\n    return a + b if a < 5 else [a + b]", "AC"),  # the list [12] for [12]
    ("def add(a, b):\n    return a + b if a < 5 else [[a + b]]", "WA"),
    ("def add(a, b):\n    return [a + b]", "WA"),  # [3] for the unambiguous 3
])
def test_call_mode_ambiguous_one_element_list_in_a_mixed_set_passes_either_reading(code, verdict):
    """In a set not wrapped throughout (`[3, [12]]`), `[12]` is 12 or the list [12], and either passes (as in
    APPS's checker); `3` is exactly 3."""
    gt = {"inputs": [[1, 2], [5, 7]], "outputs": [3, [12]], "fn_name": "add"}
    assert compute_score("apps", fenced(code), gt)["verdict"] == verdict


def test_call_mode_set_wrapped_throughout_is_exact():
    """Every output a one-element list: wrapped, judged exactly: a result [3] for [[3]] is WA."""
    gt = {"inputs": [[1, 2], [5, 7]], "outputs": [[3], [12]], "fn_name": "add"}
    assert compute_score("apps", fenced(ADD), gt)["verdict"] == "AC"
    assert compute_score("apps", fenced("def add(a, b):\n    return [a + b]"), gt)["verdict"] == "WA"


def test_call_mode_class_solution_from_ground_truth():
    gt = {"inputs": [[[1, 2, 3]]], "outputs": [[6]], "fn_name": "total"}
    code = "class Solution:\n    def total(self, xs: List[int]) -> int:\n        return sum(xs)"
    assert compute_score("apps_plus", fenced(code), gt)["acc"] == 1.0


def test_weights_combine_correctness_format_and_length():
    # The length term reads the agent loop's model_tokens (was: characters of the whole response, feedback included).
    kw = {"correctness_weight": 0.7, "format_weight": 0.2, "length_weight": 0.1, "length_target_tokens": 1000}
    short, long = {"model_tokens": 500}, {"model_tokens": 5000}
    assert compute_score("apps_plus", fenced(GOOD), GT, short, **kw)["score"] == pytest.approx(1.0)
    assert compute_score("apps_plus", fenced(BAD), GT, short, **kw)["score"] == pytest.approx(0.3)
    assert compute_score("apps_plus", fenced(GOOD), GT, long, **kw)["score"] == pytest.approx(0.9)


def test_partial_credit_uses_pass_rate():
    gt = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "0\n"]}
    result = compute_score("apps_plus", fenced(GOOD), gt, partial_credit=True)
    assert (result["score"], result["pass_rate"], result["acc"]) == (0.5, 0.5, 0.0)


def test_unknown_kwarg_raises():
    with pytest.raises(TypeError, match="correctnes_weight"):
        compute_score("apps_plus", fenced(GOOD), GT, correctnes_weight=1.0)


def test_verl_router_kwargs_are_accepted():
    assert compute_score("apps_plus", fenced(GOOD), GT, reward_router_address=None)["acc"] == 1.0


def test_bad_ground_truth_raises():
    with pytest.raises(ValueError):
        compute_score("apps_plus", fenced(GOOD), {"outputs": []})


def test_infra_is_flagged_never_a_silent_zero(monkeypatch):
    monkeypatch.setattr(reward, "_consecutive_infra", 0)
    monkeypatch.setattr(reward, "run", lambda job: ExecResult(Verdict.INFRA, 0, len(job.inputs), (), 0.1, "boom"))
    result = compute_score("apps_plus", fenced(GOOD), GT, infra_score=0.0)
    assert (result["verdict"], result["infra"], result["score"]) == ("INFRA", 1.0, 0.0)
    assert tuple(result) == REWARD_KEYS


def test_consecutive_infra_raises(monkeypatch):
    monkeypatch.setattr(reward, "_consecutive_infra", 0)
    monkeypatch.setattr(reward, "run", lambda job: ExecResult(Verdict.INFRA, 0, len(job.inputs), (), 0.1, "boom"))
    for _ in range(2):
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=3)
    with pytest.raises(reward.SandboxBroken):
        compute_score("apps_plus", fenced(GOOD), GT, max_consecutive_infra=3)


def test_hostile_answer_does_not_pass():
    hack = "import sys\nf = sys._getframe()\nwhile f.f_back: f = f.f_back\nprint(f.f_globals.get('outputs'))"
    assert compute_score("apps_plus", fenced(hack), GT)["acc"] == 0.0


def test_concurrent_calls_from_threads():
    texts = [fenced(GOOD if i % 2 else BAD) for i in range(16)]
    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(lambda t: compute_score("apps_plus", t, GT), texts))
    assert [r["acc"] for r in results] == [float(i % 2) for i in range(16)]


def test_sync_call_from_inside_an_event_loop_and_async_variant():
    async def main():
        sync = compute_score("apps_plus", fenced(GOOD), GT)  # as verl's executor thread would, but on the loop
        many = await asyncio.gather(*(compute_score_async("apps_plus", fenced(GOOD), GT) for _ in range(4)))
        return sync, many

    sync, many = asyncio.run(main())
    assert sync["acc"] == 1.0 and all(r["acc"] == 1.0 for r in many)


def test_the_documented_examples_hold():
    """The doctests of the score's terms and of compute_score (the marker line goes to stderr, not into them)."""
    import doctest

    result = doctest.testmod(reward, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8 and result.failed == 0


def test_every_term_has_a_weight_kwarg():
    """Every term has a ``<name>_weight`` reward kwarg; the defaults weigh correctness only."""
    assert {f"{name}_weight" for name in reward.TERMS} <= set(reward._DEFAULTS)
    r = compute_score("apps_plus", fenced(GOOD), GT, format_weight=0.2, correctness_weight=0.7)
    assert r["score"] == reward.weighted_score({"correctness": 1.0, "format": 1.0}, {"correctness": 0.7, "format": 0.2})
