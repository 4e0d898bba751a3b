"""`mrgrpo.eval`: the pass@k estimator against hand-computed values, the report's aggregation on made-up samples,
and the command's model resolution (no vLLM needed)."""

from __future__ import annotations

import csv
import json
from math import comb

import pytest

from mrgrpo.cli import UsageError
from mrgrpo.eval.cli import checkpoint_actor_dir, merge_command, parser, resolve_model
from mrgrpo.eval.passk import mean_pass_at_k, parse_ks, pass_at_k
from mrgrpo.eval.report import summarize, write_outputs
from mrgrpo.eval.run import SampleRecord, agent_loop_entry, attempt_programs


# ------------------------------------------------------------------ estimator
@pytest.mark.parametrize(
    "n,c,k,expected",
    [
        (1, 0, 1, 0.0),
        (1, 1, 1, 1.0),
        (10, 0, 1, 0.0),  # c = 0: never
        (10, 0, 10, 0.0),  # c = 0 and n = k
        (10, 3, 1, 0.3),  # pass@1 is c / n
        (10, 1, 10, 1.0),  # n = k: one correct sample is in every draw
        (5, 5, 3, 1.0),
        (4, 2, 2, 1 - 1 / 6),  # 1 - C(2,2)/C(4,2)
        (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2)
        (10, 2, 5, 1 - 56 / 252),  # 1 - C(8,5)/C(10,5) = 7/9
        (10, 5, 5, 1 - 1 / 252),  # 1 - C(5,5)/C(10,5)
        (6, 1, 3, 0.5),  # 1 - C(5,3)/C(6,3) = 1 - 10/20
    ],
)
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_the_binomial_definition_and_is_stable():
    for n in range(1, 25):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    # Large n: no overflow, no huge integers; monotone in k and in c.
    big = [pass_at_k(1000, 7, k) for k in (1, 10, 100, 500)]
    assert big[0] == pytest.approx(0.007) and big == sorted(big) and big[-1] < 1.0
    assert pass_at_k(1000, 0, 1000) == 0.0 and pass_at_k(1000, 1, 1000) == 1.0


