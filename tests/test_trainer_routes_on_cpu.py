"""The INFRA exclusion and the mrgrpo/* dashboard on both of verl 0.9.1's trainers, through verl's own code.

- trainer.use_v1=false (RayPPOTrainer): verl's AgentLoopWorker._postprocess builds the agent-loop output from
  PlanCodeAgentLoop-shaped outputs; MrGRPOAgentLoopManager.generate_sequences (verl's parent call stubbed) zeroes
  the excluded rows' response_mask and puts the metrics in meta_info["timing"]; verl's compute_timing_metrics
  logs them as timing_s/mrgrpo/...; verl's legacy compute_advantage runs mrgrpo_grpo on the result.
- trainer.use_v1=true (TrainerV1): MrGRPOReplayBuffer on the fake TransferQueue of test_sampler_on_cpu.py, verl's
  real ReplayBuffer.sample(); then verl's v1 advantage dispatch.
Both routes must give the same metric names (after the timing_s/ prefix) and values for the same trajectories.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl import DataProto
from verl.experimental.agent_loop import agent_loop as verl_al
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.metric_utils import compute_timing_metrics
from verl.trainer.ppo.v1 import replay_buffer as verl_rb
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

import mrgrpo.advantage as adv
from mrgrpo import manager as mgr
from mrgrpo import metrics as mm
from mrgrpo import sampler as ms

_spec = importlib.util.spec_from_file_location("sampler_tests", Path(__file__).with_name("test_sampler_on_cpu.py"))
st = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(st)

PROMPT_LEN, RESP_LEN = 4, 10
# (uid, loop extra_fields, reward dict, response length); a2 = hidden-test INFRA, b0 = raised, b2 = public INFRA
TRAJ = [
    ("a", st.loop("passed", ["AC"]), st.rew(1.0, "AC"), 5),
    ("a", st.loop("rounds", ["WA", "WA"]), st.rew(0.0, "WA"), 7),
    ("a", st.loop("passed", ["AC"]), st.rew(0.0, "INFRA", infra=1.0), 4),
    ("b", st.loop("error", []), st.rew(0.0, "NO_CODE"), 1),
    ("b", st.loop("passed", ["WA", "AC"]), st.rew(1.0, "AC"), 9),
    ("b", st.loop("infra", ["INFRA"]), st.rew(0.0, "WA"), 6),
]
EXCLUDED = [False, False, True, True, False, True]
ALGO = OmegaConf.create({"norm_adv_by_std_in_grpo": True, "gamma": 1.0, "lam": 1.0})


def reward_dict(loop, rew):
    return {**rew, **mm.sample_stats(loop, acc=rew["acc"], infra=rew["infra"])}


def internal_output(loop, rew, length):
    """A PlanCodeAgentLoop output after verl's padding (_InternalAgentLoopOutput), scored during rollout."""
    mask = torch.zeros(1, RESP_LEN, dtype=torch.int64)
    mask[0, :length] = 1
    attention = torch.cat([torch.ones(1, PROMPT_LEN, dtype=torch.int64), mask.clone()], dim=1)
    ids = torch.arange(PROMPT_LEN + RESP_LEN).unsqueeze(0)
    return verl_al._InternalAgentLoopOutput(
        prompt_ids=ids[:, :PROMPT_LEN], response_ids=ids[:, PROMPT_LEN:], input_ids=ids, position_ids=ids.clone(),
        response_mask=mask, attention_mask=attention, response_logprobs=torch.zeros(1, RESP_LEN),
        num_turns=3, metrics=verl_al.AgentLoopMetrics(), reward_score=float(rew["score"]),
        extra_fields={**loop, "turn_scores": [], "tool_rewards": [], "reward_extra_info": reward_dict(loop, rew)},
    )


def legacy_output() -> DataProto:
    """What verl 0.9.1's AgentLoopWorker._postprocess returns for TRAJ (reward loop on: handles not None)."""
    worker = object.__new__(verl_al.AgentLoopWorker)
    worker.reward_loop_worker_handles = ["reward-worker"]
    return worker._postprocess([internal_output(lp, rw, n) for _, lp, rw, n in TRAJ])


def legacy_manager(monkeypatch, output, adv_estimator=adv.NAME):
    monkeypatch.setattr(verl_al.AgentLoopManager, "generate_sequences", lambda self, prompts: output)
    manager = object.__new__(mgr.MrGRPOAgentLoopManager)
    manager.config = OmegaConf.create({"trainer": {"use_v1": False}, "algorithm": {"adv_estimator": adv_estimator},
                                       "actor_rollout_ref": {"rollout": {"n": 3}}})
    return manager


def gen_prompts(validate=False):
    uids = np.array([u for u, *_ in TRAJ], dtype=object)
    return DataProto.from_dict(non_tensors={"uid": uids}, meta_info={"validate": True} if validate else {})


def run_legacy(monkeypatch, adv_estimator=adv.NAME):
    out = legacy_manager(monkeypatch, legacy_output(), adv_estimator).generate_sequences(gen_prompts())
    return out


def test_legacy_route_zeroes_excluded_masks_only(monkeypatch):
    before = legacy_output().batch["response_mask"].clone()
    out = run_legacy(monkeypatch)
    after = out.batch["response_mask"]
    for i, ex in enumerate(EXCLUDED):
        assert after[i].sum() == (0 if ex else before[i].sum()), i
    assert torch.equal(out.batch["attention_mask"], legacy_output().batch["attention_mask"])  # sequences unchanged


