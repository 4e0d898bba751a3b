"""The learnability study (docs/results/learning.md): does the recipe teach what SFT cannot?

A 28M Qwen3 learns synthetic problems by SFT to its plateau; then GRPO with the unchanged recipe
(recipe/mrgrpo/run_qwen3_apps.sh) against an SFT control given GRPO's training time. One GPU, no network.

stages (--stages, comma-separated; they run in this order whatever the order given;
  default: %(default_stages)s):
  data          synthetic problems, splits, tokenizer, SFT transcripts into EXP_DIR (CPU, ~12 min on 2 cores)
  sft           SFT warm start with verl's SFT trainer to --sft-steps (an HF checkpoint every --save-freq steps),
                copied to EXP_DIR/sft_model
  then two tracks that share nothing but the GPU (--parallel runs them at once):
  RL track
    grpo          GRPO, K=--rounds feedback rounds, self plan, with the unchanged recipe from EXP_DIR/sft_model;
                  held-out pass@1 (greedy, verl validation) per split before training and every TEST_FREQ steps
    grpo_attempt  the same with the attempt-aware estimator (algorithm.adv_estimator=mrgrpo_attempt)
    grpo_k0       the same as grpo with K=0 (one attempt): the feedback ablation
    One after the other, or side by side with --rl-parallel: each starts once the one before it has trained a
    step, with a vLLM share 0.1 above it; with --rl-gpus the runs are dealt over those GPUs in turn (a run alone on
    its GPU starts at once with the base share). A run that fails before its first step is started once more.
  SFT track
    sft_more      the control: SFT continued for --sft-more-steps more steps (GRPO's training wall time in SFT
                  steps), then evaluated as sft_eval does (OUT_DIR/sft_more_eval)
    sft_eval      greedy held-out pass@1 (`mrgrpo eval`, the training agent loop and reward) of the SFT
                  checkpoints (--sft-eval-steps, or every one found up to --sft-steps, and up to the control's
                  last step when sft_more is a stage but not that last one, the control): the plateau curve
  table         learning_curves.py over OUT_DIR: CSV, PNG and the headline table (OUT_DIR/learning_curves_output.md)

resume: a stage whose outputs exist is skipped (data: EXP_DIR/experiment.json; sft: the checkpoint of its last
  step and its model; a GRPO run: OUT_DIR/<run>.done; an evaluation: its summary.json; the table: newer than its
  inputs), so the same command continues a study that stopped. Delete an output to run its stage again.
records: OUT_DIR/<stage>.log, OUT_DIR/<run>.jsonl (verl's file logger: every metric of every step) and
  OUT_DIR/stages.txt (each stage's start and end).
GPU: checked first (nvidia-smi lists one), before any stage runs, when a stage that needs it is still to run.
--dry-run: prints every stage's command (the GRPO runs also the launch line run_qwen3_apps.sh prints with DRY_RUN=1)
  and writes and starts nothing; no GPU needed.
GRPO knobs: the run script's environment variables (LR, BATCH_SIZE, GROUP_SIZE, TEST_FREQ, ...; see
  `bash recipe/mrgrpo/run_qwen3_apps.sh --help`) pass through; unless set, the study sets its model's:
%(knobs)s
  Extra arguments are hydra overrides for every GRPO run, appended last (the study's own are in
  learnability/stages.py: GRPO_OVERRIDES).
exit status: 0 done; 1 a stage failed (after the others ran; data and sft stop the study); 2 a bad command line or
  vLLM shares that cannot fit side by side, before anything runs; 3 no GPU.

examples:
  python experiments/learnability/run.py --parallel                # the headline run: data, SFT, GRPO, control, table
  python experiments/learnability/run.py --dry-run --stages grpo,grpo_k0
  python experiments/learnability/run.py --stages grpo --run-tag _attempt algorithm.adv_estimator=mrgrpo_attempt
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the study is imported as `learnability`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

from learnability import stages as st  # noqa: E402

PROG = "python experiments/learnability/run.py"


def _cache_dir(env) -> Path:
    return Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")) / ".cache").expanduser() / "mrgrpo"


def parser(env=os.environ) -> argparse.ArgumentParser:
    from mrgrpo.config import recipe_settings

    knobs = textwrap.fill(" ".join(f"{k}={v}" for k, v in st.GRPO_KNOBS.items()), 112, initial_indent="    ",
                          subsequent_indent="    ")
    p = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__ % {"default_stages": ",".join(st.DEFAULT_STAGES), "knobs": knobs})
    p.add_argument("--stages", default=",".join(st.DEFAULT_STAGES),
                   help=f"comma-separated, of: {', '.join(st.STAGES)} (default: %(default)s)")
    p.add_argument("--exp-dir", type=Path, default=None,
                   help="the study's data and models (default: $XDG_CACHE_HOME or ~/.cache, then mrgrpo/learn_exp)")
    p.add_argument("--out-dir", type=Path, default=None, help="logs, step logs, evaluations (default: EXP_DIR/runs)")
    p.add_argument("--sft-steps", type=int, default=2000, help="SFT's plateau, where GRPO and the control start "
                   "(default: %(default)s)")
    p.add_argument("--save-freq", type=int, default=500, help="SFT: an HF checkpoint every N steps, evaluated by "
                   "sft_eval (default: %(default)s)")
    p.add_argument("--sft-more-steps", type=int, default=1800, help="the control's further SFT steps: GRPO's "
                   "training wall time in SFT steps (default: %(default)s)")
    p.add_argument("--sft-more-save-freq", type=int, default=500, help="the control's checkpoints (default: "
                   "%(default)s)")
    p.add_argument("--sft-eval-steps", default=None, metavar="'N N ...'", help="the SFT checkpoints sft_eval "
                   "evaluates, in this order, e.g. '1500 1000 600' (default: every one found, newest first)")
    p.add_argument("--sft-batch", type=int, default=64, help="SFT batch (default: %(default)s)")
    p.add_argument("--sft-lr", default="1e-3", help="SFT learning rate (default: %(default)s)")
    p.add_argument("--sft-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a hydra override for verl's SFT trainer (sft and sft_more), repeatable")
    p.add_argument("--nproc", type=int, default=1, help="SFT processes (GPUs) (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=recipe_settings()["rounds"],
                   help="K: feedback rounds of grpo and grpo_attempt, and of the evaluations (default: the recipe's, "
                   "%(default)s)")
    p.add_argument("--steps", type=int, default=30, help="GRPO training steps (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1, help="SFT and RL seed; other than 1 it names the GRPO runs "
                   "(_s<SEED>) (default: %(default)s)")
    p.add_argument("--run-tag", default="", help="appended to the GRPO run names (verl's experiment name, "
                   "OUT_DIR/<name>.jsonl), e.g. _attempt, so that runs side by side never clash")
    p.add_argument("--parallel", action="store_true", help="the RL track and the SFT track at once on the one GPU")
    p.add_argument("--rl-parallel", action="store_true", help="the RL stages side by side (see above)")
    p.add_argument("--rl-gpus", default="", metavar="0,1", help="with --rl-parallel: GPUs to deal the RL stages over")
    p.add_argument("--gpu-mem-util", default=env.get("GPU_MEM_UTIL") or None,
                   help="the GRPO runs' vLLM share (default: GPU_MEM_UTIL of the environment, else 0.2 beside other "
                   f"engines and {st.GRPO_KNOBS['GPU_MEM_UTIL']} alone)")
    p.add_argument("--eval-gpu-mem", default=None,
                   help="the evaluations' vLLM share (default 0.15; with --parallel 0.1 above the largest GRPO share, "
                   "which it must exceed: an engine that starts next to a GRPO run counts the KV cache GRPO frees and "
                   "takes back every step as its own use; all shares at once must sum to <= 0.9)")
    p.add_argument("--python", default=sys.executable, help="the interpreter with verl and mrgrpo for every stage "
                   "(default: this one)")
    p.add_argument("--dry-run", action="store_true", help="print every stage's command; write and start nothing")
    p.add_argument("--retry-wait-s", type=float, default=20, help=argparse.SUPPRESS)
    p.add_argument("--gate-poll-s", type=float, default=10, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="hydra overrides for every GRPO run (last: win)")
    return p


def settings(argv: list[str] | None = None, env=os.environ) -> tuple[st.Settings, argparse.Namespace]:
    """The settings of this invocation; SystemExit(2) with one line for a mistake."""
    p = parser(env)
    a, extra = p.parse_known_args(argv)
    overrides = [*a.overrides, *extra]
    unknown = [x for x in overrides if x.startswith("-") and "=" not in x]
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    stages = [x.strip() for x in a.stages.split(",") if x.strip()]
    bad = [x for x in stages if x not in st.STAGES]
    if bad:
        p.error(f"unknown stage '{bad[0]}' in --stages {a.stages} (stages: {', '.join(st.STAGES)})")
    if a.rl_gpus and not re.fullmatch(r"[0-9]+(,[0-9]+)*", a.rl_gpus):
        p.error(f"--rl-gpus must be GPU numbers separated by commas (e.g. 0,1), got '{a.rl_gpus}'")
    try:
        eval_steps = None if a.sft_eval_steps is None else tuple(int(x) for x in a.sft_eval_steps.split())
    except ValueError:
        p.error(f"--sft-eval-steps must be step numbers separated by spaces, got '{a.sft_eval_steps}'")
    exp = (a.exp_dir or _cache_dir(env) / "learn_exp").absolute()
    s = st.Settings(
        exp_dir=exp, out_dir=(a.out_dir or exp / "runs").absolute(), rounds=a.rounds, python=a.python,
        stages=tuple(x for x in st.STAGES if x in stages), sft_steps=a.sft_steps, save_freq=a.save_freq,
        sft_more_steps=a.sft_more_steps, sft_more_save_freq=a.sft_more_save_freq, sft_eval_steps=eval_steps,
        sft_batch=a.sft_batch, sft_lr=a.sft_lr, nproc=a.nproc, steps=a.steps, seed=a.seed, parallel=a.parallel,
        rl_parallel=a.rl_parallel, rl_gpus=tuple(a.rl_gpus.split(",")) if a.rl_gpus else (), run_tag=a.run_tag,
        gpu_mem_util=a.gpu_mem_util, eval_gpu_mem=a.eval_gpu_mem, grpo_overrides=tuple(overrides),
        sft_overrides=tuple(a.sft_override), env=dict(env))
    return s, a


def pending_gpu_stages(s: st.Settings) -> list[str]:
    """The stages asked for that need a GPU and are not done yet."""
    todo = []
    if s.has("sft") and not st.sft_done(s, s.sft_steps, s.exp_dir / "sft_model"):
        todo.append("sft")
    todo += [run.stage for run in st.rl_runs(s) if not st.grpo_done(s, run)]
    if s.has("sft_more") and not (st.sft_done(s, st.control_steps(s), s.exp_dir / "sft_more_model")
                                  and st.evaluated(s.out_dir / "sft_more_eval")):
        todo.append("sft_more")
    if s.has("sft_eval") and ({"sft", "sft_more"} & set(todo) or any(
            st.ckpt(s, step).is_dir() and not st.evaluated(s.out_dir / "sft_eval" / f"step_{step}")
            for step in st.sft_eval_steps(s))):
        todo.append("sft_eval")
    return todo


def gpu_found(env) -> bool:
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    if smi is None:
        return False
    proc = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return proc.returncode == 0 and any(line.startswith("GPU ") for line in proc.stdout.splitlines())


def dry_run(s: st.Settings, shares: st.Shares) -> int:
    """Every stage's command, in order; nothing written, nothing started but the run script's own dry run."""
    print(f"# {PROG} --dry-run: nothing is written or started. EXP_DIR={s.exp_dir} OUT_DIR={s.out_dir}")
    print(f"# stages: {','.join(s.stages)}; each skipped when its outputs exist (resume)")

    def head(stage: str, done: bool, what: str) -> None:
        print(f"# stage {stage}: {'done before, skipped' if done else what}")

    if s.has("data"):
        head("data", st.data_done(s), f"the study's data (CPU), output to {s.out_dir / 'data.log'}")
        print(st.data_command(s).shown())
    sft_model = s.exp_dir / "sft_model"
    if s.has("sft"):
        head("sft", st.sft_done(s, s.sft_steps, sft_model), f"SFT to step {s.sft_steps}, then its checkpoint to "
             f"{sft_model}; output to {s.out_dir / 'sft.log'} (data.max_length: the longest transcript, rounded up "
             "to 512, once the data exists)")
        for command in st.sft_commands(s, s.sft_steps, s.save_freq, data_ready=s.has("data")):
            print(command.shown())
    runs = [run for run in st.rl_runs(s) if not st.grpo_done(s, run)]
    for run in st.rl_runs(s):
        if st.grpo_done(s, run):
            head(run.stage, True, "")
            continue
        i = runs.index(run)
        command = st.grpo_command(s, run, shares.rl[i], shares.gpus[i])
        head(run.stage, False, f"GRPO run {run.name} ({s.out_dir / run.name}.log, .jsonl)")
        print(command.shown())
        dry = st.grpo_command(s, run, shares.rl[i], shares.gpus[i], dry_run=True)
        proc = subprocess.run(dry.argv, env=dict(dry.env), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode:
            print(f"{PROG}: error: run_qwen3_apps.sh refused the {run.name} launch:\n{proc.stderr}", file=sys.stderr)
            return 2
        print("#   the run script launches:")
        print(proc.stdout.strip().splitlines()[-1])
    if s.has("sft_more"):
        done = st.sft_done(s, st.control_steps(s), s.exp_dir / "sft_more_model") and st.evaluated(
            s.out_dir / "sft_more_eval")
        head("sft_more", done, f"the control: SFT on to step {st.control_steps(s)}, then its checkpoint to "
             f"{s.exp_dir / 'sft_more_model'}, evaluated into {s.out_dir / 'sft_more_eval'}")
        for command in st.sft_commands(s, st.control_steps(s), s.sft_more_save_freq, data_ready=s.has("data"),
                                       model_ready=s.has("sft")):
            print(command.shown())
        print(st.eval_command(s, s.exp_dir / "sft_more_model", s.out_dir / "sft_more_eval", shares.eval).shown())
    if s.has("sft_eval"):
        steps = st.sft_eval_steps(s)
        head("sft_eval", False, f"checkpoints {' '.join(map(str, steps))}" if steps else
             "every SFT checkpoint found then (none yet), newest first, each as")
        for step in steps or ["N"]:
            out = s.out_dir / "sft_eval" / f"step_{step}"
            if step != "N" and st.evaluated(out):
                print(f"# step {step}: evaluated before, skipped")
                continue
            model = st.ckpt(s, step) if step != "N" else s.exp_dir / "sft_ckpt" / "global_step_N" / "huggingface"
            print(st.eval_command(s, model, out, shares.eval).shown())
    if s.has("table"):
        head("table", st.table_done(s), f"the tables into {s.out_dir / st.TABLE}")
        print(st.table_command(s).shown())
    return 0


def main(argv: list[str] | None = None) -> int:
    s, a = settings(argv)
    runs = [run for run in st.rl_runs(s) if not st.grpo_done(s, run)]
    try:
        shares = st.shares(s, runs)
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if a.dry_run:
        return dry_run(s, shares)
    todo = pending_gpu_stages(s)
    if todo and not gpu_found(s.env):
        print(f"{PROG}: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU), and stage(s) "
              f"{', '.join(todo)} need one. Nothing was run; --dry-run prints the commands.", file=sys.stderr)
        return 3
    from learnability.orchestrate import Study

    return Study(s, shares, retry_wait_s=a.retry_wait_s, gate_poll_s=a.gate_poll_s).main()


if __name__ == "__main__":
    raise SystemExit(main())

