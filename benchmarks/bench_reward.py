"""Benchmark: mrgrpo's reward vs verl's default APPS scorer (`prime_code.compute_score`, continuous=True).

    .venv/bin/python benchmarks/bench_reward.py [--workers 2,16] [--problems N] [--repeat N]
        [--max-program-cpu S] [--processes P] [--leaks 10000] [--skip-verl] [--tasks]

The batch: for each valid problem of the bundled APPS+ sample, its canonical solution (expected: pass) and wrong
variants (expected: fail): an extra output line / a wrong return value, no output, a crash, a syntax error, and a
hostile program that searches its process for the expected outputs. Both judges get the same fenced responses
and the same number of parallel workers (mrgrpo: threads over its sandbox pool; verl: a ProcessPoolExecutor,
as its prime reward manager uses). Latency is measured inside the worker, per submission.

What a user pays: CPU-seconds per judged submission, all processes (the judge, its workers, the programs; warm-up
of the worker processes excluded), and the floor: the CPU the programs themselves used (mrgrpo's per-test CPU,
from the slot cgroup where there is one). `--max-program-cpu S` drops the problems whose canonical solution needs
more than S CPU-seconds (measured first) and `--repeat N` repeats the batch, so that the batch's wall time is set
by throughput rather than by one slow program (the table shows the slowest submission as a share of the wall).
`--processes P` judges mrgrpo's batch from P processes (each with its own pool and threads, all sharing the slots
through node-wide admission, MRGRPO_SANDBOX_SLOTS = slots), as a GPU node's agent-loop and reward workers do, so
that one judging process's GIL is not what limits 16 slots.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

# A hostile program: find the grader's expected outputs in its own process (frames first, then the heap).
_FIND = textwrap.dedent("""
    def _expected():
        import gc, sys
        f = sys._getframe()
        while f is not None:
            d = f.f_locals.get('in_outs')
            if isinstance(d, dict) and isinstance(d.get('outputs'), list):
                return d['outputs'][f.f_locals.get('index', 0) or 0]
            f = f.f_back
        for o in gc.get_objects():
            if isinstance(o, dict) and isinstance(o.get('outputs'), list) and isinstance(o.get('inputs'), list) \\
                    and o['outputs']:
                return o['outputs'][0]
""")
HACK_STDIO = _FIND + textwrap.dedent("""
    import sys
    _out = _expected()
    if _out is not None:
        sys.stdout.write(_out if isinstance(_out, str) else '\\n'.join(map(str, _out)))
""")
HACK_CALL = _FIND + textwrap.dedent("""
    def {fn}(*args):
        out = _expected()
        return out[0] if isinstance(out, list) and len(out) == 1 else out
    class Solution:
        def {fn}(self, *args):
            return {fn}(*args)
