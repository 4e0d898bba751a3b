"""Benchmark: where the sandbox's CPU per test goes, layer by layer, against a bare fork-per-test runner.

    .venv/bin/python benchmarks/bench_sandbox_layers.py [--tests 400] [--rounds 3]

For each configuration (everything on; then one layer left out through `mrgrpo.sandbox.pool.DISABLE`, the switch
the degraded-mode tests use), one slot runs `--tests` trivial tests (`print(input())`) serially in one job, and the
CPU of ALL processes (the judging process, the launcher and zygote, the test processes) is counted per test.
A layer's cost is "everything on" minus "that layer off". The rounds alternate the configurations, and the table
shows medians. The baseline row is `bench_reward.bare_runner`: the same interpreter and preloaded modules forking
once per test, with no isolation at all.

Counting all processes is deliberate: a copy-on-write page copy lands in whichever process writes the page first
(the zygote or the test process), so a per-process split can move without any CPU being saved (docs/sandbox.md).
Leaving a layer out only measures it; production never does (pool.DISABLE is for tests).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_reward  # noqa: E402  (the baseline runner and the CPU counters)

CONFIGS = [
    ("everything on", set()),
    ("landlock off", {"landlock"}),
    ("seccomp off", {"seccomp"}),
    ("IPC namespace per test off", {"ipc_ns"}),
    ("tmpfs per test off", {"test_tmpfs"}),
    ("minimal file tree off", {"minimal_root"}),
    ("slot cgroup off (v1 and v2)", {"cgroup_v1", "cgroup_v2"}),
    ("all namespaces off (PID, net, mount, tmpfs, IPC)", {"namespaces"}),
]


def measure(disable: set[str], n: int) -> tuple[float, dict]:
    """CPU per test of all processes with `disable` left out, and the layers the slot reported."""
    from mrgrpo.sandbox import Job, pool, run, shutdown

    shutdown()
    pool.DISABLE = set(disable)
    try:
        job = Job(code="print(input())", inputs=["x"] * n, outputs=["x"] * n)
        run(Job(code="print(input())", inputs=["x"], outputs=["x"]))  # start the slot (not counted)
        layers = dict(pool.get_pool()._slots[0].layers)
        cpu0 = bench_reward.cpu_mark()
        result = run(job)
        shutdown()  # the slot's processes exit and are reaped: all their CPU is in RUSAGE_CHILDREN now
        cpu = bench_reward.cpu_mark() - cpu0
    finally:
        pool.DISABLE = set()
    if result.verdict.value != "AC":
        raise RuntimeError(f"{disable or 'everything on'}: verdict {result.verdict} on a trivial program")
    return cpu / n, layers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tests", type=int, default=400, help="trivial tests per measurement")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians are shown)")
    args = ap.parse_args()

    start = time.perf_counter()
    cpu: dict[str, list[float]] = {name: [] for name, _ in CONFIGS}
    bare: list[float] = []
    layers_on: dict = {}
    for _ in range(args.rounds):
        for name, disable in CONFIGS:
            value, layers = measure(disable, args.tests)
            cpu[name].append(value)
            if not disable:
                layers_on = layers
        bare.append(bench_reward.bare_runner(args.tests)[1])

    on = statistics.median(cpu["everything on"])
    base = statistics.median(bare)
    print(f"{args.tests} trivial tests per measurement, {args.rounds} rounds, {os.cpu_count()} CPUs, "
          f"{time.perf_counter() - start:.0f} s")
    print(f"layers with everything on: {layers_on}\n")
    print("| configuration | CPU per test, all processes (median) | rounds | the layer's cost |")
    print("|---|---|---|---|")
    for name, _ in CONFIGS:
        med = statistics.median(cpu[name])
        rounds = ", ".join(f"{v * 1e3:.2f}" for v in cpu[name])
        cost = "-" if name == "everything on" else f"{(on - med) * 1e3:.2f} ms"
        print(f"| {name} | {med * 1e3:.2f} ms | {rounds} | {cost} |")
    print(f"| baseline: bare fork runner, no isolation | {base * 1e3:.2f} ms | "
          f"{', '.join(f'{v * 1e3:.2f}' for v in bare)} | - |")
    print(f"\nsandbox minus baseline: {(on - base) * 1e3:.2f} ms per test ({on / base:.2f}x the baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
