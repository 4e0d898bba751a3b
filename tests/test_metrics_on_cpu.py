"""mrgrpo.metrics: sample_stats (reward dict keys) and batch_metrics (mrgrpo/... step metrics), on hand-built rows."""

from __future__ import annotations

import pytest

from mrgrpo import metrics as mm


def loop_fields(stop="rounds", verdicts=("WA",), plan_source="self", model=100, injected=20, plan=30,
                sandbox=(0.1,), error=""):
    verdicts = list(verdicts)
    return {
        "final_code": "print(1)", "plan": "p", "plan_source": plan_source, "attempts": len(verdicts),
        "public_pass": [v == "AC" for v in verdicts], "public_verdicts": verdicts, "stop_reason": stop,
        "error": error, "model_tokens": model, "injected_tokens": injected, "plan_tokens": plan,
        "sandbox_s": list(sandbox),
    }


def reward(acc=0.0, verdict="WA", infra=0.0, has_code=1.0, pass_rate=None):
    return {"score": acc, "acc": acc, "pass_rate": acc if pass_rate is None else pass_rate, "verdict": verdict,
            "num_tests": 4, "num_passed": int(4 * acc), "time_s": 0.01, "format_ok": 1.0, "has_code": has_code,
            "length_term": 1.0, "infra": infra}


def row(loop, rew):
    """A row as TransferQueue stores it: the loop's extra_fields with the reward dict nested."""
    return {**loop, "min_global_steps": 1, "max_global_steps": 1, "turn_scores": [], "tool_rewards": [],
            "reward_extra_info": {**rew, **mm.sample_stats(loop, acc=rew["acc"], infra=rew["infra"])}}


# ------------------------------------------------------------------------------------------------ sample_stats


@pytest.mark.parametrize("stop", mm.STOP_REASONS)
def test_sample_stats_fixed_float_key_set_for_every_stop_reason(stop):
    verdicts = {"passed": ("WA", "AC"), "no_public_tests": ("NOT_RUN",), "infra": ("INFRA",),
                "error": ()}.get(stop, ("WA", "RE"))
    stats = mm.sample_stats(loop_fields(stop=stop, verdicts=verdicts), acc=1.0, infra=0.0)
    assert tuple(stats) == mm.SAMPLE_STAT_KEYS
    assert all(type(v) is float for v in stats.values())


def test_sample_stats_without_loop_keys_keeps_key_set_and_uses_reward_infra():
    assert tuple(mm.sample_stats({"index": 3}, acc=0.0, infra=1.0)) == mm.SAMPLE_STAT_KEYS
    assert mm.sample_stats({"index": 3}, acc=0.0, infra=1.0)["excluded"] == 1.0
    assert mm.sample_stats(None, acc=1.0, infra=0.0)["excluded"] == 0.0


def test_sample_stats_partial_loop_keys_raise():
    fields = loop_fields()
    del fields["sandbox_s"]
    with pytest.raises(ValueError, match="sandbox_s"):
        mm.sample_stats(fields, acc=0.0, infra=0.0)


@pytest.mark.parametrize(("stop", "infra", "excluded"), [
    ("rounds", 0.0, 0.0), ("passed", 0.0, 0.0), ("budget", 0.0, 0.0), ("infra", 0.0, 1.0), ("error", 0.0, 1.0),
    ("passed", 1.0, 1.0),
])
def test_excluded_is_sandbox_infra_or_error(stop, infra, excluded):
    verdicts = {"infra": ("INFRA",), "error": (), "passed": ("AC",)}.get(stop, ("WA",))
    assert mm.sample_stats(loop_fields(stop=stop, verdicts=verdicts), acc=0.0, infra=infra)["excluded"] == excluded


