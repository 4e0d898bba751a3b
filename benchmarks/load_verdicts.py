"""Demo: load is not a verdict. Runs the sandbox's judgements under spinning CPU load and prints a table.

    .venv/bin/python benchmarks/load_verdicts.py [--spinners 4xCPUs] [--no-prepare] [--no-pytest] [--control]

Starts `--spinners` processes running `while 1: pass` (default: 4 per CPU), each in a session of its own (so each
is its own scheduler autogroup, as independent jobs on a shared node are: spinners of one session would share one
autogroup's CPU share), then, with them running:

1. `mrgrpo data prepare --out TMP --plans none` on the bundled APPS+ sample, fresh: how many of the 150 records are
   kept (149 expected: the 150th, apps_plus_sample:93, imports scipy) and why any other was quarantined;
2. single programs judged in this process with the default limits (4 CPU-s, 8 s wall backstop): a program that
   sleeps forever (TLE expected: the wall backstop, which a test that waited for no CPU gets no time back from), one
   that spins forever (TLE: its CPU time), and an honest one burning 2 CPU-s (AC: at a fifth of a CPU it needs
   about 10 s of wall, more than the 8 s backstop, which gives back the time it waited for a CPU);
   with `--control`, the same programs again with the backstop not stretched (the wall clock decides, as before);
3. the sandbox's verdict tests (`pytest tests/sandbox/test_sandbox_verdicts.py
   tests/sandbox/test_sandbox_canonical.py tests/sandbox/test_sandbox_compare.py`): pass/fail counts.

Each row shows the load average when it ended. Exit status 1 if any row is not as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPIN = "while 1: pass"
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {cpu}:\n    pass\nprint('ok')\n"


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _prepare(rows: list) -> None:
    with tempfile.TemporaryDirectory(prefix="load-verdicts-") as tmp:
        out = Path(tmp) / "x"
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "mrgrpo", "data", "prepare", "--out", str(out), "--plans", "none"],
                              cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - start
        if done.returncode != 0:
            rows.append(("data prepare (bundled sample)", "149 kept", f"exit {done.returncode}: "
                         f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}", wall, False))
            return
        report = json.loads((out / "report.json").read_text())
        kept = report["counts"]["kept"]
        quarantined = {q["source_id"]: f"{q['reason']}: {q['detail'][:60]}" for q in report["quarantined"]}
        runs = re.search(r"\((\d+) reference runs\)", done.stdout)
        others = {k: v for k, v in quarantined.items() if k != "apps_plus_sample:93"}
        result = f"{kept} kept, quarantined {sorted(quarantined) or 'none'}"
        if runs:
            result += f", {runs.group(1)} reference runs"
        if others:
            result += f"; unexpected: {others}"
        rows.append(("data prepare (bundled sample)", "149 kept, only :93 quarantined", result, wall,
                     kept == 149 and not others))


def _programs(rows: list, control: bool) -> None:
    from mrgrpo.sandbox import Job, Limits, run, runner

    cases = [
        ("sleeps forever", "import time\ntime.sleep(3600)\nprint('ok')", "TLE"),
        ("spins forever", "while True:\n    pass", "TLE"),
        ("honest, 2 CPU-s", BURN.format(cpu=2.0), "AC"),
    ]
    settings = [("", runner._WALL_STRETCH)]
    if control:
        settings.append((" [control: wall clock decides]", (1.0,)))
    saved = runner._WALL_STRETCH
    try:
        for label, stretch in settings:
            runner._WALL_STRETCH = stretch
            for name, code, expected in cases:
                start = time.monotonic()
                result = run(Job(code=code, inputs=[""], outputs=["ok"], limits=Limits()))
                wall = time.monotonic() - start
                cpu = result.tests[0].time_s if result.tests else 0.0
                shown = f"{result.verdict.value} ({cpu:.2f} CPU-s)"
                ok = result.verdict.value == expected if not label else True  # the control is shown, not judged
                rows.append((f"sandbox: {name}{label}", expected if not label else "-", shown, wall, ok))
    finally:
        runner._WALL_STRETCH = saved


def _pytest(rows: list) -> None:
    files = [f"tests/sandbox/test_sandbox_{name}.py" for name in ("verdicts", "canonical", "compare")]
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    summary = (done.stdout.strip().splitlines() or ["no output"])[-1].strip("= ")
    rows.append(("pytest " + " ".join(Path(f).stem for f in files), "all pass", summary, wall, done.returncode == 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spinners", type=int, default=4 * (os.cpu_count() or 1))
    ap.add_argument("--no-prepare", action="store_true")
    ap.add_argument("--no-pytest", action="store_true")
    ap.add_argument("--control", action="store_true", help="also run the programs with the wall clock deciding")
    args = ap.parse_args()
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True) for _ in range(args.spinners)]
    rows: list[tuple] = []
    loads = []
    try:
        time.sleep(5)  # let the load average see them
        print(f"{args.spinners} spinners on {os.cpu_count()} CPUs; load {_load()}", file=sys.stderr, flush=True)
        steps = [("prepare", _prepare, args.no_prepare), ("programs", lambda r: _programs(r, args.control), False),
                 ("pytest", _pytest, args.no_pytest)]
        for _name, step, skip in steps:
            if skip:
                continue
            before = len(rows)
            step(rows)
            loads += [_load()] * (len(rows) - before)
            for row in rows[before:]:
                print(f"  {row[0]}: {row[2]} ({row[3]:.1f} s)", file=sys.stderr, flush=True)
    finally:
        for p in spinners:
            p.kill()
        for p in spinners:
            p.wait()
    print(f"\n{args.spinners} spinning processes (`python -c \"{SPIN}\"`, each in its own session) on "
          f"{os.cpu_count()} CPUs\n")
    print("| check | expected | result | wall | load 1/5/15 min after |")
    print("|---|---|---|---|---|")
    for (name, expected, result, wall, _), load in zip(rows, loads, strict=True):
        print(f"| {name} | {expected} | {result} | {wall:.1f} s | {load} |")
    return 0 if all(row[4] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
