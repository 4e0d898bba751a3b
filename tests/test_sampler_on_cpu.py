"""MrGRPOReplayBuffer on an in-memory fake TransferQueue, running verl 0.9.1's real sync ReplayBuffer.sample().

The fake stores what verl's AgentLoopWorkerTQ stores (prompt tags, trajectory tags, fields incl. extra_fields with
the reward dict under reward_extra_info, response_mask and loss_mask) and answers with verl's own
list_of_dict_to_tensordict, so the sampler sees the TensorDict shapes (jagged masks, NonTensorStack) verl reads.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.v1 import replay_buffer as verl_rb
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

from mrgrpo import metrics as mm
from mrgrpo import sampler as ms


class FakeTQ:
    def __init__(self):
        self.tags: dict[str, dict[str, dict]] = {}
        self.fields: dict[str, dict[str, dict]] = {}
        self.puts: list[tuple[list[str], list[str]]] = []

    def kv_list(self, partition_id=None):
        parts = [partition_id] if partition_id else list(self.tags)
        return {p: copy.deepcopy(self.tags.get(p, {})) for p in parts}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        rows = [self.fields[partition_id][k] for k in keys]
        names = select_fields or list(rows[0])
        return list_of_dict_to_tensordict([{n: r[n] for n in names} for r in rows])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        store = self.fields.setdefault(partition_id, {})
        if fields is not None:
            names = list(fields.keys())
            self.puts.append((list(keys), names))
            for name in names:
                value = fields[name]
                values = list(value.unbind(0)) if isinstance(value, torch.Tensor) else value.tolist()
                for key, v in zip(keys, values, strict=True):
                    store.setdefault(key, {})[name] = v
        for key, tag in zip(keys, tags or [], strict=False):
            self.tags.setdefault(partition_id, {}).setdefault(key, {}).update(tag)

    def kv_clear(self, keys, partition_id):
        for key in [keys] if isinstance(keys, str) else keys:
            self.tags.get(partition_id, {}).pop(key, None)
            self.fields.get(partition_id, {}).pop(key, None)

    def add_trajectory(self, partition, uid, session, loop, rew, length):
        key = f"{uid}_{session}_0"
        mask = torch.ones(length, dtype=torch.int64)
        extra = {**loop, "min_global_steps": 1, "max_global_steps": 1, "turn_scores": [], "tool_rewards": [],
                 "reward_extra_info": {**rew, **mm.sample_stats(loop, acc=rew["acc"], infra=rew["infra"])}}
        self.fields.setdefault(partition, {})[key] = {
            "response_mask": mask, "loss_mask": mask.clone(), "extra_fields": extra,
            "rm_scores": torch.zeros(length), "uid": uid,
        }
        self.tags.setdefault(partition, {})[key] = {"status": "success", "seq_len": 10 + length, "global_steps": 1}
        return key

    def add_prompt(self, partition, uid, status="finished"):
        self.tags.setdefault(partition, {})[uid] = {"is_prompt": True, "status": status, "global_steps": 1}


def loop(stop, verdicts):
    return {"final_code": "x", "plan": "", "plan_source": "self", "attempts": len(verdicts),
            "public_pass": [v == "AC" for v in verdicts], "public_verdicts": list(verdicts), "stop_reason": stop,
            "error": "boom" if stop == "error" else "", "model_tokens": 50, "injected_tokens": 5, "plan_tokens": 7,
            "sandbox_s": [0.01] * len([v for v in verdicts if v != "NOT_RUN"])}


def rew(acc, verdict, infra=0.0):
    return {"score": acc, "acc": acc, "pass_rate": acc, "verdict": verdict, "num_tests": 3, "num_passed": 0,
            "time_s": 0.0, "format_ok": 1.0, "has_code": 1.0, "length_term": 1.0, "infra": infra}


@pytest.fixture
def fake(monkeypatch):
    tq = FakeTQ()
    monkeypatch.setattr(verl_rb, "tq", tq)
    monkeypatch.setattr(ms, "tq", tq)
    return tq


def two_groups(tq, partition="train"):
    """uid a: 3 sessions (one hidden-test INFRA); uid b: 2 of 3 sessions (one raised -> error)."""
    tq.add_prompt(partition, "a")
    tq.add_prompt(partition, "b", status="failure")
    keys = {
        "a0": tq.add_trajectory(partition, "a", 0, loop("passed", ["AC"]), rew(1.0, "AC"), 5),
        "a1": tq.add_trajectory(partition, "a", 1, loop("rounds", ["WA", "WA"]), rew(0.0, "WA"), 7),
        "a2": tq.add_trajectory(partition, "a", 2, loop("passed", ["AC"]), rew(0.0, "INFRA", infra=1.0), 4),
        "b0": tq.add_trajectory(partition, "b", 0, loop("error", []), rew(0.0, "NO_CODE"), 1),
        "b1": tq.add_trajectory(partition, "b", 1, loop("passed", ["WA", "AC"]), rew(1.0, "AC"), 9),
    }
    return keys


def make_buffer(**sampler_kwargs):
    return ms.MrGRPOReplayBuffer(
        trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=8,
        max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create(sampler_kwargs or {"rollout_n": 3}),
        refill_fn=lambda n: None,
    )


def test_sample_returns_mrgrpo_metrics(fake):
    two_groups(fake)
    batch, metrics = make_buffer().sample(global_steps=1, partition_id="train", batch_size=2)
    assert len(batch.keys) == 5
    assert metrics["mrgrpo/trajectories"] == 5.0
    assert metrics["mrgrpo/excluded_total"] == 2.0 and metrics["mrgrpo/masked_total"] == 2.0
    assert metrics["mrgrpo/error_total"] == 1.0
    assert metrics["mrgrpo/verdict/INFRA"] == pytest.approx(1 / 5)
    assert metrics["mrgrpo/acc"] == pytest.approx(2 / 3)  # trained rows a0, a1, b1
    assert metrics["mrgrpo/fix_rate"] == pytest.approx(1 / 2)  # a1 not fixed, b1 fixed
    assert metrics["mrgrpo/missing_total"] == 1.0  # b has 2 of rollout_n=3


def test_sample_zeroes_both_masks_of_excluded_rows_only(fake):
    keys = two_groups(fake)
    before = {k: {f: v.clone() for f, v in fake.fields["train"][k].items() if f in ms.MASK_FIELDS}
              for k in keys.values()}
    make_buffer().sample(global_steps=1, partition_id="train", batch_size=2)
    for name, key in keys.items():
        for field in ms.MASK_FIELDS:
            now, was = fake.fields["train"][key][field], before[key][field]
            assert now.shape == was.shape and now.dtype == was.dtype
            if name in ("a2", "b0"):
                assert torch.count_nonzero(now) == 0, (name, field)
            else:
                assert torch.equal(now, was), (name, field)


def test_zeroed_rows_get_zero_advantage_and_leave_the_baseline(fake):
    """Sampler then estimator, as verl's step runs them: masks read back from the (fake) TransferQueue."""
    keys = two_groups(fake)
    batch, _ = make_buffer().sample(global_steps=1, partition_id="train", batch_size=2)
    rows = [fake.fields["train"][k] for k in batch.keys]
    width = max(len(r["response_mask"]) for r in rows)
    mask = torch.zeros(len(rows), width)
    rewards = torch.zeros(len(rows), width)
    for i, r in enumerate(rows):
        n = len(r["response_mask"])
        mask[i, :n] = r["response_mask"].float()
        rewards[i, n - 1] = r["extra_fields"]["reward_extra_info"]["score"]
    index = np.array([r["uid"] for r in rows], dtype=object)
    a, _ = get_adv_estimator_fn("mrgrpo_grpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                                config=OmegaConf.create({"norm_adv_by_std_in_grpo": True}))
    pos = {k: i for i, k in enumerate(batch.keys)}
    assert torch.count_nonzero(a[pos[keys["a2"]]]) == 0 and torch.count_nonzero(a[pos[keys["b0"]]]) == 0
    # group a without a2: scores 1, 0 -> +-(0.5 / std) with std = sqrt(0.5)
    expected = 0.5 / (np.sqrt(0.5) + 1e-6)
    assert float(a[pos[keys["a0"]], 0]) == pytest.approx(expected, rel=1e-5)
    assert float(a[pos[keys["a1"]], 0]) == pytest.approx(-expected, rel=1e-5)
    # group b keeps only b1: no baseline left, so no advantage (not verl's lone-member raw reward)
    assert torch.count_nonzero(a[pos[keys["b1"]]]) == 0


def test_validation_sample_is_left_alone(fake):
    keys = two_groups(fake, partition="val")
    _, metrics = make_buffer().sample(global_steps=1, partition_id="val", batch_size=2)
    assert not any(k.startswith("mrgrpo/") for k in metrics)
    assert fake.puts == []
    assert torch.count_nonzero(fake.fields["val"][keys["a2"]]["response_mask"]) == 4


def test_zeroing_can_be_turned_off(fake):
    two_groups(fake)
    _, metrics = make_buffer(rollout_n=3, zero_excluded_masks=False).sample(
        global_steps=1, partition_id="train", batch_size=2)
    assert fake.puts == [] and metrics["mrgrpo/masked_total"] == 0.0 and metrics["mrgrpo/excluded_total"] == 2.0


def test_dense_masks_are_zeroed_in_place_shape():
    dense = torch.ones(3, 4, dtype=torch.int64)
    assert torch.equal(ms.zeros_like_mask(dense), torch.zeros(3, 4, dtype=torch.int64))
    nested = torch.nested.as_nested_tensor([torch.ones(2), torch.ones(5)], layout=torch.jagged)
    zeros = ms.zeros_like_mask(nested)
    assert zeros.is_nested and zeros.offsets().diff().tolist() == [2, 5] and zeros.values().abs().sum() == 0


def test_rejects_async_trainer_modes_and_unknown_options():
    with pytest.raises(ValueError, match="sync"):
        ms.MrGRPOReplayBuffer(trainer_mode="colocate_async", trainer_config={}, max_off_policy_threshold=8,
                              max_off_policy_strategy="drop", sampler_kwargs={}, refill_fn=lambda n: None)
    with pytest.raises(ValueError, match="rollout"):
        make_buffer(rolout_n=3)


def test_recipe_config_builds_it_through_verls_trainer(repo_root):
    """verl's own PPOTrainer._build_replay_buffer, fed the composed recipe config, builds MrGRPOReplayBuffer."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    with initialize_config_dir(config_dir=str(repo_root / "mrgrpo/config"), version_base=None):
        cfg = compose("mrgrpo_trainer", overrides=["actor_rollout_ref.rollout.name=vllm",
                                                   "actor_rollout_ref.rollout.n=4"])
    OmegaConf.resolve(cfg)  # as TaskRunnerV1.run does

    class Host:
        config = cfg
        trainer_mode = cfg.trainer.v1.trainer_mode

        def _add_prompts_to_generate(self, n):
            return n

    buffer = PPOTrainer._build_replay_buffer(Host())
    assert type(buffer) is ms.MrGRPOReplayBuffer
    assert buffer.rollout_n == 4 and buffer.zero_excluded_masks is True
    assert buffer.filter_groups_metric is None and buffer.sync_refill_failed_groups is False
    assert cfg.algorithm.adv_estimator in ADV_ESTIMATOR_REGISTRY
