"""`mrgrpo.metrics`: rules of the dashboard functions that tests/test_metrics_on_cpu.py leaves open (issue 17):
thresholds, contract errors, flattening and the less common fractions. Found by mutation testing
(docs/testing.md)."""

from __future__ import annotations

import pytest

from mrgrpo import metrics as mm


def loop(stop="rounds", verdicts=("WA",), plan_source="self", model=100, injected=20, plan=30, sandbox=(0.1,)):
    verdicts = list(verdicts)
    return {"final_code": "x", "plan": "p", "plan_source": plan_source, "attempts": len(verdicts),
            "public_pass": [v == "AC" for v in verdicts], "public_verdicts": verdicts, "stop_reason": stop,
            "error": "", "model_tokens": model, "injected_tokens": injected, "plan_tokens": plan,
            "sandbox_s": list(sandbox)}


def rew(acc=0.0, verdict="WA", infra=0.0, has_code=1.0, pass_rate=0.0):
    return {"acc": acc, "pass_rate": pass_rate, "verdict": verdict, "has_code": has_code, "infra": infra}


def flat(lp, rw):
    return {**lp, **rw}


@pytest.mark.parametrize("infra,excluded", [(0.49, False), (0.5, True), (1.0, True), (0.0, False)])
def test_hidden_infra_excludes_from_one_half(infra, excluded):
    assert mm.excluded_from("rounds", infra) is excluded


@pytest.mark.parametrize("stop", ["infra", "error"])
def test_public_infra_and_errors_exclude_whatever_the_reward(stop):
    assert mm.excluded_from(stop, 0.0) is True


@pytest.mark.parametrize("acc,flag", [(0.49, 1.0), (0.5, 0.0)])
def test_public_pass_hidden_fail_threshold_is_acc_below_one_half(acc, flag):
    assert mm.sample_stats(loop("passed", ("AC",)), acc=acc, infra=0.0)["public_pass_hidden_fail"] == flag


def test_a_final_public_fail_is_never_a_public_pass_hidden_fail():
    s = mm.sample_stats(loop("rounds", ("AC", "WA")), acc=0.0, infra=0.0)
    assert (s["public_pass_final"], s["public_pass_hidden_fail"], s["first_public_pass"]) == (0.0, 0.0, 1.0)


def test_sample_stats_copies_the_loop_counts():
    s = mm.sample_stats(loop("rounds", ("WA", "RE"), model=111, injected=22, plan=33), acc=0.0, infra=0.0)
    assert (s["attempts"], s["model_tokens"], s["injected_tokens"], s["plan_tokens"]) == (2.0, 111.0, 22.0, 33.0)


@pytest.mark.parametrize("stop,key", [("budget", "budget_clip"), ("infra", "loop_infra"), ("error", "loop_error")])
def test_stop_reason_flags(stop, key):
    s = mm.sample_stats(loop(stop, ("WA",)), acc=0.0, infra=0.0)
    flags = {k: s[k] for k in ("budget_clip", "loop_infra", "loop_error")}
    assert flags == {k: 1.0 if k == key else 0.0 for k in flags}


def test_zero_attempts_have_no_first_attempt():
    s = mm.sample_stats(loop("budget", ()), acc=0.0, infra=0.0)
    assert (s["first_public_pass"], s["failed_first"], s["fixed"], s["public_pass_final"]) == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("verdict", mm.FAILED_VERDICTS)
def test_every_failed_verdict_counts_as_a_failed_first_attempt(verdict):
    assert mm.sample_stats(loop("rounds", (verdict,)), acc=0.0, infra=0.0)["failed_first"] == 1.0


@pytest.mark.parametrize("verdict", ["AC", "INFRA", "NOT_RUN"])
def test_other_first_verdicts_are_not_failures(verdict):
    assert mm.sample_stats(loop("rounds", (verdict,)), acc=0.0, infra=0.0)["failed_first"] == 0.0


def test_an_unknown_stop_reason_is_a_contract_error():
    with pytest.raises(ValueError, match="unknown stop_reason 'gave_up'"):
        mm.sample_stats(loop("gave_up"), acc=0.0, infra=0.0)


@pytest.mark.parametrize("field", ["public_pass", "public_verdicts"])
def test_one_public_entry_per_attempt_is_a_contract(field):
    lp = loop("rounds", ("WA", "WA"))
    lp[field] = lp[field][:1]
    with pytest.raises(ValueError, match="attempts=2 but public_pass has"):
        mm.sample_stats(lp, acc=0.0, infra=0.0)


def test_without_loop_keys_only_the_reward_infra_excludes():
    assert mm.sample_stats({"plan": "p"}, acc=1.0, infra=0.0) == dict.fromkeys(mm.SAMPLE_STAT_KEYS, 0.0)


def test_flatten_row_merges_the_reward_dict_and_the_loop_wins():
    ef = {"attempts": 2, "x": 1, "reward_extra_info": {"attempts": 9.0, "acc": 1.0}}
    assert mm.flatten_row(ef) == {"attempts": 2, "x": 1, "acc": 1.0}
    assert mm.flatten_row({"x": 1, "reward_extra_info": None}) == {"x": 1}
    assert ef["reward_extra_info"] == {"attempts": 9.0, "acc": 1.0}


def test_flatten_row_needs_a_mapping():
    with pytest.raises(TypeError, match="extra_fields must be a mapping, got list"):
        mm.flatten_row([("a", 1)])


def test_has_reward_needs_every_reward_key():
    full = rew()
    assert mm.has_reward(full)
    for key in full:
        assert not mm.has_reward({k: v for k, v in full.items() if k != key}), key


