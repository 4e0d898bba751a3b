"""``MrGRPOAgentLoopManager``: verl's agent-loop manager plus mrGRPO's per-step dashboard and INFRA exclusion, for
``trainer.use_v1=false`` (``RayPPOTrainer``: verl 0.9.1's legacy trainer and the only trainer on verl's ``neo``).

Selected with ``actor_rollout_ref.rollout.agent.agent_loop_manager_class=mrgrpo.manager.MrGRPOAgentLoopManager``
(verl loads it by its dotted name: ``ray_trainer.py:940`` on 0.9.1, ``:933`` on ``neo``). ``RayPPOTrainer`` calls
``generate_sequences`` once per training step (``ray_trainer.py:1513``) and once per validation batch
(``:640``). For a training batch, after verl's own ``generate_sequences`` (every trajectory rolled out and, with
verl's reward loop, scored: the reward dict is in ``non_tensor_batch["reward_extra_info"]``), it:

1. builds one row per trajectory from the output's ``non_tensor_batch`` (the agent loop's ``extra_fields`` become
   columns, ``agent_loop.py:1118-1135``) and computes :func:`mrgrpo.exclusion.inspect_rows`;
2. zeroes ``batch["response_mask"]`` of the excluded rows, before the trainer balances the batch, recomputes
   log-probs, computes advantages and updates the actor (all later in the same step). The actor's ``loss_mask``
   (the token-mean normaliser) is a copy of ``response_mask`` (``workers/utils/padding.py:71``), so such a row is
   one of verl's padding rows in all but name;
3. adds the metrics to ``output.meta_info["timing"]``: the only dict of an agent-loop manager's output that
   ``RayPPOTrainer.fit`` logs (``timing_raw.update(...)``, ``ray_trainer.py:1518``), under ``timing_s/<name>``
   (``metric_utils.py:645``). So the dashboard is ``timing_s/mrgrpo/...`` on this trainer and ``mrgrpo/...`` on
   TrainerV1 (``mrgrpo.sampler``); the names after the prefix and their values are the same (one function).

Validation batches (``meta_info["validate"]``) are returned untouched: their metrics come from the reward dict
(``val-aux/...``), and nothing trains on them.

With ``trainer.use_v1=true`` the same config key reaches ``TaskRunnerV1.init_agent_loop_manager``
(``main_ppo.py:120``), which needs verl's TransferQueue manager: :meth:`create` then returns verl's own
``AgentLoopManagerTQ`` unchanged, and the v1 hook is the custom sampler. One recipe works with either value.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from verl.experimental.agent_loop.agent_loop import AgentLoopManager

import mrgrpo.advantage
from mrgrpo import exclusion
from mrgrpo import metrics as mm

UID = "uid"
REWARD_EXTRA_INFO = mm.REWARD_EXTRA_INFO


def _get(config: Any, dotted: str, default: Any = None) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None:
            return default
        getter = getattr(node, "get", None)
        node = getter(part, None) if callable(getter) else getattr(node, part, None)
    return default if node is None else node


def uses_v1(config: Any) -> bool:
    """``trainer.use_v1`` of the config (verl 0.9.1's default when unset: true)."""
    return bool(_get(config, "trainer.use_v1", True))


def output_rows(non_tensor_batch: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``extra_fields``-shaped dict per trajectory from a legacy agent-loop output's ``non_tensor_batch``: the
    agent loop's keys (``mrgrpo.metrics.LOOP_FIELDS``, one column each) plus ``reward_extra_info`` (a column of
    dicts) when verl's reward loop scored during rollout. A missing loop column raises with its name."""
    missing = [k for k in mm.LOOP_FIELDS if k not in non_tensor_batch]
    if missing:
        raise ValueError(f"agent-loop output has no column(s) {missing} (has {sorted(non_tensor_batch)}): not "
                         "written by mrgrpo.agent_loop.PlanCodeAgentLoop")
    n = len(non_tensor_batch[mm.STOP_REASON])
    reward = non_tensor_batch.get(REWARD_EXTRA_INFO)
    rows = []
    for i in range(n):
        row = {k: non_tensor_batch[k][i] for k in mm.LOOP_FIELDS}
        if reward is not None and reward[i]:
            row[REWARD_EXTRA_INFO] = dict(reward[i])
        rows.append(row)
    return rows


def apply_to_output(output: Any, uids: Any, *, rollout_n: int | None, adv_estimator: str | None) -> dict[str, float]:
    """Steps 1-2 of the module doc on a legacy agent-loop output (a ``DataProto``): returns the metrics and zeroes
    ``output.batch["response_mask"]`` of the excluded rows in place."""
    rows = output_rows(output.non_tensor_batch)
    mask = output.batch["response_mask"]
    if mask.shape[0] != len(rows):
        raise ValueError(f"response_mask has {mask.shape[0]} rows for {len(rows)} trajectories")
    masks = list(mask) if adv_estimator == mrgrpo.advantage.ATTEMPT_NAME else None
    metrics, flags = exclusion.inspect_rows(rows, [str(u) for u in uids], zero=True, rollout_n=rollout_n,
                                            masks=masks)
    excluded = torch.tensor(flags, dtype=torch.bool, device=mask.device)
    if bool(excluded.any()):
        output.batch["response_mask"] = mask.masked_fill(excluded.unsqueeze(-1), 0)
    return metrics


class MrGRPOAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` whose training ``generate_sequences`` also zeroes the masks of excluded
    trajectories and reports ``mrgrpo/...`` metrics through ``meta_info["timing"]`` (see the module docstring)."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Any:
        """verl's ``create`` (workers started, instance returned); with ``trainer.use_v1=true`` verl's own
        ``AgentLoopManagerTQ`` instead (this class does nothing on TrainerV1)."""
        config = kwargs.get("config", args[0] if args else None)
        if uses_v1(config):
            from verl.trainer.ppo.v1 import AgentLoopManagerTQ

            return AgentLoopManagerTQ.create(*args, **kwargs)
        return super().create(*args, **kwargs)

    def generate_sequences(self, prompts: Any) -> Any:
        output = super().generate_sequences(prompts)  # verl's auto_await returns the DataProto to sync callers
        if inspect.isawaitable(output):
            raise TypeError("MrGRPOAgentLoopManager.generate_sequences must be called as RayPPOTrainer does "
                            "(synchronously); it got an awaitable from verl's AgentLoopManager")
        if (prompts.meta_info or {}).get("validate", False):
            return output
        if UID not in prompts.non_tensor_batch:
            raise KeyError("the generation batch has no 'uid' column (RayPPOTrainer._get_gen_batch keeps it)")
        metrics = apply_to_output(output, prompts.non_tensor_batch[UID],
                                  rollout_n=int(_get(self.config, "actor_rollout_ref.rollout.n", 1)),
                                  adv_estimator=_get(self.config, "algorithm.adv_estimator"))
        timing = output.meta_info.setdefault("timing", {})
        clash = sorted(set(timing) & set(metrics))
        if clash:
            raise ValueError(f"meta_info['timing'] already has {clash}")
        timing.update(metrics)
        return output
