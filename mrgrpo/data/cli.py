"""`mrgrpo data`: APPS+/APPS -> validated problems -> plans -> verl parquet. See docs/data.md.

mrgrpo data prepare [--input FILE] --out DIR [--plans batch|sync|vllm|none]   # all stages
mrgrpo data validate [--input FILE] --out DIR
mrgrpo data plans --out DIR --plans batch|sync|vllm
mrgrpo data build --out DIR [--no-plans]
mrgrpo data report --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

from mrgrpo.apps import ProblemFormatError
from mrgrpo.cli import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PENDING,
    EXIT_USAGE,
    HelpFormatter,
    OneLineParser,
    OutLock,
    UsageError,
    check_input_file,
    check_writable_dir,
    number,
    report_interrupt,
)
from mrgrpo.data import pipeline, store
from mrgrpo.data.build import BuildOptions
from mrgrpo.data.plans import DASHSCOPE_BASE_URL, DEFAULT_MODEL, BatchPending, PlanOptions, PlansInterrupted
from mrgrpo.data.store import DataError
from mrgrpo.data.validate import ValidateOptions

EXIT_HELP = (
    "exit status: 0 done; 1 the work failed (message names what and where); 2 bad option, missing input, "
    "DIR not writable or in use, API key missing (found before any work); 3 a plan batch is still running "
    "after --max-wait (re-run to resume); 130 interrupted (finished work saved, re-run to resume)"
)


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="output directory (created; reused on later runs; one run at a time: DIR/.lock)")
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
        type=number(int, 0),
        default=1,
        help="at most this many tests (the first ones) are public; one test always stays hidden",
    )
    p.add_argument(
        "--no-run-reference",
        action="store_true",
        help="do not run reference solutions in the sandbox (items get the reference_not_run flag)",
    )
    p.add_argument(
        "--float-tol",
        type=number(float, 0),
        default=1e-6,
        help="tolerance for re-checking references that fail on float outputs",
    )
    p.add_argument("--ref-time-s", type=number(float, 0, low_open=True), default=None,
                   help="per-test CPU seconds for reference runs (default: 12, 3x the reward's limit: a busy "
                        "machine slows a reference without saying anything about its tests)")
    p.add_argument("--no-dedupe", action="store_true", help="keep records with identical statement and tests")
    p.add_argument("--force", action="store_true",
                   help="redo validation even if its inputs did not change; replace data that DIR holds from "
                   "another --input")


def _add_plans(p: argparse.ArgumentParser, with_none: bool) -> None:
    choices = ["batch", "sync", "vllm", "none"] if with_none else ["batch", "sync", "vllm"]
    p.add_argument("--plans", choices=choices, default="none" if with_none else "batch", help="plan backend")
    p.add_argument("--model", default=None,
                   help=f"plan model (default: {DEFAULT_MODEL}; for vllm a local path or HF id)")
    p.add_argument("--base-url", default=DASHSCOPE_BASE_URL, help="OpenAI-compatible base URL")
    p.add_argument("--api-key-env", default="DASHSCOPE_API_KEY",
                   help="name of the environment variable holding the API key (never the key itself)")
    p.add_argument(
        "--plan-with-solution",
        action="store_true",
        help="show the reference solution to the plan model (plans copying it are rejected)",
    )
    p.add_argument("--temperature", type=number(float, 0), default=0.3, help="sampling temperature of plans")
    p.add_argument("--max-tokens", type=number(int, 1), default=1024,
                   help="per plan; a plan cut at this length is rejected")
    p.add_argument(
        "--extra-body",
        type=_json_object,
        default=None,
        help="JSON merged into each request body, e.g. '{\"enable_thinking\": false}'",
    )
    p.add_argument("--max-attempts", type=number(int, 1), default=3,
                   help="attempts per plan before it is reported failed")
    p.add_argument("--retry-failed", action="store_true", help="give plans that failed earlier a new set of attempts")
    p.add_argument("--concurrency", type=number(int, 1), default=8, help="sync: requests in flight")
    p.add_argument("--max-retries", type=number(int, 0), default=6,
                   help="retries of 429/408/409/5xx, cut connections and timeouts per API call (batch and sync)")
    p.add_argument("--poll-interval", type=number(float, 0, low_open=True), default=30.0,
                   help="batch: seconds between status polls")
    p.add_argument(
        "--max-wait",
        type=number(float, 0, low_open=True),
        default=48 * 3600.0,
        help="batch: stop polling after this many seconds (the batch id is saved; rerun to resume) "
        "(default: %(default)g s = 48 h)",
    )
    p.add_argument("--price-in", type=number(float, 0), default=1.2,
                   help="USD per 1M prompt tokens, for the cost estimate")
    p.add_argument("--price-out", type=number(float, 0), default=6.0, help="USD per 1M completion tokens")
    p.add_argument("--batch-discount", type=number(float, 0, 1, low_open=True), default=0.5,
                   help="batch price as a fraction of the sync price")
    p.add_argument("--plan-cache", type=Path, default=None, help="plan cache directory (default: DIR/plans/cache)")
    p.add_argument(
        "--vllm-args",
        type=_json_object,
        default={},
        help="JSON kwargs for vllm.LLM, e.g. '{\"tensor_parallel_size\": 2}'",
    )


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON ({e.msg} at char {e.pos}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object like '{{\"key\": 1}}', got {text!r}")
    return value


def _add_build(p: argparse.ArgumentParser, standalone: bool) -> None:
    p.add_argument("--val-fraction", type=number(float, 0, 1, high_open=True), default=0.1,
                   help="share of each difficulty that goes to val.parquet")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/val split")
    p.add_argument(
        "--require-plans",
        action="store_true",
        help="quarantine problems without an accepted plan instead of building them plan-less",
    )
    if standalone:
        p.add_argument("--no-plans", action="store_true", help="build prompts without plans")


EXAMPLES = {
    "prepare": "examples:\n  mrgrpo data prepare --out data/sample --plans none\n"
    "  DASHSCOPE_API_KEY=... mrgrpo data prepare --input apps_plus.jsonl --out data/apps_plus --plans batch",
    "validate": "example:\n  mrgrpo data validate --input apps_plus.jsonl --out data/apps_plus --public-tests 1",
    "plans": "example:\n  DASHSCOPE_API_KEY=... mrgrpo data plans --out data/apps_plus --plans sync --concurrency 16",
    "build": "example:\n  mrgrpo data build --out data/apps_plus --val-fraction 0.1 --seed 0",
    "report": "example:\n  mrgrpo data report --out data/apps_plus",
}


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="mrgrpo data", description="APPS+ pipeline: validate, plan, build verl parquet.",
                       epilog=EXIT_HELP, formatter_class=HelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=help_text, description=help_text + ".",
                              epilog=EXAMPLES[name] + "\n\n" + EXIT_HELP, formatter_class=HelpFormatter)

    p = add("prepare", "all stages: validate, plans, build, report")
    _add_out(p)
    _add_validate(p)
    _add_plans(p, with_none=True)
    _add_build(p, standalone=False)
    p = add("validate", "read, quarantine, run reference solutions, flag, split tests")
    _add_out(p)
    _add_validate(p)
    p = add("plans", "generate plans for DIR/problems.jsonl (cached, resumable)")
    _add_out(p)
    _add_plans(p, with_none=False)
    p = add("build", "write DIR/train.parquet and DIR/val.parquet")
    _add_out(p)
    _add_build(p, standalone=True)
    p = add("report", "write DIR/report.json and print the summary")
    _add_out(p)
    return ap


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


def _plans_done(out: Path) -> bool:
    """Every problem has an accepted plan already (a re-run will request nothing, so it needs no key)."""
    path = out / pipeline.PLANS
    try:
        rows = list(store.read_jsonl(path)) if path.is_file() else []
    except (OSError, ValueError):
        return False
    return bool(rows) and all(r.get("status") == "ok" for r in rows)


def _check_api(a) -> None:
    """The plan backends that call an API need its key and a URL: checked before any reference run (the key only
    when some plan is still to be requested; the plan stage itself says so too if it needs one after all)."""
    if a.plans not in ("batch", "sync"):
        return
    if not a.base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url must start with http:// or https://, got {a.base_url!r}")
    if _plans_done(a.out):
        return
    if not os.environ.get(a.api_key_env):
        raise UsageError(
            f"environment variable {a.api_key_env} is not set: it must hold the API key for {a.base_url} "
            "(export it, or name another variable with --api-key-env"
            + ("; --plans none needs no key)" if a.cmd == "prepare" else ")")
        )
    _check_reachable(a.base_url)


def _check_reachable(base_url: str, timeout: float = 10.0) -> None:
    """A TCP connection to the API's host and port (no request is sent): a wrong host or port fails here, before
    any reference run, instead of after them. Proxies (HTTPS_PROXY) are not followed: the check is skipped then."""
    import socket
    from urllib.parse import urlsplit

    if os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy") or os.environ.get("ALL_PROXY"):
        return
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        raise UsageError(f"--base-url {base_url}: cannot connect to {url.hostname}:{port} ({exc})") from None


def _written(out: Path, cmd: str) -> list[str]:
    names = {
        "prepare": ["train.parquet", "val.parquet", "problems.jsonl", "quarantine.jsonl", "plans.jsonl",
                    "report.json"],
        "validate": ["problems.jsonl", "quarantine.jsonl", "report.json"],
        "plans": ["plans.jsonl"],
        "build": ["train.parquet", "val.parquet", "report.json"],
        "report": ["report.json"],
    }[cmd]
    return [str(out / n) for n in names if (out / n).is_file()]


def _next_command(out: Path, cmd: str) -> str:
    q = shlex.quote(str(out))
    if cmd in ("prepare", "build", "report"):
        return f"DATA_DIR={q} bash recipe/mrgrpo/run_qwen3_apps.sh   (DRY_RUN=1 first to see the launch)"
    if cmd == "validate":
        return f"mrgrpo data plans --out {q} --plans batch   (or: mrgrpo data build --out {q} --no-plans)"
    return f"mrgrpo data build --out {q}"


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    out: Path = a.out
    prog = f"mrgrpo data {a.cmd}"
    progress = not a.quiet and sys.stderr.isatty()
    t0 = time.perf_counter()
    outcomes = []
    try:
        # cheap checks first: nothing below may fail on a typo after minutes of work
        if a.cmd in ("prepare", "validate") and a.input is not None:
            check_input_file(a.input, "--input")
        if a.cmd in ("prepare", "plans"):
            _check_api(a)
        if a.cmd not in ("prepare", "validate") and not (out / pipeline.PROBLEMS).is_file():
            raise UsageError(f"{out / pipeline.PROBLEMS} not found: run `mrgrpo data validate --out {out}` first")
        check_writable_dir(out)
        with OutLock(out, "mrgrpo data"):
            if a.cmd in ("prepare", "validate"):
                outcomes.append(
                    pipeline.run_validate(out, a.input, _validate_opts(a), progress=progress, force=a.force)
                )
            if a.cmd == "plans" or (a.cmd == "prepare" and a.plans != "none"):
                quiet_log = (lambda line: None) if a.quiet else None  # None: progress lines to stderr
                outcomes.append(pipeline.run_plans(out, _plan_opts(a), cache_dir=a.plan_cache, progress=progress,
                                                   log=quiet_log))
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
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except BatchPending as e:
        print(f"mrgrpo data: {e}", file=sys.stderr)
        return EXIT_PENDING
    except PlansInterrupted:  # plans.py printed "interrupted: N saved, re-run to resume"
        return EXIT_INTERRUPTED
    except pipeline.ValidateInterrupted as e:
        return report_interrupt(f"interrupted: {e.saved} saved, re-run to resume")
    except KeyboardInterrupt:  # build/report: files are written atomically, nothing is half-written
        return report_interrupt("interrupted: 0 saved, re-run to resume")
    except (DataError, FileNotFoundError, ProblemFormatError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:  # a disk that fills up, a file that vanished: one line naming the file
        where = f" ({e.filename})" if getattr(e, "filename", None) else ""
        print(f"{prog}: error: {e.strerror or e}{where}", file=sys.stderr)
        return EXIT_FAILED
    files = _written(out, a.cmd)
    # the closing lines are a log (stderr): stdout stays the command's output (the summary, or JSON for `plans`)
    print(f"wrote {out} in {time.perf_counter() - t0:.1f}s: " + ", ".join(Path(f).name for f in files),
          file=sys.stderr)
    print(f"next: {_next_command(out, a.cmd)}", file=sys.stderr)
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
