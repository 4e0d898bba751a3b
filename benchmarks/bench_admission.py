"""Benchmark: the same oversubscribed workload with and without node-wide sandbox admission.

    .venv/bin/python benchmarks/bench_admission.py [--processes 8] [--jobs 16] [--burn 1.0] [--wall 3]

P processes (as verl's agent-loop and reward workers are) each judge J jobs of an honest program that burns
`--burn` CPU-seconds, on their own pool of `--workers` slots (default: all CPUs, as a reward worker's pool sizes
itself), limits time_s = wall_s = `--wall`. Without admission P x workers programs share the cores and honest
programs hit the wall limit (TLE); with admission (MRGRPO_SANDBOX_SLOTS, default: the node's CPUs) at most that
many run at once. Prints one table row per setting: verdicts, wall time, job throughput, p50/p99 job latency
(including waiting for admission).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

_WORKER = textwrap.dedent("""
    import json, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from mrgrpo.sandbox import Job, Limits, run, run_batch
    burn, jobs, workers, wall = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    code = ("import time\\nt = time.process_time()\\n"
            f"while time.process_time() - t < {burn}:\\n    pass\\nprint(input())\\n")
    job = Job(code=code, inputs=["ok\\n"], outputs=["ok\\n"], limits=Limits(time_s=wall, wall_s=wall))
    def one(_):
        start = time.perf_counter()
        r = run(job)
        return r.verdict.value, time.perf_counter() - start
    with ThreadPoolExecutor(workers) as ex:
        print(json.dumps(list(ex.map(one, range(jobs)))))
""")


def workload(slots: int, processes: int, jobs: int, workers: int, burn: float, wall: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="mrgrpo-bench-admission-") as d:
        env = dict(os.environ, MRGRPO_SANDBOX_SLOTS=str(slots), MRGRPO_SANDBOX_ADMISSION_DIR=d)
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(burn), str(jobs), str(workers), str(wall)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
                 for _ in range(processes)]
        results = []
        for p in procs:
            out, err = p.communicate()
            if p.returncode:
                raise RuntimeError(f"worker failed: {err[-2000:]}")
            results += json.loads(out.strip().splitlines()[-1])
        wall_total = time.perf_counter() - start
    verdicts = [v for v, _ in results]
    lat = sorted(t for _, t in results)
    return {"slots": slots, "n": len(results), "AC": verdicts.count("AC"), "TLE": verdicts.count("TLE"),
            "other": len(verdicts) - verdicts.count("AC") - verdicts.count("TLE"), "wall": wall_total,
            "p50": statistics.median(lat), "p99": lat[min(len(lat) - 1, int(0.99 * len(lat)))]}


def main(argv: list[str] | None = None) -> int:
    from mrgrpo.sandbox.admission import node_capacity

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=16, help="jobs per process")
    ap.add_argument("--workers", type=int, default=os.cpu_count(), help="concurrent jobs per process")
    ap.add_argument("--burn", type=float, default=1.0, help="CPU-seconds each program burns")
    ap.add_argument("--wall", type=float, default=3.0, help="Limits.wall_s (time_s is 4)")
    ap.add_argument("--slots", type=int, default=None, help="admission slots (default: the node's CPUs)")
    args = ap.parse_args(argv)
    os.environ.pop("MRGRPO_SANDBOX_SLOTS", None)
    slots = args.slots or node_capacity()
    print(f"{args.processes} processes x {args.jobs} jobs, {args.workers} concurrent per process, burn {args.burn} "
          f"CPU-s, time_s=4, wall_s={args.wall}; {os.cpu_count()} CPUs", flush=True)
    print("\n| admission | jobs | AC | TLE | other | wall | jobs/s | p50 job latency | p99 job latency |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in (slots, 0):
        r = workload(s, args.processes, args.jobs, args.workers, args.burn, args.wall)
        label = f"{s} slots" if s else "off"
        print(f"| {label} | {r['n']} | {r['AC']} | {r['TLE']} | {r['other']} | {r['wall']:.1f} s | "
              f"{r['n'] / r['wall']:.2f} | {r['p50']:.2f} s | {r['p99']:.2f} s |", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
