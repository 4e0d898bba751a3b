"""mrgrpo_attempt: one advantage per model turn (runs of 1 in response_mask), per-turn-index group baselines.

Hand-built batches with advantages worked out by hand, GRPO as the one-turn special case (bit-exact, through
verl's registry and v1 dispatch), exclusions, masks, an exact enumeration showing the per-turn baselines add no
bias when attempt counts differ, and the sampler's mrgrpo/attempt_credit/... check on a fake TransferQueue.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.v1 import replay_buffer as verl_rb
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

import mrgrpo.advantage as adv
from mrgrpo import metrics as mm
from mrgrpo import sampler as ms

EPS = adv.EPSILON


def build(rows, width=None, pad_rows=0):
    """rows: (uid, [turn lengths], reward) -> token_level_rewards, response_mask, index. Turns are runs of 1
    separated by 2 injected tokens (mask 0, e.g. feedback); the reward sits on the last response token, as verl
    puts it; each row ends with 1 trailing injected token. An empty turn list makes an all-zero (excluded) row."""
    seqs = []
    for uid, turns, reward in rows:
        mask = []
        for j, n in enumerate(turns):
            mask += ([0, 0] if j else []) + [1] * n
        mask += [0]
        seqs.append((uid, mask, reward))
    width = width or max(len(m) for _, m, _ in seqs)
    masks = torch.zeros(len(seqs) + pad_rows, width)
    rewards = torch.zeros(len(seqs) + pad_rows, width)
    for i, (_, mask, reward) in enumerate(seqs):
        masks[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        rewards[i, len(mask) - 1] = reward
    index = np.array([u for u, _, _ in seqs] + ["pad0123abcd"] * pad_rows, dtype=object)
    return rewards, masks, index


def attempt(rewards, mask, index, norm=True, **cfg):
    fn = get_adv_estimator_fn(adv.ATTEMPT_NAME)
    return fn(token_level_rewards=rewards, response_mask=mask, index=index,
              config=OmegaConf.create({"norm_adv_by_std_in_grpo": norm, **cfg}))


def grpo(rewards, mask, index, norm=True):
    return get_adv_estimator_fn(adv.NAME)(token_level_rewards=rewards, response_mask=mask, index=index,
                                          config=OmegaConf.create({"norm_adv_by_std_in_grpo": norm}))


def per_turn(a, mask):
    """Row -> the advantage of each of its turns (all tokens of a turn must agree)."""
    turns = adv.turn_index(mask)
    out = []
    for i in range(a.shape[0]):
        values = []
        for k in range(1, int(turns[i].max()) + 1):
            v = a[i][turns[i] == k]
            assert torch.all(v == v[0]), (i, k, v)
            values.append(float(v[0]))
        out.append(values)
    return out


def random_single_turn(seed, groups=5, n=4, singletons=2, pad_rows=3, width=14):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for j in range(groups * n + singletons):
        uid = f"u{j // n}" if j < groups * n else f"single{j}"
        rows.append((uid, [int(torch.randint(1, width - 2, (1,), generator=g))],
                     float(torch.randint(0, 3, (1,), generator=g)) / 2))
    return build(rows, width=width, pad_rows=pad_rows)


# ------------------------------------------------------------------------------------------------ registration


def test_registered_in_verl_next_to_mrgrpo_grpo():
    assert get_adv_estimator_fn("mrgrpo_attempt") is adv.compute_mrgrpo_attempt_advantage
    assert get_adv_estimator_fn("mrgrpo_grpo") is adv.compute_mrgrpo_grpo_advantage
    adv.register()  # idempotent
    spec = importlib.util.spec_from_file_location("mrgrpo_advantage_copy2", adv.__file__)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # a second copy of the file registers again
    assert get_adv_estimator_fn("mrgrpo_attempt") is adv.compute_mrgrpo_attempt_advantage


def test_a_foreign_function_under_the_name_raises(monkeypatch):
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    monkeypatch.setitem(ADV_ESTIMATOR_REGISTRY, adv.ATTEMPT_NAME, lambda **kw: None)
    with pytest.raises(ValueError, match="already registered"):
        adv.register()


def test_turn_index_and_counts():
    mask = torch.tensor([[1, 1, 0, 0, 1, 0, 1, 1, 0], [0, 1, 1, 1, 0, 0, 0, 0, 0], [0] * 9])
    assert adv.turn_index(mask).tolist() == [[1, 1, 0, 0, 2, 0, 3, 3, 0], [0, 1, 1, 1, 0, 0, 0, 0, 0], [0] * 9]
    assert adv.turn_counts(mask).tolist() == [3, 1, 0]


# ------------------------------------------------------------------------------------ GRPO as the special case


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_one_turn_per_trajectory_is_exactly_grpo(seed, norm):
    rewards, mask, index = random_single_turn(seed)
    a, r = attempt(rewards, mask, index, norm=norm)
    b, _ = grpo(rewards, mask, index, norm=norm)
    verl, _ = get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                           norm_adv_by_std_in_grpo=norm)
    assert torch.equal(a, b) and torch.equal(a, verl) and torch.equal(a, r)


def test_one_turn_with_exclusions_is_exactly_mrgrpo_grpo():
    rewards, mask, index = random_single_turn(7, groups=3, n=5, singletons=0, pad_rows=2)
    mask[1] = 0.0  # an INFRA row the sampler zeroed (its reward stays: the estimator must ignore it)
    mask[10:12] = 0.0
    mask[5:9] = 0.0  # group u1 keeps one member
    a, _ = attempt(rewards, mask, index)
    b, _ = grpo(rewards, mask, index)
    assert torch.equal(a, b)


def test_plan_plus_one_attempt_everywhere_is_exactly_grpo():
    """plan_source=self with one attempt each: two turns per row, both get GRPO's advantage (gamma = 1)."""
    rows = [("a", [3, 4], 1.0), ("a", [2, 5], 0.0), ("a", [4, 1], 1.0), ("a", [1, 1], 0.5), ("b", [2, 2], 1.0),
            ("b", [3, 3], 1.0)]
    rewards, mask, index = build(rows)
    a, _ = attempt(rewards, mask, index)
    b, _ = grpo(rewards, mask, index)
    assert torch.equal(a, b)


