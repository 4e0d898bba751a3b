"""``mrgrpo eval``: pass@k of a checkpoint on a verl parquet, with the training agent loop and reward.

    mrgrpo eval --model CKPT_OR_HF_DIR_OR_HUB_ID --data val.parquet --out outputs/eval --n 10 --k 1,5,10

Every mistake in the command line or its surroundings (options, ``--data``, ``--model``, a missing vLLM) is found
before any heavy import (`mrgrpo.eval.checks`) and is one line, ``mrgrpo eval: error: ...``, exit 2.
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

from mrgrpo.cli import EXIT_FAILED, EXIT_USAGE, HelpFormatter, OneLineParser, UsageError, check_writable_dir, number
from mrgrpo.config import recipe_settings
from mrgrpo.eval.checks import (
    GPU_INSTALL,
    ModelSource,
    check_data,
    check_file_option,
    check_vllm,
    checkpoint_actor_dir,  # noqa: F401  (part of this module's interface: tests, callers)
    fetch_hub_model,
    hub_offline,
    is_hf_dir,
    model_source,
    vllm_import_error,
)
from mrgrpo.eval.engine import EngineStartError
from mrgrpo.eval.passk import parse_ks
from mrgrpo.first_turn import PLAN_SOURCES
from mrgrpo.reward import RETIRED_KWARGS
from mrgrpo.sandbox import WALL_PER_CPU, Limits
from mrgrpo.testset import LimitsOverride

EXIT_ENGINE = 3

EXAMPLES = """examples:
  mrgrpo eval --model Qwen/Qwen3-0.6B --data outputs/apps_plus_sample/val.parquet --out outputs/eval/base
  mrgrpo eval --model ckpt/global_step_200 --data outputs/apps_plus_sample/val.parquet --out outputs/eval/step200 \\
      --n 10 --k 1,5,10 --plan-source self --rounds 2

exit status: 0 evaluated; 2 a usage error, found before any work (a bad option, --data missing, not a parquet or
without the columns or plans it needs, --model not found, vLLM not installed, every prompt longer than
--max-prompt-length); 1 verl's model merger failed; 3 vLLM's engine failed to start twice (on a GPU shared with
a training run or another engine: give this one a larger --gpu-memory-utilization than theirs)."""


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="mrgrpo eval",
        description="pass@k of a model on a verl parquet built by `mrgrpo data prepare`, with the training agent\n"
        "loop (plan -> code -> public-test feedback) and the training reward (hidden tests), on vLLM\n"
        f"(`{GPU_INSTALL}`). Writes summary.json, per_problem.csv, report.md and passk.png to --out.",
        epilog=EXAMPLES,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", required=True,
                   help="an HF model directory; a verl checkpoint (global_step_N or its actor/ directory; FSDP), "
                   "merged to HF with verl's model merger into --merged-dir; or a Hugging Face hub id (org/name, "
                   "e.g. Qwen/Qwen3-0.6B), taken from the HF cache (HF_HUB_CACHE) and downloaded into it when the hub "
                   "is reachable (not with HF_HUB_OFFLINE=1). Required, no default")
    p.add_argument("--data", required=True,
                   help="a parquet from `mrgrpo data prepare` (e.g. val.parquet). Required, no default")
    p.add_argument("--out", required=True, help="output directory. Required, no default")
    p.add_argument("--n", type=number(int, 1), default=10, help="samples per problem")
    p.add_argument("--k", default="1,5,10", help="comma-separated k values, each <= n")
    recipe = recipe_settings()  # the loop's defaults: the trainer yaml's mrgrpo.agent_loop, their one home
    p.add_argument("--plan-source", choices=PLAN_SOURCES, default=recipe["plan_source"],
                   help="who writes the plan: self (the policy), teacher (the row's extra_info.plan; the data needs "
                   "plans) or none; a row's extra_info.plan_source overrides it (default: mrgrpo.agent_loop."
                   f"plan_source of the recipe's trainer yaml, {recipe['plan_source']})")
    p.add_argument("--rounds", type=number(int, 0), default=None,
                   help="feedback rounds K (default: mrgrpo.agent_loop.rounds of the recipe's trainer yaml, "
                   f"{recipe['rounds']})")
    p.add_argument("--temperature", type=number(float, 0), default=1.0, help="sampling temperature")
    p.add_argument("--top-p", type=number(float, 0, 1, low_open=True), default=1.0, help="nucleus sampling top_p")
    p.add_argument("--top-k", type=int, default=-1, help="top_k (-1: off)")
    p.add_argument("--max-prompt-length", type=number(int, 1), default=2048,
                   help="problems whose first prompt is longer (in tokens) are dropped, as verl's filter does; "
                   "report.md says which")
    p.add_argument("--max-response-length", type=number(int, 1), default=4096,
                   help="token budget of a whole trajectory after the prompt")
    p.add_argument("--limit", type=int, default=-1, help="evaluate the first N problems only (-1: all)")
    p.add_argument("--concurrency", type=number(int, 1), default=256, help="trajectories in flight at once")
    p.add_argument("--enable-thinking", action="store_true",
                   help="Qwen3 thinking on (default: off, as the recipe's apply_chat_template_kwargs.enable_thinking)")
    p.add_argument("--agent-loop-config", default=None,
                   help="agent-loop yaml (default: mrgrpo/config/agent_loop.yaml, shipped in the package)")
    p.add_argument("--reward-kwargs", default="{}",
                   help="JSON: the run's reward.custom_reward_function.reward_kwargs (weights, partial credit; acc "
                   "does not depend on the weights), without the limits: those are --time-s, --wall-s, --memory-mb")
    p.add_argument("--time-s", type=number(float, 0, low_open=True), default=None,
                   help="CPU seconds per test, public (the loop's) and hidden (the reward's) alike: the run's "
                   "mrgrpo.limits.time_s (default: each problem's own time_s, else the sandbox's "
                   f"{Limits().time_s:g})")
    p.add_argument("--wall-s", type=number(float, 0, low_open=True), default=None,
                   help="wall seconds per test, at least the CPU limit: mrgrpo.limits.wall_s (default: the "
                   f"problem's own with its own CPU limit, else {WALL_PER_CPU:g} x the CPU limit)")
    p.add_argument("--memory-mb", type=number(int, 1), default=None,
                   help=f"memory per test: mrgrpo.limits.memory_mb (default: the sandbox's {Limits().memory_mb})")
    p.add_argument("--merged-dir", default=None,
                   help="where a verl checkpoint is merged to HF (default: OUT/merged_hf)")
    p.add_argument("--seed", type=int, default=0, help="vLLM engine seed (default: 0)")
    p.add_argument("--tensor-parallel-size", type=number(int, 1), default=1, help="vLLM tensor parallel size")
    p.add_argument("--gpu-memory-utilization", type=number(float, 0, 1, low_open=True), default=0.85,
                   help="vLLM's share of GPU memory")
    p.add_argument("--dtype", default="auto", help="vLLM dtype")
    p.add_argument("--enforce-eager", action="store_true", help="vLLM without CUDA graphs (default: off)")
    p.add_argument("--no-progress", "--quiet", action="store_true",
                   help="no progress bar (--quiet is the same; default: a progress bar on stderr)")
    return p


class MergeFailed(RuntimeError):
    """verl's model merger exited non-zero (its own output, above, says why): exit 1."""


