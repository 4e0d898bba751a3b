"""The per-step batch work both of verl 0.9.1's trainers get from mrGRPO: the ``mrgrpo/...`` dashboard and the
INFRA / error exclusion, computed once a step over the sampled trajectories, before verl reads their masks.

Where it runs (one hook per trainer, both selected in the config; docs/metrics.md, "Routes"):

- ``trainer.use_v1=true`` (0.9.1's TrainerV1, TransferQueue): ``mrgrpo.sampler.MrGRPOReplayBuffer.sample()``,
  ``trainer.v1.sampler.custom_sampler``; its metrics are merged into the step's (``trainer_base.py:567-572``).
- ``trainer.use_v1=false`` (``RayPPOTrainer``: 0.9.1's legacy trainer, the only trainer on verl's ``neo``):
  ``mrgrpo.manager.MrGRPOAgentLoopManager.generate_sequences()``,
  ``actor_rollout_ref.rollout.agent.agent_loop_manager_class``; its metrics go into the output's
  ``meta_info["timing"]``, which verl merges into ``timing_raw`` (``ray_trainer.py:1518``) and logs as
  ``timing_s/<name>`` (``metric_utils.py:645``), i.e. ``timing_s/mrgrpo/...``.

Both build one row per trajectory (the agent loop's ``extra_fields`` with the reward dict under
``reward_extra_info``, attached during rollout by verl's reward loop) and call :func:`inspect_rows`. The caller then
zeroes the masks of the rows it flags, so an excluded trajectory becomes what verl makes of its own padding rows:
no loss, no share of the token-mean normaliser, and advantage 0 outside its group's baseline in the registered
estimators (:mod:`mrgrpo.advantage`), which exist on both trainers and on ``neo``.

No torch-free promise here (the attempt-credit check reads masks); no verl trainer import either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

import mrgrpo.advantage  # registers mrgrpo_grpo / mrgrpo_attempt in the process that runs the hook
from mrgrpo import metrics as mm

ATTEMPT_PREFIX = f"{mm.METRIC_PREFIX}attempt_credit/"
MASKED_TOTAL = f"{mm.METRIC_PREFIX}masked_total"
MISSING_TOTAL = f"{mm.METRIC_PREFIX}missing_total"


def mask_rows(mask: torch.Tensor) -> list[torch.Tensor]:
    """One 1-D tensor per row of a jagged nested or dense mask."""
    return list(mask.unbind()) if mask.is_nested else list(mask)


def expected_turns(row: dict[str, Any]) -> int:
    """Model turns PlanCodeAgentLoop made, from its extra_fields: the self-plan turn (when it produced a token)
    plus one per code attempt. Each should be one run of 1s in the response mask."""
    plan = 1 if row.get(mm.PLAN_SOURCE) == "self" and float(row.get(mm.PLAN_TOKENS, 0) or 0) > 0 else 0
    return plan + int(row[mm.ATTEMPTS])


def attempt_credit_metrics(uids: Sequence[str], rows: Sequence[dict[str, Any]], masks: Sequence[torch.Tensor],
                           excluded: Sequence[bool], zeroed: Sequence[bool]) -> dict[str, float]:
    """``mrgrpo/attempt_credit/...`` of one batch (for ``adv_estimator: mrgrpo_attempt``).

    ``turn_mismatch_total``: trained rows whose number of runs of 1 in ``response_mask`` (the turns the estimator
    credits separately) differs from the loop's own count (:func:`expected_turns`); 0 means the estimator's turn k
    is the loop's turn k on every row. ``own_baseline_frac``: fraction of trained rows with a turn whose baseline
    is not the group mean, i.e. rows whose advantages differ from ``mrgrpo_grpo``'s. ``excluded``: rows that get
    no gradient (:func:`mrgrpo.metrics.row_excluded`); ``zeroed``: rows whose masks the hook zeroes (the
    estimator then sees no turn in them)."""
    counts = [0 if z else int(mrgrpo.advantage.turn_counts(m.reshape(1, -1))[0]) for m, z in
              zip(masks, zeroed, strict=True)]
    trained = [i for i, ex in enumerate(excluded) if not ex]
    mismatch = sum(counts[i] != expected_turns(rows[i]) for i in trained)
    own = mrgrpo.advantage.rows_with_own_baseline(list(uids), counts)
    out = {f"{ATTEMPT_PREFIX}turn_mismatch_total": float(mismatch)}
    if trained:
        out[f"{ATTEMPT_PREFIX}own_baseline_frac"] = sum(own[i] for i in trained) / len(trained)
    return out


def inspect_rows(extra_fields: Sequence[Any], uids: Sequence[str], *, zero: bool, rollout_n: int | None,
                 masks: Sequence[torch.Tensor] | None = None) -> tuple[dict[str, float], list[bool]]:
    """The dashboard of one sampled training batch and which of its rows get no gradient.

    Args:
        extra_fields: one per trajectory, as verl stores it: the agent loop's keys plus ``reward_extra_info``.
        uids: each row's prompt uid (its GRPO group).
        zero: whether the caller zeroes the masks of the flagged rows (``mrgrpo/masked_total`` says how many).
        rollout_n: the group size; ``mrgrpo/missing_total`` = sum over groups of ``rollout_n`` - rows present
            (sessions verl dropped); None leaves it out.
        masks: each row's ``response_mask`` as read, before zeroing; given only with ``mrgrpo_attempt``, it adds
            :func:`attempt_credit_metrics`.

    Returns:
        (metrics, excluded): the ``mrgrpo/...`` metrics (docs/metrics.md) and one flag per row
        (:func:`mrgrpo.metrics.row_excluded`: sandbox INFRA on the hidden or public tests, or the trajectory raised).
    """
    if len(extra_fields) != len(uids):
        raise ValueError(f"{len(extra_fields)} rows but {len(uids)} uids")
    rows = [mm.flatten_row(e) for e in extra_fields]
    out = mm.batch_metrics(rows)
    flags = [mm.row_excluded(r) for r in rows]
    if masks is not None:
        if len(masks) != len(rows):
            raise ValueError(f"{len(masks)} masks for {len(rows)} rows")
        zeroed = flags if zero else [False] * len(flags)
        out.update(attempt_credit_metrics(list(uids), rows, list(masks), flags, zeroed))
    out[MASKED_TOTAL] = float(sum(flags)) if zero else 0.0
    if rollout_n is not None:
        per_uid = Counter(str(u) for u in uids)
        out[MISSING_TOTAL] = float(sum(max(0, int(rollout_n) - c) for c in per_uid.values()))
    return out, flags
