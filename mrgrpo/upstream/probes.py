"""Behaviour probes of the upstream replacements for the fork's edits (CPU only: no GPU, no Ray)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mrgrpo.upstream.core import VERL_CONFIG_MODULE, VERL_SEARCHPATH, Problem, resolve


def _run_in_fresh_loop_thread(fn: Callable[[], Any]) -> Any:
    """verl's managers grab `asyncio.get_event_loop()` in __init__: give them a thread of their own."""
    box: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the caller
            box["error"] = e
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    t = threading.Thread(target=target, name="mrgrpo-upstream-probe")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


def probe_score_on_last_valid_token() -> list[Problem]:
    """RewardManagerBase.assemble_rm_scores puts each scalar on the last valid (unpadded) response token."""
    import torch

    base = resolve("verl.experimental.reward_loop.reward_manager.base:RewardManagerBase")
    data_proto = resolve("verl.protocol:DataProto")
    prompts = torch.tensor([[1, 2, 3], [0, 4, 5]])
    responses = torch.tensor([[6, 7, 0, 0], [8, 9, 10, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]])
    data = data_proto.from_dict(tensors={"prompts": prompts, "responses": responses, "attention_mask": attention})
    got = base.assemble_rm_scores(data, [0.5, 1.0])
    want = torch.zeros(2, 4)
    want[0, 1] = 0.5
    want[1, 2] = 1.0
    if tuple(got.shape) != (2, 4) or not torch.equal(got.float(), want):
        where = "verl.experimental.reward_loop.reward_manager.base.RewardManagerBase.assemble_rm_scores"
        return [Problem("verl", where, f"score not on the last valid response token: got {got.tolist()}")]
    return []


def probe_naive_manager_call() -> list[Problem]:
    """The naive reward manager calls compute_score(data_source=, solution_str=, ground_truth=, extra_info=) and
    returns {"reward_score", "reward_extra_info"}; extra_info carries the agent loop's extra_fields."""
    import numpy as np
    import torch

    where = "verl.experimental.reward_loop.reward_manager.naive.NaiveRewardManager.run_single"
    registry = resolve("verl.experimental.reward_loop.reward_manager:get_reward_manager_cls")
    naive = resolve("verl.experimental.reward_loop.reward_manager.naive:NaiveRewardManager")
    data_proto = resolve("verl.protocol:DataProto")
    problems: list[Problem] = []
    if registry("naive") is not naive:
        problems.append(Problem("verl", "reward manager 'naive'", f"is {registry('naive')!r}, not NaiveRewardManager"))

    calls: list[dict[str, Any]] = []

    def fake_score(**kwargs: Any) -> dict[str, Any]:
        calls.append(kwargs)
        return {"score": 0.75, "acc": 1.0, "verdict": "AC"}

    class FakeTokenizer:
        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return "|".join(str(int(i)) for i in ids)

    probe_cls = type("_MrgrpoProbeNaive", (naive,), {})  # keeps class-level state off verl's own class
    data = data_proto.from_dict(
        tensors={
            "prompts": torch.tensor([[1, 2]]),
            "responses": torch.tensor([[3, 4, 0]]),
            "attention_mask": torch.tensor([[1, 1, 1, 1, 0]]),
        },
        non_tensors={
            "data_source": np.array(["apps_plus"], dtype=object),
            "reward_model": np.array([{"ground_truth": "GT", "style": "rule"}], dtype=object),
            "extra_info": np.array([{"index": 7}], dtype=object),
            "tool_extra_fields": np.array([{"final_code": "print(1)"}], dtype=object),
        },
    )

    def run() -> Any:
        manager = probe_cls(config=None, tokenizer=FakeTokenizer(), compute_score=fake_score)
        return manager.loop.run_until_complete(manager.run_single(data))

    result = _run_in_fresh_loop_thread(run)
    if len(calls) != 1:
        return problems + [Problem("verl", where, f"called compute_score {len(calls)} times, expected once")]
    call = calls[0]
    want = {"data_source", "solution_str", "ground_truth", "extra_info"}
    if not want <= set(call):
        problems.append(Problem("verl", where, f"compute_score called with {sorted(call)}, expected {sorted(want)}"))
    else:
        if call["data_source"] != "apps_plus" or call["ground_truth"] != "GT" or call["solution_str"] != "3|4":
            problems.append(Problem("verl", where, f"unexpected compute_score arguments {call}"))
        if (call["extra_info"] or {}).get("final_code") != "print(1)":
            problems.append(Problem("verl", where, "the agent loop's extra_fields no longer reach extra_info"))
    if not isinstance(result, dict) or set(result) != {"reward_score", "reward_extra_info"}:
        problems.append(Problem("verl", where, f"returned {result!r}, expected reward_score + reward_extra_info"))
    elif result["reward_score"] != 0.75 or result["reward_extra_info"].get("verdict") != "AC":
        problems.append(Problem("verl", where, f"score dict not passed through: {result!r}"))
    return problems


def _verl_init_mentions(token: str) -> list[Problem]:
    verl = resolve("verl")
    text = Path(verl.__file__).read_text(encoding="utf-8")
    if token in text and "entry_points" in text:
        return []
    return [Problem("verl", "verl/__init__.py", f"no longer loads entry points of group {token!r}", True)]


def _verl_config_file(name: str) -> list[Problem]:
    from importlib import resources

    if resources.files(VERL_CONFIG_MODULE).joinpath(f"{name}.yaml").is_file():
        return []
    return [Problem("verl", f"{VERL_SEARCHPATH}/{name}.yaml", "missing", True)]