def test_through_verls_v1_dispatch_with_the_algorithm_config():
    """The path of verl 0.9.1's v1 _compute_advantage: compute_advantage_for_multi_trajectories ->
    ray_trainer.compute_advantage -> registry, config = the algorithm DictConfig (norm_adv_by_std_in_grpo and
    gamma are read there: verl passes its gamma kwarg to GAE only)."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rows = [("a", [2, 3], 1.0), ("a", [2, 3, 2], 1.0), ("a", [1, 2, 1], 0.0), ("a", [3], 0.0), ("b", [4], 1.0),
            ("b", [1, 1], 0.0)]
    rewards, mask, index = build(rows, pad_rows=2)
    keys = [f"{u}_{i}_0" for i, u in enumerate(index)]
    for norm, gamma in [(True, 1.0), (False, 1.0), (True, 0.5)]:
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
                                   non_tensors={"uid": index.copy()})
        config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm, "gamma": gamma, "lam": 1.0})
        out = compute_advantage_for_multi_trajectories(  # as trainer_base.py:1776-1784 calls it
            data, batch_keys=keys, adv_estimator="mrgrpo_attempt", gamma=gamma, lam=1.0, num_repeat=4,
            norm_adv_by_std_in_grpo=norm, config=config)
        direct, _ = attempt(rewards, mask, index, norm=norm, gamma=gamma)
        assert torch.equal(out.batch["advantages"], direct) and torch.equal(out.batch["returns"], direct)


# ------------------------------------------------------------------------------------------- known advantages


def test_a_fix_after_feedback_is_credited_more_than_the_failed_attempt():
    """Group of 4, plan + attempts. R = 1, 1, 0, 1; mean 3/4, std 1/2 (unbiased).
    row 0: attempt 1 failed, attempt 2 fixed it -> plan, attempt 1: (1 - 3/4) / (1/2) = 0.5; attempt 2 is judged
           against the two members that also needed a second attempt (R 1 and 0: mean 1/2): (1 - 1/2) / (1/2) = 1.
    row 2: failed twice -> -1.5 on plan and attempt 1, (0 - 1/2) / (1/2) = -1 on attempt 2.
    rows 1, 3: passed at attempt 1 -> 0.5 (GRPO's value)."""
    rows = [("a", [2, 2, 2], 1.0), ("a", [2, 2], 1.0), ("a", [2, 2, 2], 0.0), ("a", [2, 1], 1.0)]
    rewards, mask, index = build(rows)
    a, _ = attempt(rewards, mask, index)
    got = per_turn(a, mask)
    s = 0.5 + EPS
    assert got[0] == pytest.approx([0.25 / s, 0.25 / s, 0.5 / s], abs=1e-6)
    assert got[1] == pytest.approx([0.25 / s, 0.25 / s], abs=1e-6)
    assert got[2] == pytest.approx([-0.75 / s, -0.75 / s, -0.5 / s], abs=1e-6)
    assert got[3] == pytest.approx([0.25 / s, 0.25 / s], abs=1e-6)
    assert got[0][2] > got[0][1]  # the fix over the failed attempt
    g, _ = grpo(rewards, mask, index)
    assert per_turn(g, mask)[0] == pytest.approx([0.25 / s] * 3, abs=1e-6)  # GRPO: all the same


def test_mixed_attempt_counts_in_one_group():
    """No plan turn. Outcomes: A 1 attempt R=1; B 2 attempts R=1; C 3 attempts R=1; D 3 attempts R=0;
    E 2 attempts R=0. norm off (raw centring) to read the baselines directly:
    b1 = mean(1,1,1,0,0) = 0.6; b2 = mean over B, C, D, E = 0.5; b3 = mean over C, D = 0.5."""
    rows = [("g", [3], 1.0), ("g", [2, 2], 1.0), ("g", [1, 2, 3], 1.0), ("g", [2, 2, 2], 0.0), ("g", [1, 4], 0.0)]
    rewards, mask, index = build(rows)
    got = per_turn(attempt(rewards, mask, index, norm=False)[0], mask)
    assert got == [pytest.approx(v, abs=1e-6) for v in
                   ([0.4], [0.4, 0.5], [0.4, 0.5, 0.5], [-0.6, -0.5, -0.5], [-0.6, -0.5])]
    # normalised: the same centring divided by the group's std of R (one scale for every turn)
    std = float(torch.tensor([1.0, 1, 1, 0, 0]).std())
    got_n = per_turn(attempt(rewards, mask, index)[0], mask)
    for row_raw, row_n in zip(got, got_n, strict=True):
        assert row_n == pytest.approx([v / (std + EPS) for v in row_raw], abs=1e-6)


def test_a_turn_only_one_member_reached_keeps_the_earlier_baseline():
    """Only C reached attempt 3: no sibling to compare with, so attempt 3 keeps attempt 2's baseline
    (mean over B, C = 0.5) instead of its own outcome (which would give 0)."""
    rows = [("g", [2], 1.0), ("g", [2, 2], 0.0), ("g", [2, 2, 2], 1.0)]
    rewards, mask, index = build(rows)
    got = per_turn(attempt(rewards, mask, index, norm=False)[0], mask)
    b1 = 2 / 3
    assert got == [pytest.approx(v, abs=1e-6) for v in ([1 - b1], [-b1, -0.5], [1 - b1, 0.5, 0.5])]
    assert adv.turn_baselines([1, 2, 3]) == [[0, 1, 2], [1, 2], [1, 2]]
    assert adv.turn_baselines([1, 1, 3]) == [[0, 1, 2], [0, 1, 2], [0, 1, 2]]


def test_injected_tokens_and_padding_get_zero_and_each_turn_its_own_value():
    rows = [("a", [2, 3, 1], 1.0), ("a", [4], 0.0), ("a", [1, 1, 1], 0.0)]
    rewards, mask, index = build(rows, width=20, pad_rows=1)
    a, r = attempt(rewards, mask, index)
    assert torch.equal(a, r)
    assert torch.count_nonzero(a[mask == 0]) == 0
    assert torch.count_nonzero(a[-1]) == 0  # verl's padding row
    turns = adv.turn_index(mask)
    for i in range(3):
        for k in range(1, int(turns[i].max()) + 1):
            assert torch.unique(a[i][turns[i] == k]).numel() == 1


def test_excluded_rows_get_zero_and_leave_every_baseline():
    keep = [("a", [2], 1.0), ("a", [2, 2], 1.0), ("a", [2, 2], 0.0), ("a", [2, 2, 2], 0.0)]
    excluded = [("a", [], 0.0), ("a", [], 1.0)]  # INFRA / error rows: all-zero masks, rewards left in place
    rewards, mask, index = build(keep + excluded, width=12)
    rewards[4, 5] = 0.0
    rewards[5, 3] = 1.0
    a, _ = attempt(rewards, mask, index)
    assert torch.count_nonzero(a[4:]) == 0
    alone, _ = attempt(rewards[:4], mask[:4], index[:4])
    assert torch.equal(a[:4], alone)


def test_lone_kept_member_gets_zero_and_group_of_one_follows_verl():
    rows = [("a", [2, 2], 1.0), ("a", [], 0.0), ("solo", [1, 3, 1], 0.5)]
    rewards, mask, index = build(rows)
    a, _ = attempt(rewards, mask, index)
    assert torch.count_nonzero(a[:2]) == 0
    assert per_turn(a, mask)[2] == pytest.approx([0.5 / (1 + EPS)] * 3, abs=1e-7)


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_all_equal_groups_give_finite_values_and_no_nan(gamma):
    rows = [("ones", [2], 1.0), ("ones", [2, 2], 1.0), ("ones", [2, 2, 2], 1.0),
            ("zeros", [2], 0.0), ("zeros", [2, 2], 0.0), ("zeros", [1, 1, 1], 0.0),
            ("same", [3], 1.0), ("same", [3], 1.0)]
    rewards, mask, index = build(rows)
    a, _ = attempt(rewards, mask, index, gamma=gamma)
    assert torch.isfinite(a).all()
    assert torch.count_nonzero(a[3:]) == 0
    if gamma == 1.0:
        assert torch.count_nonzero(a) == 0  # everyone solved it: no signal, as in GRPO
    else:  # solved with fewer attempts is better; bounded by GRPO's range
        got = per_turn(a, mask)
        assert got[0][0] > 0 > got[2][0] and float(a.abs().max()) < 2.0


def test_discount_prefers_fewer_attempts_and_is_validated():
    """With gamma < 1 a first-attempt pass beats fail-then-fix on attempt 1 (the fix is still rewarded)."""
    rows = [("a", [2], 1.0), ("a", [2, 2], 1.0), ("a", [2, 2], 0.0), ("a", [2], 0.0)]
    rewards, mask, index = build(rows)
    flat = per_turn(attempt(rewards, mask, index)[0], mask)
    assert flat[0][0] == pytest.approx(flat[1][0])  # gamma = 1: the objective is the final outcome only
    got = per_turn(attempt(rewards, mask, index, gamma=0.5)[0], mask)
    assert got[0][0] > got[1][0] and got[1][1] > 0
    with pytest.raises(ValueError, match="gamma"):
        attempt(rewards, mask, index, gamma=0.0)
    with pytest.raises(ValueError, match="gamma"):
        attempt(rewards, mask, index, gamma=1.5)


def test_a_turns_advantage_ignores_how_many_turns_the_member_takes_after_it():
    """The RFC #7244 failure mode: a baseline that depends on the member's own stopping turn. Here, with the
    outcome fixed, adding later turns to a member leaves the advantages of its earlier turns unchanged."""
    base = [("a", [2], 1.0), ("a", [2, 2], 0.0), ("a", [2, 2], 1.0), ("a", [2, 2, 2], 0.0)]
    longer = list(base)
    longer[1] = ("a", [2, 2, 2, 2], 0.0)
    r0, m0, i0 = build(base, width=16)
    r1, m1, i1 = build(longer, width=16)
    a0, a1 = per_turn(attempt(r0, m0, i0, norm=False)[0], m0), per_turn(attempt(r1, m1, i1, norm=False)[0], m1)
    assert a1[1][:2] == pytest.approx(a0[1], abs=1e-7)


# ------------------------------------------------------------------- unbiasedness under varying attempt counts


def _enumerate(estimator, p=(0.3, 0.5, 0.6), members=3):
    """A 3-attempt tabular policy: attempt k passes with probability p_k (logit theta_k); the loop stops at the
    first pass. R = 1 if some attempt passed. Enumerates every outcome of a group exactly and returns, per
    theta_k, E[sum_i sum_k dlog pi(a_ik)/dtheta_k * A_ik] and E[... * c_ik * R_i], where c_ik = (m - 1) / m and
    m = the size of turn k's baseline set (GRPO's self-inclusion factor)."""
    outcomes = [1, 2, 3, 0]  # passed at attempt 1, 2, 3; 0 = failed all three
    lhs, rhs = np.zeros(3), np.zeros(3)
    for combo in itertools.product(outcomes, repeat=members):
        prob = 1.0
        rows = []
        for o in combo:
            n = o if o else 3
            prob *= np.prod([1 - p[k] for k in range(n - 1)]) * (p[n - 1] if o else 1 - p[2])
            rows.append(("g", [2] * n, 1.0 if o else 0.0))
        rewards, mask, index = build(rows)
        a = per_turn(estimator(rewards, mask, index), mask)
        bases = adv.turn_baselines([len(r[1]) for r in rows])
        for i, (o, (_, turns, reward)) in enumerate(zip(combo, rows, strict=True)):
            for k in range(len(turns)):
                passed = 1.0 if o == k + 1 else 0.0
                score = passed - p[k]  # d log Bernoulli(passed; sigmoid(theta_k)) / d theta_k
                m = len(bases[k])
                lhs[k] += prob * score * a[i][k]
                rhs[k] += prob * score * (m - 1) / m * reward
    return lhs, rhs


def test_per_turn_baselines_add_no_bias_when_attempt_counts_differ():
    """Exact expectation over every outcome of a 3-member group: the baselines' part of the gradient vanishes
    for every attempt's parameter, so each attempt's gradient is the REINFORCE gradient times GRPO's positive
    self-inclusion factor (norm off; std normalisation adds GRPO's own, known, per-group weighting)."""
    lhs, rhs = _enumerate(lambda r, m, i: attempt(r, m, i, norm=False)[0])
    assert lhs == pytest.approx(rhs, abs=1e-7)  # float32 advantages
    assert (rhs > 0).all()  # and the true gradient of P(solve) is positive in every theta_k


def test_the_enumeration_catches_a_baseline_that_depends_on_the_own_stopping_turn():
    """Control: baseline = mean outcome of the members with the SAME total attempt count (it depends on the
    member's own later turns) is biased, and the check above sees it."""
    def same_count_baseline(rewards, mask, index):
        counts = adv.turn_counts(mask)
        scores = rewards.sum(-1)
        out = torch.zeros_like(rewards)
        for i in range(len(scores)):
            peers = counts == counts[i]
            out[i] = (scores[i] - scores[peers].mean()) * mask[i]
        return out

    lhs, rhs = _enumerate(same_count_baseline)
    assert np.abs(lhs - rhs).max() > 1e-3


# ------------------------------------------------------------------------------------ sampler: the span check


class FakeTQ:
    def __init__(self):
        self.tags, self.fields, self.gets = {}, {}, []

    def kv_list(self, partition_id=None):
        parts = [partition_id] if partition_id else list(self.tags)
        return {p: copy.deepcopy(self.tags.get(p, {})) for p in parts}

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        self.gets.append(list(select_fields or []))
        rows = [self.fields[partition_id][k] for k in keys]
        return list_of_dict_to_tensordict([{n: r[n] for n in select_fields} for r in rows])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for name in list(fields.keys()) if fields is not None else []:
            for key, v in zip(keys, list(fields[name].unbind(0)), strict=True):
                self.fields[partition_id][key][name] = v

    def kv_clear(self, keys, partition_id):
        for key in [keys] if isinstance(keys, str) else keys:
            self.tags.get(partition_id, {}).pop(key, None)
            self.fields.get(partition_id, {}).pop(key, None)

    def add(self, uid, session, verdicts, mask, stop="rounds", acc=0.0, infra=0.0, plan_tokens=3):
        loop = {"final_code": "x", "plan": "p", "plan_source": "self", "attempts": len(verdicts),
                "public_pass": [v == "AC" for v in verdicts], "public_verdicts": list(verdicts), "stop_reason": stop,
                "error": "", "model_tokens": sum(mask), "injected_tokens": len(mask) - sum(mask),
                "plan_tokens": plan_tokens, "sandbox_s": [0.01] * len(verdicts)}
        rew = {"score": acc, "acc": acc, "pass_rate": acc, "verdict": "AC" if acc else "WA", "num_tests": 3,
               "num_passed": 0, "time_s": 0.0, "format_ok": 1.0, "has_code": 1.0, "length_term": 1.0, "infra": infra}
        key = f"{uid}_{session}_0"
        m = torch.tensor(mask, dtype=torch.int64)
        self.fields.setdefault("train", {})[key] = {
            "response_mask": m, "loss_mask": m.clone(), "uid": uid, "rm_scores": torch.zeros(len(mask)),
            "extra_fields": {**loop, "min_global_steps": 1, "max_global_steps": 1,
                             "reward_extra_info": {**rew, **mm.sample_stats(loop, acc=acc, infra=infra)}}}
        self.tags.setdefault("train", {})[key] = {"status": "success", "seq_len": 10 + len(mask), "global_steps": 1}
        self.tags["train"].setdefault(uid, {"is_prompt": True, "status": "finished", "global_steps": 1})
        return key


@pytest.fixture
def fake(monkeypatch):
    tq = FakeTQ()
    monkeypatch.setattr(verl_rb, "tq", tq)
    monkeypatch.setattr(ms, "tq", tq)
    return tq


def buffer(**kwargs):
    return ms.MrGRPOReplayBuffer(trainer_mode="sync", trainer_config=OmegaConf.create({}), max_off_policy_threshold=8,
                                 max_off_policy_strategy="drop", sampler_kwargs=OmegaConf.create(kwargs),
                                 refill_fn=lambda n: None)


def fill(tq):
    # plan turn, [0 0] ask-code, attempt 1, [0 0 0] feedback, attempt 2
    tq.add("a", 0, ["AC"], [1, 1, 0, 0, 1, 1, 0], stop="passed", acc=1.0)
    tq.add("a", 1, ["WA", "AC"], [1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0], stop="passed", acc=1.0)
    tq.add("a", 2, ["WA", "WA"], [1, 0, 0, 1, 0, 0, 0, 1], acc=0.0)
    tq.add("a", 3, ["WA", "WA"], [1, 0, 0, 1, 1, 1, 1, 1], acc=0.0)  # feedback not masked: turns merged
    tq.add("b", 0, ["AC"], [1, 0, 1], stop="passed", acc=1.0)
    tq.add("b", 1, ["WA", "AC"], [1, 0, 1, 0, 1], stop="passed", acc=0.0, infra=1.0)  # excluded


def test_sampler_checks_turns_and_counts_rows_with_own_baselines(fake):
    fill(fake)
    _, metrics = buffer(rollout_n=4, adv_estimator="mrgrpo_attempt").sample(
        global_steps=1, partition_id="train", batch_size=2)
    assert ["extra_fields", "response_mask"] in fake.gets
    assert metrics["mrgrpo/attempt_credit/turn_mismatch_total"] == 1.0  # a3
    # group a: turns 2, 3, 3, 2 -> turn 3 reached by a1 and a2 only: those two get their own baseline.
    # group b: b1 excluded, b0 alone -> 0. Trained rows: 5.
    assert metrics["mrgrpo/attempt_credit/own_baseline_frac"] == pytest.approx(2 / 5)
    assert metrics["mrgrpo/masked_total"] == 1.0


@pytest.mark.parametrize("options", [{"rollout_n": 4}, {"adv_estimator": "mrgrpo_grpo"}])
def test_sampler_leaves_the_check_off_unless_the_estimator_is_mrgrpo_attempt(fake, options):
    fill(fake)
    _, metrics = buffer(**options).sample(global_steps=1, partition_id="train", batch_size=2)
    assert metrics["mrgrpo/trajectories"] == 6.0
    assert not any(k.startswith(ms.ATTEMPT_PREFIX) for k in metrics)
    assert ["extra_fields", "response_mask"] not in fake.gets


def test_rows_with_own_baseline():
    assert adv.rows_with_own_baseline(["a"] * 4, [1, 1, 1, 1]) == [False] * 4
    assert adv.rows_with_own_baseline(["a"] * 4, [1, 2, 2, 1]) == [False, True, True, False]
    assert adv.rows_with_own_baseline(["a"] * 3, [1, 2, 0]) == [False, False, False]  # only one reached 2
    assert adv.rows_with_own_baseline(["a", "a", "b", "b"], [2, 2, 1, 3]) == [False] * 4


def test_recipe_config_selects_it_with_overrides(repo_root):
    """The overrides docs/attempt_credit.md gives: estimator, discount, sampler check; verl builds the sampler."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    with initialize_config_dir(config_dir=str(repo_root / "mrgrpo/config"), version_base=None):
        cfg = compose("mrgrpo_trainer", overrides=[
            "actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=mrgrpo_attempt",
            "algorithm.gamma=0.9"])  # the recipe passes the estimator's name to the sampler itself
    OmegaConf.resolve(cfg)

    class Host:
        config = cfg
        trainer_mode = cfg.trainer.v1.trainer_mode

        def _add_prompts_to_generate(self, n):
            return n

    buf = PPOTrainer._build_replay_buffer(Host())
    assert buf.attempt_credit is True
    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator) is adv.compute_mrgrpo_attempt_advantage
    rewards, mask, index = build([("a", [2], 1.0), ("a", [2, 2], 1.0), ("a", [2, 2], 0.0)])
    a, _ = adv.compute_mrgrpo_attempt_advantage(rewards, mask, index, config=cfg.algorithm)
    b, _ = adv.compute_mrgrpo_attempt_advantage(rewards, mask, index, config=cfg.algorithm, gamma=0.9)
    assert torch.equal(a, b)
