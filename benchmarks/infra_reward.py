"""mrgrpo's reward with an injected hidden-test INFRA on a fixed share of responses (benchmarks/gpu_trainers_check.sh).

`reward.custom_reward_function.path=<this file>` / `name=compute_score`. A response whose CRC32 is divisible by
``INJECT_EVERY`` (env ``MRGRPO_INJECT_INFRA_EVERY``, default 4: about a quarter) is scored as if the sandbox failed
on its hidden tests (verdict INFRA, ``infra`` = 1, ``excluded`` = 1), through mrgrpo.reward's own result path; every
other response is scored normally. Deterministic per response text, so both trainers see the same rule.
"""

from __future__ import annotations

import os
import zlib

from mrgrpo import reward
from mrgrpo.sandbox import ExecResult, Verdict

INJECT_EVERY = int(os.environ.get("MRGRPO_INJECT_INFRA_EVERY", "4"))


def injected(solution_str: str) -> bool:
    return zlib.crc32((solution_str or "").encode("utf-8")) % INJECT_EVERY == 0


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if not injected(solution_str):
        return reward.compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    call = reward._Call(solution_str, ground_truth, extra_info, kwargs)
    result = ExecResult(Verdict.INFRA, 0, len(call.job.inputs), (), 0.0, "injected by benchmarks/infra_reward.py")
    return call.finish(result)