""")
# Known data errors of the sample (see tests/sandbox/test_sandbox_canonical.py).
EXCLUDE = {"apps_plus_sample:93"}


def build_batch(n_problems: int | None) -> list[dict]:
    from mrgrpo.apps import Problem, bundled_sample_path, read_problems

    problems = [p for p in read_problems(bundled_sample_path())
                if isinstance(p, Problem) and p.reference_solution and p.source_id not in EXCLUDE]
    problems = problems[:n_problems] if n_problems else problems
    batch = []
    for p in problems:
        gt = json.dumps(p.ground_truth())
        ref = p.reference_solution
        if p.io_mode == "stdio":
            wrong = ref + "\nprint('wrong-answer-sentinel')\n"
            empty = "import sys\nsys.stdin.read()\n"
            hack = HACK_STDIO
        else:
            fn = p.fn_name
            if p.class_name:
                wrong = ref + f"\nSolution.{fn} = lambda self, *a: 'wrong-answer-sentinel'\n"
            else:
                wrong = ref + f"\n{fn} = lambda *a: 'wrong-answer-sentinel'\n"
            empty = f"def {fn}(*a):\n    return 'wrong-answer-sentinel'\nclass Solution:\n    def {fn}(self, *a):\n" \
                    f"        return 'wrong-answer-sentinel'\n"
            hack = HACK_CALL.format(fn=fn)
        variants = [("canonical", ref, True), ("wrong_output", wrong, False), ("no_output", empty, False),
                    ("crash", "raise RuntimeError('boom')\n" + ref, False), ("syntax_error", ref + "\n)\n", False),
                    ("hack_read_expected", hack, False)]
        for kind, code, should_pass in variants:
            batch.append({"id": p.source_id, "kind": kind, "response": f"Here it is.\n```python\n{code}\n```\n",
                          "ground_truth": gt, "should_pass": should_pass, "num_tests": len(p.inputs)})
    return batch


def _mrgrpo_one(item: dict) -> tuple[bool, str, float]:
    from mrgrpo.reward import compute_score

    start = time.perf_counter()
    r = compute_score("apps_plus", item["response"], item["ground_truth"])
    return r["acc"] == 1.0, r["verdict"], time.perf_counter() - start


def _verl_one(item: dict) -> tuple[bool, str, float]:
    import contextlib
    import io

    from verl.utils.reward_score import prime_code

    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        success, _ = prime_code.compute_score(item["response"], item["ground_truth"], continuous=True)
    passed = success is True or (not isinstance(success, bool) and float(success) == 1.0)
    return passed, "pass" if passed else "fail", time.perf_counter() - start


_program_cpu = [0.0, 0]  # CPU seconds of the programs' tests, number of tests that ran
_program_cpu_lock = __import__("threading").Lock()


def _count_program_cpu() -> None:
    """Wrap the reward's sandbox call to add up the CPU of every test (the floor)."""
    import mrgrpo.reward as reward

    # Wrap the real function (not an earlier wrapper: a second load of this module has counters of its own).
    real = getattr(reward.run, "_bench_real", reward.run)

    def run(job):
        result = real(job)
        with _program_cpu_lock:
            _program_cpu[0] += sum(t.time_s for t in result.tests)
            _program_cpu[1] += len(result.tests)
        return result

    run._bench_real = real
    reward.run = run