def test_sample_stats_fix_and_public_hidden_fail():
    fixed = mm.sample_stats(loop_fields(stop="passed", verdicts=("WA", "RE", "AC")), acc=0.0, infra=0.0)
    assert (fixed["failed_first"], fixed["fixed"], fixed["first_public_pass"]) == (1.0, 1.0, 0.0)
    assert (fixed["public_pass_final"], fixed["public_pass_hidden_fail"]) == (1.0, 1.0)
    first = mm.sample_stats(loop_fields(stop="passed", verdicts=("AC",)), acc=1.0, infra=0.0)
    assert (first["failed_first"], first["fixed"], first["first_public_pass"]) == (0.0, 0.0, 1.0)
    assert first["public_pass_hidden_fail"] == 0.0
    # a first attempt cut off mid-answer was never tested: not a "failed" attempt
    cut = mm.sample_stats(loop_fields(stop="budget", verdicts=("NOT_RUN",)), acc=0.0, infra=0.0)
    assert cut["failed_first"] == 0.0 and cut["budget_clip"] == 1.0


# ------------------------------------------------------------------------------------------------ batch_metrics


def hand_batch():
    """8 trajectories with known answers (T = the 6 trained ones)."""
    return [
        row(loop_fields("passed", ("AC",), sandbox=(1.0,)), reward(1.0, "AC")),                 # first-attempt pass
        row(loop_fields("passed", ("WA", "AC"), sandbox=(2.0, 3.0)), reward(1.0, "AC")),        # fixed
        row(loop_fields("passed", ("RE", "WA", "AC"), sandbox=(4.0,)), reward(0.0, "WA")),      # fixed, hidden fail
        row(loop_fields("rounds", ("WA", "WA", "TLE"), sandbox=(5.0,)), reward(0.0, "TLE")),   # not fixed
        row(loop_fields("budget", ("NOT_RUN",), plan_source="teacher", model=400, injected=0, plan=0,
                        sandbox=()), reward(0.0, "NO_CODE", has_code=0.0)),
        row(loop_fields("truncated", ("SE",), sandbox=(6.0,)), reward(0.0, "SE")),               # never retried
        row(loop_fields("infra", ("INFRA",), sandbox=(7.0,)), reward(0.0, "WA")),               # excluded
        row(loop_fields("rounds", ("WA",), sandbox=(8.0,)), reward(0.0, "INFRA", infra=1.0)),   # excluded
    ]


def test_batch_fix_rate_over_trajectories_that_failed_attempt_one():
    m = mm.batch_metrics(hand_batch())
    # failed first (T): WA.., RE.., WA.., SE -> 4; fixed: 2
    assert m["mrgrpo/failed_first"] == pytest.approx(4 / 6)
    assert m["mrgrpo/fix_rate"] == pytest.approx(2 / 4)


def test_batch_first_attempt_public_pass():
    assert mm.batch_metrics(hand_batch())["mrgrpo/first_public_pass"] == pytest.approx(1 / 6)


def test_batch_public_pass_hidden_fail_is_conditional_on_public_pass():
    assert mm.batch_metrics(hand_batch())["mrgrpo/public_pass_hidden_fail"] == pytest.approx(1 / 3)


def test_batch_verdict_fractions_over_all_rows():
    m = mm.batch_metrics(hand_batch())
    expected = {"AC": 2, "WA": 2, "RE": 0, "TLE": 1, "MLE": 0, "OLE": 0, "SE": 1, "NO_CODE": 1, "INFRA": 1}
    assert {v: m[f"mrgrpo/verdict/{v}"] for v in mm.VERDICTS} == pytest.approx({k: c / 8 for k, c in expected.items()})


def test_batch_stop_reason_fractions_and_exclusions():
    m = mm.batch_metrics(hand_batch())
    assert m["mrgrpo/stop_reason/passed"] == pytest.approx(3 / 8)
    assert m["mrgrpo/stop_reason/rounds"] == pytest.approx(2 / 8)
    assert m["mrgrpo/stop_reason/error"] == 0.0
    assert m["mrgrpo/tokens/budget_clip_ratio"] == pytest.approx(1 / 8)
    assert m["mrgrpo/excluded_total"] == 2.0 and m["mrgrpo/excluded_frac"] == pytest.approx(2 / 8)
    assert m["mrgrpo/infra/hidden_rate"] == pytest.approx(1 / 8)
    assert m["mrgrpo/infra/public_rate"] == pytest.approx(1 / 8)
    assert m["mrgrpo/infra/rate"] == pytest.approx(2 / 8)


