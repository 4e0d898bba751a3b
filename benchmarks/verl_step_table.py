"""Summarise verl console logs (`trainer.logger=[console]`) into a per-step time table.

    python benchmarks/verl_step_table.py run1.log [run2.log ...] [--skip-first]

verl prints one line per step: `step:N - key:value - key:value ...`. This picks the time split
(generation, reward, old log-prob, update, weight sync, whole step), throughput, the actor's peak GPU
memory, turns per trajectory, score, largest advantage and gradient norm, and prints one markdown table
per log plus a mean over steps (optionally without step 1, which holds JIT and worker start-up).
"""

from __future__ import annotations

import argparse
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
}
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
    args = parser.parse_args(argv)
    for log in args.logs:
        steps = parse_steps(log.read_text(errors="replace"))
        print(f"\n### {log.name}: {len(steps)} steps\n")
        print(table(steps, args.skip_first) if steps else "(no `step:N - ...` lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
