"""``mrgrpo eval``: pass@k of a checkpoint on a verl parquet, with the training agent loop and reward.

    mrgrpo eval --model CKPT_OR_HF_DIR --data val.parquet --out outputs/eval --n 10 --k 1,5,10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mrgrpo.eval.passk import parse_ks


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mrgrpo eval",
        description="pass@k of a model on a verl parquet built by `mrgrpo data prepare`, with the training agent loop "
        "(plan -> code -> public-test feedback) and the training reward (hidden tests). Writes summary.json, "
        "per_problem.csv, report.md and passk.png to --out.",
        epilog="exit status: 0 evaluated; 2 bad arguments or no rows to evaluate; 3 vLLM's engine failed to start "
        "twice (on a GPU shared with a training run or another engine: give this one a larger "
        "--gpu-memory-utilization than theirs).",
    )
    p.add_argument("--model", required=True, help="an HF model directory, or a verl checkpoint (global_step_N or its "
                   "actor/ directory; FSDP), merged to HF with verl's model merger into --merged-dir")
    p.add_argument("--data", required=True, help="a parquet from `mrgrpo data prepare` (e.g. val.parquet)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--n", type=int, default=10, help="samples per problem (default 10)")
    p.add_argument("--k", default="1,5,10", help="comma-separated k values, each <= n (default 1,5,10)")
    p.add_argument("--plan-source", choices=("none", "self", "teacher"), default="self",
                   help="who writes the plan (default self; a row's extra_info.plan_source overrides it)")
    p.add_argument("--rounds", type=int, default=None,
                   help="feedback rounds K (default: mrgrpo.agent_loop.rounds of the recipe's trainer yaml, 2)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling top_p (default 1.0)")
    p.add_argument("--top-k", type=int, default=-1, help="top_k (default -1: off)")
    p.add_argument("--max-prompt-length", type=int, default=2048,
                   help="longer first prompts are dropped, as verl's filter does (default 2048)")
    p.add_argument("--max-response-length", type=int, default=4096,
                   help="token budget of a whole trajectory after the prompt (default 4096)")
    p.add_argument("--limit", type=int, default=-1, help="evaluate the first N problems only (default all)")
    p.add_argument("--concurrency", type=int, default=256, help="trajectories in flight at once (default 256)")
    p.add_argument("--enable-thinking", action="store_true",
                   help="Qwen3 thinking on (the recipe's default is off: apply_chat_template_kwargs.enable_thinking)")
    p.add_argument("--agent-loop-config", default=None,
                   help="agent-loop yaml (default: recipe/mrgrpo/config/agent_loop.yaml of this checkout)")
    p.add_argument("--reward-kwargs", default="{}",
                   help="JSON: the run's reward.custom_reward_function.reward_kwargs (sandbox limits, weights; acc "
                   "does not depend on the weights)")
    p.add_argument("--merged-dir", default=None, help="where a verl checkpoint is merged to HF (default OUT/merged_hf)")
    p.add_argument("--seed", type=int, default=0, help="vLLM engine seed (default 0)")
    p.add_argument("--tensor-parallel-size", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--dtype", default="auto", help="vLLM dtype (default auto)")
    p.add_argument("--enforce-eager", action="store_true", help="vLLM without CUDA graphs")
    p.add_argument("--no-progress", "--quiet", action="store_true", help="no progress bar (--quiet is the same)")
    return p


def is_hf_dir(path: Path) -> bool:
    return (path / "config.json").is_file()


def checkpoint_actor_dir(path: Path) -> Path | None:
    """The FSDP actor directory of a verl checkpoint (``global_step_N`` or ``global_step_N/actor``), else None."""
    for cand in (path / "actor", path):
        if (cand / "fsdp_config.json").is_file() or any(cand.glob("model_world_size_*_rank_*.pt")):
            return cand
    return None


def merge_command(actor_dir: Path, target: Path) -> list[str]:
    """verl's own model merger (FSDP -> HF)."""
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor_dir),
            "--target_dir", str(target)]