def test_batch_quality_over_trained_rows():
    m = mm.batch_metrics(hand_batch())
    assert m["mrgrpo/acc"] == pytest.approx(2 / 6)
    assert m["mrgrpo/has_code"] == pytest.approx(5 / 6)
    assert m["mrgrpo/attempts/mean"] == pytest.approx((1 + 2 + 3 + 3 + 1 + 1) / 6)
    assert (m["mrgrpo/attempts/frac_1"], m["mrgrpo/attempts/frac_2"], m["mrgrpo/attempts/frac_3plus"]) == \
        pytest.approx((3 / 6, 1 / 6, 2 / 6))
    assert m["mrgrpo/tokens/model/max"] == 400.0
    assert m["mrgrpo/tokens/model/mean"] == pytest.approx((5 * 100 + 400) / 6)
    assert m["mrgrpo/tokens/injected/mean"] == pytest.approx(100 / 6)
    assert m["mrgrpo/plan_tokens/mean"] == 30.0  # self plans only (the teacher row is left out)


def test_batch_sandbox_latency_percentiles():
    m = mm.batch_metrics(hand_batch())
    # all public-test calls of all rows: 1..8 -> numpy's linear percentile
    assert m["mrgrpo/sandbox/public_s/p50"] == pytest.approx(4.5)
    assert m["mrgrpo/sandbox/public_s/p99"] == pytest.approx(1 + 7 * 0.99)


def test_batch_sandbox_time_per_trajectory_adds_public_calls_and_hidden_tests():
    """Per trajectory: the sum of its public calls plus its hidden tests' time_s (0.01 each); all rows count."""
    m = mm.batch_metrics(hand_batch())
    per_row = [1.0, 5.0, 4.0, 5.0, 0.0, 6.0, 7.0, 8.0]
    assert m["mrgrpo/sandbox/trajectory_s/max"] == pytest.approx(8.01)
    assert m["mrgrpo/sandbox/trajectory_s/mean"] == pytest.approx(sum(per_row) / 8 + 0.01)
    no_reward = [{k: v for k, v in r.items() if k != "reward_extra_info"} for r in hand_batch()]
    assert mm.batch_metrics(no_reward)["mrgrpo/sandbox/trajectory_s/max"] == pytest.approx(8.0)


def test_percentile_matches_numpy_linear():
    np = pytest.importorskip("numpy")
    xs = [0.3, 5.0, 1.25, 9.0, 2.0, 2.0, 7.5]
    for q in (0, 1, 50, 90, 99, 100):
        assert mm.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))


def test_batch_empty_denominators_are_left_out():
    rows = [row(loop_fields("passed", ("AC",), sandbox=()), reward(1.0, "AC"))]
    m = mm.batch_metrics(rows)
    assert "mrgrpo/fix_rate" not in m and "mrgrpo/sandbox/public_s/p50" not in m
    assert all(v == v for v in m.values())  # no NaN


def test_batch_without_reward_keys_leaves_reward_metrics_out():
    m = mm.batch_metrics([loop_fields("rounds", ("WA",)), loop_fields("passed", ("AC",))])
    assert "mrgrpo/acc" not in m and "mrgrpo/verdict/AC" not in m
    assert m["mrgrpo/first_public_pass"] == 0.5


def test_batch_mixed_reward_presence_raises():
    with pytest.raises(ValueError, match="lack the reward keys"):
        mm.batch_metrics([loop_fields(), row(loop_fields(), reward())])


def test_batch_missing_loop_key_raises():
    bad = row(loop_fields(), reward())
    del bad["plan_tokens"]
    with pytest.raises(ValueError, match="plan_tokens"):
        mm.batch_metrics([bad])


def test_metric_names_reduce_as_intended_in_verl_aggregator():
    """verl's MetricsAggregator picks max/min/sum/mean from substrings of the name; ours must not trip on it."""
    from verl.trainer.ppo.v1.utils import MetricsAggregator

    agg = MetricsAggregator()
    for name in mm.batch_metrics(hand_batch()):
        want = "max" if name.endswith("/max") else "sum" if name.endswith("_total") else "weighted_avg"
        assert agg._get_aggregation_type(name) == want, name