def merge_command(actor_dir: Path, target: Path) -> list[str]:
    """verl's own model merger (FSDP -> HF)."""
    return [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor_dir),
            "--target_dir", str(target)]


def materialize(source: ModelSource, merged_dir: Path) -> tuple[Path, str]:
    """(an HF model directory, how it was obtained) for a checked ``--model``: a hub id is fetched (or taken from
    the cache), a verl checkpoint is merged once into ``merged_dir``."""
    if source.kind == "hf":
        return source.path, "hf"
    if source.kind == "hub":
        if source.path is not None and hub_offline():
            return source.path, f"hub {source.repo_id}, from the HF cache"
        return fetch_hub_model(source.repo_id), f"hub {source.repo_id}, HF cache"
    actor = source.path
    if is_hf_dir(merged_dir):
        print(f"mrgrpo eval: using the merged model in {merged_dir}", file=sys.stderr)
        return merged_dir, f"verl checkpoint {actor}, merged earlier"
    cmd = merge_command(actor, merged_dir)
    print("mrgrpo eval: merging the checkpoint: " + " ".join(cmd), file=sys.stderr)
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise MergeFailed(f"verl's model merger failed on {actor} (exit {done.returncode}); its output above says why")
    if not is_hf_dir(merged_dir):
        raise MergeFailed(f"verl's model merger wrote no config.json into {merged_dir}")
    return merged_dir, f"verl checkpoint {actor}, merged by verl.model_merger"


def resolve_model(model: str, merged_dir: Path) -> tuple[Path, str]:
    """(an HF model directory, how it was obtained) for ``--model``; UsageError when it is none of the forms."""
    return materialize(model_source(model), merged_dir)


