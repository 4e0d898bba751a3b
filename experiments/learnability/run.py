"""The learnability study (docs/results/learning.md): does the recipe teach what SFT cannot?

A 28M Qwen3 learns synthetic problems by SFT until its held-out score stops improving, by a stated rule; then GRPO
with the unchanged recipe (recipe/mrgrpo/run_qwen3_apps.sh) against an SFT control given GRPO's training time, over
several seeds, measured on two held-out sets. One GPU (or a few), no network.

stages (--stages, comma-separated; they run in this order whatever the order given; default: %(default_stages)s):
  data          synthetic problems, splits, the two held-out sets, tokenizer, SFT transcripts into EXP_DIR, shared by
                every seed (CPU, ~12 min on 2 cores)
  then per seed (--seeds; each in OUT_DIR/seed_N), each stage for every seed before the next stage begins:
  plateau       the seed's random model, then SFT (verl's SFT trainer, one run in chunks of --sft-chunk steps, cosine
                learning rate from --sft-lr to --sft-lr-floor x it over --sft-max-steps, the seed's data order), each
                chunk's checkpoint evaluated (greedy held-out pass@1, `mrgrpo eval`, val.parquet) while the next one
                trains, until the plateau rule stops it (below); the plateau checkpoint -> seed_N/plateau_model
  grpo          GRPO, K=--rounds feedback rounds, self plan, with the unchanged recipe from the plateau model, a
                checkpoint at its last step; held-out pass@1 (greedy, verl validation) every TEST_FREQ steps
  grpo_attempt  the same with the attempt-aware estimator (algorithm.adv_estimator=mrgrpo_attempt): curves only
  grpo_k0       the same as grpo with K=0 (one attempt), the feedback ablation: curves only
  control       SFT continued from the plateau checkpoint (its optimizer, schedule and data position) for as many
                seconds of training steps as the grpo run's steps took (the sum of its timing_s/step)
  eval          `mrgrpo eval` of the plateau checkpoint, GRPO's last checkpoint (merged to Hugging Face format) and
                the control on EXP_DIR/rl/val.parquet and val2.parquet
  table         seeds_table.py: per seed and the mean, start / GRPO / control and the differences with paired 95%%
                intervals on both held-out sets, whether the targets hold; OUT_DIR/seeds_table.md and .csv, and
                seed_N/curves.png

plateau rule (learnability/plateau.py): after each evaluated chunk, stop when the best no-demo pass@1 of the last
  --plateau-window (3) checkpoints is within --plateau-tolerance (2) points of the best so far AND the last step is
  at least 1 + --plateau-extra (1.5) times the step where that best was first reached; else stop at --sft-max-steps,
  reported as NOT AT PLATEAU. The plateau checkpoint is the best one.
seeds side by side (--parallel): every stage runs for all seeds at once on the GPU (or the seeds dealt over --gpus);
  the GRPO runs on one GPU start one after the other, each once the one before it has trained a step, with a vLLM
  share 0.1 above it. Without --parallel, one seed after the other, stage by stage.
resume: a piece whose outputs are complete is skipped (data: EXP_DIR/experiment.json and the parquet files; a chunk:
  its checkpoint; an evaluation: its summary.json; the plateau: seed_N/plateau.json; a GRPO run: seed_N/<run>.done;
  the control: seed_N/control.json; the table: newer than its inputs), so the same command continues a study that
  stopped; an interrupted piece runs again. Delete seed_N/ to redo a seed.
records: OUT_DIR/stages.txt (every start and end), OUT_DIR/data.log; per seed: sft.log, <run>.log, <run>.jsonl
  (verl's file logger: every metric of every step), control.log, each evaluation's log beside its folder.
GPU: checked first (nvidia-smi lists one), before any stage runs, when a stage that needs it is still to run.
--dry-run: prints every stage's command for every seed (the GRPO runs also the launch line run_qwen3_apps.sh prints
  with DRY_RUN=1) and writes and starts nothing; no GPU needed.
GRPO knobs: the run script's environment variables (LR, BATCH_SIZE, GROUP_SIZE, TEST_FREQ, ...; see
  `bash recipe/mrgrpo/run_qwen3_apps.sh --help`) pass through; unless set, the study sets its model's:
%(knobs)s
  Extra arguments are hydra overrides for every GRPO run, appended last (the study's own are in
  learnability/stages.py: GRPO_OVERRIDES).
exit status: 0 done; 1 a stage failed (after the others ran; data stops the study); 2 a bad command line or vLLM
  shares that cannot fit side by side, before anything runs; 3 no GPU.

examples:
  python experiments/learnability/run.py --seeds 1,2,3 --parallel    # the whole study, the seeds side by side
  python experiments/learnability/run.py --dry-run --seeds 1,2,3      # every stage's command for every seed
  python experiments/learnability/run.py --stages grpo_k0              # later: the K=0 ablation from each plateau
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

from learnability import learning_curves as lc  # noqa: E402
from learnability import stages as st  # noqa: E402
from learnability.plateau import decide  # noqa: E402

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
    p.add_argument("--seeds", default="1,2,3", help="comma-separated: each seed is the model's initialisation and "
                   "the data order of SFT and GRPO (the data is the same for all) (default: %(default)s)")
    p.add_argument("--exp-dir", type=Path, default=None,
                   help="the study's data (default: $XDG_CACHE_HOME or ~/.cache, then mrgrpo/learn_exp)")
    p.add_argument("--out-dir", type=Path, default=None,
                   help="models, logs, step logs, evaluations, one seed_N/ folder per seed (default: EXP_DIR/runs)")
    p.add_argument("--sft-chunk", type=int, default=500, help="SFT: a checkpoint, evaluated, every N steps "
                   "(default: %(default)s)")
    p.add_argument("--sft-max-steps", type=int, default=6000, help="SFT's cap (NOT AT PLATEAU when reached) and the "
                   "length of its learning-rate schedule (default: %(default)s)")
    p.add_argument("--plateau-window", type=int, default=3, help="the rule's last N evaluated checkpoints "
                   "(default: %(default)s)")
    p.add_argument("--plateau-tolerance", type=float, default=2, help="the rule's tolerance, in points of pass@1 "
                   "(default: %(default)s)")
    p.add_argument("--plateau-extra", type=float, default=0.5, help="the rule's further steps past the best, as a "
                   "fraction of the best's step (default: %(default)s)")
    p.add_argument("--sft-batch", type=int, default=64, help="SFT batch (default: %(default)s)")
    p.add_argument("--sft-lr", default="1e-3", help="SFT's peak learning rate (default: %(default)s)")
    p.add_argument("--sft-lr-floor", type=float, default=0.1, help="SFT's learning rate at --sft-max-steps and after, "
                   "as a fraction of --sft-lr (verl's optim.min_lr_ratio) (default: %(default)s)")
    p.add_argument("--sft-override", action="append", default=[], metavar="KEY=VALUE",
                   help="a hydra override for verl's SFT trainer (plateau and control), repeatable")
    p.add_argument("--rounds", type=int, default=recipe_settings()["rounds"],
                   help="K: feedback rounds of grpo and grpo_attempt, and of the evaluations (default: the recipe's, "
                   "%(default)s)")
    p.add_argument("--steps", type=int, default=30, help="GRPO training steps (default: %(default)s)")
    p.add_argument("--run-tag", default="", help="appended to the GRPO run names (seed_N/<name>.jsonl), e.g. _lr1e-5 "
                   "with overrides, so that a variant never writes over the others")
    p.add_argument("--parallel", action="store_true", help="the seeds side by side, stage by stage (see above)")
    p.add_argument("--gpus", default="", metavar="0,1", help="GPUs to deal the seeds over (default: what is visible)")
    p.add_argument("--gpu-mem-util", default=env.get("GPU_MEM_UTIL") or None,
                   help="the GRPO runs' vLLM share (default: GPU_MEM_UTIL of the environment, else 0.2 (+0.1 a run) "
                   f"side by side and {st.GRPO_KNOBS['GPU_MEM_UTIL']} alone)")
    p.add_argument("--eval-gpu-mem", default=None, help="the evaluations' vLLM share (default 0.15)")
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
    if not re.fullmatch(r"[0-9]+(,[0-9]+)*", a.seeds) or len(set(a.seeds.split(","))) != len(a.seeds.split(",")):
        p.error(f"--seeds must be distinct numbers separated by commas (e.g. 1,2,3), got '{a.seeds}'")
    if a.gpus and not re.fullmatch(r"[0-9]+(,[0-9]+)*", a.gpus):
        p.error(f"--gpus must be GPU numbers separated by commas (e.g. 0,1), got '{a.gpus}'")
    for name in ("sft_chunk", "sft_max_steps", "plateau_window", "steps"):
        if getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.plateau_tolerance < 0 or a.plateau_extra < 0 or not 0 <= a.sft_lr_floor <= 1:
        p.error("--plateau-tolerance and --plateau-extra must be >= 0 and --sft-lr-floor within [0, 1]")
    exp = (a.exp_dir or _cache_dir(env) / "learn_exp").absolute()
    s = st.Settings(
        exp_dir=exp, out_dir=(a.out_dir or exp / "runs").absolute(), rounds=a.rounds, python=a.python,
        stages=tuple(x for x in st.STAGES if x in stages), seeds=tuple(int(x) for x in a.seeds.split(",")),
        sft_chunk=a.sft_chunk, sft_max_steps=a.sft_max_steps, plateau_window=a.plateau_window,
        plateau_tolerance=a.plateau_tolerance / 100, plateau_extra=a.plateau_extra, sft_batch=a.sft_batch,
        sft_lr=a.sft_lr, sft_lr_floor=a.sft_lr_floor, steps=a.steps, parallel=a.parallel,
        gpus=tuple(a.gpus.split(",")) if a.gpus else (), run_tag=a.run_tag, gpu_mem_util=a.gpu_mem_util,
        eval_gpu_mem=a.eval_gpu_mem, grpo_overrides=tuple(overrides), sft_overrides=tuple(a.sft_override),
        env=dict(env))
    return s, a


def pending_gpu_stages(s: st.Settings) -> list[str]:
    """The stages asked for that need a GPU and are not done yet, as 'stage (seed N)'."""
    todo = []
    for seed in s.seeds:
        d = s.seed_dir(seed)
        if s.has("plateau") and not st.plateau_done(d):
            todo.append(f"plateau (seed {seed})")
        todo += [f"{run.name} (seed {seed})" for run in st.rl_runs(s, [seed]) if not st.grpo_done(d, run)]
        if s.has("control") and st.control_end(d) is None:
            todo.append(f"control (seed {seed})")
        if s.has("eval") and not all(st.evaluated(job.out) for job in st.eval_jobs(s, d)):
            todo.append(f"eval (seed {seed})")
    return todo


def gpu_found(env) -> bool:
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    if smi is None:
        return False
    proc = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return proc.returncode == 0 and any(line.startswith("GPU ") for line in proc.stdout.splitlines())


def dry_run(s: st.Settings, shares: st.Shares) -> int:
    """Every stage's command for every seed, in order; nothing written, nothing started but the run script's own
    dry run."""
    print(f"# {PROG} --dry-run: nothing is written or started. EXP_DIR={s.exp_dir} OUT_DIR={s.out_dir}")
    print(f"# stages: {','.join(s.stages)}; seeds: {','.join(map(str, s.seeds))}, "
          f"{'side by side' if s.parallel else 'one after the other'}; what is done is skipped (resume)")

    def head(stage: str, seed: int | None, done: bool, what: str) -> None:
        where = f" seed {seed}" if seed is not None else ""
        print(f"# stage {stage}{where}: {'done before, skipped' if done else what}")

    if s.has("data"):
        head("data", None, st.data_done(s), f"the study's data (CPU), output to {s.out_dir / 'data.log'}")
        print(st.data_command(s).shown())
    if s.has("plateau"):
        for seed in s.seeds:
            d = s.seed_dir(seed)
            if st.plateau_done(d):
                head("plateau", seed, True, "")
                continue
            points = [(k, st.nodemo_score(d.chunk_eval(k))) for k in st.candidate_steps(s)
                      if st.evaluated(d.chunk_eval(k))]
            now = decide(points, s.rule())
            trained = st.trained_steps(d)
            nxt = [k for k in st.candidate_steps(s) if k > max(trained, default=0)]
            head("plateau", seed, False, f"SFT chunk by chunk ({s.sft_chunk} steps, to at most {s.sft_max_steps}), "
                 f"each checkpoint evaluated, until the rule stops it ({s.rule().text()}); so far: "
                 f"{len(trained)} chunk(s) trained, {len(points)} evaluated, the rule says {now.status}"
                 f"{': ' + now.why if now.why else ''}; output to {d.log('sft')}")
            if not (d.model_init / "config.json").is_file():
                print(st.model_init_command(s, seed).shown())
            if nxt:
                print(f"#   the next chunk (then every {s.sft_chunk} steps the same with --stop-at-step N):")
                print(st.chunk_command(s, seed, nxt[0]).shown())
            step = next((k for k in trained if not st.evaluated(d.chunk_eval(k))), nxt[0] if nxt else "N")
            print(f"#   the evaluation of chunk {step} (each chunk's, into {d.chunk_eval('N')}):")
            print(st.eval_command(s, seed, d.ckpt(step), "val", d.chunk_eval(step), shares.eval).shown())
    for run in st.rl_runs(s):
        d = s.seed_dir(run.seed)
        if st.grpo_done(d, run):
            head(run.stage, run.seed, True, "")
            continue
        head(run.stage, run.seed, False, f"GRPO run {run.name} from {d.plateau_model} ({d.root / run.name}.log, "
             ".jsonl), its last step's checkpoint in " + str(st.grpo_final(s, d, run)))
        print(st.grpo_command(s, run, shares.rl.get(run)).shown())
        dry = st.grpo_command(s, run, shares.rl.get(run), dry_run=True)
        proc = subprocess.run(dry.argv, env=dict(dry.env), capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode:
            print(f"{PROG}: error: run_qwen3_apps.sh refused the {run.experiment} launch:\n{proc.stderr}",
                  file=sys.stderr)
            return 2
        print("#   the run script launches:")
        print(proc.stdout.strip().splitlines()[-1])
    if s.has("control"):
        for seed in s.seeds:
            d = s.seed_dir(seed)
            if st.control_end(d) is not None:
                head("control", seed, True, "")
                continue
            start = st.plateau_step(d)
            jsonl = d.root / f"{st.headline(s, seed).name}.jsonl"
            budget = (sum(r["step_time_s"] for r in lc.read_run(jsonl) if "step_time_s" in r) if jsonl.is_file()
                      else "GRPO_STEP_SECONDS")
            head("control", seed, False, f"SFT from the plateau checkpoint (step {start or 'PLATEAU'}) for the "
                 f"seconds of {jsonl.name}'s steps (GRPO_STEP_SECONDS: the sum of its timing_s/step), into "
                 f"{d.control_ckpt}; output to {d.log('control')}")
            print(st.control_command(s, seed, budget, start or "PLATEAU").shown())
    if s.has("eval"):
        for seed in s.seeds:
            d = s.seed_dir(seed)
            jobs = st.eval_jobs(s, d)
            head("eval", seed, all(st.evaluated(job.out) for job in jobs),
                 "the plateau checkpoint, GRPO's last checkpoint (merged to HF format) and the control on both "
                 "held-out sets (the plateau on val.parquet: its chunk evaluation)")
            for job in jobs:
                if not st.evaluated(job.out):
                    print(st.eval_command(s, seed, job.source, job.heldout, job.out, shares.eval,
                                          job.merged_dir).shown())
    if s.has("table"):
        head("table", None, st.table_done(s), f"the table into {s.out_dir / st.TABLE}")
        print(st.table_command(s).shown())
    return 0


def main(argv: list[str] | None = None) -> int:
    s, a = settings(argv)
    runs = [run for run in st.rl_runs(s) if not st.grpo_done(s.seed_dir(run.seed), run)]
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

