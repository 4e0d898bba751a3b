"""``MrGRPOReplayBuffer``: verl 0.9.1's sync replay buffer plus mrGRPO's per-step dashboard and INFRA exclusion,
for ``trainer.use_v1=true`` (TrainerV1, TransferQueue) only.

It is the v1 trainer's hook of :mod:`mrgrpo.exclusion`; ``trainer.use_v1=false`` (RayPPOTrainer, and verl's
``neo``, which has no TrainerV1) gets the same through ``mrgrpo.manager.MrGRPOAgentLoopManager``. Nothing else in
mrGRPO needs this module: the estimators register through the ``verl.plugins`` entry point too.

Selected with ``trainer.v1.sampler.custom_sampler.path=pkg://mrgrpo.sampler`` and ``.name=MrGRPOReplayBuffer``;
verl builds it in the TaskRunner (``PPOTrainer._build_replay_buffer``) and calls ``sample()`` once per training
step (``_step_once``) and once per validation batch (``_validate``, whose returned metrics verl discards).
After verl's own sampling, for a training batch it:

1. reads every sampled trajectory's ``extra_fields`` from TransferQueue (the agent loop's keys plus the reward
   dict under ``reward_extra_info``, attached during rollout) and returns :func:`mrgrpo.exclusion.inspect_rows`'s
   metrics in the metrics dict, which ``fit()`` merges into the step's logged metrics;
2. for each trajectory that must get no gradient (sandbox INFRA on the hidden or public tests, or a trajectory
   that raised: :func:`mrgrpo.metrics.row_excluded`), writes an all-zero ``response_mask`` and ``loss_mask``
   back to TransferQueue, before any log-prob, advantage or actor step reads them. Such a row is then treated
   like one of verl's own padding rows: it adds nothing to the loss, its token count leaves the loss
   normaliser, and the ``mrgrpo_grpo`` / ``mrgrpo_attempt`` estimators (:mod:`mrgrpo.advantage`) leave it out of
   its group's baselines and std and give it advantage 0;
3. with ``adv_estimator: mrgrpo_attempt``, also reads ``response_mask`` and logs ``mrgrpo/attempt_credit/...``
   (:func:`mrgrpo.exclusion.attempt_credit_metrics`).

Options (``trainer.v1.sampler.sampler_kwargs``): ``rollout_n`` (the group size, to count trajectories missing
from their group: ``mrgrpo/missing_total``; null leaves that metric out), ``zero_excluded_masks`` (default
true) and ``adv_estimator`` (the run's ``algorithm.adv_estimator``, e.g. ``${algorithm.adv_estimator}``;
default null: off; ``mrgrpo_attempt`` turns on step 3). What the custom sampler costs (verl stops passing DAPO /
refill kwargs to a custom sampler): docs/metrics.md.

verl's next release breaks this class (``neo``: no TrainerV1; PR #7415: ``sample()`` stops returning
``KVBatchMeta``); ``mrgrpo upstream --verl-source`` reports it. Nothing but the v1 dashboard depends on it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

import mrgrpo.advantage  # registers mrgrpo_grpo / mrgrpo_attempt in this process (the TaskRunner loads this module)
from mrgrpo import exclusion
from mrgrpo.exclusion import ATTEMPT_PREFIX, attempt_credit_metrics, expected_turns, mask_rows  # noqa: F401

logger = logging.getLogger(__name__)

# The TransferQueue fields that decide what trains: response_mask (loss mask of the policy loss, entropy, KL,
# advantage broadcast) and loss_mask (the engines' global token count for the token-mean normaliser).
MASK_FIELDS = ("response_mask", "loss_mask")
OPTIONS = ("rollout_n", "zero_excluded_masks", "adv_estimator")


def split_key(key: str) -> tuple[str, str, int]:
    """``{uid}_{session_id}_{index}`` (verl's trajectory key) -> (uid, session_id, index)."""
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        raise ValueError(f"unexpected TransferQueue trajectory key {key!r} (expected uid_session_index)")
    return parts[0], parts[1], int(parts[2])


def _as_list(values: Any) -> list:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def zeros_like_mask(mask: torch.Tensor) -> torch.Tensor:
    """All-zero masks of the same per-row lengths, layout and dtype (jagged nested or dense)."""
    if mask.is_nested:
        lengths = mask.offsets().diff().tolist()
        return torch.nested.as_nested_tensor([torch.zeros(int(n), dtype=mask.dtype) for n in lengths],
                                             layout=torch.jagged)
    return torch.zeros_like(mask)


def zero_masks(keys: Sequence[str], partition_id: str) -> None:
    """Overwrite ``MASK_FIELDS`` of ``keys`` in TransferQueue with zeros (lengths kept)."""
    keys = list(keys)
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(MASK_FIELDS))
    fields = {name: zeros_like_mask(data[name]) for name in MASK_FIELDS}
    tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=TensorDict(fields, batch_size=len(keys)))


