"""``mrgrpo_grpo``: GRPO whose groups leave out the trajectories that must get no gradient.

Registered in verl's advantage-estimator registry on import (``algorithm.adv_estimator=mrgrpo_grpo``). verl 0.9.1's
v1 trainer calls it in the TaskRunner from ``_compute_advantage`` -> ``compute_advantage_for_multi_trajectories``
-> ``ray_trainer.compute_advantage`` (any name other than ``grpo``) as
``fn(token_level_rewards=, response_mask=, config=<algorithm DictConfig>, index=<uid array>)`` over every row of
the batch, padding rows included (all-zero ``response_mask``, one shared ``pad<hex>`` uid).

The rule (derivation in docs/metrics.md): a row whose ``response_mask`` is all zero is excluded. Excluded rows
are padding rows, trajectories the agent loop masked because they raised, and trajectories whose mask
``mrgrpo.sampler.MrGRPOReplayBuffer`` zeroed because the sandbox failed. Each group (same uid) is then normalised
exactly as verl's ``grpo`` does, over its kept members only: score minus the group mean, divided by
(std + epsilon) when ``algorithm.norm_adv_by_std_in_grpo`` (unbiased std). A group that has one member in all
(``rollout.n=1``) gets mean 0 and std 1, as verl does; a group left with ONE kept member after exclusions gets 0
(no baseline is left to compare it with, and its raw reward would be a biased advantage). Excluded rows get
advantage 0. With no excluded real rows this equals verl's ``grpo``.

Importing twice is safe: a second copy of this module (re-executed from a file path, or reloaded) finds its own
function already registered under the name and leaves the registry alone; a different function under the
name raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

NAME = "mrgrpo_grpo"
EPSILON = 1e-6  # verl's compute_grpo_outcome_advantage default (verl's compute_advantage does not pass one)


def _config_value(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    if callable(getter):
        return getter(key, default)
    return getattr(config, key, default)


def compute_mrgrpo_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = EPSILON,
    norm_adv_by_std_in_grpo: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages over the kept (non-all-zero-mask) members of each uid group; 0 for excluded rows.

    Args:
        token_level_rewards: (bs, L); a row's score is its sum (verl puts the reward on the last token).
        response_mask: (bs, L); a row with no 1 is excluded.
        index: (bs,) group ids (verl passes the prompt uid).
        config: verl's ``algorithm`` config; ``norm_adv_by_std_in_grpo`` is read from it (default True)
            unless passed explicitly.
        epsilon: added to the std, as in verl's grpo.

    Returns:
        (advantages, returns), both (bs, L) = the row's scalar advantage times its response_mask.
    """
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(_config_value(config, "norm_adv_by_std_in_grpo", True))
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} differ")
    bsz = token_level_rewards.shape[0]
    if len(index) != bsz:
        raise ValueError(f"index has {len(index)} entries for {bsz} rows")
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        kept = (response_mask != 0).any(dim=-1).tolist()
        groups: dict[Any, list[int]] = {}
        sizes: dict[Any, int] = {}
        for i in range(bsz):
            sizes[index[i]] = sizes.get(index[i], 0) + 1
            if kept[i]:
                groups.setdefault(index[i], []).append(i)
        scalar = torch.zeros_like(scores)
        for uid, members in groups.items():
            if len(members) == 1 and sizes[uid] > 1:
                continue  # the only member left after exclusions: no baseline, advantage 0
            rows = torch.tensor(members, dtype=torch.long, device=scores.device)
            group_scores = scores[rows]
            if len(members) == 1:
                mean = torch.tensor(0.0, dtype=scores.dtype, device=scores.device)
                std = torch.tensor(1.0, dtype=scores.dtype, device=scores.device)
            else:
                mean = torch.mean(group_scores)
                std = torch.std(group_scores)
            centred = group_scores - mean
            scalar[rows] = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred
        advantages = scalar.unsqueeze(-1) * response_mask
    return advantages, advantages


def register() -> None:
    """Put ``compute_mrgrpo_grpo_advantage`` in verl's registry under ``NAME`` (idempotent, see module doc)."""
    current = core_algos.ADV_ESTIMATOR_REGISTRY.get(NAME)
    if current is None:
        core_algos.register_adv_est(NAME)(compute_mrgrpo_grpo_advantage)
        return
    ours = compute_mrgrpo_grpo_advantage
    if current is ours:
        return
    code = getattr(current, "__code__", None)
    if getattr(current, "__qualname__", None) == ours.__qualname__ and code is not None and (
        code.co_filename == ours.__code__.co_filename
    ):
        return  # an earlier copy of this same file (reloaded, or loaded by path) registered it
    raise ValueError(f"advantage estimator {NAME!r} is already registered to {current!r}, not mrgrpo's")


register()