def test_row_excluded_reads_stop_reason_and_reward_infra():
    assert mm.row_excluded({"stop_reason": "rounds"}) is False
    assert mm.row_excluded({"stop_reason": "rounds", "infra": 1.0}) is True
    assert mm.row_excluded({"stop_reason": "error"}) is True
    with pytest.raises(ValueError, match="row has no 'stop_reason'"):
        mm.row_excluded({"infra": 0.0})


def test_percentile_rules():
    with pytest.raises(ValueError, match="^percentile of no values$"):
        mm.percentile([], 50)
    assert mm.percentile([7], 99) == 7.0
    assert mm.percentile([3, 1, 2], 0) == 1.0 and mm.percentile([3, 1, 2], 100) == 3.0
    assert mm.percentile([0, 10], 25) == 2.5


def test_an_empty_batch_has_no_metrics():
    assert mm.batch_metrics([]) == {}


def test_a_batch_row_without_loop_keys_is_an_error():
    with pytest.raises(ValueError, match="row 1 has none of the agent-loop keys"):
        mm.batch_metrics([flat(loop(), rew()), rew()])


def test_an_unknown_reward_verdict_is_an_error():
    with pytest.raises(ValueError, match=r"unknown reward verdicts \['OK'\]"):
        mm.batch_metrics([flat(loop(), rew(verdict="OK"))])


def test_batch_counts_and_attempt_fractions():
    rows = [flat(loop("budget", (), plan_source="teacher", model=50, injected=5), rew()),
            flat(loop("error", ("WA",)), rew()),
            flat(loop("rounds", ("WA", "WA"), injected=40), rew(pass_rate=0.5)),
            flat(loop("passed", ("AC",), model=300), rew(acc=1.0, verdict="AC", pass_rate=1.0)),
            flat(loop("passed", ("AC",)), rew(acc=1.0, verdict="AC", pass_rate=1.0))]
    m = mm.batch_metrics(rows)
    assert m["mrgrpo/trajectories"] == 5.0 and m["mrgrpo/error_total"] == 1.0
    assert m["mrgrpo/stop_reason/error"] == 0.2 and m["mrgrpo/stop_reason/budget"] == 0.2
    assert m["mrgrpo/excluded_total"] == 1.0
    # trained rows: budget (0 attempts), rounds (2), passed (1), passed (1)
    assert m["mrgrpo/attempts/frac_0"] == pytest.approx(1 / 4)
    assert m["mrgrpo/attempts/frac_1"] == pytest.approx(2 / 4)
    assert m["mrgrpo/attempts/frac_2"] == pytest.approx(1 / 4)
    assert m["mrgrpo/attempts/frac_3plus"] == 0.0
    assert m["mrgrpo/pass_rate"] == pytest.approx(2.5 / 4)
    assert m["mrgrpo/tokens/injected/max"] == 40.0 and m["mrgrpo/tokens/model/max"] == 300.0
    assert m["mrgrpo/plan_tokens/max"] == 30.0 and m["mrgrpo/plan_tokens/mean"] == 30.0
    assert m["mrgrpo/infra/hidden_rate"] == 0.0 and m["mrgrpo/infra/rate"] == 0.0


def test_hidden_infra_counts_from_one_half_in_the_batch_too():
    m = mm.batch_metrics([flat(loop(), rew(infra=0.5)), flat(loop(), rew(infra=0.49))])
    assert m["mrgrpo/infra/hidden_rate"] == 0.5 and m["mrgrpo/infra/rate"] == 0.5
    assert m["mrgrpo/excluded_frac"] == 0.5


def test_mixed_reward_presence_names_how_many_rows_lack_it():
    with pytest.raises(ValueError, match=r"^1 of 3 rows lack the reward keys"):
        mm.batch_metrics([flat(loop(), rew()), loop(), flat(loop(), rew())])


def test_batch_without_self_plans_leaves_plan_tokens_out():
    m = mm.batch_metrics([flat(loop(plan_source="teacher"), rew())])
    assert "mrgrpo/plan_tokens/mean" not in m and "mrgrpo/plan_tokens/max" not in m


def test_a_batch_of_excluded_rows_has_no_quality_metrics():
    m = mm.batch_metrics([flat(loop("infra", ("INFRA",)), rew()), flat(loop(), rew(verdict="INFRA", infra=1.0))])
    assert m["mrgrpo/excluded_frac"] == 1.0 and m["mrgrpo/infra/rate"] == 1.0
    assert not any(k.startswith(("mrgrpo/attempts/", "mrgrpo/acc", "mrgrpo/tokens/model")) for k in m)


def test_batch_reads_nested_and_flat_rows_alike():
    lp, rw = loop("passed", ("WA", "AC")), rew(acc=1.0, verdict="AC")
    nested = {**lp, "reward_extra_info": rw}
    assert mm.batch_metrics([nested]) == mm.batch_metrics([flat(lp, rw)])


def test_every_batch_metric_is_a_float():
    m = mm.batch_metrics([flat(loop("passed", ("WA", "AC"), sandbox=(0.5, 1.5)), rew(acc=1.0, verdict="AC"))])
    assert m and all(type(v) is float for v in m.values())
    assert m["mrgrpo/fix_rate"] == 1.0 and m["mrgrpo/public_pass_hidden_fail"] == 0.0


def test_an_incomplete_loop_row_names_the_missing_keys_and_the_writer():
    lp = loop()
    del lp["plan_tokens"]
    with pytest.raises(ValueError) as exc:
        mm.sample_stats(lp, acc=0.0, infra=0.0)
    assert str(exc.value).startswith("agent-loop extra_fields incomplete: missing ['plan_tokens'] (has [")
    assert str(exc.value).endswith(
        "]); mrgrpo.agent_loop.PlanCodeAgentLoop writes all of mrgrpo.metrics.LOOP_FIELDS")
