"""Faults and thread CPU per step of the test process (needs steps.patch applied to worker.py)."""
import collections, os, sys
sys.path.insert(0, os.getcwd())
from mrgrpo.sandbox import Job, run
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
r = run(Job(code="print(input())", inputs=["x"] * N, outputs=["x"] * N))
flt, cpu = collections.defaultdict(list), collections.defaultdict(list)
for t in r.tests[N // 10:]:
    prev = None
    for p in t.stderr.split()[1:]:
        tag, f, c = p.split(":")
        if prev is not None:
            flt[tag].append(int(f) - prev[0]); cpu[tag].append(int(c) - prev[1])
        prev = (int(f), int(c))
print("| step (ends at) | minor faults | thread CPU, us |\n|---|---|---|")
for k in flt:
    print(f"| {k} | {sum(flt[k]) / len(flt[k]):.1f} | {sorted(cpu[k])[len(cpu[k]) // 2] / 1e3:.1f} (median) |")
print("last:", r.tests[-1].stderr)
