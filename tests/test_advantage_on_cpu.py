"""mrgrpo_grpo: verl's GRPO over the kept group members; all-zero-mask rows are excluded and get 0.

Every call goes through verl's own registry lookup (get_adv_estimator_fn) or verl's v1 dispatch
(compute_advantage_for_multi_trajectories), and compares with verl's own grpo.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, get_adv_estimator_fn

import mrgrpo.advantage as adv


def random_batch(seed: int, groups: int = 6, n: int = 4, width: int = 12, pad_rows: int = 3, singletons: int = 2):
    """Rows of `groups` uid groups of size n (+ singleton groups), then verl-style padding rows: one shared
    `pad<hex>` uid, all-zero mask and reward. Every real row has at least one mask-1 token."""
    g = torch.Generator().manual_seed(seed)
    uids, masks, rewards = [], [], []
    for j in range(groups * n + singletons):
        uids.append(f"u{j // n}" if j < groups * n else f"single{j}")
        length = int(torch.randint(1, width + 1, (1,), generator=g))
        mask = torch.zeros(width)
        mask[:length] = (torch.rand(length, generator=g) < 0.7).float()
        mask[int(torch.randint(0, length, (1,), generator=g))] = 1.0
        reward = torch.zeros(width)
        reward[length - 1] = float(torch.randint(0, 3, (1,), generator=g)) / 2  # 0, .5, 1: ties and spread
        masks.append(mask)
        rewards.append(reward)
    for _ in range(pad_rows):
        uids.append("pad0123abcd")
        masks.append(torch.zeros(width))
        rewards.append(torch.zeros(width))
    return torch.stack(rewards), torch.stack(masks), np.array(uids, dtype=object)


def ours(rewards, mask, index, norm=True):
    fn = get_adv_estimator_fn(adv.NAME)
    return fn(token_level_rewards=rewards, response_mask=mask, index=index,
              config=OmegaConf.create({"norm_adv_by_std_in_grpo": norm}))


def verl_grpo(rewards, mask, index, norm=True):
    return get_adv_estimator_fn("grpo")(token_level_rewards=rewards, response_mask=mask, index=index,
                                        norm_adv_by_std_in_grpo=norm)


def test_registered_under_its_name_in_verl():
    assert get_adv_estimator_fn("mrgrpo_grpo") is adv.compute_mrgrpo_grpo_advantage


@pytest.mark.parametrize("seed", range(5))
def test_equals_verl_grpo_when_nothing_is_excluded(seed):
    rewards, mask, index = random_batch(seed)
    a, r = ours(rewards, mask, index)
    b, _ = verl_grpo(rewards, mask, index)
    assert torch.equal(a, b) and torch.equal(a, r)


@pytest.mark.parametrize("norm", [True, False])
def test_equals_verl_grpo_through_v1_dispatch_reading_norm_from_config(norm):
    """The path verl 0.9.1's v1 trainer takes (_compute_advantage -> compute_advantage_for_multi_trajectories):
    norm_adv_by_std_in_grpo reaches a registered estimator only through `config`."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    rewards, mask, index = random_batch(11)
    keys = [f"{u}_{i}_0" for i, u in enumerate(index)]
    out = {}
    for name in ("grpo", "mrgrpo_grpo"):
        data = DataProto.from_dict(tensors={"token_level_rewards": rewards.clone(), "response_mask": mask.clone()},
                                   non_tensors={"uid": index.copy()})
        config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm, "gamma": 1.0, "lam": 1.0})
        out[name] = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator=name, norm_adv_by_std_in_grpo=norm, config=config,
        ).batch["advantages"]
    assert torch.allclose(out["grpo"], out["mrgrpo_grpo"], atol=1e-6, rtol=0)


def test_infra_member_leaves_its_group():
    rewards, mask, index = random_batch(3, groups=1, n=6, pad_rows=0, singletons=0)
    rewards[2] = 0.0
    rewards[2, -1] = 0.0  # an INFRA sample scored 0 ...
    mask[2] = 0.0  # ... whose mask the sampler zeroed
    a, _ = ours(rewards, mask, index)
    keep = [i for i in range(6) if i != 2]
    expected, _ = verl_grpo(rewards[keep], mask[keep], index[keep])
    assert torch.equal(a[keep], expected)
    assert torch.count_nonzero(a[2]) == 0


def test_all_excluded_group_gets_zeros_and_no_nan():
    rewards, mask, index = random_batch(4, groups=2, n=4, pad_rows=0, singletons=0)
    mask[:4] = 0.0  # the whole first group
    a, _ = ours(rewards, mask, index)
    assert not torch.isnan(a).any()
    assert torch.count_nonzero(a[:4]) == 0
    expected, _ = verl_grpo(rewards[4:], mask[4:], index[4:])
    assert torch.equal(a[4:], expected)


def test_the_last_kept_member_of_a_group_gets_no_advantage():
    # No baseline is left: its raw reward (verl's lone-member rule) would be a biased advantage.
    rewards, mask, index = random_batch(5, groups=1, n=3, pad_rows=0, singletons=0)
    mask[1:] = 0.0
    a, _ = ours(rewards, mask, index)
    assert torch.count_nonzero(a) == 0


def test_a_group_of_one_by_design_follows_verls_rule():
    rewards, mask, index = random_batch(6, groups=0, n=3, pad_rows=0, singletons=2)
    a, _ = ours(rewards, mask, index)
    expected, _ = verl_grpo(rewards, mask, index)  # verl: mean 0, std 1 for a lone member
    assert torch.equal(a, expected)


def test_importing_twice_is_safe():
    spec = importlib.util.spec_from_file_location("mrgrpo_advantage_copy", adv.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)  # re-executes register(): must not raise "already registered"
    assert ADV_ESTIMATOR_REGISTRY[adv.NAME] is adv.compute_mrgrpo_grpo_advantage


def test_a_foreign_function_under_the_name_raises(monkeypatch):
    monkeypatch.setitem(ADV_ESTIMATOR_REGISTRY, adv.NAME, lambda **kw: None)
    with pytest.raises(ValueError, match="already registered"):
        adv.register()


def test_import_verl_registers_it_through_the_plugin(repo_root):
    """The verl.plugins entry point registers mrgrpo_grpo while verl/__init__ runs (no circular import)."""
    code = ("import sys, verl; from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY as R; "
            "print('mrgrpo_grpo' in R, 'mrgrpo.plugin' in sys.modules)")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    if proc.stdout.split()[1] == "False":
        pytest.skip("mrgrpo is not pip-installed here (no verl.plugins entry point)")
    assert proc.stdout.split() == ["True", "True"]
