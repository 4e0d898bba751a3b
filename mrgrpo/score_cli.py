"""`mrgrpo score`: run programs against APPS/APPS+ tests in the sandbox and print a verdict table.

    mrgrpo score --input apps_plus.jsonl            # check each problem's canonical solution
    mrgrpo score --pairs pairs.jsonl --out r.jsonl  # score (problem, solution) pairs

A pairs line is a JSON object with `ground_truth` (APPS JSON string or dict) or `problem` (an APPS+/APPS record),
and `code` (a program, run as is) or `response` (a model answer; the program is found as the reward finds it);
`id` is optional.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from mrgrpo.sandbox import ExecResult, Job, Limits, Verdict, run_batch


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mrgrpo score", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", type=Path, help="APPS+/APPS file (JSONL, JSON array, or APPS parquet): check the "
                                                "canonical solutions")
    src.add_argument("--pairs", type=Path, help="JSONL of (problem, solution) pairs to score")
    p.add_argument("--out", type=Path, help="write one JSON result per item to this JSONL file")
    p.add_argument("--workers", type=int, default=None, help="parallel sandbox slots (default: CPU count)")
    p.add_argument("--all-tests", action="store_true", help="run every test instead of stopping at the first failure")
    p.add_argument("--limit", type=int, default=None, help="only the first N items")
    p.add_argument("--time-s", type=float, default=None, help="CPU seconds per test (default: Limits.time_s)")
    p.add_argument("--memory-mb", type=int, default=None, help="memory per test (default: Limits.memory_mb)")
    p.add_argument("--show", type=int, default=20, help="list at most this many failing items (default 20)")
    return p


def _limits(args) -> Limits:
    kw = {}
    if args.time_s is not None:
        kw["time_s"] = args.time_s
        kw["wall_s"] = max(Limits().wall_s, 2 * args.time_s)
    if args.memory_mb is not None:
        kw["memory_mb"] = args.memory_mb
    return Limits(**kw)


def _items_from_input(path: Path, args, limits: Limits) -> tuple[list[tuple[str, Job | None, str]], int]:
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
            job = rec.tests().job(rec.reference_solution, stop_on_first_failure=not args.all_tests, limits=limits)
            items.append((rec.source_id, job, ""))
    return items, len(items)


def _items_from_pairs(path: Path, args, limits: Limits) -> tuple[list[tuple[str, Job | None, str]], int]:
    from mrgrpo.apps import problem_from_record
    from mrgrpo.code_extract import extract_code
    from mrgrpo.reward import build_job

    items = []
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if args.limit is not None and len(items) >= args.limit:
                break
            where = f"{path.name}:{line_no}"
            try:
                obj = json.loads(line)
                item_id = str(obj.get("id", where))
                if "code" in obj:
                    code = obj["code"]
                elif "response" in obj:
                    code = extract_code(obj["response"]) or ""
                else:
                    raise ValueError("needs `code` or `response`")
                if "ground_truth" in obj:
                    gt = obj["ground_truth"]
                elif "problem" in obj:
                    gt = problem_from_record(obj["problem"], item_id).ground_truth()
                else:
                    raise ValueError("needs `ground_truth` or `problem`")
                job = build_job(gt, code, all_tests=args.all_tests, limits=limits)
                if not job.inputs:
                    raise ValueError("the problem has no tests")
            except (ValueError, TypeError, KeyError) as exc:
                items.append((where, None, f"BAD_RECORD: {exc}"))
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


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    path = args.input or args.pairs
    if not path.exists():
        print(f"mrgrpo score: no such file: {path}", file=sys.stderr)
        return 2
    limits = _limits(args)
    items, _ = (_items_from_input if args.input else _items_from_pairs)(path, args, limits)
    jobs = [job for _, job, _ in items if job is not None]
    start = time.monotonic()
    results = iter(run_batch(jobs, workers=args.workers, progress=sys.stderr.isatty()))
    elapsed = time.monotonic() - start
    rows = [_row(item_id, next(results) if job is not None else None, reason) for item_id, job, reason in items]

    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with open(args.out, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    counts = collections.Counter(row["verdict"] for row in rows)
    n_tests = sum(row["passed"] if row["verdict"] != "AC" else row["total"] for row in rows)
    print(f"{'verdict':<12} {'items':>6} {'share':>7}")
    for verdict, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{verdict:<12} {n:>6} {n / max(1, len(rows)):>7.1%}")
    print(f"{'total':<12} {len(rows):>6}   {len(jobs)} run in {elapsed:.1f} s "
          f"({len(jobs) / max(elapsed, 1e-9):.1f} items/s, >= {n_tests} tests passed)")
    failing = [row for row in rows if row["verdict"] != "AC"]
    if failing:
        print(f"\nfailing items ({min(len(failing), args.show)} of {len(failing)}):")
        for row in failing[: args.show]:
            print(f"  {row['id']:<28} {row['verdict']:<11} {row['passed']}/{row['total']}  {row['detail'][:90]}")
    if args.out:
        print(f"\nper-item results: {args.out}")
    return 1 if counts.get("INFRA") else 0


if __name__ == "__main__":
    raise SystemExit(main())
