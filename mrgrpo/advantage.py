"""mrGRPO's advantage estimators: ``mrgrpo_grpo`` (GRPO whose groups leave out the trajectories that must get no
gradient) and ``mrgrpo_attempt`` (the same, with one advantage per model turn: attempt-aware credit).

Both are registered in verl's advantage-estimator registry on import (``algorithm.adv_estimator=mrgrpo_grpo`` /
``mrgrpo_attempt``). verl 0.9.1's v1 trainer calls either in the TaskRunner from ``_compute_advantage`` ->
``compute_advantage_for_multi_trajectories`` -> ``ray_trainer.compute_advantage`` (any name other than ``grpo``) as
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

``mrgrpo_attempt`` (experimental, :func:`compute_mrgrpo_attempt_advantage`; math, channel and verl lines in
docs/attempt_credit.md) reads the model turns from the same ``response_mask`` (its runs of 1: plan, attempt 1,
attempt 2, ...; injected turns are 0) and gives turn k of a member the group-normalised final outcome minus a
baseline over the siblings that also reached turn k. Exclusions and one-member groups follow the rule above;
with one turn per trajectory it equals ``mrgrpo_grpo`` exactly. It needs no extra channel: the agent loop stops
at the first attempt that passes the public tests, so every earlier attempt's outcome is "failed", which the
mere existence of a later turn already says, and the final outcome is the reward verl puts in ``rm_scores``.

Importing twice is safe: a second copy of this module (re-executed from a file path, or reloaded) finds its own
functions already registered under the names and leaves the registry alone; a different function under the
name raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo import core_algos

NAME = "mrgrpo_grpo"
ATTEMPT_NAME = "mrgrpo_attempt"
# mrgrpo_attempt's per-turn discount is verl's own algorithm.gamma (default 1.0: no discount; unused by GRPO;
# docs/attempt_credit.md). verl passes it to GAE only, so a registered estimator reads it from `config`.
DISCOUNT_KEY = "gamma"
EPSILON = 1e-6  # verl's compute_grpo_outcome_advantage default (verl's compute_advantage does not pass one)


def _config_value(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    if callable(getter):
        return getter(key, default)
    return getattr(config, key, default)


def _check_shapes(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: np.ndarray) -> int:
    """The batch size, after checking that rewards, mask and group ids describe the same rows."""
    if token_level_rewards.shape != response_mask.shape:
        raise ValueError(f"token_level_rewards {tuple(token_level_rewards.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} differ")
    bsz = token_level_rewards.shape[0]
    if len(index) != bsz:
        raise ValueError(f"index has {len(index)} entries for {bsz} rows")
    return bsz


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
    bsz = _check_shapes(token_level_rewards, response_mask, index)
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


# ---------------------------------------------------------------------------------------------- mrgrpo_attempt


def turn_index(response_mask: torch.Tensor) -> torch.Tensor:
    """(bs, L) long: for a mask-1 token, the 1-based index of its model turn (the run of 1s it sits in, counted
    from the left); 0 for every mask-0 token (injected turns, padding)."""
    on = response_mask != 0
    before = torch.zeros_like(on)
    before[:, 1:] = on[:, :-1]
    starts = on & ~before
    return torch.cumsum(starts.long(), dim=-1) * on.long()


def turn_counts(response_mask: torch.Tensor) -> torch.Tensor:
    """(bs,) long: the number of model turns (runs of 1s) of each row; 0 for an all-zero (excluded) row."""
    on = response_mask != 0
    before = torch.zeros_like(on)
    before[:, 1:] = on[:, :-1]
    return (on & ~before).sum(dim=-1)


def _discount(config: Any, gamma: float | None) -> float:
    value = gamma if gamma is not None else _config_value(config, DISCOUNT_KEY, 1.0)
    value = float(1.0 if value is None else value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"algorithm.{DISCOUNT_KEY} must be in (0, 1], got {value}")
    return value


def turn_baselines(turns: Sequence[int]) -> list[list[int]]:
    """For one group's kept members (their turn counts), which members' outcomes form the baseline of each turn
    index: ``out[k - 1]`` = the member positions whose mean is turn k's baseline. Turn 1: every member. Turn k >= 2:
    the members that reached turn k, if there are at least two of them; otherwise turn k - 1's set (the nearest
    earlier turn index with a baseline of its own)."""
    if not turns:
        return []
    out = [list(range(len(turns)))]
    for k in range(2, max(turns) + 1):
        reached = [j for j, n in enumerate(turns) if n >= k]
        out.append(reached if len(reached) >= 2 else out[-1])
    return out


def rows_with_own_baseline(index: Sequence[Any], counts: Sequence[int]) -> list[bool]:
    """Which rows ``mrgrpo_attempt`` treats differently from ``mrgrpo_grpo``: rows with a turn k >= 2 whose
    baseline is not the whole group's mean (at least two kept siblings reached turn k, and not every kept member
    did). ``counts``: each row's number of model turns (0 = excluded). For the sampler's dashboard."""
    groups: dict[Any, list[int]] = {}
    for i, (uid, n) in enumerate(zip(index, counts, strict=True)):
        if n > 0:
            groups.setdefault(uid, []).append(i)
    out = [False] * len(counts)
    for members in groups.values():
        if len(members) < 2:
            continue
        member_turns = [int(counts[i]) for i in members]
        bases = turn_baselines(member_turns)
        for k, basis in enumerate(bases[1:], start=2):
            if len(basis) == len(members):
                continue
            for j, n in enumerate(member_turns):
                if n >= k:
                    out[members[j]] = True
    return out


def compute_mrgrpo_attempt_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    epsilon: float = EPSILON,
    norm_adv_by_std_in_grpo: bool | None = None,
    gamma: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attempt-aware GRPO: each model turn of a trajectory gets its own advantage (docs/attempt_credit.md).

    EXPERIMENTAL: on the learnability task it did no better than GRPO (one seed, 40 steps from one SFT model:
    docs/results/learning.md, "GRPO against `mrgrpo_attempt` from one SFT model"); ``mrgrpo_grpo`` stays the
    recipe's estimator.

    Turns are the runs of 1 in ``response_mask`` (plan turn, attempt 1, attempt 2, ...; injected turns are 0).
    For a uid group with kept members K (rows with a mask-1 token), outcome R'_i = gamma^(turns_i - 1) * R_i
    (R_i = the row's summed reward, gamma = the ``gamma`` argument, else ``algorithm.gamma`` from ``config``,
    default 1), and for member i's turn k:

        A_ik = (R'_i - b_k) / (std_K(R') + eps)      (or R'_i - b_k without ``norm_adv_by_std_in_grpo``)

    with b_1 = mean_K R' (GRPO's baseline) and b_k = mean of R' over the members that reached turn k (at least
    two of them; else b_(k-1)). Every baseline depends only on the siblings and on the fact that turn k was
    reached, never on turn k's own tokens or on how many turns follow: unbiased for any attempt counts. A group
    whose members all have one turn gets exactly ``mrgrpo_grpo`` (= verl's grpo without exclusions). Excluded
    rows, lone kept members of a larger group and injected tokens get 0; one-member groups follow verl's rule.

    Returns:
        (advantages, returns), both (bs, L), mask-0 tokens 0.
    """
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = bool(_config_value(config, "norm_adv_by_std_in_grpo", True))
    gamma = _discount(config, gamma)
    bsz = _check_shapes(token_level_rewards, response_mask, index)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        turns = turn_index(response_mask)
        n_turns = turns.max(dim=-1).values if turns.shape[-1] else torch.zeros(bsz, dtype=torch.long)
        outcome = scores
        if gamma != 1.0:
            exponent = (n_turns - 1).clamp(min=0).to(scores.dtype)
            outcome = scores * torch.pow(torch.full_like(scores, gamma), exponent)
        counts = n_turns.tolist()
        groups: dict[Any, list[int]] = {}
        sizes: dict[Any, int] = {}
        for i in range(bsz):
            sizes[index[i]] = sizes.get(index[i], 0) + 1
            if counts[i] > 0:
                groups.setdefault(index[i], []).append(i)
        table = torch.zeros(bsz, max([1, *counts]), dtype=scores.dtype, device=scores.device)
        for uid, members in groups.items():
            if len(members) == 1 and sizes[uid] > 1:
                continue  # the only member left after exclusions: no baseline, advantage 0
            rows = torch.tensor(members, dtype=torch.long, device=scores.device)
            group_out = outcome[rows]
            if len(members) == 1:  # a group of one by design (rollout.n=1): verl's mean 0, std 1, every turn
                centred = group_out - torch.tensor(0.0, dtype=scores.dtype, device=scores.device)
                std = torch.tensor(1.0, dtype=scores.dtype, device=scores.device)
                value = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred
                table[rows[0], : counts[members[0]]] = value[0]
                continue
            std = torch.std(group_out)
            member_turns = [counts[i] for i in members]
            for k, basis in enumerate(turn_baselines(member_turns), start=1):
                baseline = torch.mean(group_out[torch.tensor(basis, dtype=torch.long, device=scores.device)])
                here = torch.tensor([j for j, n in enumerate(member_turns) if n >= k], dtype=torch.long,
                                    device=scores.device)
                centred = group_out[here] - baseline
                table[rows[here], k - 1] = centred / (std + epsilon) if norm_adv_by_std_in_grpo else centred
        per_token = table.gather(1, (turns - 1).clamp(min=0))
        advantages = per_token * response_mask
    return advantages, advantages


def _register_one(name: str, ours: Any) -> None:
    current = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
    if current is None:
        core_algos.register_adv_est(name)(ours)
        return
    if current is ours:
        return
    code = getattr(current, "__code__", None)
    if getattr(current, "__qualname__", None) == ours.__qualname__ and code is not None and (
        code.co_filename == ours.__code__.co_filename
    ):
        return  # an earlier copy of this same file (reloaded, or loaded by path) registered it
    raise ValueError(f"advantage estimator {name!r} is already registered to {current!r}, not mrgrpo's")


def register() -> None:
    """Put mrgrpo's estimators in verl's registry: ``NAME`` -> ``compute_mrgrpo_grpo_advantage`` and
    ``ATTEMPT_NAME`` -> ``compute_mrgrpo_attempt_advantage`` (idempotent, see module doc)."""
    _register_one(NAME, compute_mrgrpo_grpo_advantage)
    _register_one(ATTEMPT_NAME, compute_mrgrpo_attempt_advantage)


register()