def _proc_cpu(pid: int) -> float:
    """CPU seconds of a live process and of its children that it has reaped (utime+stime+cutime+cstime), plus
    those of its live descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15]) / tick
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return total
    return total + sum(_proc_cpu(c) for c in children)


def _tree_self_cpu(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a live process and its live descendants, each counting only itself: the
    processes they have already reaped (a zygote's test processes) are left out."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        user, system = int(fields[11]) / tick, int(fields[12]) / tick
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            children = [int(c) for c in f.read().split()]
    except OSError:
        return 0.0, 0.0
    for c in children:
        u, k = _tree_self_cpu(c)
        user, system = user + u, system + k
    return user, system


def _self_cpu() -> float:
    """CPU seconds of this process alone (all its threads), not its children."""
    import resource

    a = resource.getrusage(resource.RUSAGE_SELF)
    return a.ru_utime + a.ru_stime


def _own_cpu() -> float:
    """CPU seconds of this process and of the children it has reaped."""
    import resource

    b = resource.getrusage(resource.RUSAGE_CHILDREN)
    return _self_cpu() + b.ru_utime + b.ru_stime


def _live_children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def cpu_mark() -> float:
    """CPU so far of this process, its reaped children and its live ones: the difference of two marks, the second
    taken once the children have exited and been reaped, is what everything in between cost."""
    return _own_cpu() + sum(_proc_cpu(c) for c in _live_children())


def _warm_mrgrpo(workers: int) -> None:
    """Count the programs' CPU (the floor) and start this process's sandbox pool of `workers` slots."""
    from mrgrpo.sandbox import Job, run_batch, shutdown

    _count_program_cpu()
    shutdown()
    run_batch([Job(code="print(1)", inputs=[""], outputs=["1"])] * workers, workers=workers)


def _disabled() -> set[str]:
    from mrgrpo.sandbox import pool

    return set(pool.DISABLE)


def _shard_main(path: str, workers: int) -> int:
    """One judging process of `--processes P`: judge the shard in `path` with `workers` threads over its own pool
    (node-wide admission caps all shards together), after a "go" line on stdin; print one JSON line."""
    from mrgrpo.sandbox import shutdown

    with open(path) as f:
        shard = json.load(f)
    _warm_mrgrpo(workers)
    print("ready", flush=True)
    sys.stdin.readline()
    _program_cpu[:] = [0.0, 0]
    judging0 = _self_cpu()
    with ThreadPoolExecutor(workers) as ex:
        results = list(ex.map(_mrgrpo_one, shard))
    print(json.dumps({"results": results, "floor": _program_cpu[0], "tests_run": _program_cpu[1],
                      "judging": _self_cpu() - judging0}), flush=True)
    shutdown()
    return 0


def _judge_in_processes(batch: list[dict], workers: int,
                        processes: int) -> tuple[list, float, float, int, float, float]:
    """mrgrpo's judge spread over `processes` judging processes (as verl's agent-loop and reward workers are),
    sharing `workers` slots through node-wide admission. Returns (results in batch order, wall, CPU of all
    processes, tests run, program CPU, CPU of the judging processes themselves)."""
    import subprocess

    shards = [batch[i::processes] for i in range(processes)]
    env = dict(os.environ, MRGRPO_SANDBOX_SLOTS=str(workers))
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, shard in enumerate(shards):
            path = os.path.join(tmp, f"shard{i}.json")
            with open(path, "w") as f:
                json.dump(shard, f)
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--shard", path,
                                           "--workers", str(workers), "--disable", ",".join(sorted(_disabled()))],
                                          stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, text=True, env=env))
        for p in procs:
            line = p.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"judging process {p.pid} sent {line!r} instead of ready")
        cpu0 = _own_cpu() + sum(_proc_cpu(p.pid) for p in procs)
        start = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [json.loads(p.stdout.readline()) for p in procs]
        wall = time.perf_counter() - start
        for p in procs:
            if p.wait() != 0:
                raise RuntimeError(f"judging process {p.pid} exited with {p.returncode}")
    cpu = _own_cpu() - cpu0  # the judging processes and everything they ran, reaped by now
    results: list = [None] * len(batch)
    for i, out in enumerate(outs):
        results[i::processes] = [tuple(r) for r in out["results"]]
    return (results, wall, cpu, sum(o["tests_run"] for o in outs), sum(o["floor"] for o in outs),
            sum(o["judging"] for o in outs))


def _judge_here(name: str, batch: list[dict], workers: int) -> tuple[list, float, float, float | None]:
    """The batch judged from this process (mrgrpo: threads over its pool; verl: a process pool). Returns (results,
    wall, CPU of this process and its children, warm-up excluded; mrgrpo: CPU of this process alone)."""
    if name == "mrgrpo":
        from mrgrpo.sandbox import shutdown

        _warm_mrgrpo(workers)
        executor, fn = ThreadPoolExecutor(workers), _mrgrpo_one
    else:
        executor, fn = ProcessPoolExecutor(workers), _verl_one
        list(executor.map(_verl_one, batch[:workers]))  # warm the processes (imports)
    # CPU of everything from here on: ours, and our children's once reaped, minus what the live (warmed-up)
    # children had already used.
    cpu0 = cpu_mark()
    _program_cpu[:] = [0.0, 0]
    judging0 = _self_cpu()
    start = time.perf_counter()
    with executor:
        results = list(executor.map(fn, batch))
    wall = time.perf_counter() - start
    judging = _self_cpu() - judging0 if name == "mrgrpo" else None
    if name == "mrgrpo":
        shutdown()  # the workers exit and are reaped: their CPU (and their tests') lands in RUSAGE_CHILDREN
    return results, wall, _own_cpu() - cpu0, judging


def machine_busy_cpu() -> float | None:
    """CPU-seconds the whole machine has been busy (all CPUs, user + system + interrupts), from /proc/stat: what
    the batch's own count is checked against (kernel workers, e.g. freeing namespaces, belong to no process)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:8]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def run_judge(name: str, batch: list[dict], workers: int, processes: int = 1) -> dict:
    busy0 = machine_busy_cpu()
    if name == "mrgrpo" and processes > 1:
        results, wall, cpu, tests_run, floor, judging = _judge_in_processes(batch, workers, processes)
        _program_cpu[:] = [floor, tests_run]
    else:
        results, wall, cpu, judging = _judge_here(name, batch, workers)
    busy1 = machine_busy_cpu()
    busy = busy1 - busy0 if busy0 is not None and busy1 is not None else None
    latencies = sorted(r[2] for r in results)
    agree = sum(r[0] == item["should_pass"] for r, item in zip(results, batch, strict=True))
    false_pass = sum(r[0] and not item["should_pass"] for r, item in zip(results, batch, strict=True))
    false_fail = sum(not r[0] and item["should_pass"] for r, item in zip(results, batch, strict=True))
    by_kind: dict[str, list[int]] = {}
    for r, item in zip(results, batch, strict=True):
        by_kind.setdefault(item["kind"], [0, 0])
        by_kind[item["kind"]][0] += r[0] == item["should_pass"]
        by_kind[item["kind"]][1] += 1
    return {"name": name, "wall": wall, "n": len(batch), "tests": sum(i["num_tests"] for i in batch),
            "workers": workers, "processes": processes if name == "mrgrpo" else workers,
            "cpu": cpu, "floor": _program_cpu[0] if name == "mrgrpo" else None, "judging": judging,
            "tests_run": _program_cpu[1] if name == "mrgrpo" else None,
            "max_latency": latencies[-1],
            "p50": statistics.median(latencies), "p99": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "agree": agree, "false_pass": false_pass, "false_fail": false_fail, "by_kind": by_kind, "busy": busy,
            "verdicts": [r[1] for r in results]}


