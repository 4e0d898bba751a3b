"""`mrgrpo data`: APPS+/APPS -> validated problems -> plans -> verl parquet. See docs/data.md.

mrgrpo data prepare [--input FILE] --out DIR [--plans batch|sync|vllm|none]   # all stages
mrgrpo data validate [--input FILE] --out DIR
mrgrpo data plans --out DIR --plans batch|sync|vllm
mrgrpo data build --out DIR [--no-plans]
mrgrpo data report --out DIR
mrgrpo data synth --n N --seed S --out FILE.jsonl [--templates train|heldout|all]   # synthetic APPS+ records
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mrgrpo.apps import ProblemFormatError
from mrgrpo.data import pipeline
from mrgrpo.data.build import BuildOptions
from mrgrpo.data.plans import DASHSCOPE_BASE_URL, DEFAULT_MODEL, BatchPending, PlanOptions
from mrgrpo.data.store import DataError
from mrgrpo.data.validate import ValidateOptions


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, help="output directory (created; reused on later runs)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_validate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input",
        type=Path,
        default=None,
        help="APPS+ (.jsonl or .json array) or APPS (.jsonl/.parquet with input_output) file; "
        "default: the bundled 150-problem APPS+ sample",
    )
    p.add_argument(
        "--public-tests",
        type=int,
        default=1,
        help="at most this many tests (the first ones) are public; one test always stays hidden (default 1)",
    )
    p.add_argument(
        "--no-run-reference",
        action="store_true",
        help="do not run reference solutions in the sandbox (items get the reference_not_run flag)",
    )
    p.add_argument(
        "--float-tol",
        type=float,
        default=1e-6,
        help="tolerance for re-checking references that fail on float outputs (default 1e-6)",
    )
    p.add_argument("--ref-time-s", type=float, default=None, help="per-test CPU limit for reference runs")
    p.add_argument("--no-dedupe", action="store_true", help="keep records with identical statement and tests")
    p.add_argument("--force", action="store_true", help="redo validation even if its inputs did not change")


def _add_plans(p: argparse.ArgumentParser, with_none: bool) -> None:
    choices = ["batch", "sync", "vllm", "none"] if with_none else ["batch", "sync", "vllm"]
    p.add_argument(
        "--plans",
        choices=choices,
        default="none" if with_none else "batch",
        help="plan backend" + (" (default none)" if with_none else " (default batch)"),
    )
    p.add_argument("--model", default=None, help=f"plan model (default {DEFAULT_MODEL}; for vllm a local path/HF id)")
    p.add_argument(
        "--base-url", default=DASHSCOPE_BASE_URL, help=f"OpenAI-compatible base URL (default {DASHSCOPE_BASE_URL})"
    )
    p.add_argument(
        "--api-key-env",
        default="DASHSCOPE_API_KEY",
        help="name of the environment variable holding the API key (default DASHSCOPE_API_KEY)",
    )
    p.add_argument(
        "--plan-with-solution",
        action="store_true",
        help="show the reference solution to the plan model (plans copying it are rejected)",
    )
    p.add_argument("--temperature", type=float, default=0.3)
    p.add_argument("--max-tokens", type=int, default=1024, help="per plan; a plan cut at this length is rejected")
    p.add_argument(
        "--extra-body",
        type=json.loads,
        default=None,
        help="JSON merged into each request body, e.g. '{\"enable_thinking\": false}'",
    )
    p.add_argument("--max-attempts", type=int, default=3, help="attempts per plan before it is reported failed")
    p.add_argument("--retry-failed", action="store_true", help="give plans that failed earlier a new set of attempts")
    p.add_argument("--concurrency", type=int, default=8, help="sync: requests in flight")
    p.add_argument("--max-retries", type=int, default=6,
                   help="retries of 429/408/409/5xx, cut connections and timeouts per API call (batch and sync)")
    p.add_argument("--poll-interval", type=float, default=30.0, help="batch: seconds between status polls")
    p.add_argument(
        "--max-wait",
        type=float,
        default=48 * 3600.0,
        help="batch: stop polling after this many seconds (the batch id is saved; rerun to resume)",
    )
    p.add_argument("--price-in", type=float, default=1.2, help="USD per 1M prompt tokens, for the cost estimate")
    p.add_argument("--price-out", type=float, default=6.0, help="USD per 1M completion tokens")
    p.add_argument("--batch-discount", type=float, default=0.5, help="batch price as a fraction of the sync price")
    p.add_argument("--plan-cache", type=Path, default=None, help="plan cache directory (default DIR/plans/cache)")
    p.add_argument(
        "--vllm-args",
        type=json.loads,
        default={},
        help="JSON kwargs for vllm.LLM, e.g. '{\"tensor_parallel_size\": 2}'",
    )


def _add_build(p: argparse.ArgumentParser, standalone: bool) -> None:
    p.add_argument("--val-fraction", type=float, default=0.1, help="per difficulty (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--require-plans",
        action="store_true",
        help="quarantine problems without an accepted plan instead of building them plan-less",
    )
    if standalone:
        p.add_argument("--no-plans", action="store_true", help="build prompts without plans")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mrgrpo data", description="APPS+ pipeline: validate, plan, build verl parquet.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    p = sub.add_parser("prepare", help="all stages: validate, plans, build, report")
    _add_out(p)
    _add_validate(p)
    _add_plans(p, with_none=True)
    _add_build(p, standalone=False)
    p = sub.add_parser("validate", help="read, quarantine, run reference solutions, flag, split tests")
    _add_out(p)
    _add_validate(p)
    p = sub.add_parser("plans", help="generate plans for DIR/problems.jsonl (cached, resumable)")
    _add_out(p)
    _add_plans(p, with_none=False)
    p = sub.add_parser("build", help="write DIR/train.parquet and DIR/val.parquet")
    _add_out(p)
    _add_build(p, standalone=True)
    p = sub.add_parser("report", help="write DIR/report.json and print the summary")
    _add_out(p)
    p = sub.add_parser("synth", help="write seeded synthetic APPS+ records (offline learnability check)")
    p.add_argument("--n", type=int, default=1000, help="number of records (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed; the same seed gives the same bytes (default 0)")
    p.add_argument("--out", required=True, type=Path, help="output .jsonl file (input of `mrgrpo data prepare`)")
    p.add_argument(
        "--templates",
        choices=["train", "heldout", "all"],
        default="train",
        help="statement templates: the training ones, only the held-out ones (an evaluation file), or all "
        "(default train)",
    )
    return ap


def _synth(a) -> int:
    from mrgrpo.data import synth

    t0 = time.perf_counter()
    try:
        records = synth.generate(a.n, seed=a.seed, templates=a.templates)
    except ValueError as e:
        print(f"mrgrpo data synth: error: {e}", file=sys.stderr)
        return 1
    synth.write_jsonl(records, a.out)
    print(json.dumps(synth.summarize(records)))
    print(f"wrote {len(records)} synthetic records (seed {a.seed}, templates {a.templates}) to {a.out} "
          f"in {time.perf_counter() - t0:.1f}s")
    return 0


def _validate_opts(a) -> ValidateOptions:
    return ValidateOptions(
        public_tests=a.public_tests,
        run_reference=not a.no_run_reference,
        float_tol=a.float_tol,
        time_s=a.ref_time_s,
        dedupe=not a.no_dedupe,
    )


def _plan_opts(a) -> PlanOptions:
    return PlanOptions(
        backend=a.plans,
        model=a.model or DEFAULT_MODEL,
        base_url=a.base_url,
        api_key_env=a.api_key_env,
        include_solution=a.plan_with_solution,
        temperature=a.temperature,
        max_tokens=a.max_tokens,
        extra_body=a.extra_body,
        max_attempts=a.max_attempts,
        retry_failed=a.retry_failed,
        concurrency=a.concurrency,
        max_retries=a.max_retries,
        poll_interval_s=a.poll_interval,
        max_wait_s=a.max_wait,
        price_in_per_m=a.price_in,
        price_out_per_m=a.price_out,
        batch_discount=a.batch_discount,
        vllm_kwargs=a.vllm_args,
    )


def _build_opts(a, use_plans: bool) -> BuildOptions:
    return BuildOptions(val_fraction=a.val_fraction, seed=a.seed, use_plans=use_plans, require_plans=a.require_plans)


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    if a.cmd == "synth":
        return _synth(a)
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    progress = not a.quiet and sys.stderr.isatty()
    t0 = time.perf_counter()
    outcomes = []
    try:
        if a.cmd in ("prepare", "validate"):
            outcomes.append(pipeline.run_validate(out, a.input, _validate_opts(a), progress=progress, force=a.force))
        if a.cmd == "plans" or (a.cmd == "prepare" and a.plans != "none"):
            outcomes.append(pipeline.run_plans(out, _plan_opts(a), cache_dir=a.plan_cache, progress=progress))
        if a.cmd in ("prepare", "build"):
            use_plans = (a.plans != "none") if a.cmd == "prepare" else not a.no_plans
            outcomes.append(pipeline.run_build(out, _build_opts(a, use_plans)))
        if a.cmd in ("prepare", "report", "build", "validate"):
            report = pipeline.make_report(out)
            print(pipeline.format_summary(report, outcomes))
        else:
            for o in outcomes:
                print(
                    json.dumps(
                        {"stage": o.name, "skipped": o.skipped, "seconds": round(o.seconds, 2), **o.info},
                        indent=2,
                        default=str,
                    )
                )
    except BatchPending as e:
        print(f"mrgrpo data: {e}", file=sys.stderr)
        return 3
    except (DataError, FileNotFoundError, ProblemFormatError) as e:
        print(f"mrgrpo data {a.cmd}: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