def check_options(args: argparse.Namespace) -> tuple[list[int], dict, LimitsOverride]:
    """(ks, reward_kwargs, limits override) from the options argparse cannot check alone."""
    try:
        ks = parse_ks(args.k, args.n)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        reward_kwargs = json.loads(args.reward_kwargs)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--reward-kwargs is not JSON ({exc}): {args.reward_kwargs!r}") from None
    if not isinstance(reward_kwargs, dict):
        raise UsageError(f"--reward-kwargs must be a JSON object, got {args.reward_kwargs!r}")
    limit_keys = sorted(set(reward_kwargs) & {*RETIRED_KWARGS, "limits"})
    if limit_keys:
        options = ", ".join(f"--{k.replace('_', '-')}" for k in RETIRED_KWARGS)
        raise UsageError(f"--reward-kwargs {limit_keys[0]}: the per-test limits are {options} (one override for the "
                         "public and the hidden tests), not reward kwargs")
    time_s = args.time_s if args.time_s is not None else Limits().time_s
    if args.wall_s is not None and args.wall_s < time_s:
        raise UsageError(f"--wall-s {args.wall_s:g} is below --time-s {time_s:g}: the CPU limit could never be "
                         f"reached (leave --wall-s out for {WALL_PER_CPU:g} x --time-s)")
    limits = LimitsOverride(time_s=args.time_s, wall_s=args.wall_s, memory_mb=args.memory_mb)
    check_file_option(args.agent_loop_config, "--agent-loop-config")
    return ks, reward_kwargs, limits


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"mrgrpo eval: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MergeFailed as exc:
        print(f"mrgrpo eval: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except EngineStartError as exc:
        print(f"mrgrpo eval: error: {exc}", file=sys.stderr)
        return EXIT_ENGINE


def run(args: argparse.Namespace) -> int:
    """The command after argparse: checks first (UsageError, before any heavy import), then the work."""
    ks, reward_kwargs, limits = check_options(args)
    data = check_data(args.data, args.plan_source, args.limit)
    source = model_source(args.model)
    check_vllm()
    out = check_writable_dir(Path(args.out).expanduser(), "--out")
    try:
        import vllm  # noqa: F401  (seconds; a broken install is a usage error too, not a traceback later)
    except ImportError as exc:
        raise vllm_import_error(exc) from None
    model_dir, model_how = materialize(source, Path(args.merged_dir) if args.merged_dir else out / "merged_hf")

    from transformers import AutoConfig, AutoTokenizer

    from mrgrpo.eval.engine import AsyncVllmServer, build_async_engine, on_cpu
    from mrgrpo.eval.report import write_outputs
    from mrgrpo.eval.run import EvalSettings, evaluate, load_rows

    settings = EvalSettings(
        n=args.n, temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, plan_source=args.plan_source,
        rounds=args.rounds, max_prompt_length=args.max_prompt_length, max_response_length=args.max_response_length,
        limit=args.limit, concurrency=args.concurrency, enable_thinking=args.enable_thinking,
        agent_loop_config=args.agent_loop_config, reward_kwargs=reward_kwargs, limits=limits,
    )
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        hf_type = getattr(AutoConfig.from_pretrained(str(model_dir)), "model_type", None)
    except (OSError, ValueError) as exc:  # no tokenizer files, a config transformers does not know
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"--model {args.model}: transformers cannot load the tokenizer or config of {model_dir} "
                         f"({first})") from None
    loaded = load_rows(data.path, tokenizer, settings)
    if not loaded.rows:
        raise UsageError(f"--data {data.path}: all {loaded.num_read} problems have a first prompt longer than "
                         f"--max-prompt-length {settings.max_prompt_length} tokens: raise it")
    if loaded.dropped:
        print(f"mrgrpo eval: {len(loaded.dropped)} of {loaded.num_read} problems dropped: first prompt longer than "
              f"--max-prompt-length {settings.max_prompt_length} tokens (report.md lists them)", file=sys.stderr)
    max_model_len = settings.max_prompt_length + settings.max_response_length
    if on_cpu():
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    else:
        # CUDA may already be initialised in this process (imports above): the engine core must not be forked.
        # `python -m mrgrpo` and the console script are safe to spawn from (no main() re-run in the child).
        os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    start = time.monotonic()
    engine = build_async_engine(str(model_dir), max_model_len=max_model_len, seed=args.seed, dtype=args.dtype,
                                gpu_memory_utilization=args.gpu_memory_utilization,
                                tensor_parallel_size=args.tensor_parallel_size, enforce_eager=args.enforce_eager)
    try:
        records = asyncio.run(evaluate(loaded.rows, AsyncVllmServer(engine, max_model_len), tokenizer, settings,
                                       hf_model_type=hf_type, progress=not args.no_progress))
    finally:
        engine.shutdown()
        del engine  # now, not at interpreter exit (vLLM's __del__ shuts down again and fails there)
    info = settings_info(settings, model=str(args.model), model_dir=str(model_dir), model_how=model_how,
                         data=str(data.path), seconds=time.monotonic() - start)
    summary = write_outputs(records, ks, info, out, prompt_filter=loaded.prompt_filter(settings.max_prompt_length))
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
