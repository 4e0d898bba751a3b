"""benchmarks/multiturn_cost.py's accounting (pure): which calls are feedback turns, and their prefix-cache hit rate."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "multiturn_cost.py"
    spec = importlib.util.spec_from_file_location("multiturn_cost", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(rid, prompt, cached, generated):
    return {"request_id": rid, "prompt_ids": [0] * prompt, "num_cached_tokens": cached, "token_ids": [1] * generated}


def test_feedback_turns_are_the_calls_after_the_first_code_attempt():
    calls = [call("a", 100, 0, 50), call("a", 160, 96, 40), call("a", 260, 240, 30),  # plan, code, feedback
             call("b", 100, 96, 60), call("b", 170, 160, 20)]  # plan, code: no feedback
    with_plan = _bench().turn_summary(calls, plan_first=True)
    assert with_plan["feedback_calls"] == 1 and with_plan["feedback_hit"] == 240 / 260
    assert with_plan["later_hit"] == (96 + 240 + 160) / (160 + 260 + 170)
    assert (with_plan["generated"], with_plan["prompt"], with_plan["prefilled"]) == (200, 790, 790 - 592)
    without_plan = _bench().turn_summary(calls, plan_first=False)  # the first call is already code
    assert without_plan["feedback_calls"] == 3


def test_a_k_without_feedback_turns_has_no_hit_rate_rather_than_zero():
    summary = _bench().turn_summary([call("a", 100, None, 10)], plan_first=False)
    assert summary["feedback_hit"] is None and summary["later_hit"] is None
    assert summary["cache_reported"] is False
