"""`mrgrpo score`: run programs against APPS/APPS+ tests in the sandbox and print a verdict table.

    mrgrpo score --input apps_plus.jsonl            # check each problem's canonical solution
    mrgrpo score --pairs pairs.jsonl --out r.jsonl  # score (problem, solution) pairs

A pairs line is a JSON object with `ground_truth` (APPS JSON string or dict) or `problem` (an APPS+/APPS record),
and `code` (a program, run as is) or `response` (a model answer; the program is found as the reward finds it);
`id` is optional.

With --out, each result is saved as it completes (OUT.partial): Ctrl-C keeps them, prints "interrupted: N saved,
re-run to resume" and exits 130; the same command again runs only the rest. Two runs writing the same --out
are refused (a flock on OUT.lock).

exit status: 0 done; 1 a sandbox failure (INFRA) or an unreadable input file; 2 bad option, missing input,
--out not writable or in use; 130 interrupted.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
import time
from pathlib import Path

from mrgrpo.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    HelpFormatter,
    OneLineParser,
    OutLock,
    UsageError,
    check_input_file,
    check_writable_dir,
    number,
)
from mrgrpo.jobs import map_saving
from mrgrpo.sandbox import WALL_PER_CPU, ExecResult, Job, Limits, Verdict, run
from mrgrpo.testset import LimitsOverride, TestSetError

EXAMPLES = """examples:
  mrgrpo score --input mrgrpo/assets/apps_plus_sample.jsonl --all-tests
  mrgrpo score --pairs pairs.jsonl --out results.jsonl --workers 4 --time-s 2"""


def _parser():
    p = OneLineParser(prog="mrgrpo score", description=__doc__, epilog=EXAMPLES, formatter_class=HelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", type=Path, help="APPS+/APPS file (JSONL, JSON array, or APPS parquet): check the "
                                                "canonical solutions")
    src.add_argument("--pairs", type=Path, help="JSONL of (problem, solution) pairs to score")
    p.add_argument("--out", type=Path, help="write one JSON result per item to this JSONL file")
    p.add_argument("--workers", type=number(int, 1), default=None, help="parallel sandbox slots (default: CPU count)")
    p.add_argument("--all-tests", action="store_true", help="run every test instead of stopping at the first failure")
    p.add_argument("--limit", type=number(int, 0), default=None, help="only the first N items (default: all)")
    p.add_argument("--time-s", type=number(float, 0, low_open=True), default=None,
                   help=f"CPU seconds per test (default: each problem's own time_s, else {Limits().time_s:g})")
    p.add_argument("--wall-s", type=number(float, 0, low_open=True), default=None,
                   help="wall seconds per test, at least --time-s (default: the problem's own with its own CPU limit, "
                   f"else {WALL_PER_CPU:g} x the CPU limit)")
    p.add_argument("--memory-mb", type=number(int, 1), default=None,
                   help=f"memory per test (default: {Limits().memory_mb})")
    p.add_argument("--show", type=number(int, 0), default=20, help="list at most this many failing items")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _override(args) -> LimitsOverride:
    """The limits options as the override of every problem's own limits (`mrgrpo.testset.TestSet.limits`)."""
    time_s = Limits.of(time_s=args.time_s).time_s
    if args.wall_s is not None and args.wall_s < time_s:
        raise UsageError(f"--wall-s {args.wall_s:g} is below --time-s {time_s:g}: the CPU limit could never be "
                         f"reached (leave --wall-s out for {WALL_PER_CPU:g} x --time-s)")
    return LimitsOverride(time_s=args.time_s, wall_s=args.wall_s, memory_mb=args.memory_mb)


