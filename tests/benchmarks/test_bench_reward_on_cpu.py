"""benchmarks/bench_reward.py's multi-process judge (`--processes P`): the batch split over P judging processes
comes back whole, in order, with every verdict right; nothing is asserted about speed."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path


def _bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_reward.py"
    spec = importlib.util.spec_from_file_location("bench_reward", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_reward"] = module
    spec.loader.exec_module(module)
    return module


def test_a_batch_judged_from_several_processes_comes_back_in_order_and_right():
    bench = _bench()
    batch = bench.build_batch(3)
    one = bench.run_judge("mrgrpo", batch, workers=2)
    three = bench.run_judge("mrgrpo", batch, workers=2, processes=3)
    assert three["n"] == len(batch) and three["processes"] == 3
    assert three["agree"] == len(batch) and three["false_pass"] == 0 and three["false_fail"] == 0
    assert three["verdicts"] == one["verdicts"]  # the shards were put back in batch order
    assert three["tests_run"] == one["tests_run"] > 0 and three["floor"] > 0  # program CPU came back from each shard
    assert three["cpu"] > three["floor"]  # the judging processes' own CPU is counted too


def test_the_bare_runner_baseline_runs_each_test_and_reads_its_output():
    bench = _bench()
    for fork in ("os", "libc"):
        wall, cpu = bench.bare_runner(3, fork=fork)  # raises unless all 3 forked programs echoed their input
        assert isinstance(wall, float) and isinstance(cpu, float)


def test_the_layer_benchmark_leaves_out_the_layer_it_names_and_restores_the_switch():
    _bench()  # bench_sandbox_layers imports it
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_sandbox_layers.py"
    spec = importlib.util.spec_from_file_location("bench_sandbox_layers", path)
    layers_bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(layers_bench)
    from mrgrpo.sandbox import pool

    cpu, layers = layers_bench.measure({"seccomp"}, 2)
    assert cpu > 0 and layers["seccomp"] is False  # the slot ran without the layer it was told to leave out
    assert pool.DISABLE == set()  # production's switch is back to "everything on"
    _, layers_on = layers_bench.measure(set(), 2)
    assert pool.DISABLE == set() and set(layers_on) == set(layers)


def test_the_per_test_table_counts_the_tests_it_was_asked_for_and_splits_user_from_system_time():
    bench = _bench()
    rows = dict(bench.overhead(1, serial=True, n=7, rounds=2))
    assert "1 slot, 7 tests of print(input()) in one job, serial: wall per test (median of 2)" in rows
    each = rows[next(k for k in rows if "median of the rounds' differences" in k)]
    assert len(each.split("[")[1].split(",")) == 2  # one difference per round
    judging, sandbox = (float(v.split()[0]) for v in rows[next(k for k in rows if "judging process /" in k)].split("/"))
    user, system = (float(v.split()[0]) for v in rows[next(k for k in rows if "user / system" in k)].split("/"))
    assert sandbox >= 0 and judging >= 0 and user >= 0 and system >= 0  # /proc counts in ticks: 7 tests may show 0
    assert abs(user + system - sandbox) <= 0.011  # the same CPU, split (each shown to 0.01 ms)


def test_the_machine_wide_busy_cpu_counts_what_this_process_burns():
    """machine_busy_cpu (the check of the batch's own CPU count) grows by at least the CPU this process uses."""
    import resource

    def own() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    bench = _bench()
    busy0, own0 = bench.machine_busy_cpu(), own()
    x = 0
    while own() - own0 < 0.3:
        x += 1
    assert bench.machine_busy_cpu() - busy0 >= 0.25  # clock ticks of 10 ms: a little below what was burnt


def test_disabled_layers_reach_every_judging_process(monkeypatch):
    """`--disable` (diagnosis only) switches the layers off in the shards of `--processes P` too: a program that only
    passes without the seccomp filter (it opens an AF_UNIX socket) passes in every shard."""
    bench = _bench()
    from mrgrpo.sandbox import pool

    pool.shutdown()
    monkeypatch.setattr(pool, "DISABLE", {"seccomp"})
    code = ("import socket\ntry:\n    socket.socket(socket.AF_UNIX).close()\n    print('open')\n"
            "except OSError:\n    print('closed')")
    item = {"id": "probe", "kind": "probe", "response": f"```python\n{code}\n```\n", "num_tests": 1,
            "ground_truth": '{"inputs": [""], "outputs": ["open\\n"]}', "should_pass": True}
    try:
        result = bench.run_judge("mrgrpo", [item, dict(item)], workers=2, processes=2)
    finally:
        pool.shutdown()
    assert result["agree"] == 2, result["verdicts"]


def test_a_small_batch_says_its_slowest_submission_weighs_on_the_throughput_and_splits_the_overhead(capsys):
    assert _bench().main(["--workers", "1", "--problems", "1", "--skip-verl", "--overhead-tests", "2"]) == 0
    out = capsys.readouterr().out
    assert "note: mrgrpo, 1 slots: the slowest submission took" in out  # 6 submissions: each well over 1%
    assert re.search(r"- 1 slots: judging processes \(.*\) \d+\.\d\d ms; the sandbox's own processes", out)
