"""Benchmark: what the plan -> code -> feedback loop costs over one attempt, at equal batch.

    python benchmarks/multiturn_cost.py --model DIR --data PARQUET [--rounds 0,2] [--n 8] [--limit 32]
        [--max-response-length 4096] [--gpu-memory-utilization 0.5] [--out DIR]

The training agent loop (`PlanCodeAgentLoop`, the recipe's settings) rolls out the same problems with each number of
feedback rounds K, on one in-process vLLM engine whose prefix cache is emptied before each K (`mrgrpo eval`'s
engine and server; vLLM's prefix caching on, as in verl's rollout). Every model call is recorded: its prompt
tokens, the part vLLM served from its prefix cache (``RequestOutput.num_cached_tokens``) and the tokens generated.
Per K it prints: rollout wall, calls per trajectory, generated / prompt / prefilled (not cached) tokens, the
prefix-cache hit rate of the calls after a trajectory's first code attempt (the feedback turns: their prompt is
the previous context plus one new message) and of every call after the first, and seconds per 1,000 generated
tokens, with its ratio against the first K (the cost per generated token of the loop against one attempt).
A short warm-up rollout (not counted) runs first, so the first K does not pay for the engine's first batches.

Results also go to ``--out`` as ``calls_K<k>.jsonl`` (one line per call) and ``summary.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path


def turn_summary(calls: list[dict], plan_first: bool) -> dict:
    """Token and prefix-cache totals of one K's calls (pure). ``plan_first``: the first call of a trajectory is its
    plan (plan source ``self``), so its first code attempt is its second call; otherwise its first."""
    by_traj: dict[str, list[dict]] = {}
    for c in calls:
        by_traj.setdefault(c["request_id"], []).append(c)
    first_code = 1 if plan_first else 0
    tot = {"trajectories": len(by_traj), "calls": len(calls), "generated": 0, "prompt": 0, "cached": 0,
           "feedback_calls": 0, "feedback_prompt": 0, "feedback_cached": 0, "later_prompt": 0, "later_cached": 0}
    for seq in by_traj.values():
        for i, c in enumerate(seq):
            prompt, cached = len(c["prompt_ids"]), int(c.get("num_cached_tokens") or 0)
            tot["generated"] += len(c["token_ids"])
            tot["prompt"] += prompt
            tot["cached"] += cached
            if i > 0:
                tot["later_prompt"] += prompt
                tot["later_cached"] += cached
            if i > first_code:
                tot["feedback_calls"] += 1
                tot["feedback_prompt"] += prompt
                tot["feedback_cached"] += cached
    tot["prefilled"] = tot["prompt"] - tot["cached"]
    tot["feedback_hit"] = tot["feedback_cached"] / tot["feedback_prompt"] if tot["feedback_prompt"] else None
    tot["later_hit"] = tot["later_cached"] / tot["later_prompt"] if tot["later_prompt"] else None
    tot["cache_reported"] = all(c.get("num_cached_tokens") is not None for c in calls)
    return tot


def table(rows: list[dict]) -> str:
    def pct(x):
        return "-" if x is None else f"{x:.1%}"

    base = rows[0]["s_per_1k_generated"] if rows else None
    out = ["| K | trajectories | rollout wall | calls / trajectory | generated tokens | prompt tokens | prefilled "
           "(not cached) | prefix-cache hit, feedback turns (calls) | hit, every call after the first | s per 1k "
           "generated tokens | vs first K |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['s_per_1k_generated'] / base:.2f}x" if base else "-"
        per_traj = r["calls"] / max(1, r["trajectories"])
        out.append(f"| {r['rounds']} | {r['trajectories']} | {r['wall_s']:.1f} s | {per_traj:.2f} | {r['generated']:,} "
                   f"| {r['prompt']:,} | {r['prefilled']:,} | {pct(r['feedback_hit'])} "
                   f"({r['feedback_calls']}) | {pct(r['later_hit'])} | {r['s_per_1k_generated']:.3f} | {ratio} |")
    return "\n".join(out)


async def _rollout(engine, server_cls, rows, tokenizer, settings, hf_type):
    from mrgrpo.eval.run import evaluate

    await engine.reset_prefix_cache()
    server = server_cls(engine, settings.max_prompt_length + settings.max_response_length, record=True)
    start = time.monotonic()
    records = await evaluate(rows, server, tokenizer, settings, hf_model_type=hf_type, progress=False)
    return records, server.calls, time.monotonic() - start


async def _all_rounds(engine, rows, tokenizer, common: dict, ks: list[int], warmup: int, hf_type, out: Path):
    from mrgrpo.eval.engine import AsyncVllmServer
    from mrgrpo.eval.run import EvalSettings

    results = []
    warm = EvalSettings(**{**common, "n": 1}, rounds=ks[0])
    await _rollout(engine, AsyncVllmServer, rows[:warmup], tokenizer, warm, hf_type)
    for k in ks:
        settings = EvalSettings(**common, rounds=k)
        records, calls, wall = await _rollout(engine, AsyncVllmServer, rows, tokenizer, settings, hf_type)
        summary = turn_summary(calls, plan_first=settings.plan_source == "self")
        summary.update(rounds=k, wall_s=wall, plan_source=settings.plan_source,
                       s_per_1k_generated=wall / max(1, summary["generated"]) * 1000,
                       acc=sum(r.acc for r in records) / max(1, len(records)),
                       attempts=sum(r.attempts for r in records) / max(1, len(records)))
        results.append(summary)
        with open(out / f"calls_K{k}.jsonl", "w") as f:
            for c in calls:
                f.write(json.dumps({"request_id": c["request_id"], "prompt": len(c["prompt_ids"]),
                                    "cached": c.get("num_cached_tokens"), "generated": len(c["token_ids"]),
                                    "max_tokens": c["max_tokens"], "finish_reason": c["finish_reason"]}) + "\n")
        print(f"K={k}: {summary['trajectories']} trajectories, {wall:.1f} s, mean attempts "
              f"{summary['attempts']:.2f}, acc {summary['acc']:.3f}", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a local HF model directory")
    ap.add_argument("--data", required=True, help="a parquet of `mrgrpo data prepare` (e.g. val.parquet)")
    ap.add_argument("--rounds", default="0,2", help="comma-separated K values, the first is the baseline (default 0,2)")
    ap.add_argument("--n", type=int, default=8, help="samples per problem (default 8, the default profile's group)")
    ap.add_argument("--limit", type=int, default=32, help="problems (default 32, the default profile's batch)")
    ap.add_argument("--plan-source", default=None, help="self | teacher | none (default: the recipe's)")
    ap.add_argument("--max-prompt-length", type=int, default=2048)
    ap.add_argument("--max-response-length", type=int, default=4096)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--warmup", type=int, default=4, help="trajectories rolled out first and not counted (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="multiturn_cost", help="directory for calls_K*.jsonl and summary.json")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.rounds.split(",") if k.strip()]
    if not ks or min(ks) < 0:
        ap.error("--rounds: comma-separated K >= 0")
    if not Path(args.model, "config.json").is_file():
        ap.error(f"--model {args.model}: no config.json there")
    if not Path(args.data).is_file():
        ap.error(f"--data {args.data}: no such file")

    from transformers import AutoConfig, AutoTokenizer

    from mrgrpo.eval.engine import build_async_engine, on_cpu
    from mrgrpo.eval.run import EvalSettings, load_rows

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = dict(n=args.n, temperature=args.temperature, plan_source=args.plan_source,
                  max_prompt_length=args.max_prompt_length, max_response_length=args.max_response_length,
                  limit=args.limit)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    hf_type = getattr(AutoConfig.from_pretrained(args.model), "model_type", None)
    loaded = load_rows(args.data, tokenizer, EvalSettings(**common, rounds=ks[0]))
    rows = loaded.rows
    if not rows:
        print(f"{args.data}: no problem fits --max-prompt-length {args.max_prompt_length}", file=sys.stderr)
        return 2
    if on_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    else:
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    engine = build_async_engine(args.model, max_model_len=args.max_prompt_length + args.max_response_length,
                                seed=args.seed, gpu_memory_utilization=args.gpu_memory_utilization,
                                enforce_eager=args.enforce_eager)
    try:
        # One event loop for the engine's whole life: vLLM's async engine serves the loop it first ran in.
        results = asyncio.run(_all_rounds(engine, rows, tokenizer, common, ks, args.warmup, hf_type, out))
    finally:
        engine.shutdown()
        del engine
    (out / "summary.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    if not all(r["cache_reported"] for r in results):
        print("note: this vLLM did not report cached prompt tokens for every call; hit rates count those as misses")
    print(f"wrote {out}/summary.json and {out}/calls_K*.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