# The named baseline of the per-test table: the least a fork-per-test runner of the same interpreter can cost. The
# same preloaded modules, one fork per test from a warm Python process, stdin and stdout through pipes, the child
# reaped; no namespace, tmpfs, Landlock, seccomp, rlimit, uid, cgroup or output cap. What the sandbox costs on top of
# this is what its isolation and machinery cost, wherever a page copy lands (zygote or test process). With `os.fork`
# the child also runs CPython's at-fork handlers (`threading` and `random`, among the preloads, register some), which
# the sandbox skips by forking from libc; the "libc" variant does the same, so the difference is isolation alone.
_BARE_RUNNER = r"""
import gc, json, os, sys
for name in json.loads(sys.argv[2]):
    __import__(name)
if sys.argv[3] == "libc":
    import ctypes
    fork = ctypes.CDLL(None, use_errno=True).fork
else:
    fork = os.fork
code = compile("print(input())", "solution.py", "exec")
gc.freeze()
right = 0
for _ in range(int(sys.argv[1])):
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    pid = fork()
    if pid == 0:
        os.dup2(in_r, 0)
        os.dup2(out_w, 1)
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)
        exec(code, {"__name__": "__main__"})
        sys.stdout.flush()
        os._exit(0)
    os.close(in_r)
    os.close(out_w)
    os.write(in_w, b"x\n")
    os.close(in_w)
    out = b""
    while chunk := os.read(out_r, 65536):
        out += chunk
    os.close(out_r)
    os.waitpid(pid, 0)
    right += out == b"x\n"
print(right)
"""


