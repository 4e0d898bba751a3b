"""The stages of ``mrgrpo data`` over one output directory, each resumable and idempotent.

DIR/problems.jsonl        validated problems (stage validate)
DIR/quarantine.jsonl      one line per rejected input record, with the reason (validate; build adds
                          plan_failed rows with --require-plans)
DIR/plans.jsonl           one line per problem: plan status, plan text, reason (stage plans)
DIR/plans/                plan cache, batch state and files, rejected raw responses
DIR/cache/                reference-run cache
DIR/train.parquet, DIR/val.parquet   (stage build)
DIR/report.json           (stage report; deterministic: no timings)
DIR/state.json            fingerprints of the completed stages
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mrgrpo import prompts
from mrgrpo.apps import bundled_sample_path
from mrgrpo.data import store
from mrgrpo.data.build import BuildOptions, build_rows, parquet_bytes
from mrgrpo.data.plans import PlanOptions, generate_plans, make_client, usage_dict
from mrgrpo.data.runner import ReferenceRunner
from mrgrpo.data.store import DataError
from mrgrpo.data.validate import NOT_FINAL, ValidateOptions, problem_from_dict, validate
from mrgrpo.errors import UsageError

PROBLEMS = "problems.jsonl"
QUARANTINE = "quarantine.jsonl"
PLANS = "plans.jsonl"
REPORT = "report.json"
REFERENCE_CACHE = ("cache", "reference_runs.jsonl")


class ValidateInterrupted(KeyboardInterrupt):
    """Ctrl-C during validate: every finished reference run is in the cache; ``saved`` counts them."""

    def __init__(self, saved: int):
        super().__init__(saved)
        self.saved = saved


def resolve_input(path: str | Path | None) -> tuple[Path, str]:
    """(path, label for the report). No path: the bundled APPS+ sample."""
    if path is None:
        p = bundled_sample_path()
        return p, f"bundled:{p.name}"
    p = Path(path)
    if p.is_dir():
        raise DataError(f"mrgrpo data: input {p} is a directory: pass one .jsonl, .json or .parquet file")
    if not p.is_file():
        raise FileNotFoundError(f"mrgrpo data: input file not found: {p}")
    return p, str(p)


@dataclass
class StageOutcome:
    name: str
    skipped: bool
    seconds: float
    info: dict = field(default_factory=dict)


# ---------------------------------------------------------------- validate


def _cache_rows(path: Path) -> list[dict]:
    return list(store.read_jsonl(path, tolerate_bad_lines=True)) if path.is_file() else []


def count_reference_cache(out: Path) -> int:
    """Reference runs saved in ``DIR/cache/reference_runs.jsonl`` (distinct jobs)."""
    return len({r.get("key") for r in _cache_rows(out.joinpath(*REFERENCE_CACHE)) if isinstance(r, dict)})


def _load_verdicts_quarantined(out: Path) -> bool:
    """Whether the last validate quarantined a reference for a verdict load can cause (TLE, INFRA): the stage is then
    not up to date, and runs again to judge those references (the rest come from the cache)."""
    for row in _cache_rows(out / QUARANTINE):
        if not isinstance(row, dict) or row.get("stage") != "validate":
            continue
        verdict = str(row.get("detail", "")).split(":", 1)[0]
        if row.get("reason") == "sandbox_infra" or (row.get("reason") == "reference_failed" and verdict in NOT_FINAL):
            return True
    return False


def run_validate(
    out: Path,
    input_path: str | Path | None,
    opts: ValidateOptions,
    runner: ReferenceRunner | None = None,
    progress: bool = False,
    force: bool = False,
) -> StageOutcome:
    t0 = time.perf_counter()
    path, label = resolve_input(input_path)
    input_sha = store.file_sha256(path)
    fingerprint = store.stable_hash({"input": input_sha, "options": opts.fingerprint_dict()})
    state = store.StageState(out)
    before = (state.data.get("validate") or {}).get("info") or {}
    if not force and before.get("input_sha256") not in (None, input_sha) and before.get("input") != label:
        raise UsageError(
            f"{out} holds data prepared from another input ({before.get('input')}); this run reads {label}: "
            "use another --out, or add --force to replace that data"
        )
    if (not force and state.is_done("validate", fingerprint, [out / PROBLEMS, out / QUARANTINE])
            and not _load_verdicts_quarantined(out)):
        return StageOutcome("validate", True, time.perf_counter() - t0, state.data["validate"].get("info", {}))
    try:
        res = validate(path, out, opts, runner=runner, progress=progress, force=force)
    except KeyboardInterrupt:
        raise ValidateInterrupted(count_reference_cache(out)) from None
    store.write_text_if_changed(out / PROBLEMS, store.jsonl_text(res.problems))
    quarantine = [{**q, "stage": "validate"} for q in res.quarantined]
    store.write_text_if_changed(out / QUARANTINE, store.jsonl_text(quarantine))
    if not res.problems:
        records = len(res.quarantined)
        if records == 0:
            raise DataError(f"{label} holds no records (an empty file?): nothing to build")
        reasons = Counter(q["reason"] for q in res.quarantined)
        first = res.quarantined[0]
        raise DataError(
            f"no record of {label} was kept: all {records} quarantined ("
            + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
            + f"; first: {first.get('where')}: {first.get('detail', '')[:120]}); see {out / QUARANTINE}"
        )
    info = {
        "input": label,
        "input_sha256": input_sha,
        "kept": len(res.problems),
        "quarantined": len(res.quarantined),
        "records": len(res.problems) + len(res.quarantined),
    }
    state.mark_done("validate", fingerprint, info=info)
    return StageOutcome("validate", False, time.perf_counter() - t0, {**info, "reference_runs": res.reference_runs})


def load_problems(out: Path) -> list[tuple[Any, dict]]:
    path = out / PROBLEMS
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `mrgrpo data validate --out {out}` first")
    return [(problem_from_dict(r), r) for r in store.read_jsonl(path)]


# ---------------------------------------------------------------- plans


def run_plans(
    out: Path,
    opts: PlanOptions,
    cache_dir: str | Path | None = None,
    client_factory=make_client,
    progress: bool = False,
    sleep=time.sleep,
    log=None,
) -> StageOutcome:
    """The plan stage. Progress lines (``log``; default: stderr) never mix with the machine output on stdout."""
    if log is None:
        def log(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    problems = [p for p, _ in load_problems(out)]
    res = generate_plans(
        problems,
        opts,
        out / "plans",
        cache_dir or out / "plans" / "cache",
        client_factory,
        progress=progress,
        sleep=sleep,
        log=log,
    )
    store.write_text_if_changed(out / PLANS, store.jsonl_text(res.rows))
    summary = {
        "backend": opts.backend,
        "model": opts.model,
        "prompt_version": opts.prompt_version,
        "ok": res.counts["ok"],
        "failed": res.counts["failed"],
        "attempts": res.counts["attempts"],
        "rejected_attempts": res.counts["rejected_attempts"],
        "usage_total": usage_dict(res.usage_total),
        "price_per_1m": {
            "prompt": opts.price_in_per_m,
            "completion": opts.price_out_per_m,
            "batch_discount": opts.batch_discount,
        },
    }
    state = store.StageState(out)
    state.mark_done("plans", store.stable_hash(summary), info=summary)
    failed = [r for r in res.rows if r["status"] != "ok"]
    info = {
        **summary,
        "requested_now": res.requested,
        "usage_now": usage_dict(res.usage_now),
        "failed_examples": [(r["source_id"], r["reason"]) for r in failed[:10]],
    }
    return StageOutcome("plans", res.requested == 0, time.perf_counter() - t0, info)


# ---------------------------------------------------------------- build


def run_build(out: Path, opts: BuildOptions) -> StageOutcome:
    t0 = time.perf_counter()
    problems = load_problems(out)
    plans: dict[str, dict] = {}
    if opts.use_plans:
        if not (out / PLANS).is_file():
            raise FileNotFoundError(f"{out / PLANS} not found: run `mrgrpo data plans` first, or build with --no-plans")
        plans = {r["source_id"]: r for r in store.read_jsonl(out / PLANS)}
    res = build_rows(problems, plans, opts)
    if not res.train and not res.val:
        raise DataError(
            f"no row to build from {out / PROBLEMS} ({len(problems)} problems, {len(res.dropped)} without a plan "
            "dropped by --require-plans): nothing written"
        )
    changed = store.write_bytes_if_changed(out / "train.parquet", parquet_bytes(res.train))
    changed |= store.write_bytes_if_changed(out / "val.parquet", parquet_bytes(res.val))
    # quarantine.jsonl: the validate rows, then this build's plan_failed rows (replacing an earlier build's)
    q = (
        [r for r in store.read_jsonl(out / QUARANTINE) if r.get("stage") != "plans"]
        if (out / QUARANTINE).is_file()
        else []
    )
    store.write_text_if_changed(out / QUARANTINE, store.jsonl_text(q + res.dropped))
    info = {
        "train": len(res.train),
        "val": len(res.val),
        "dropped_no_plan": len(res.dropped),
        "with_plan": sum(bool(r["extra_info"]["plan"]) for r in res.train + res.val),
        "options": dataclasses.asdict(opts),
    }
    store.StageState(out).mark_done("build", store.stable_hash(info), info=info)
    return StageOutcome("build", not changed, time.perf_counter() - t0, info)


# ---------------------------------------------------------------- report


def make_report(out: Path) -> dict:
    state = store.StageState(out).data
    problems = [r for _, r in load_problems(out)]
    quarantine = list(store.read_jsonl(out / QUARANTINE)) if (out / QUARANTINE).is_file() else []
    build = state.get("build", {}).get("info", {})
    split_of: dict[str, str] = {}
    for split in ("train", "val"):
        path = out / f"{split}.parquet"
        if path.is_file():
            import pyarrow.parquet as pq

            for info in pq.read_table(path, columns=["extra_info"]).column("extra_info").to_pylist():
                split_of[info["source_id"]] = split
    by_diff: dict[str, Counter] = {}
    for r in problems:
        c = by_diff.setdefault(r["difficulty"], Counter())
        c["kept"] += 1
        c[split_of.get(r["source_id"], "not_built")] += 1
    quarantine_reasons = Counter(q["reason"] for q in quarantine)
    special = Counter(f for r in problems for f in r["special"])
    plans = (
        state.get("plans", {}).get("info")
        if (out / PLANS).is_file() and build.get("options", {}).get("use_plans")
        else None
    )
    report = {
        "input": state.get("validate", {}).get("info", {}),
        "prompt_version": prompts.PROMPT_VERSION,
        "counts": {
            "records": len(problems) + sum(q.get("stage") == "validate" for q in quarantine),
            "kept": len(problems),
            "quarantined": len(quarantine),
            "train": build.get("train", 0),
            "val": build.get("val", 0),
        },
        "by_difficulty": {d: dict(sorted(c.items())) for d, c in sorted(by_diff.items())},
        "by_io_mode": dict(sorted(Counter(r["io_mode"] for r in problems).items())),
        "quarantine_reasons": dict(sorted(quarantine_reasons.items())),
        "quarantined": [
            {
                "source_id": q.get("source_id"),
                "where": q.get("where"),
                "reason": q["reason"],
                "detail": q.get("detail", ""),
            }
            for q in quarantine
        ],
        "special": dict(sorted(special.items())),
        "special_items": sum(bool(r["special"]) for r in problems),
        "public_tests": dict(sorted(Counter(str(r["n_public"]) for r in problems).items())),
        "plans": plans,
    }
    store.write_text_if_changed(out / REPORT, store.dump_json(report))
    return report


def format_summary(report: dict, outcomes: list[StageOutcome]) -> str:
    c = report["counts"]
    lines = [
        f"records {c['records']}: kept {c['kept']}, quarantined {c['quarantined']}, train {c['train']}, val {c['val']}"
    ]
    for d, cnt in report["by_difficulty"].items():
        lines.append(
            f"  {d:<13} kept {cnt.get('kept', 0):>5}  train {cnt.get('train', 0):>5}  val {cnt.get('val', 0):>4}"
        )
    if report["quarantine_reasons"]:
        lines.append("quarantined: " + ", ".join(f"{k} {v}" for k, v in report["quarantine_reasons"].items()))
        for q in report["quarantined"][:10]:
            lines.append(f"  {q['source_id'] or q['where']}: {q['reason']}: {q['detail'][:100]}")
    if report["special"]:
        lines.append(
            f"special items {report['special_items']}: " + ", ".join(f"{k} {v}" for k, v in report["special"].items())
        )
    p = report.get("plans")
    if p:
        u = p["usage_total"]
        lines.append(
            f"plans ({p['backend']}, {p['model']}): ok {p['ok']}, failed {p['failed']}, "
            f"attempts {p['attempts']} (rejected {p['rejected_attempts']}); tokens {u['prompt_tokens']} in / "
            f"{u['completion_tokens']} out, est. cost ${u['cost_usd']:.4f}"
        )
    else:
        lines.append("plans: none")
    for o in outcomes:
        extra = ""
        if o.name == "plans":
            un = o.info.get("usage_now", {})
            extra = (
                f" (requested {o.info.get('requested_now', 0)}, {un.get('prompt_tokens', 0)}+"
                f"{un.get('completion_tokens', 0)} tokens now, ${un.get('cost_usd', 0):.4f})"
            )
        if o.name == "validate" and not o.skipped:
            extra = f" ({o.info.get('reference_runs', 0)} reference runs)"
        lines.append(f"stage {o.name:<8} {'up to date' if o.skipped else 'done':<10} {o.seconds:6.2f}s{extra}")
    return "\n".join(lines)