def _items_from_input(path: Path, args, override: LimitsOverride) -> tuple[list[tuple[str, Job | None, str]], int]:
    """(id, job or None, reason when None) per record, and the count of records."""
    from mrgrpo.apps import Problem, read_problems

    items = []
    for rec in read_problems(path):
        if args.limit is not None and len(items) >= args.limit:
            break
        if not isinstance(rec, Problem):
            items.append((rec.where, None, f"BAD_RECORD: {rec.reason}"))
        elif not rec.reference_solution:
            items.append((rec.source_id, None, "NO_REFERENCE: no canonical solution"))
        elif not rec.inputs:
            items.append((rec.source_id, None, "NO_TESTS: the record has no tests"))
        else:
            tests = rec.tests()
            try:  # the override against the problem's own limits (a wall below its CPU limit)
                limits = tests.limits(override)
            except TestSetError as exc:
                items.append((rec.source_id, None, f"BAD_RECORD: {exc}"))
                continue
            job = tests.job(rec.reference_solution, stop_on_first_failure=not args.all_tests, limits=limits)
            items.append((rec.source_id, job, ""))
    return items, len(items)


def _items_from_pairs(path: Path, args, override: LimitsOverride) -> tuple[list[tuple[str, Job | None, str]], int]:
    from mrgrpo.apps import problem_from_record
    from mrgrpo.code_extract import extract_code
    from mrgrpo.reward import build_job

    items = []
    with open(path, "rb") as f:
        for line_no, data in enumerate(f, 1):
            if not data.strip():
                continue
            if args.limit is not None and len(items) >= args.limit:
                break
            where = item_id = f"{path.name}:{line_no}"  # a bad line is reported under its file:line
            try:
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = f"byte 0x{data[exc.start]:02x} at {exc.start + 1}"
                    raise ValueError(f"line is not valid UTF-8 ({bad})") from None
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    raise ValueError(f"line is not a JSON object but a {type(obj).__name__}")
                item_id = str(obj.get("id", where))
                if "code" in obj:
                    code = obj["code"]
                    if not isinstance(code, str):
                        raise ValueError(f"`code` must be a string, got {type(code).__name__}")
                elif "response" in obj:
                    if not isinstance(obj["response"], str):
                        raise ValueError(f"`response` must be a string, got {type(obj['response']).__name__}")
                    code = extract_code(obj["response"]) or ""
                else:
                    raise ValueError("needs `code` or `response`")
                if "ground_truth" in obj:
                    gt = obj["ground_truth"]
                elif "problem" in obj:
                    gt = problem_from_record(obj["problem"], item_id).ground_truth()
                else:
                    raise ValueError("needs `ground_truth` or `problem`")
                job = build_job(gt, code, all_tests=args.all_tests, override=override)
                if not job.inputs:
                    raise ValueError("the problem has no tests")
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                named = f" (id {item_id})" if item_id != where else ""
                items.append((where, None, f"BAD_RECORD: {exc}{named}"))
                continue
            items.append((item_id, job, ""))
    return items, len(items)


def _row(item_id: str, result: ExecResult | None, reason: str) -> dict:
    if result is None:
        return {"id": item_id, "verdict": reason.split(":")[0], "passed": 0, "total": 0, "time_s": 0.0,
                "detail": reason}
    row = {"id": item_id, "verdict": result.verdict.value, "passed": result.passed, "total": result.total,
           "time_s": round(result.time_s, 4), "detail": result.detail}
    failing = next((t for t in result.tests if t.verdict is not Verdict.AC), None)
    if failing is not None:
        row["first_failure"] = {"index": failing.index, "verdict": failing.verdict.value,
                                "stdout": failing.stdout[:500], "stderr": failing.stderr[-500:]}
    return row


def _key(item_id: str, job: Job) -> str:
    from mrgrpo.data.store import stable_hash

    return stable_hash([item_id, dataclasses.asdict(job)])