def bare_runner(n: int, fork: str = "os") -> tuple[float, float]:
    """(wall, CPU of all processes) per test of `_BARE_RUNNER`, `n` trivial tests serially (start-up excluded);
    `fork` is "os" (`os.fork`, with CPython's at-fork handlers) or "libc" (without, as the sandbox forks)."""
    import subprocess

    from mrgrpo.sandbox import testproc

    def run(count: int) -> tuple[float, float]:
        cpu0, start = _own_cpu(), time.perf_counter()
        out = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", _BARE_RUNNER, str(count),
                              json.dumps(testproc.PRELOAD), fork], check=True, stdout=subprocess.PIPE, text=True).stdout
        wall, cpu = time.perf_counter() - start, _own_cpu() - cpu0
        if out.strip() != str(count):
            raise RuntimeError(f"the bare runner echoed {out.strip()} of {count} inputs")
        return wall, cpu

    wall0, cpu0 = run(0)  # start-up and imports alone
    wall, cpu = run(n)
    return (wall - wall0) / n, (cpu - cpu0) / n


def _sandbox_cpu() -> tuple[float, float]:
    """(user, system) CPU so far of this process's live sandbox processes (launchers, zygotes), themselves only."""
    user = system = 0.0
    for c in _live_children():
        u, k = _tree_self_cpu(c)
        user, system = user + u, system + k
    return user, system


def _serial_sandbox(n: int) -> dict:
    """One serial run of `n` trivial tests in one job on a fresh one-slot pool: CPU per test of all processes,
    of the program (as judged), of the judging process and of the sandbox's own processes (user, system)."""
    import resource

    from mrgrpo.sandbox import Job, run, shutdown

    def parent_cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    job = Job(code="print(input())", inputs=["x"] * n, outputs=["x"] * n)
    shutdown()
    run(job)
    cpu0 = cpu_mark()
    parent0, sandbox0 = parent_cpu(), _sandbox_cpu()
    start = time.perf_counter()
    result = run(job)
    wall = time.perf_counter() - start
    parent, (user, system) = parent_cpu() - parent0, _sandbox_cpu()
    user, system = user - sandbox0[0], system - sandbox0[1]
    shutdown()
    cpu = _own_cpu() - cpu0
    return {"wall": wall / n, "cpu": cpu / n, "program": sum(t.time_s for t in result.tests) / n,
            "judging": parent / n, "user": user / n, "system": system / n}


