"""What the installed verl does with mrgrpo's objects, run on CPU (no GPU, no Ray).

`mrgrpo upstream` checks that the symbols exist with the shape mrgrpo needs; these tests check the behaviour the
original fork had to patch in, and now gets from unedited verl: the score on the last valid response token (fork
edit 1), the naive reward manager calling compute_score by keyword with the agent loop's extra fields (edit 2),
and `import verl` loading mrgrpo's plugin.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mrgrpo import upstream


def in_fresh_loop_thread(fn):
    """verl's reward managers grab `asyncio.get_event_loop()` in __init__: give them a thread of their own."""
    box: dict[str, Any] = {}

    def target() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised below
            box["error"] = e
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_score_lands_on_the_last_valid_response_token():
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.protocol import DataProto

    data = DataProto.from_dict(tensors={
        "prompts": torch.tensor([[1, 2, 3], [0, 4, 5]]),
        "responses": torch.tensor([[6, 7, 0, 0], [8, 9, 10, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1, 0]]),
    })
    got = RewardManagerBase.assemble_rm_scores(data, [0.5, 1.0])
    want = torch.zeros(2, 4)
    want[0, 1], want[1, 2] = 0.5, 1.0
    assert torch.equal(got.float(), want), got


def test_naive_manager_calls_compute_score_with_the_loops_extra_fields():
    from verl.experimental.reward_loop.reward_manager import get_reward_manager_cls
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.protocol import DataProto

    assert get_reward_manager_cls("naive") is NaiveRewardManager
    calls: list[dict[str, Any]] = []

    def fake_score(**kwargs: Any) -> dict[str, Any]:  # keyword-only: fails if verl passes anything positionally
        calls.append(kwargs)
        return {"score": 0.75, "acc": 1.0, "verdict": "AC"}

    class Tokenizer:
        def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
            return "|".join(str(int(i)) for i in ids)

    data = DataProto.from_dict(
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
    manager_cls = type("ProbeNaive", (NaiveRewardManager,), {})  # keeps class-level state off verl's class

    def go() -> Any:
        manager = manager_cls(config=None, tokenizer=Tokenizer(), compute_score=fake_score)
        return manager.loop.run_until_complete(manager.run_single(data))

    result = in_fresh_loop_thread(go)
    assert len(calls) == 1
    call = calls[0]
    assert {"data_source", "solution_str", "ground_truth", "extra_info"} <= set(call)
    assert (call["data_source"], call["solution_str"], call["ground_truth"]) == ("apps_plus", "3|4", "GT")
    assert call["extra_info"]["final_code"] == "print(1)" and call["extra_info"]["index"] == 7
    assert set(result) == {"reward_score", "reward_extra_info"}
    assert result["reward_score"] == 0.75 and result["reward_extra_info"]["verdict"] == "AC"


def test_import_verl_loads_the_plugin():
    code = "import sys, verl; print('mrgrpo.plugin' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"


def test_every_ct_helper_the_loop_calls_is_in_the_table():
    import mrgrpo.agent_loop

    used = set(re.findall(r"self\.(ct_\w+)\s*\(", Path(mrgrpo.agent_loop.__file__).read_text(encoding="utf-8")))
    used |= {mrgrpo.agent_loop.CT_MERGE_USER}  # called through getattr: its name differs across verl versions
    table = {name for name, _, _ in upstream.CT_HELPERS} | {later for _, later, _ in upstream.CT_HELPERS if later}
    assert used and used <= table, used
    assert set(mrgrpo.agent_loop.CT_MERGE_NAMES) <= table


def test_the_verl_pin_is_read_from_the_package_metadata(monkeypatch, caplog):
    """mrgrpo.plugin warns against the pin in mrgrpo's metadata, the same one REQUIRED_VERL.txt holds."""
    from mrgrpo import plugin

    v = upstream.versions()
    assert upstream.pinned_verl() == v["metadata"] == v["pin_file"]
    real = upstream.metadata.version
    monkeypatch.setattr(upstream.metadata, "version", lambda name: "0.0.1" if name == "verl" else real(name))
    plugin._check_verl_version()
    assert f"pinned to verl=={v['pin_file']} but verl==0.0.1 is installed" in caplog.text