def test_sample_stats_become_validation_metrics():
    """verl's process_validation_metrics turns every numeric reward key (sample_stats included) into a metric."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics

    rows = hand_batch()[:6]
    infos = {"reward": [r["reward_extra_info"]["score"] for r in rows]}
    for key in rows[0]["reward_extra_info"]:
        infos[key] = [r["reward_extra_info"][key] for r in rows]
    uids = ["u0", "u0", "u0", "u1", "u1", "u1"]
    out = process_validation_metrics(["apps_plus"] * 6, uids, infos)["apps_plus"]
    for key in mm.SAMPLE_STAT_KEYS:
        assert "mean@3" in out[key], key
    assert "verdict" not in out  # strings are skipped


# ------------------------------------------------------------------------------------------------ one vocabulary
def test_eval_summary_and_the_training_dashboard_agree_on_the_same_trajectories():
    """`mrgrpo eval`'s summary and `batch_metrics` computed from the same trajectories give the same fix rate, first
    public pass, attempts and token means (INFRA and error trajectories left out by both; an untested first
    attempt not counted as failed by either)."""
    from mrgrpo.eval.report import summarize
    from mrgrpo.eval.run import SampleRecord

    trajectories = [  # (loop fields, reward dict)
        (loop_fields(stop="passed", verdicts=("WA", "AC"), model=120, injected=40), reward(1.0, "AC")),
        (loop_fields(stop="rounds", verdicts=("WA", "RE", "WA"), model=300, injected=90), reward(0.0, "WA")),
        (loop_fields(stop="passed", verdicts=("AC",), model=80, injected=0), reward(0.0, "WA")),
        (loop_fields(stop="passed", verdicts=("RE", "AC"), model=150, injected=45), reward(1.0, "AC")),
        (loop_fields(stop="budget", verdicts=("NOT_RUN",), model=512, injected=0), reward(0.0, "NO_CODE", 0.0, 0.0)),
        (loop_fields(stop="passed", verdicts=("WA", "AC"), model=90, injected=30), reward(0.0, "INFRA", infra=1.0)),
        (loop_fields(stop="infra", verdicts=("INFRA",), model=60, injected=0), reward(0.0, "WA")),
        (loop_fields(stop="error", verdicts=(), model=0, injected=0, error="boom"), reward(0.0, "NO_CODE")),
    ]
    dashboard = mm.batch_metrics([row(loop, rew) for loop, rew in trajectories])
    records = [
        SampleRecord(problem_id=f"p{i // 2}", index=i // 2, data_source="apps_plus", difficulty="interview",
                     plan_source=loop["plan_source"], sample=i % 2, verdict=rew["verdict"], acc=rew["acc"],
                     attempt1_verdict=rew["verdict"], attempt1_acc=rew["acc"], attempts=loop["attempts"],
                     stop_reason=loop["stop_reason"], model_tokens=loop["model_tokens"],
                     injected_tokens=loop["injected_tokens"], public_pass=loop["public_pass"],
                     public_verdicts=loop["public_verdicts"], plan_tokens=loop["plan_tokens"], error=loop["error"])
        for i, (loop, rew) in enumerate(trajectories)
    ]
    summary = summarize(records, [1], {"n": 2})
    public = summary["public_tests"]
    assert public["fix_rate"] == pytest.approx(dashboard["mrgrpo/fix_rate"]) == pytest.approx(2 / 3)
    assert (public["fixed_after_feedback"], public["failed_public_at_attempt1"]) == (2, 3)
    assert public["attempt1_public_pass_rate"] == pytest.approx(dashboard["mrgrpo/first_public_pass"])
    assert summary["overall"]["mean_attempts"] == pytest.approx(dashboard["mrgrpo/attempts/mean"])
    assert summary["mean_model_tokens"] == pytest.approx(dashboard["mrgrpo/tokens/model/mean"])
    assert summary["mean_injected_tokens"] == pytest.approx(dashboard["mrgrpo/tokens/injected/mean"])
    assert dashboard["mrgrpo/excluded_total"] == 3.0