def overhead(workers: int, serial: bool = True, n: int = 400, rounds: int = 3) -> list[tuple[str, str]]:
    """Per test, trivial programs: the sandbox's own cost (wall, and CPU of all processes); `n` serial tests, in
    `rounds` rounds that alternate the sandbox and the bare runner forking from libc (medians: one run of each can
    differ by a tenth of a millisecond per test on a 16-core host)."""
    from mrgrpo.sandbox import Job, run_batch

    rows = []
    if serial:
        runs, libc = [], []
        for _ in range(rounds):
            runs.append(_serial_sandbox(n))
            libc.append(bare_runner(n, fork="libc"))
        med = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        libc_wall, libc_cpu = statistics.median(w for w, _ in libc), statistics.median(c for _, c in libc)
        extra = sorted(r["cpu"] - c for r, (_, c) in zip(runs, libc, strict=True))
        rows.append((f"1 slot, {n} tests of print(input()) in one job, serial: wall per test (median of {rounds})",
                     f"{med['wall'] * 1e3:.2f} ms"))
        rows.append(("same, CPU per test of all processes / of which the program itself",
                     f"{med['cpu'] * 1e3:.2f} ms / {med['program'] * 1e3:.2f} ms"))
        rows.append(("same, CPU per test of the judging process / the sandbox's own processes (launcher, zygote)",
                     f"{med['judging'] * 1e3:.2f} ms / {(med['user'] + med['system']) * 1e3:.2f} ms"))
        rows.append(("same, the sandbox's own processes: user / system (kernel) time per test",
                     f"{med['user'] * 1e3:.2f} ms / {med['system'] * 1e3:.2f} ms"))
        bare_wall, bare_cpu = bare_runner(n)
        rows.append(("baseline: bare fork runner (same interpreter and preloads, no isolation), serial: wall / CPU "
                     "per test of all processes", f"{bare_wall * 1e3:.2f} ms / {bare_cpu * 1e3:.2f} ms"))
        rows.append(("sandbox minus baseline: CPU per test of all processes (isolation and machinery, wherever "
                     "page copies land)", f"{(med['cpu'] - bare_cpu) * 1e3:.2f} ms ({med['cpu'] / bare_cpu:.2f}x "
                                          "the baseline)"))
        rows.append((f"baseline 2: the same bare runner forking from libc as the sandbox does (no at-fork handlers), "
                     f"run between the sandbox's runs: wall / CPU per test of all processes (median of {rounds})",
                     f"{libc_wall * 1e3:.2f} ms / {libc_cpu * 1e3:.2f} ms"))
        rows.append(("sandbox minus baseline 2: CPU per test of all processes (what isolation and the sandbox's "
                     "machinery cost), median of the rounds' differences [each round]",
                     f"{statistics.median(extra) * 1e3:.2f} ms ({med['cpu'] / libc_cpu:.2f}x baseline 2) ["
                     + ", ".join(f"{x * 1e3:.2f}" for x in extra) + "]"))
    jobs = [Job(code="print(input())", inputs=["x"] * 20, outputs=["x"] * 20) for _ in range(40 * workers)]
    run_batch(jobs[:workers], workers=workers)
    start = time.perf_counter()
    run_batch(jobs, workers=workers)
    rows.append((f"{workers} slots, {len(jobs)} jobs x 20 tests: wall per test",
                 f"{(time.perf_counter() - start) / (20 * len(jobs)) * 1e3:.2f} ms"))
    return rows


def leak_check(n: int, workers: int) -> dict:
    from mrgrpo.sandbox import Job, Limits, run_batch, shutdown

    def children() -> int:
        me, count = str(os.getpid()), 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    count += f.read().rsplit(")", 1)[1].split()[1] == me
            except OSError:
                pass
        return count

    def dirs() -> int:
        return sum(d.startswith("mrgrpo-sandbox-") for d in os.listdir(tempfile.gettempdir()))

    shutdown()
    before = (children(), len(os.listdir("/proc/self/fd")), dirs())
    codes = ["print(input())", "print('x')", "1/0", "import os\nif os.fork() == 0:\n    os.setsid()\n"
             "    import time; time.sleep(30)\nprint(input())", "open('f', 'w').write('x')\nprint(input())"]
    jobs = [Job(code=codes[i % len(codes)], inputs=[f"{i}"], outputs=[f"{i}"], limits=Limits(wall_s=4))
            for i in range(n)]
    start = time.perf_counter()
    results = run_batch(jobs, workers=workers)
    wall = time.perf_counter() - start
    during = children()
    shutdown()
    after = (children(), len(os.listdir("/proc/self/fd")), dirs())
    return {"executions": n, "wall": wall, "infra": sum(r.verdict.value == "INFRA" for r in results),
            "workers_alive_during": during, "before": before, "after": after}


