"""Stage 3: verl parquet rows (``train.parquet``, ``val.parquet``), stratified by difficulty, fixed seed.

Row schema (docs/architecture.md, "mrgrpo.data parquet row"); the Arrow schema is explicit so that a
column that is null in every row of a split (``fn_name`` in an all-stdio split) keeps its type.
"""

from __future__ import annotations

import io
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from mrgrpo import prompts
from mrgrpo.apps import Problem

AGENT_NAME = "plan_code"
ABILITY = "code"


def arrow_schema():
    import pyarrow as pa

    msg = pa.struct([("role", pa.string()), ("content", pa.string())])
    extra = pa.struct(
        [
            ("index", pa.int64()),
            ("split", pa.string()),
            ("difficulty", pa.string()),
            ("source_id", pa.string()),
            ("plan", pa.string()),
            ("plan_model", pa.string()),
            ("io_mode", pa.string()),
            ("fn_name", pa.string()),
            ("class_name", pa.string()),
            ("public_tests", pa.string()),
            ("num_tests", pa.int64()),
            ("reference_solution", pa.string()),
            ("special", pa.list_(pa.string())),
            ("statement", pa.string()),
            ("starter_code", pa.string()),
            ("prompt_version", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(msg)),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra),
            ("agent_name", pa.string()),
        ]
    )


@dataclass(frozen=True)
class BuildOptions:
    val_fraction: float = 0.1
    seed: int = 0
    use_plans: bool = True
    require_plans: bool = False  # a problem without an accepted plan is quarantined instead of built plan-less

    def __post_init__(self):
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"BuildOptions.val_fraction must be in [0, 1), got {self.val_fraction}")


def stratified_split(keys_by_difficulty: dict[str, list[str]], val_fraction: float, seed: int) -> set[str]:
    """Keys that go to validation: round(n * fraction) of each difficulty, drawn with ``Random(seed)``
    from the keys sorted (so the result does not depend on input order)."""
    val: set[str] = set()
    for difficulty in sorted(keys_by_difficulty):
        keys = sorted(keys_by_difficulty[difficulty])
        rng = random.Random(f"{seed}:{difficulty}")
        rng.shuffle(keys)
        n_val = int(len(keys) * val_fraction + 0.5)
        if len(keys) >= 2:
            n_val = min(n_val, len(keys) - 1)
        val.update(keys[:n_val])
    return val


def make_row(p: Problem, problem_row: dict, plan: str, plan_model: str, split: str, index: int) -> dict:
    special = list(problem_row.get("special") or [])
    # One codec (mrgrpo.testset) for both halves: the public tests (the first n_public, shown by the agent loop's
    # feedback) go to extra_info only; the reward's ground truth holds the HIDDEN tests only, so the reward and
    # its `acc` measure what the policy never saw. float_tol (validated float answers) and the problem's own
    # time limit (time_s) travel with both.
    public, hidden = p.tests(problem_row.get("float_tol")).split(int(problem_row["n_public"]))
    if not len(hidden):
        raise ValueError(f"{p.source_id}: no hidden test left after {len(public)} public ones")
    return {
        "data_source": p.data_source,
        "prompt": prompts.build_messages(p.statement, p.starter_code, p.io_mode, p.fn_name, plan or None, p.class_name),
        "ability": ABILITY,
        "reward_model": {"style": "rule", "ground_truth": hidden.to_json()},
        "extra_info": {
            "index": index,
            "split": split,
            "difficulty": p.difficulty,
            "source_id": p.source_id,
            "plan": plan or "",
            "plan_model": plan_model if plan else "",
            "io_mode": p.io_mode,
            "fn_name": p.fn_name,
            "class_name": p.class_name,
            "public_tests": public.to_json(),
            "num_tests": len(hidden),
            "reference_solution": p.reference_solution or "",
            "special": special,
            "statement": p.statement,
            "starter_code": p.starter_code or "",
            "prompt_version": prompts.PROMPT_VERSION,
        },
        "agent_name": AGENT_NAME,
    }


def parquet_bytes(rows: Sequence[dict]) -> bytes:
    """Deterministic parquet bytes for ``rows`` (same rows -> same bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows), schema=arrow_schema())
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


@dataclass
class BuildResult:
    train: list[dict]
    val: list[dict]
    dropped: list[dict]  # quarantine rows (stage "plans") when require_plans


def build_rows(problems: Sequence[tuple[Problem, dict]], plans: dict[str, dict], opts: BuildOptions) -> BuildResult:
    """``problems``: (Problem, its problems.jsonl row); ``plans``: source_id -> plans.jsonl row."""
    kept, dropped = [], []
    for p, prow in problems:
        plan_row = plans.get(p.source_id) if opts.use_plans else None
        plan = plan_row["plan"] if plan_row and plan_row["status"] == "ok" else ""
        if opts.use_plans and not plan:
            if opts.require_plans:
                reason = plan_row["reason"] if plan_row else "no plan stage output"
                dropped.append(
                    {
                        "where": prow.get("where"),
                        "source_id": p.source_id,
                        "reason": "plan_failed",
                        "detail": reason,
                        "raw": "",
                        "stage": "plans",
                    }
                )
                continue
            prow = {**prow, "special": sorted({*prow.get("special", []), "plan_failed"})}
        kept.append((p, prow, plan, plan_row["model"] if plan_row else ""))
    by_diff: dict[str, list[str]] = defaultdict(list)
    for p, *_ in kept:
        by_diff[p.difficulty].append(p.source_id)
    val_ids = stratified_split(by_diff, opts.val_fraction, opts.seed)
    train, val = [], []
    for p, prow, plan, model in kept:
        split_rows, split = (val, "val") if p.source_id in val_ids else (train, "train")
        split_rows.append(make_row(p, prow, plan, model, split, len(split_rows)))
    return BuildResult(train, val, dropped)
