import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    v = line.split()[0]
    nums = dict(re.findall(r"(cpu|machine|program|faults|wall) ([0-9.]+)", line))
    rows.setdefault(v, []).append({k: float(x) for k, x in nums.items()})
print("| version | runs | CPU, our processes (ms/test) | whole machine | program (time_s) | minor faults | wall |")
print("|---|---|---|---|---|---|---|")
for v, rs in rows.items():
    med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    print(f"| {v} | {len(rs)} | {med['cpu']:.3f} (min {min(r['cpu'] for r in rs):.3f}) | {med['machine']:.3f} | "
          f"{med['program']:.3f} | {med['faults']:.0f} | {med['wall']:.3f} |")