def resolve_model(model: str, merged_dir: Path) -> tuple[Path, str]:
    """(an HF model directory, how it was obtained). A verl checkpoint is merged once into ``merged_dir``."""
    path = Path(model).expanduser()
    if is_hf_dir(path):
        return path, "hf"
    actor = checkpoint_actor_dir(path)
    if actor is None:
        raise SystemExit(f"mrgrpo eval: --model {model} is neither an HF model directory (config.json) nor a verl "
                         "FSDP checkpoint (global_step_N/actor with fsdp_config.json and model_world_size_*_rank_*.pt)")
    if is_hf_dir(merged_dir):
        print(f"mrgrpo eval: using the merged model in {merged_dir}", file=sys.stderr)
        return merged_dir, f"verl checkpoint {actor}, merged earlier"
    cmd = merge_command(actor, merged_dir)
    print("mrgrpo eval: merging the checkpoint: " + " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True)
    if not is_hf_dir(merged_dir):
        raise SystemExit(f"mrgrpo eval: verl's model merger wrote no config.json into {merged_dir}")
    return merged_dir, f"verl checkpoint {actor}, merged by verl.model_merger"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        ks = parse_ks(args.k, args.n)
        reward_kwargs = json.loads(args.reward_kwargs)
        if not isinstance(reward_kwargs, dict):
            raise ValueError(f"--reward-kwargs must be a JSON object, got {args.reward_kwargs!r}")
    except ValueError as exc:
        print(f"mrgrpo eval: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir, model_how = resolve_model(args.model, Path(args.merged_dir) if args.merged_dir else out / "merged_hf")

    from transformers import AutoConfig, AutoTokenizer

    from mrgrpo.eval.engine import AsyncVllmServer, EngineStartError, build_async_engine, on_cpu
    from mrgrpo.eval.report import write_outputs
    from mrgrpo.eval.run import EvalSettings, evaluate, load_rows

    settings = EvalSettings(
        n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, plan_source=args.plan_source,
        rounds=args.rounds, max_prompt_length=args.max_prompt_length, max_response_length=args.max_response_length,
        limit=args.limit, concurrency=args.concurrency, enable_thinking=args.enable_thinking,
        agent_loop_config=args.agent_loop_config, reward_kwargs=reward_kwargs,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    hf_type = getattr(AutoConfig.from_pretrained(str(model_dir)), "model_type", None)
    rows = load_rows(args.data, tokenizer, settings)
    if not rows:
        print(f"mrgrpo eval: no rows left in {args.data} (all longer than --max-prompt-length?)", file=sys.stderr)
        return 2
    max_model_len = settings.max_prompt_length + settings.max_response_length
    if on_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    else:
        # CUDA may already be initialised in this process (imports above): the engine core must not be forked.
        # `python -m mrgrpo` and the console script are safe to spawn from (no main() re-run in the child).
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    start = time.monotonic()
    try:
        engine = build_async_engine(str(model_dir), max_model_len=max_model_len, seed=args.seed, dtype=args.dtype,
                                    gpu_memory_utilization=args.gpu_memory_utilization,
                                    tensor_parallel_size=args.tensor_parallel_size, enforce_eager=args.enforce_eager)
    except EngineStartError as exc:
        print(f"mrgrpo eval: {exc}", file=sys.stderr)
        return 3
    try:
        records = asyncio.run(evaluate(rows, AsyncVllmServer(engine, max_model_len), tokenizer, settings,
                                       hf_model_type=hf_type, progress=not args.no_progress))
    finally:
        engine.shutdown()
        del engine  # now, not at interpreter exit (vLLM's __del__ shuts down again and fails there)
    info = settings_info(settings, model=str(args.model), model_dir=str(model_dir), model_how=model_how,
                         data=str(args.data), seconds=time.monotonic() - start)
    summary = write_outputs(records, ks, info, out)
    overall = summary["overall"]
    line = ", ".join(f"{k} {v:.4f}" for k, v in overall["final"].items() if v is not None)
    line1 = ", ".join(f"{k} {v:.4f}" for k, v in overall["attempt1"].items() if v is not None)
    print(f"mrgrpo eval: {summary['num_problems']} problems x {args.n}: {line} (attempt 1: {line1}); "
          f"report {out / 'report.md'}")
    return 0


def settings_info(settings, **extra) -> dict:
    from dataclasses import asdict

    from mrgrpo.eval.run import trainer_config

    rounds = int(trainer_config(settings).mrgrpo.agent_loop.rounds)
    return json.loads(json.dumps({**asdict(settings), "rounds_effective": rounds, **extra}, default=str))


if __name__ == "__main__":
    raise SystemExit(main())