@pytest.mark.parametrize("n,c,k", [(0, 0, 1), (3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_and_parse_ks():
    assert mean_pass_at_k([(4, 2), (4, 0)], 2) == pytest.approx((5 / 6 + 0) / 2)
    assert mean_pass_at_k([], 1) is None
    assert parse_ks("10, 1,5,5", 10) == [1, 5, 10]
    with pytest.raises(ValueError, match="n=4"):
        parse_ks("1,5", 4)
    with pytest.raises(ValueError):
        parse_ks(" , ", 4)


# ------------------------------------------------------------------ aggregation and files
def rec(pid, sample, acc, acc1, difficulty="introductory", source="apps_plus", plan="self", public=(True,)):
    return SampleRecord(
        problem_id=pid, index=int(pid[-1]), data_source=source, difficulty=difficulty, plan_source=plan,
        sample=sample, verdict="AC" if acc else "WA", acc=float(acc), attempt1_verdict="AC" if acc1 else "WA",
        attempt1_acc=float(acc1), attempts=len(public), stop_reason="passed" if public[-1] else "rounds",
        model_tokens=100 + sample, injected_tokens=10 * (len(public) - 1), public_pass=list(public),
        public_verdicts=["AC" if p else "WA" for p in public], num_tests=3,
    )


def records():
    # p1 (introductory, seen): 4 samples, 2 right in the end, 1 right at attempt 1.
    # p2 (interview, unseen): 4 samples, none right at attempt 1, 4 right after feedback.
    return [
        rec("p1", 0, 1, 1),
        rec("p1", 1, 1, 0, public=(False, True)),
        rec("p1", 2, 0, 0, public=(False, False)),
        rec("p1", 3, 0, 0, public=(False, False)),
        *[rec("p2", s, 1, 0, "interview", "apps_plus_unseen", public=(False, True)) for s in range(4)],
    ]


def test_summary_by_difficulty_source_and_attempt():
    s = summarize(records(), [1, 2, 4], {"n": 4})
    o = s["overall"]
    assert (s["num_problems"], s["num_samples"]) == (2, 8)
    assert o["final"]["pass@1"] == pytest.approx((2 / 4 + 1) / 2)
    assert o["final"]["pass@2"] == pytest.approx((5 / 6 + 1) / 2)
    assert o["final"]["pass@4"] == 1.0
    assert o["attempt1"]["pass@1"] == pytest.approx((1 / 4 + 0) / 2)
    assert o["attempt1"]["pass@2"] == pytest.approx((1 / 2 + 0) / 2)  # 1 - C(3,2)/C(4,2)
    d = s["by_difficulty"]
    assert list(d) == ["introductory", "interview"]
    assert d["interview"]["final"]["pass@1"] == 1.0 and d["interview"]["attempt1"]["pass@4"] == 0.0
    assert set(s["by_data_source"]) == {"apps_plus", "apps_plus_unseen"}
    assert s["by_data_source"]["apps_plus"]["final"] == d["introductory"]["final"]
    assert list(s["by_plan_source"]) == ["self"]
    assert s["verdicts"] == {"AC": 6, "WA": 2} and s["attempt1_verdicts"] == {"WA": 7, "AC": 1}
    pub = s["public_tests"]
    assert pub["failed_public_at_attempt1"] == 7 and pub["fixed_after_feedback"] == 5
    assert pub["fix_rate"] == pytest.approx(5 / 7) and pub["attempt1_public_pass_rate"] == pytest.approx(1 / 8)
    assert s["mean_model_tokens"] == pytest.approx(101.5)


def test_pass_at_k_skips_problems_with_fewer_samples_than_k():
    rs = [rec("p1", s, 1, 1) for s in range(4)] + [rec("p2", 0, 0, 0)]
    s = summarize(rs, [1, 4], {"n": 4})
    assert s["overall"]["final"]["pass@1"] == pytest.approx(0.5)
    assert s["overall"]["final"]["pass@4"] == 1.0  # only p1 has 4 samples


def test_write_outputs(tmp_path):
    pytest.importorskip("matplotlib")
    summary = write_outputs(records(), [1, 2], {"n": 4, "plan_source": "self", "temperature": 1.0, "top_p": 1.0,
                                                "top_k": -1, "max_response_length": 512, "rounds": 2}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["passk.png", "per_problem.csv", "report.md",
                                                          "summary.json"]
    assert json.loads((tmp_path / "summary.json").read_text())["overall"] == summary["overall"]
    with open(tmp_path / "per_problem.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 8 and rows[1]["public_pass"] == "01" and rows[1]["public_verdicts"] == "WA|AC"
    assert {"problem_id", "sample", "verdict", "acc", "attempts", "stop_reason", "model_tokens",
            "public_pass"} <= set(rows[0])
    md = (tmp_path / "report.md").read_text()
    assert "![pass@k](passk.png)" in md and "| interview | 1 | 4 | 1.0000 | 1.0000 | 0.0000 | 0.0000 |" in md


# ------------------------------------------------------------------ first-attempt programs, agent-loop yaml
class _Tok:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


def test_attempt_programs_are_the_last_generations():
    def gen(text, closed=True):
        return [ord(ch) for ch in text] + ([0] if closed else [])

    plan = gen("Plan: add.")
    wrong = gen("```python\nprint(7)\n```")
    none = gen("no code", closed=False)
    right = gen("```python\nprint(1)\n```")
    programs = attempt_programs([plan, wrong, none, right], 3, _Tok(), frozenset({0}))
    assert programs == ["print(7)", None, "print(1)"]
    assert attempt_programs([plan], 0, _Tok(), frozenset({0})) == []


def test_agent_loop_entry_is_the_recipes():
    entry = agent_loop_entry(None)
    assert entry._target_ == "mrgrpo.agent_loop.PlanCodeAgentLoop" and entry.name == "plan_code"


# ------------------------------------------------------------------ model resolution
def test_model_resolution(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    (hf / "tokenizer_config.json").write_text("{}")
    assert resolve_model(str(hf), tmp_path / "merged") == (hf, "hf")

    step = tmp_path / "global_step_5"
    actor = step / "actor"
    actor.mkdir(parents=True)
    (actor / "fsdp_config.json").write_text('{"world_size": 1}')
    assert checkpoint_actor_dir(step) == actor and checkpoint_actor_dir(actor) == actor
    cmd = merge_command(actor, tmp_path / "merged")
    assert cmd[1:] == ["-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
                       "--target_dir", str(tmp_path / "merged")]
    merged = tmp_path / "merged"
    merged.mkdir()
    (merged / "config.json").write_text("{}")  # merged earlier: not merged again
    assert resolve_model(str(step), merged)[0] == merged
    with pytest.raises(UsageError, match="no such directory"):  # exit 2 in the command
        resolve_model(str(tmp_path / "nothing"), tmp_path / "m2")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="without config.json or an FSDP checkpoint"):
        resolve_model(str(tmp_path / "empty"), tmp_path / "m2")


def test_cli_defaults_and_k_check(capsys, tmp_path):
    args = parser().parse_args(["--model", "m", "--data", "d.parquet", "--out", "o"])
    assert (args.n, args.k, args.plan_source, args.rounds, args.temperature, args.top_p) == (10, "1,5,10", "self",
                                                                                               None, 1.0, 1.0)
    from mrgrpo.eval.cli import main

    assert main(["--model", "m", "--data", "d", "--out", str(tmp_path / "o"), "--n", "4"]) == 2
    assert "n=4" in capsys.readouterr().err
