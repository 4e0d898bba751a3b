"""Mutation-killing tests for mrgrpo/advantage.py (tests/run_mutation.sh advantage; docs/testing.md).

Exact values on hand-built batches: how the config is read (dict-like, attribute-style, missing keys), the
discount's precedence and defaults, group sizes around the lone-member rule, zero-length responses, dtype kept,
error messages, and the registry's rule for a second copy of the module.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos

import mrgrpo.advantage as adv

GRPO, ATTEMPT = adv.compute_mrgrpo_grpo_advantage, adv.compute_mrgrpo_attempt_advantage


def batch(scores, masks, uids, dtype=torch.float32):
    mask = torch.tensor(masks, dtype=dtype)
    rewards = torch.zeros_like(mask)
    for i, s in enumerate(scores):
        rewards[i, -1] = s
    return rewards, mask, np.array(uids, dtype=object)


def row_values(advantages, mask):
    """One value per row (its first mask-1 token), 0.0 for an all-zero row."""
    out = []
    for a, m in zip(advantages, mask, strict=True):
        on = torch.nonzero(m).flatten()
        out.append(round(float(a[on[0]]), 6) if len(on) else 0.0)
    return out


# ------------------------------------------------------------------------------------------------ config reading

THREE = batch([1.0, 0.0, 0.5], [[1, 1]] * 3, ["a"] * 3)
NORMED = [1.0, -1.0, 0.0]  # (s - 0.5) / std([1, 0, .5]) = (s - .5) / .5
CENTRED = [0.5, -0.5, 0.0]


@pytest.mark.parametrize("fn", [GRPO, ATTEMPT])
@pytest.mark.parametrize("config,expected", [
    (None, NORMED),
    (OmegaConf.create({}), NORMED),  # a DictConfig without the key: the default, True
    ({}, NORMED),  # a plain dict without the key
    ({"norm_adv_by_std_in_grpo": False}, CENTRED),  # read through .get: a dict has no such attribute
    (types.SimpleNamespace(), NORMED),  # attribute-style config without the key
    (types.SimpleNamespace(norm_adv_by_std_in_grpo=False), CENTRED),  # attribute-style, no .get
])
def test_norm_adv_is_read_from_any_config_style_and_defaults_to_true(fn, config, expected):
    rewards, mask, uids = THREE
    advantages, returns = fn(rewards, mask, uids, config=config)
    assert row_values(advantages, mask) == pytest.approx(expected, abs=1e-5) and returns is advantages


def test_an_explicit_argument_beats_the_config():
    rewards, mask, uids = THREE
    advantages, _ = GRPO(rewards, mask, uids, config={"norm_adv_by_std_in_grpo": True}, norm_adv_by_std_in_grpo=False)
    assert row_values(advantages, mask) == pytest.approx(CENTRED)


# ------------------------------------------------------------------------------------------------ the discount

TWO_TURNS = batch([1.0, 1.0, 0.0], [[1, 0, 0], [1, 0, 1], [1, 0, 0]], ["g"] * 3)


def test_discount_gamma_none_in_the_config_means_no_discount():
    rewards, mask, uids = TWO_TURNS
    plain, _ = ATTEMPT(rewards, mask, uids, config={"gamma": 1.0})
    for config in ({"gamma": None}, {}, types.SimpleNamespace(gamma=None), None):
        assert torch.equal(ATTEMPT(rewards, mask, uids, config=config)[0], plain), config


def test_the_gamma_argument_beats_the_config_and_discounts_by_turns_minus_one():
    rewards, mask, uids = TWO_TURNS
    advantages, _ = ATTEMPT(rewards, mask, uids, config={"gamma": 1.0}, gamma=0.5, norm_adv_by_std_in_grpo=False)
    # outcomes R' = [1, 0.5 (two turns: 0.5^1), 0]; turn 1 baseline = mean = 0.5
    assert row_values(advantages, mask) == pytest.approx([0.5, 0.0, -0.5])
    assert float(advantages[1, 2]) == pytest.approx(0.0)  # turn 2: only one member reached it -> turn 1's baseline


def test_discount_outside_its_range_names_the_key():
    rewards, mask, uids = TWO_TURNS
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match=r"algorithm.gamma must be in \(0, 1\], got"):
            ATTEMPT(rewards, mask, uids, config={"gamma": bad})


# ------------------------------------------------------------------------------------------------ group sizes


@pytest.mark.parametrize("fn", [GRPO, ATTEMPT])
def test_lone_kept_member_of_a_group_of_two_or_three_gets_zero(fn):
    # group "two": one of 2 excluded; group "three": 2 of 3 excluded; group "pair": 1 of 3 excluded (2 kept: normal)
    rewards, mask, uids = batch(
        [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 5.0],
        [[1, 1], [0, 0], [1, 1], [0, 0], [0, 0], [1, 1], [1, 1], [0, 0]],
        ["two", "two", "three", "three", "three", "pair", "pair", "pair"],
    )
    advantages, _ = fn(rewards, mask, uids, config=None, norm_adv_by_std_in_grpo=False)
    assert row_values(advantages, mask) == [0.0, 0.0, 0.0, 0.0, 0.0, 0.5, -0.5, 0.0]


@pytest.mark.parametrize("fn", [GRPO, ATTEMPT])
def test_zero_length_responses_give_an_empty_result(fn):
    rewards, mask, uids = torch.zeros(3, 0), torch.zeros(3, 0), np.array(["a", "a", "b"], dtype=object)
    advantages, returns = fn(rewards, mask, uids)
    assert advantages.shape == (3, 0) and returns.shape == (3, 0)


@pytest.mark.parametrize("fn", [GRPO, ATTEMPT])
def test_the_rewards_dtype_is_kept(fn):
    rewards, mask, uids = batch([1.0, 0.0, 0.5, 2.0], [[1, 1], [1, 0], [0, 1], [1, 1]], ["a", "a", "a", "solo"],
                                dtype=torch.float64)
    advantages, _ = fn(rewards, mask, uids)
    assert advantages.dtype == torch.float64
    eps = adv.EPSILON
    assert row_values(advantages, mask) == pytest.approx([0.5 / (0.5 + eps), -0.5 / (0.5 + eps), 0.0, 2 / (1 + eps)],
                                                         abs=1e-6)


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("fn", [GRPO, ATTEMPT])
def test_shape_errors_name_both_shapes(fn):
    with pytest.raises(ValueError, match=r"^token_level_rewards \(2, 3\) and response_mask \(2, 4\) differ$"):
        fn(torch.zeros(2, 3), torch.zeros(2, 4), np.array(["a", "b"], dtype=object))
    with pytest.raises(ValueError, match=r"^index has 3 entries for 2 rows$"):
        fn(torch.zeros(2, 3), torch.zeros(2, 3), np.array(["a", "b", "c"], dtype=object))


# ------------------------------------------------------------------------------------------------ the dashboard


def test_rows_with_own_baseline_ignores_excluded_rows_and_every_group_counts():
    # a lone group first (skipped), then a group where turn 2 has its own baseline (2 of 3 reached it)
    assert adv.rows_with_own_baseline(["lone", "g", "g", "g"], [2, 1, 2, 2]) == [False, False, True, True]
    # two kept members that both reached turn 2 and an excluded sibling: turn 2's baseline is the whole kept group
    assert adv.rows_with_own_baseline(["h", "h", "h"], [2, 2, 0]) == [False, False, False]


def test_rows_with_own_baseline_needs_one_count_per_row():
    with pytest.raises(ValueError):
        adv.rows_with_own_baseline(["a", "a"], [1])


# ------------------------------------------------------------------------------------------------ the registry


@pytest.fixture
def registry(monkeypatch):
    table = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", table)
    return table


def test_register_puts_each_function_under_its_own_name(registry):
    registry.pop(adv.NAME, None)
    registry.pop(adv.ATTEMPT_NAME, None)
    adv.register()
    assert registry[adv.NAME] is GRPO and registry[adv.ATTEMPT_NAME] is ATTEMPT


def _function(name: str, filename: str):
    namespace: dict = {}
    exec(compile(f"def {name}(**kwargs):\n    return None\n", filename, "exec"), namespace)
    return namespace[name]


def test_a_copy_of_this_file_is_accepted_and_anything_else_raises(registry):
    same_file, name = GRPO.__code__.co_filename, GRPO.__qualname__
    registry[adv.NAME] = _function(name, same_file)  # this module, loaded again
    adv.register()
    for impostor in (
        _function(name, "/elsewhere/advantage.py"),  # same name, another file
        _function("something_else", same_file),  # this file, another function
    ):
        registry[adv.NAME] = impostor
        with pytest.raises(ValueError, match=r"^advantage estimator 'mrgrpo_grpo' is already registered to"):
            adv.register()
    for other in (types.SimpleNamespace(__qualname__=name), object()):  # the name but no code; nothing at all
        registry[adv.NAME] = other
        with pytest.raises(ValueError, match="already registered"):
            adv.register()