class MrGRPOReplayBuffer(ReplayBuffer):
    """verl's sync ``ReplayBuffer`` whose ``sample()`` also returns ``mrgrpo/...`` metrics and zeroes the masks
    of excluded trajectories (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.trainer_mode != "sync":
            raise ValueError(f"MrGRPOReplayBuffer extends verl's sync ReplayBuffer; trainer.v1.trainer_mode is "
                             f"{self.trainer_mode!r}")
        opts = self.sampler_kwargs
        if isinstance(opts, DictConfig):
            opts = OmegaConf.to_container(opts, resolve=True)
        opts = dict(opts or {})
        unknown = sorted(set(opts) - set(OPTIONS))
        if unknown:
            raise ValueError(f"unknown trainer.v1.sampler.sampler_kwargs {unknown}; known: {list(OPTIONS)}")
        n = opts.get("rollout_n")
        self.rollout_n = int(n) if n is not None else None
        self.zero_excluded_masks = bool(opts.get("zero_excluded_masks", True))
        estimator = opts.get("adv_estimator")
        self.adv_estimator = str(estimator) if estimator is not None else None
        # mrgrpo_attempt credits each run of 1s in response_mask: check that those are the loop's turns
        self.attempt_credit = self.adv_estimator == mrgrpo.advantage.ATTEMPT_NAME

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        batch, metrics = super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        if partition_id == "val" or not batch.keys:
            return batch, metrics  # fit() discards validation sample() metrics; validation masks are never read
        metrics = dict(metrics)
        metrics.update(self.inspect_batch(batch))
        return batch, metrics

    def inspect_batch(self, batch: KVBatchMeta) -> dict[str, float]:
        """Metrics of the sampled batch; zeroes the masks of its excluded trajectories (when enabled)."""
        keys = list(batch.keys)
        parsed = [split_key(k) for k in keys]
        multi = [k for k, (_, _, index) in zip(keys, parsed, strict=True) if index != 0]
        if multi:
            raise ValueError(f"MrGRPOReplayBuffer expects one output per session (PlanCodeAgentLoop); got {multi[:3]}")
        fields = ["extra_fields", "response_mask"] if self.attempt_credit else ["extra_fields"]
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)
        extra = _as_list(data["extra_fields"])
        if len(extra) != len(keys):
            raise RuntimeError(f"TransferQueue returned {len(extra)} extra_fields for {len(keys)} keys")
        masks = mask_rows(data["response_mask"]) if self.attempt_credit else None
        out, flags = exclusion.inspect_rows(extra, [uid for uid, _, _ in parsed], zero=self.zero_excluded_masks,
                                            rollout_n=self.rollout_n, masks=masks)
        excluded = [k for k, flag in zip(keys, flags, strict=True) if flag]
        if self.zero_excluded_masks and excluded:
            zero_masks(excluded, batch.partition_id)
        return out
