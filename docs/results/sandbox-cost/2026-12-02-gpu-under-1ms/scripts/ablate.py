"""Per-test cost of serial trivial tests with one sandbox layer left out at a time (alternating rounds).

Columns per test: CPU of all our processes (cpu_mark), busy CPU of the whole machine (/proc/stat: kernel threads,
deferred namespace teardown included), the program's CPU as the sandbox reports it (time_s), minor faults of all
processes, wall. Usage: PYTHONPATH=. python3 ablate.py N ROUNDS [cfg,cfg,...] (cfg: layer+layer, '' = all layers)."""
import os, resource, sys, time
sys.path.insert(0, os.getcwd())
from benchmarks import bench_reward as br
from mrgrpo.sandbox import Job, run, shutdown, pool

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
configs = [(), ("ipc_ns",), ("seccomp",), ("landlock",), ("cgroup_v1", "cgroup_v2"), ("test_tmpfs",), ("minimal_root",)]
if len(sys.argv) > 3:
    configs = [tuple(c.split("+")) if c else () for c in sys.argv[3].split(",")]


def busy():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def faults():
    def tree(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fl = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            return 0
        return int(fl[7]) + int(fl[8]) + sum(tree(k) for k in kids)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt + resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
            + sum(tree(c) for c in br._live_children()))


job = Job(code="print(input())", inputs=["x"] * N, outputs=["x"] * N)
res = {c: [] for c in configs}
for r in range(ROUNDS):
    for c in configs:
        pool.DISABLE.clear(); pool.DISABLE.update(c)
        shutdown(); run(Job(code="print(input())", inputs=["x"] * 50, outputs=["x"] * 50))
        f0, b0, cpu0, t0 = faults(), busy(), br.cpu_mark(), time.perf_counter()
        out = run(job)
        wall = time.perf_counter() - t0
        shutdown()
        cpu, b, f = br.cpu_mark() - cpu0, busy() - b0, faults() - f0
        assert out.verdict.value == "AC", out.verdict
        row = (cpu / N * 1e3, b / N * 1e3, sum(t.time_s for t in out.tests) / N * 1e3, f / N, wall / N * 1e3)
        res[c].append(row)
        print(f"round {r} {'+'.join(c) or 'all layers':24s} cpu {row[0]:.3f} ms  machine {row[1]:.3f} ms  "
              f"program {row[2]:.3f} ms  faults {row[3]:.0f}  wall {row[4]:.3f} ms", flush=True)
lw, lc = br.bare_runner(N, fork="libc")
print(f"\nbare libc runner: cpu/test {lc*1e3:.3f} ms, wall {lw*1e3:.3f} ms")
print("| left out | CPU, our processes | CPU, whole machine | program (time_s) | minor faults | wall | (medians, ms/test) |")
print("|---|---|---|---|---|---|---|")
for c, rows in res.items():
    med = [sorted(x)[len(x) // 2] for x in zip(*rows)]
    print(f"| {'+'.join(c) or 'nothing'} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.0f} | {med[4]:.3f} | |")