def heavy_problems(batch: list[dict], max_cpu: float, workers: int) -> set[str]:
    """Problems whose canonical solution needs more than `max_cpu` CPU-seconds (all its tests) in mrgrpo."""
    _count_program_cpu()
    heavy = set()
    for item in batch:
        if item["kind"] != "canonical":
            continue
        _program_cpu[:] = [0.0, 0]
        _mrgrpo_one(item)
        if _program_cpu[0] > max_cpu:
            heavy.add(item["id"])
    return heavy


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default=str(os.cpu_count()), help="comma-separated slot counts, e.g. 2,16")
    ap.add_argument("--problems", type=int, default=None, help="use only the first N problems")
    ap.add_argument("--repeat", type=int, default=1, help="repeat the batch N times (sustained throughput)")
    ap.add_argument("--max-program-cpu", type=float, default=None,
                    help="drop problems whose canonical solution needs more CPU-seconds than this")
    ap.add_argument("--skip-verl", action="store_true")
    ap.add_argument("--tasks", action="store_true",
                    help="judge only the reference solutions (each a whole problem on all its tests) and print "
                         "problems judged per second per vCPU, the unit other sandboxes publish")
    ap.add_argument("--overhead-tests", type=int, default=400,
                    help="serial trivial tests in the per-test table (more: less noise on a shared machine)")
    ap.add_argument("--overhead-rounds", type=int, default=3,
                    help="rounds of the serial per-test table, alternating the sandbox and the bare runner (medians)")
    ap.add_argument("--leaks", type=int, default=0, help="also run N trivial executions and check for leftovers")
    ap.add_argument("--processes", type=int, default=1,
                    help="judge mrgrpo's batch from P processes sharing the slots through node-wide admission, as "
                         "verl's agent-loop and reward workers do (default 1: threads in this process)")
    ap.add_argument("--disable", default="",
                    help="diagnosis only: switch these sandbox layers off (comma-separated names of "
                         "mrgrpo.sandbox.pool.DISABLE, e.g. cgroup_v1,cgroup_v2 to see what the slot cgroup costs); "
                         "the numbers are then not those of the sandbox as it runs")
    ap.add_argument("--shard", help=argparse.SUPPRESS)  # internal: one judging process of --processes
    args = ap.parse_args(argv)
    if args.disable:
        from mrgrpo.sandbox import pool

        pool.DISABLE.update(name for name in args.disable.split(",") if name)
        if not args.shard:
            print(f"layers switched off for this measurement (not the sandbox as it runs): {sorted(pool.DISABLE)}")
    if args.shard:
        return _shard_main(args.shard, int(args.workers))
    if args.processes < 1:
        ap.error("--processes must be >= 1")
    worker_counts = [int(w) for w in str(args.workers).split(",")]

    batch = build_batch(args.problems)
    if args.tasks:
        batch = [i for i in batch if i["kind"] == "canonical"]
    if args.max_program_cpu is not None:
        heavy = heavy_problems(batch, args.max_program_cpu, max(worker_counts))
        batch = [i for i in batch if i["id"] not in heavy]
        print(f"dropped {len(heavy)} problems whose canonical solution needs > {args.max_program_cpu} CPU-s: "
              f"{sorted(heavy)}")
    batch = batch * args.repeat
    print(f"batch: {len(batch)} submissions ({sum(i['should_pass'] for i in batch)} should pass), "
          f"{sum(i['num_tests'] for i in batch)} tests; slots {worker_counts}; {os.cpu_count()} CPUs", flush=True)
    stats = []
    for workers in worker_counts:
        stats.append(run_judge("mrgrpo", batch, workers, args.processes))
        if not args.skip_verl:
            stats.append(run_judge("verl prime_code", batch, workers))
    print("\n| judge | slots | judging processes | submissions/s | CPU-s per submission | floor (programs) per "
          "submission | overhead CPU per test run | p50 latency | p99 latency | slowest / wall | agreement | "
          "false passes | false fails | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in stats:
        counted = s["floor"] is not None and s["tests_run"]
        floor = f"{s['floor'] / s['n'] * 1e3:.1f} ms" if s["floor"] is not None else "-"
        over = f"{(s['cpu'] - s['floor']) / s['tests_run'] * 1e3:.2f} ms" if counted else "-"
        print(f"| {s['name']} | {s['workers']} | {s['processes']} | {s['n'] / s['wall']:.1f} | "
              f"{s['cpu'] / s['n'] * 1e3:.1f} ms | "
              f"{floor} | {over} | {s['p50'] * 1e3:.0f} ms | {s['p99'] * 1e3:.0f} ms | "
              f"{s['max_latency'] / s['wall']:.1%} | {s['agree'] / s['n']:.1%} ({s['agree']}/{s['n']}) | "
              f"{s['false_pass']} | {s['false_fail']} | {s['wall']:.1f} s |")
    for s in stats:
        share = s["max_latency"] / s["wall"]
        if share > 0.01:  # the rule for a sustained-throughput figure
            print(f"note: {s['name']}, {s['workers']} slots: the slowest submission took {share:.1%} of the wall time "
                  f"(> 1%), so one submission weighs on the throughput figure; a larger --repeat gives a sustained one")
    print("\nthe whole machine while each batch ran (/proc/stat; the CPU column above counts the benchmark's own "
          "processes):")
    for s in stats:
        if s["busy"] is not None:
            print(f"- {s['name']}, {s['workers']} slots: {s['busy']:.1f} CPU-s busy, {s['busy'] / s['wall']:.2f} of "
                  f"{os.cpu_count()} cores; counted {s['cpu']:.1f} CPU-s, {s['cpu'] / s['wall']:.2f} cores")
    mine = [s for s in stats if s["name"] == "mrgrpo"]
    print("\nmrgrpo's overhead per test run split by process (the batch above; the overhead column is their sum):")
    for s in mine:
        if not s["tests_run"]:
            continue
        per_test = 1e3 / s["tests_run"]
        sandbox = s["cpu"] - s["floor"] - s["judging"]
        print(f"- {s['workers']} slots: judging processes (reward function, threads, admission) "
              f"{s['judging'] * per_test:.2f} ms; the sandbox's own processes (launcher, zygote: compiling each "
              f"submission, fork, watch) and the kernel's work charged to them {sandbox * per_test:.2f} ms")
    if len(mine) >= 2:
        lo, hi = mine[0], mine[-1]
        scale = (hi["n"] / hi["wall"]) / (lo["n"] / lo["wall"]) / (hi["workers"] / lo["workers"])
        print(f"\nmrgrpo scaling {lo['workers']} -> {hi['workers']} slots: {scale:.2f} of linear")
    for workers in worker_counts:
        pair = [s for s in stats if s["workers"] == workers]
        if len(pair) == 2:
            print(f"{workers} slots: CPU per submission verl / mrgrpo = {pair[1]['cpu'] / pair[0]['cpu']:.1f}x; "
                  f"submissions/s mrgrpo / verl = {pair[1]['wall'] / pair[0]['wall']:.1f}x")
    if args.tasks:
        print(f"\nwhole problems (reference solutions, every test) per second per vCPU ({os.cpu_count()} vCPUs):")
        for s in stats:
            print(f"- {s['name']}, {s['workers']} slots: {s['n'] / s['wall'] / os.cpu_count():.2f} tasks/s/vCPU "
                  f"({s['n']} problems in {s['wall']:.1f} s, {s['tests'] / s['n']:.1f} tests each)")
    print("\nagreement with the expected pass/fail, by variant (first slot count):")
    first = [s for s in stats if s["workers"] == worker_counts[0]]
    print("| variant | " + " | ".join(s["name"] for s in first) + " |")
    print("|---|" + "---|" * len(first))
    for kind in first[0]["by_kind"]:
        print(f"| {kind} | " + " | ".join(f"{s['by_kind'][kind][0]}/{s['by_kind'][kind][1]}" for s in first) + " |")
    from collections import Counter

    print("\nmrgrpo verdicts:", dict(Counter(stats[0]["verdicts"])))
    print("\nper-test overhead (trivial program):")
    for i, workers in enumerate(worker_counts):
        for label, value in overhead(workers, serial=i == 0, n=args.overhead_tests, rounds=args.overhead_rounds):
            print(f"| {label} | {value} |")
    if args.leaks:
        print("\nleak check:", json.dumps(leak_check(args.leaks, worker_counts[-1])))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