def _load_partial(path: Path) -> dict[str, dict]:
    """Rows saved by an interrupted run with the same --out (a cut last line is ignored)."""
    from mrgrpo.data.store import read_jsonl

    if not path.is_file():
        return {}
    return {r["key"]: r["row"] for r in read_jsonl(path, tolerate_bad_lines=True) if "key" in r and "row" in r}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = args.input or args.pairs
    try:
        check_input_file(path, "--input" if args.input else "--pairs")
        if args.out is not None:
            if args.out.is_dir():
                raise UsageError(f"--out {args.out} is a directory: pass a .jsonl file name")
            check_writable_dir(args.out.parent, "directory of --out")
        override = _override(args)
    except UsageError as e:
        print(f"mrgrpo score: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        items, _ = (_items_from_input if args.input else _items_from_pairs)(path, args, override)
    except (ValueError, OSError) as e:  # the file as a whole (a broken JSON array, ...): one line naming it
        print(f"mrgrpo score: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted: 0 saved, re-run to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not items:
        print(f"mrgrpo score: error: {path} holds no items (an empty file?)", file=sys.stderr)
        return EXIT_FAILED
    if args.out is None:
        return _score(args, items, None)
    try:
        with OutLock(args.out.parent, "mrgrpo score", name=args.out.name + ".lock"):
            return _score(args, items, args.out)
    except UsageError as e:
        print(f"mrgrpo score: error: {e}", file=sys.stderr)
        return EXIT_USAGE


def _score(args, items: list, out: Path | None) -> int:
    from mrgrpo.data import store
    from mrgrpo.sandbox.pool import get_pool

    partial = out.with_name(out.name + ".partial") if out is not None else None
    keyed = [(i, item_id, job, _key(item_id, job)) for i, (item_id, job, _) in enumerate(items) if job is not None]
    saved = _load_partial(partial) if partial is not None else {}
    results: dict[int, dict] = {i: saved[k] for i, _, _, k in keyed if k in saved}
    todo = [(i, item_id, job, k) for i, item_id, job, k in keyed if k not in saved]
    workers = args.workers or get_pool(args.workers).size

    def done(n: int, result: ExecResult) -> None:
        i, item_id, _, k = todo[n]
        results[i] = _row(item_id, result, "")
        if partial is not None:
            store.append_jsonl(partial, {"key": k, "row": results[i]})

    start = time.monotonic()
    try:
        map_saving(lambda t: run(t[2]), todo, done, workers,
                   progress=not args.quiet and sys.stderr.isatty(), desc="sandbox")
    except KeyboardInterrupt:
        if partial is None:
            print("interrupted: nothing saved (no --out), re-run to score again", file=sys.stderr)
        else:
            print(f"interrupted: {len(results)} saved, re-run to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    elapsed = time.monotonic() - start
    jobs = [job for _, job, _ in items if job is not None]
    rows = [results[i] if job is not None else _row(item_id, None, reason)
            for i, (item_id, job, reason) in enumerate(items)]

    if out is not None:
        store.write_text_if_changed(out, "".join(json.dumps(row) + "\n" for row in rows))
        if partial.exists():
            partial.unlink()

    counts = collections.Counter(row["verdict"] for row in rows)
    n_tests = sum(row["passed"] if row["verdict"] != "AC" else row["total"] for row in rows)
    print(f"{'verdict':<12} {'items':>6} {'share':>7}")
    for verdict, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{verdict:<12} {n:>6} {n / max(1, len(rows)):>7.1%}")
    resumed = f", {len(jobs) - len(todo)} from an interrupted run" if len(todo) != len(jobs) else ""
    print(f"{'total':<12} {len(rows):>6}   {len(todo)} run in {elapsed:.1f} s "
          f"({len(todo) / max(elapsed, 1e-9):.1f} items/s, >= {n_tests} tests passed{resumed})")
    failing = [row for row in rows if row["verdict"] != "AC"]
    if failing:
        print(f"\nfailing items ({min(len(failing), args.show)} of {len(failing)}):")
        for row in failing[: args.show]:
            print(f"  {row['id']:<28} {row['verdict']:<11} {row['passed']}/{row['total']}  {row['detail'][:90]}")
    if args.out:
        print(f"\nper-item results: {args.out}")
    if not jobs:
        print(f"mrgrpo score: error: none of the {len(rows)} items of {args.input or args.pairs} could be run "
              f"(first: {rows[0]['id']}: {rows[0]['detail'][:120]})", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if counts.get("INFRA") else 0


if __name__ == "__main__":
    raise SystemExit(main())
