"""Summarise verl step logs into a per-step time table.

    python benchmarks/verl_step_table.py run1.log [run2.jsonl ...] [--skip-first] [--trajectories N]

Reads verl's console log (`trainer.logger=[console]`: one line per step, `step:N - key:value - ...`) or its file
logger's JSON lines (`{"step": N, "data": {...}}`, `trainer.logger=[file]`). Picks the time split (generation,
reward, old log-prob, update, weight sync, whole step), throughput, the actor's peak GPU memory, turns per
trajectory, score, largest advantage and gradient norm, and the sandbox's share of the step, and prints one
markdown table per log plus a mean over steps (optionally without step 1, which holds JIT and worker start-up).

`sandbox_share` = the longest time one trajectory waited on the sandbox in that step (the mrgrpo dashboard's
`sandbox/trajectory_s/max`: its public-test calls, plus its hidden tests when the reward scored them during the
rollout) / `timing_s/step`. The rollout lasts as long as its slowest trajectory, so this bounds the share of the
step spent waiting on the sandbox from above (the trajectory that waited longest need not be the slowest one).
`gen_s/1k_tok` (with `--trajectories N`, the step's trajectory count: batch x group) = generation seconds per 1,000
tokens the model generated (the dashboard's `tokens/model/mean` x N; feedback and plan tokens the loop injected
are not counted): the rollout's cost per generated token, comparable across K.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path

COLUMNS = {
    "step_s": "timing_s/step",
    "gen_s": "timing_s/gen",
    "reward_s": "timing_s/reward",
    "old_logp_s": "timing_s/old_log_prob",
    "ref_s": "timing_s/ref",
    "update_s": "timing_s/update_actor",
    "upd_weights_s": "timing_s/update_weights",
    "tok/s/gpu": "perf/throughput",
    "peak_gb": "actor/perf/max_memory_allocated_gb",
    "turns": "num_turns/mean",
    "score": "critic/score/mean",
    "adv_max": "critic/advantages/max",
    "grad_norm": "actor/grad_norm",
    "resp_len": "response_length/mean",
    "sandbox_share": "sandbox_share",
    "gen_s/1k_tok": "gen_s_per_1k_model_tokens",
}
# The dashboard's name on each trainer: use_v1=false logs it under timing_s/ (docs/metrics.md, "Routes").
_SANDBOX_WAIT = ("mrgrpo/sandbox/trajectory_s/max", "timing_s/mrgrpo/sandbox/trajectory_s/max")
_MODEL_TOKENS = ("mrgrpo/tokens/model/mean", "timing_s/mrgrpo/tokens/model/mean")
_STEP_RE = re.compile(r"step:(\d+) - (.*)")
_NP_WRAPPED = re.compile(r"^np\.\w+\((.*)\)$")


def parse_steps(text: str) -> dict[int, dict[str, float]]:
    steps: dict[int, dict[str, float]] = {}
    for line in text.splitlines():
        m = _STEP_RE.search(line)
        if not m:
            continue
        metrics = {}
        for part in m.group(2).split(" - "):
            key, sep, value = part.rpartition(":")
            if not sep:
                continue
            value = _NP_WRAPPED.sub(r"\1", value.strip())  # pprint shows numpy scalars as np.float64(2.5)
            try:
                metrics[key.strip()] = float(value)
            except ValueError:
                continue
        steps[int(m.group(1))] = metrics
    return steps


def parse_jsonl(text: str) -> dict[int, dict[str, float]]:
    """verl's file logger: one `{"step": N, "data": {key: value}}` per line; non-numbers are left out."""
    steps: dict[int, dict[str, float]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            n, data = int(row["step"]), row["data"]
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"line {lineno}: not a verl file-logger row ({e!r})") from None
        steps[n] = {k: float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return steps


def with_derived(steps: dict[int, dict[str, float]], trajectories: int | None = None) -> dict[int, dict[str, float]]:
    """Adds `sandbox_share` to each step that logged the sandbox wait and the step time, and, given the step's
    trajectory count, `gen_s_per_1k_model_tokens` to each that logged generation time and model tokens."""
    for metrics in steps.values():
        wait = next((metrics[k] for k in _SANDBOX_WAIT if k in metrics), None)
        step = metrics.get("timing_s/step")
        if wait is not None and step:
            metrics["sandbox_share"] = wait / step
        tokens = next((metrics[k] for k in _MODEL_TOKENS if k in metrics), None)
        if trajectories and tokens and "timing_s/gen" in metrics:
            metrics["gen_s_per_1k_model_tokens"] = metrics["timing_s/gen"] / (tokens * trajectories) * 1000
    return steps


def table(steps: dict[int, dict[str, float]], skip_first: bool) -> str:
    head = "| step | " + " | ".join(COLUMNS) + " |"
    rows = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for n in sorted(steps):
        vals = [steps[n].get(k) for k in COLUMNS.values()]
        rows.append(f"| {n} | " + " | ".join("" if v is None else f"{v:.3g}" for v in vals) + " |")
    use = [n for n in sorted(steps) if not (skip_first and n == min(steps))] or sorted(steps)
    means = []
    for key in COLUMNS.values():
        xs = [steps[n][key] for n in use if key in steps[n]]
        means.append(f"{statistics.mean(xs):.3g}" if xs else "")
    label = "mean" + (" (w/o first)" if skip_first and len(use) < len(steps) else "")
    rows.append(f"| {label} | " + " | ".join(means) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--skip-first", action="store_true", help="leave the first step out of the mean")
    parser.add_argument("--trajectories", type=int, default=None,
                        help="trajectories per step (batch x group): adds gen_s/1k_tok")
    args = parser.parse_args(argv)
    for log in args.logs:
        text = log.read_text(errors="replace")
        steps = with_derived(parse_jsonl(text) if log.suffix == ".jsonl" else parse_steps(text), args.trajectories)
        print(f"\n### {log.name}: {len(steps)} steps\n")
        print(table(steps, args.skip_first) if steps else "(no steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
