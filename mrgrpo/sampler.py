"""``MrGRPOReplayBuffer``: verl 0.9.1's sync replay buffer plus mrGRPO's per-step dashboard and INFRA exclusion.

Selected with ``trainer.v1.sampler.custom_sampler.path=pkg://mrgrpo.sampler`` and ``.name=MrGRPOReplayBuffer``;
verl builds it in the TaskRunner (``PPOTrainer._build_replay_buffer``) and calls ``sample()`` once per training
step (``_step_once``) and once per validation batch (``_validate``, whose returned metrics verl discards).
After verl's own sampling, for a training batch it:

1. reads every sampled trajectory's ``extra_fields`` from TransferQueue (the agent loop's keys plus the reward
   dict under ``reward_extra_info``, attached during rollout) and returns :func:`mrgrpo.metrics.batch_metrics`
   in the metrics dict, which ``fit()`` merges into the step's logged metrics;
2. for each trajectory that must get no gradient (sandbox INFRA on the hidden or public tests, or a trajectory
   that raised: :func:`mrgrpo.metrics.row_excluded`), writes an all-zero ``response_mask`` and ``loss_mask``
   back to TransferQueue, before any log-prob, advantage or actor step reads them. Such a row is then treated
   like one of verl's own padding rows: it adds nothing to the loss, its token count leaves the loss
   normaliser, and the ``mrgrpo_grpo`` estimator (:mod:`mrgrpo.advantage`, registered by importing this module)
   leaves it out of its group's mean and std and gives it advantage 0.

Options (``trainer.v1.sampler.sampler_kwargs``): ``rollout_n`` (the group size, to count trajectories missing
from their group: ``mrgrpo/missing_total``; null leaves that metric out) and ``zero_excluded_masks`` (default
true). What the custom sampler costs (verl stops passing DAPO / refill kwargs to a custom sampler):
docs/metrics.md.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

import mrgrpo.advantage  # noqa: F401  registers mrgrpo_grpo in this process (the TaskRunner loads this module)
from mrgrpo import metrics as mm

logger = logging.getLogger(__name__)

# The TransferQueue fields that decide what trains: response_mask (loss mask of the policy loss, entropy, KL,
# advantage broadcast) and loss_mask (the engines' global token count for the token-mean normaliser).
MASK_FIELDS = ("response_mask", "loss_mask")
OPTIONS = ("rollout_n", "zero_excluded_masks")


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
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        extra = _as_list(data["extra_fields"])
        if len(extra) != len(keys):
            raise RuntimeError(f"TransferQueue returned {len(extra)} extra_fields for {len(keys)} keys")
        rows = [mm.flatten_row(e) for e in extra]
        out = mm.batch_metrics(rows)
        excluded = [k for k, r in zip(keys, rows, strict=True) if mm.row_excluded(r)]
        if self.zero_excluded_masks and excluded:
            zero_masks(excluded, batch.partition_id)
        out[f"{mm.METRIC_PREFIX}masked_total"] = float(len(excluded)) if self.zero_excluded_masks else 0.0
        if self.rollout_n is not None:
            per_uid = Counter(uid for uid, _, _ in parsed)
            out[f"{mm.METRIC_PREFIX}missing_total"] = float(sum(max(0, self.rollout_n - c) for c in per_uid.values()))
        return out