def test_legacy_route_metrics_reach_verls_step_metrics_as_timing(monkeypatch):
    out = run_legacy(monkeypatch)
    timing = out.meta_info["timing"]
    assert timing["mrgrpo/excluded_total"] == 3.0 and timing["mrgrpo/masked_total"] == 3.0
    assert timing["mrgrpo/missing_total"] == 0.0
    assert timing["mrgrpo/infra/hidden_rate"] == pytest.approx(1 / 6)
    assert timing["mrgrpo/infra/public_rate"] == pytest.approx(1 / 6)
    assert timing["mrgrpo/acc"] == pytest.approx(2 / 3)  # trained rows a0, a1, b1
    # what RayPPOTrainer.fit does with it: timing_raw.update(meta_info["timing"]) -> compute_timing_metrics
    timing_raw = {"gen": 1.0, **timing}
    logged = compute_timing_metrics(batch=out, timing_raw=timing_raw)
    assert {f"timing_s/{k}" for k in timing} <= set(logged)
    assert logged["timing_s/mrgrpo/excluded_total"] == 3.0


def test_legacy_route_leaves_validation_alone(monkeypatch):
    output = legacy_output()
    out = legacy_manager(monkeypatch, output).generate_sequences(gen_prompts(validate=True))
    assert "timing" not in out.meta_info
    assert int(out.batch["response_mask"].sum()) == sum(n for *_, n in TRAJ)


def test_legacy_route_then_verls_legacy_compute_advantage(monkeypatch):
    out = run_legacy(monkeypatch)
    out.non_tensor_batch["uid"] = gen_prompts().non_tensor_batch["uid"]
    out.batch["token_level_rewards"] = out.batch["rm_scores"]
    data = ray_trainer.compute_advantage(out, adv_estimator=adv.NAME, config=ALGO)
    scores = out.batch["rm_scores"].sum(-1)
    a = data.batch["advantages"]
    for i, ex in enumerate(EXCLUDED):
        if ex:
            assert torch.all(a[i] == 0), i
    # group a keeps a0 (1.0) and a1 (0.0): the baseline ignores a2 (INFRA, placeholder score 0.0)
    kept = torch.tensor([scores[0], scores[1]])
    expected = (kept - kept.mean()) / (kept.std() + adv.EPSILON)
    assert a[0, 0] == pytest.approx(float(expected[0])) and a[1, 0] == pytest.approx(float(expected[1]))
    # group b keeps only b1: no baseline left, advantage 0
    assert torch.all(a[4] == 0)


def test_legacy_route_needs_the_loop_columns(monkeypatch):
    output = legacy_output()
    output.non_tensor_batch.pop("stop_reason")
    with pytest.raises(ValueError, match="stop_reason"):
        legacy_manager(monkeypatch, output).generate_sequences(gen_prompts())


def test_create_dispatches_on_use_v1(monkeypatch):
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    calls = []
    monkeypatch.setattr(AgentLoopManagerTQ, "create", classmethod(lambda cls, **kw: calls.append(("tq", cls))))
    monkeypatch.setattr(verl_al.AgentLoopManager, "create", classmethod(lambda cls, **kw: calls.append(("al", cls))))
    mgr.MrGRPOAgentLoopManager.create(config=OmegaConf.create({"trainer": {"use_v1": True}}), llm_client=None)
    mgr.MrGRPOAgentLoopManager.create(config=OmegaConf.create({"trainer": {"use_v1": False}}), llm_client=None)
    assert calls == [("tq", AgentLoopManagerTQ), ("al", mgr.MrGRPOAgentLoopManager)]


def v1_metrics(monkeypatch, adv_estimator=None):
    fake = st.FakeTQ()
    monkeypatch.setattr(verl_rb, "tq", fake)
    monkeypatch.setattr(ms, "tq", fake)
    for uid in ("a", "b"):
        fake.add_prompt("train", uid)
    keys = [fake.add_trajectory("train", uid, j % 3, lp, rw, n) for j, (uid, lp, rw, n) in enumerate(TRAJ)]
    kwargs = {"rollout_n": 3, **({"adv_estimator": adv_estimator} if adv_estimator else {})}
    batch, metrics = st.make_buffer(**kwargs).sample(global_steps=1, partition_id="train", batch_size=2)
    return fake, keys, batch, metrics


@pytest.mark.parametrize("estimator", [adv.NAME, adv.ATTEMPT_NAME])
def test_both_trainers_log_the_same_mrgrpo_metrics(monkeypatch, estimator):
    _, _, _, v1 = v1_metrics(monkeypatch, estimator)
    legacy = run_legacy(monkeypatch, estimator).meta_info["timing"]
    v1 = {k: v for k, v in v1.items() if k.startswith(mm.METRIC_PREFIX)}
    assert set(v1) == set(legacy)
    assert v1 == pytest.approx(legacy)
    if estimator == adv.ATTEMPT_NAME:
        assert "mrgrpo/attempt_credit/turn_mismatch_total" in legacy


def test_v1_route_then_verls_v1_advantage_dispatch(monkeypatch):
    fake, keys, batch, _ = v1_metrics(monkeypatch)
    rows = [fake.fields["train"][k] for k in keys]
    mask = torch.stack([torch.nn.functional.pad(r["response_mask"], (0, RESP_LEN - len(r["response_mask"])))
                        for r in rows])
    rewards = torch.zeros_like(mask, dtype=torch.float32)
    for i, (_, _, rw, n) in enumerate(TRAJ):
        rewards[i, n - 1] = rw["score"]
    uids = np.array([u for u, *_ in TRAJ], dtype=object)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": uids})
    got = compute_advantage_for_multi_trajectories(data, batch_keys=keys, adv_estimator=adv.NAME, config=ALGO)
    a = got.batch["advantages"]
    assert [bool(torch.all(a[i] == 0)) for i in range(len(TRAJ))] == [False, False, True, True, True, True]
    assert a[0, 0] > 0 > a[1, 0]  # group a: 1.0 vs 0.0, the INFRA row's placeholder 0.0 left out
