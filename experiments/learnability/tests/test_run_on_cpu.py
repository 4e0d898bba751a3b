"""experiments/learnability/run.py without a GPU.

Its dry run prints every stage's command for every seed and writes nothing; the launch lines compose with verl
0.9.1's own hydra configs, so a key verl does not have (``trainer.seed`` in main_ppo) or a setting verl's trainer
trips on (``test_freq`` > 0 without validation files) fails here, not 5 minutes into a GPU run. Its real run is driven
with fakes for the GPU (nvidia-smi), python (verl, `mrgrpo eval`, the data and model commands) and torchrun (the SFT
chunks and the control): the GPU check comes first, the plateau rule decides when SFT stops, every seed gets its
plateau, GRPO run, control and evaluations, the seeds run side by side, and a second run resumes where the first
stopped and runs nothing that is done.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

RUN = "experiments/learnability/run.py"
KNOBS = {"PROFILE", "MODEL", "DATA_DIR", "ROUNDS", "STAGES", "DRY_RUN", "PARALLEL", "RL_PARALLEL", "GPU_MEM_UTIL",
         "EVAL_GPU_MEM", "RL_GPUS", "CUDA_VISIBLE_DEVICES", "GPUS_PER_NODE", "ROLLOUT_TP", "STEPS", "LR", "SAVE_FREQ",
         "CKPT_DIR", "RESUME"}
SFT_OPTIONS = {"--stop-at-step", "--stop-after-s", "--data-seed", "--record"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env.update(extra)
    return env


def _dry(repo_root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = env if env is not None else _env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin")
    return subprocess.run([sys.executable, RUN, "--dry-run", *args], cwd=repo_root, env=env, capture_output=True,
                          text=True, timeout=600)


def _commands(stdout: str) -> list[list[str]]:
    """The printed commands (not the comment lines), each without its ``env NAME=VALUE ...`` prefix."""
    out = []
    for line in stdout.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        argv = shlex.split(line)
        if argv[0] == "env":
            argv = argv[1:]
            while argv and ("=" in argv[0] or argv[0] == "-u"):
                argv = argv[2:] if argv[0] == "-u" else argv[1:]
        out.append(argv)
    return out


def _launches(repo_root: Path, *args: str, **env: str) -> list[list[str]]:
    proc = _dry(repo_root, *args, env=_env(PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", **env))
    assert proc.returncode == 0, proc.stderr
    return [a for a in _commands(proc.stdout) if a[1:3] == ["-m", "verl.trainer.main_ppo"]]


def _compose(config_dir: str, name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=name, overrides=overrides)


def _grpo_cfg(argv: list[str]):
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    name_at = argv.index("--config-name")
    return _compose(argv[argv.index("--config-path") + 1], argv[name_at + 1], argv[name_at + 2 :])


def _sft_split(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(sft_run's options, verl's overrides) of an SFT launch line."""
    assert Path(argv[0]).name == "torchrun" and argv[argv.index("-m") + 1] == "learnability.sft_run"
    rest, opts = argv[argv.index("-m") + 2 :], {}
    while rest and rest[0] in SFT_OPTIONS:
        opts[rest[0]], rest = rest[1], rest[2:]
    return opts, rest


def _sft_cfg(argv: list[str]):
    import verl

    return _compose(str(Path(verl.__file__).parent / "trainer/config"), "sft_trainer_engine", _sft_split(argv)[1])


def _validate(cfg) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


# ------------------------------------------------------------------ the dry run's launch lines
def test_grpo_stages_compose_validate_and_carry_the_seed_and_rounds(repo_root, tmp_path):
    lines = _launches(repo_root, "--stages", "grpo_k0,grpo_attempt,grpo", "--seeds", "7", "--rounds", "2",
                      "--exp-dir", str(tmp_path / "exp"))
    assert len(lines) == 3
    k2, attempt, k0 = (_grpo_cfg(argv) for argv in lines)  # in stage order, whatever the order given
    assert (k2.mrgrpo.agent_loop.rounds, attempt.mrgrpo.agent_loop.rounds, k0.mrgrpo.agent_loop.rounds) == (2, 2, 0)
    assert [c.algorithm.adv_estimator for c in (k2, attempt, k0)] == ["mrgrpo_grpo", "mrgrpo_attempt", "mrgrpo_grpo"]
    assert [c.trainer.experiment_name for c in (k2, attempt, k0)] == ["grpo_k2_s7", "grpo_k2_attempt_s7", "grpo_k0_s7"]
    seed_dir = tmp_path / "exp/runs/seed_7"
    for cfg in (k2, attempt, k0):
        assert cfg.data.seed == 7
        assert cfg.actor_rollout_ref.actor.fsdp_config.seed == 7 and cfg.actor_rollout_ref.rollout.seed == 7
        assert cfg.actor_rollout_ref.model.use_fused_kernels is True
        assert cfg.actor_rollout_ref.model.path == str(seed_dir / "plateau_model")
        _validate(cfg)
    assert k2.trainer.default_local_dir == str(seed_dir / "grpo_ckpt/grpo_k2")  # a checkpoint of its last step
    assert (k2.trainer.save_freq, k2.trainer.total_training_steps, k2.trainer.resume_mode) == (30, 30, "disable")


def test_the_grpo_stage_runs_the_unchanged_recipe_with_the_studys_model_and_data(repo_root, tmp_path):
    """The study passes its model and data as knobs and overrides of the default profile: true sampling, greedy
    validation, 1 / 2 s per test, the small-model settings."""
    proc = _dry(repo_root, "--stages", "grpo", "--seeds", "1", "--exp-dir", str(tmp_path / "exp"))
    assert proc.returncode == 0, proc.stderr
    (runner,) = [a for a in _commands(proc.stdout) if a[0] == "bash"]
    assert runner[1] == str(repo_root / "recipe/mrgrpo/run_qwen3_apps.sh")
    line = next(x for x in proc.stdout.splitlines() if "run_qwen3_apps.sh" in x and not x.startswith("#"))
    assert "PROFILE=default" in line and f"MODEL={tmp_path / 'exp/runs/seed_1/plateau_model'}" in line
    (argv,) = [a for a in _commands(proc.stdout) if a[1:3] == ["-m", "verl.trainer.main_ppo"]]
    cfg = _grpo_cfg(argv)
    assert cfg.data.train_files == str(tmp_path / "exp/rl/train.parquet")
    assert cfg.data.val_files == str(tmp_path / "exp/rl/val.parquet")
    assert cfg.actor_rollout_ref.rollout.top_k == -1 and cfg.actor_rollout_ref.rollout.val_kwargs.temperature == 0
    assert (cfg.mrgrpo.limits.time_s, cfg.mrgrpo.limits.wall_s) == (1, 2)  # the loop's public tests and
    limits = cfg.reward.custom_reward_function.reward_kwargs.limits  # the reward's hidden tests alike
    assert (limits.time_s, limits.wall_s) == (1, 2)
    assert cfg.mrgrpo.agent_loop.sandbox_time_s is None  # the retired keys stay unset
    assert cfg.data.plan_source == "self"
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, cfg.data.max_response_length) == (64, 8, 1024)
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.trainer.val_before_train is True
    _validate(cfg)


def test_the_run_scripts_knobs_pass_through_to_multi_gpu_launches(repo_root, tmp_path):
    """The study on a 2-GPU node (rollout TP 1 = two replicas, and TP 2): the run script's knobs in the environment
    reach the launch, and verl's own config checks accept it."""
    for tp in ("1", "2"):
        (argv,) = _launches(repo_root, "--stages", "grpo", "--seeds", "1", "--exp-dir", str(tmp_path / "exp"),
                            GPUS_PER_NODE="2", ROLLOUT_TP=tp, HOME=str(tmp_path))
        cfg = _grpo_cfg(argv)
        assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (2, 1)
        assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == int(tp)
        _validate(cfg)


def test_runs_get_their_own_names_per_seed_and_tag(repo_root, tmp_path):
    """Seeds and a run tag name the runs (verl's experiment, seed_N/<name>.jsonl), so that runs side by side never
    write into each other; extra overrides reach every GRPO run."""
    lines = _launches(repo_root, "--seeds", "1,2", "--run-tag", "_x", "--stages", "grpo", "--exp-dir",
                      str(tmp_path / "exp"), "--out-dir", str(tmp_path / "runs"),
                      "algorithm.adv_estimator=mrgrpo_attempt")
    cfgs = [_grpo_cfg(argv) for argv in lines]
    assert {c.algorithm.adv_estimator for c in cfgs} == {"mrgrpo_attempt"}
    assert [(c.trainer.experiment_name, Path(c.trainer.default_local_dir).parent.parent.name) for c in cfgs] == [
        ("grpo_k2_x_s1", "seed_1"), ("grpo_k2_x_s2", "seed_2")]


def _sft_lines(repo_root, *args) -> list[list[str]]:
    proc = _dry(repo_root, *args)
    assert proc.returncode == 0, proc.stderr
    return [a for a in _commands(proc.stdout) if "learnability.sft_run" in a]


def test_sft_chunks_compose_with_verl_as_one_run_with_a_cosine_schedule_over_the_cap(repo_root, tmp_path):
    exp = tmp_path / "exp"
    (argv,) = _sft_lines(repo_root, "--stages", "plateau", "--seeds", "4", "--exp-dir", str(exp), "--sft-chunk", "250",
                         "--sft-max-steps", "900", "--sft-lr-floor", "0.05")
    opts, _ = _sft_split(argv)
    assert opts == {"--stop-at-step": "250", "--data-seed": "4"}  # the first chunk; the seed's data order
    cfg = _sft_cfg(argv)
    assert cfg.trainer.total_training_steps == 900 and cfg.trainer.save_freq == 250  # the schedule's horizon: the cap
    assert (cfg.optim.lr_scheduler_type, cfg.optim.min_lr_ratio, cfg.optim.lr) == ("cosine", 0.05, 1e-3)
    assert cfg.trainer.default_local_dir == str(exp / "runs/seed_4/sft_ckpt") and cfg.trainer.resume_mode == "auto"
    assert cfg.model.path == str(exp / "runs/seed_4/model_init")
    assert cfg.data.val_files is None and cfg.trainer.test_freq == -1
    assert cfg.model.use_fused_kernels is True and cfg.model.use_remove_padding is False
    assert cfg.data.custom_cls.name == "TranscriptSFTDataset"
    assert cfg.data.custom_cls.path == "pkg://learnability.sft_dataset"

    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_val.parquet").write_bytes(b"")
    (argv,) = _sft_lines(repo_root, "--stages", "plateau", "--seeds", "4", "--exp-dir", str(exp), "--sft-chunk", "250",
                         "--sft-override", "optim.weight_decay=0.1")
    cfg = _sft_cfg(argv)
    assert cfg.data.val_files == str(exp / "sft/sft_val.parquet") and cfg.trainer.test_freq == 250
    assert cfg.optim.weight_decay == 0.1  # --sft-override reaches the trainer


def test_the_control_continues_from_the_plateau_for_grpos_step_seconds(repo_root, tmp_path):
    exp, seed = tmp_path / "exp", tmp_path / "exp/runs/seed_1"
    (argv,) = _sft_lines(repo_root, "--stages", "control", "--seeds", "1", "--exp-dir", str(exp))
    assert _sft_split(argv)[0]["--stop-after-s"] == "GRPO_STEP_SECONDS"  # before GRPO ran
    seed.mkdir(parents=True)
    (seed / "plateau.json").write_text(json.dumps({"step": 1500}))
    (seed / "grpo_k2.jsonl").write_text("".join(json.dumps({"step": n, "data": {"timing_s/step": 17.25}}) + "\n"
                                                for n in (1, 2, 3)))
    (argv,) = _sft_lines(repo_root, "--stages", "control", "--seeds", "1", "--exp-dir", str(exp))
    opts, _ = _sft_split(argv)
    assert opts == {"--stop-after-s": "51.750", "--data-seed": "1", "--record": str(seed / "control.json")}
    cfg = _sft_cfg(argv)
    assert cfg.trainer.resume_from_path == str(seed / "sft_ckpt/global_step_1500")
    assert cfg.trainer.default_local_dir == str(seed / "control_ckpt") and cfg.trainer.save_freq == -1
    assert cfg.trainer.total_training_steps == 6000  # the same schedule as the plateau run's


def test_sft_max_length_follows_the_longest_transcript(repo_root, tmp_path):
    exp = tmp_path / "exp"
    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_report.json").write_text('{"splits": {"train": {"max_tokens": 1500}}}')
    (argv,) = _sft_lines(repo_root, "--stages", "plateau", "--seeds", "1", "--exp-dir", str(exp))
    assert _sft_cfg(argv).data.max_length == 1536


# ------------------------------------------------------------------ the dry run writes and starts nothing
_LOGGING_PYTHON = """#!/bin/bash
echo "$@" >> CALLS
exit 0
"""


def test_dry_run_prints_every_stage_for_every_seed_and_writes_and_starts_nothing(repo_root, tmp_path):
    """No GPU, a fresh HOME: every stage's command for every seed is printed, in order, and no file appears anywhere
    (not the experiment folder, not OUT_DIR/stages.txt, not the cache); no stage's program ran (the run script's own
    dry run is the only thing asked, for the GRPO launch line)."""
    home, bin_dir, calls = tmp_path / "home", tmp_path / "bin", tmp_path / "calls.txt"
    home.mkdir()
    bin_dir.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text(_LOGGING_PYTHON.replace("CALLS", str(calls)))
        (bin_dir / name).chmod(0o755)
    before = sorted(tmp_path.rglob("*"))
    env = _env(PATH=f"{bin_dir}:/usr/bin:/bin", HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)
    proc = _dry(repo_root, "--stages", "table,eval,control,grpo_k0,grpo,plateau,data", "--seeds", "1,2,3",
                "--python", str(bin_dir / "python"), env=env)
    assert proc.returncode == 0, proc.stderr
    heads = [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("# stage ")]
    seeds = (1, 2, 3)
    assert heads == ["# stage data", *(f"# stage plateau seed {n}" for n in seeds),
                     *(f"# stage {stage} seed {n}" for n in seeds for stage in ("grpo", "grpo_k0")),
                     *(f"# stage {stage} seed {n}" for stage in ("control", "eval") for n in seeds), "# stage table"]
    commands = _commands(proc.stdout)
    exp = home / ".cache/mrgrpo/learn_exp"
    assert [str(bin_dir / "python"), "-m", "learnability", "data", "--out", str(exp)] in commands
    for n in (1, 2, 3):
        seed = exp / f"runs/seed_{n}"
        assert [str(bin_dir / "python"), "-m", "learnability", "model", "--tokenizer", str(exp / "tokenizer"),
                "--out", str(seed / "model_init"), "--seed", str(n)] in commands
        evals = [a[a.index("--out") + 1] for a in commands if a[1:4] == ["-m", "mrgrpo", "eval"] and str(seed) in
                 a[a.index("--out") + 1]]
        assert evals == [str(seed / "sft_eval/step_500"), *(str(seed / f"eval/{m}") for m in
                                                             ("start_val2", "grpo_val", "grpo_val2", "control_val",
                                                              "control_val2"))]
    assert sum("learnability.sft_run" in a for a in commands) == 6  # a chunk and the control, per seed
    assert sum(a[:2] == ["bash", str(repo_root / "recipe/mrgrpo/run_qwen3_apps.sh")] for a in commands) == 6
    assert sum(a[1:3] == ["-m", "verl.trainer.main_ppo"] for a in commands) == 6
    assert commands[-1][1:] == [str(repo_root / "experiments/learnability/seeds_table.py"), str(exp / "runs"),
                                "--seeds", "1,2,3"]
    assert set(tmp_path.rglob("*")) - set(before) <= {calls}
    ran = calls.read_text().splitlines() if calls.exists() else []
    assert not [c for c in ran if c.startswith(("-m learnability", "-m verl", "-m mrgrpo eval", "--standalone"))], ran


def test_dry_run_skips_what_is_done_and_refuses_what_cannot_fit(repo_root, tmp_path):
    exp = tmp_path / "exp"
    for f in ("experiment.json", "rl/train.parquet", "rl/val.parquet", "rl/val2.parquet", "sft/sft_train.parquet"):
        (exp / f).parent.mkdir(parents=True, exist_ok=True)
        (exp / f).write_text("")
    proc = _dry(repo_root, "--stages", "data,table", "--exp-dir", str(exp))
    assert proc.returncode == 0 and "# stage data: done before, skipped" in proc.stdout, proc.stderr
    # 2 seeds x 3 RL stages side by side on one GPU: 0.2 + 0.3 + ... + 0.7
    proc = _dry(repo_root, "--stages", "grpo,grpo_attempt,grpo_k0", "--seeds", "1,2", "--parallel", "--exp-dir",
                str(exp))
    assert proc.returncode == 2 and "lower --gpu-mem-util" in proc.stderr and proc.stdout == ""


# ------------------------------------------------------------------ the real run, with fakes
_FAKE_PYTHON = """#!/bin/bash
if [[ "$1" == *seeds_table.py ]]; then exec REAL_PYTHON "$@"; fi  # the table itself, for real
# mrgrpo eval: a chunk's no-demo score from SCORES ("500:0.1 1000:0.3 ..."); per-problem records by model kind
if [[ "$1 $2 $3" == "-m mrgrpo eval" ]]; then
  ARGS="$*"
  while [[ $# -gt 0 ]]; do [[ $1 == --out ]] && out=$2; [[ $1 == --model ]] && model=$2; [[ $1 == --data ]] && data=$2
    [[ $1 == --gpu-memory-utilization ]] && mem=$2; shift; done
  name="$(basename "$(dirname "$(dirname "$out")")")/$(basename "$(dirname "$out")")/$(basename "$out")"
  echo "eval $name $(basename "$data")" >> CALLS
  echo "evalmem $mem" >> CALLS
  echo "evalargs $ARGS" >> CALLS
  if [[ "$out" == *"$FAIL_EVAL_ONCE" && -n "$FAIL_EVAL_ONCE" && ! -e "$out.failed_once" ]]; then
    touch "$out.failed_once"; exit 1; fi
  score=0.5; solved=5
  if [[ "$model" =~ global_step_([0-9]+)/huggingface$ && "$model" == */sft_ckpt/* ]]; then
    step=${BASH_REMATCH[1]}
    for pair in ${SCORES:-500:0.10 1000:0.30 1500:0.29 2000:0.30 2500:0.20 3000:0.20}; do
      [[ ${pair%%:*} == "$step" ]] && score=${pair#*:}; done
  fi
  [[ "$model" == *plateau_model ]] && solved=3
  [[ "$model" == *grpo_ckpt* ]] && solved=9
  [[ "$model" == *control_ckpt* ]] && solved=4
  mkdir -p "$out"
  { echo "problem_id,data_source,sample,acc"
    for split in synth_seen synth_nodemo synth_unseen_template; do
      for i in 0 1 2 3 4 5 6 7 8 9; do echo "$split-$i,$split,0,$(( i < solved ? 1 : 0 ))"; done; done
  } > "$out/per_problem.csv"
  pass="{\\"pass@1\\": $score}"
  echo "{\\"by_data_source\\": {\\"synth_nodemo\\": {\\"final\\": $pass, \\"attempt1\\": $pass}}}" > "$out/summary.json"
  exit 0
fi
if [[ "$1 $2" == "-m learnability" ]]; then
  echo "learnability $3" >> CALLS
  if [[ "$3" == data ]]; then  # what the data stage writes
    for f in experiment.json rl/train.parquet rl/val.parquet rl/val2.parquet sft/sft_train.parquet tokenizer/t.json
      do mkdir -p "$(dirname "$5/$f")" && touch "$5/$f"; done
  fi
  if [[ "$3" == model ]]; then mkdir -p "$7" && echo {} > "$7/config.json"; fi
  exit 0
fi
if [[ "$1 $2" == "-m verl.trainer.main_ppo" ]]; then
  est=gae
  for a in "$@"; do case $a in trainer.experiment_name=*) name=${a#*=};; algorithm.adv_estimator=*) est=${a#*=};;
    *.rollout.gpu_memory_utilization=*) mem=${a#*=};; trainer.default_local_dir=*) ckpt=${a#*=};;
    trainer.total_training_steps=*) steps=${a#*=};; esac; done
  echo "grpo $name" >> CALLS
  echo "grpomem $name $mem" >> CALLS
  echo "grpoest $name $est" >> CALLS
  echo "grpogpu $name ${CUDA_VISIBLE_DEVICES-unset}" >> CALLS
  if [[ "$name" == "$FAIL_START_ONCE" && ! -e "CALLS.$name.failed" ]]; then  # dies before its first step, once
    touch "CALLS.$name.failed"; echo "No available memory for the cache blocks"; exit 1
  fi
  # FAKE_HOLD="a:b": run a does not train its first step until run b has started (at most 60 s)
  for pair in $FAKE_HOLD; do
    if [[ "${pair%%:*}" == "$name" ]]; then
      for _ in $(seq 600); do grep -qx "grpo ${pair#*:}" CALLS && break; sleep 0.1; done
    fi
  done
  echo "step:1 - training/epoch:0"  # verl's console logger, as the gate reads it
  echo "trained $name" >> CALLS
  # FAKE_NEXT="a:b c:d": run a trains until run b has started (at most 60 s), so "side by side" needs no timing
  for pair in $FAKE_NEXT; do
    if [[ "${pair%%:*}" == "$name" ]]; then
      for _ in $(seq 600); do grep -qx "grpo ${pair#*:}" CALLS && break; sleep 0.1; done
    fi
  done
  for s in 1 2; do echo "{\\"step\\": $s, \\"data\\": {\\"timing_s/step\\": 12.5}}" >> "$VERL_FILE_LOGGER_PATH"; done
  [[ -n "$GRPO_RC" ]] || mkdir -p "$ckpt/global_step_$steps/actor"
  echo "end $name" >> CALLS
  exit "${GRPO_RC:-0}"
fi
exit 0
"""

_FAKE_TORCHRUN = """#!/bin/bash
# learnability.sft_run: --stop-at-step N trains the chunk to N; --stop-after-s S is the control (100 steps)
for a in "$@"; do case $a in trainer.default_local_dir=*) d=${a#*=};; trainer.resume_from_path=*) r=${a#*=};; esac
done
while [[ $# -gt 0 ]]; do case $1 in --stop-at-step) n=$2;; --stop-after-s) budget=$2;; --record) record=$2;;
  --data-seed) seed=$2;; esac; shift; done
save() { mkdir -p "$d/global_step_$1/huggingface" && echo {} > "$d/global_step_$1/huggingface/config.json"
  echo "$1" > "$d/latest_checkpointed_iteration.txt"; }
if [[ -n "$n" ]]; then
  echo "sft seed $seed to $n" >> CALLS
  if [[ "$n" == "$FAIL_CHUNK_ONCE" && ! -e "$d/failed_$n" ]]; then touch "$d/failed_$n"; exit 1; fi
  save "$n"
else
  start=${r##*global_step_}
  echo "control seed $seed from $start for $budget" >> CALLS
  save $(( start + 100 ))
  echo "{\\"start_step\\": $start, \\"end_step\\": $(( start + 100 )), \\"steps\\": 100, \\"train_s\\": $budget}" \\
    > "$record"
fi
"""


def _fakes(tmp_path: Path, gpu: bool = True) -> tuple[Path, Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fakes = [("python", _FAKE_PYTHON.replace("REAL_PYTHON", sys.executable)), ("torchrun", _FAKE_TORCHRUN)]
    if gpu:
        fakes.append(("nvidia-smi", "#!/bin/bash\necho 'GPU 0: fake'\n"))
    else:
        (bin_dir / "nvidia-smi").unlink(missing_ok=True)
    for name, text in fakes:
        (bin_dir / name).write_text(text.replace("CALLS", str(calls)))
        (bin_dir / name).chmod(0o755)
    return bin_dir, calls


def _study(repo_root, tmp_path, *args: str, gpu: bool = True, **env_extra: str):
    """run.py for real, with the fakes; (process, calls, OUT_DIR/stages.txt, OUT_DIR)."""
    exp, out = tmp_path / "exp", tmp_path / "runs"
    bin_dir, calls = _fakes(tmp_path, gpu)
    env = _env(PATH=f"{bin_dir}:/usr/bin:/bin", **env_extra)
    proc = subprocess.run([sys.executable, RUN, "--exp-dir", str(exp), "--out-dir", str(out), "--python",
                           str(bin_dir / "python"), "--retry-wait-s", "0", "--gate-poll-s", "0.1", *args],
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    stages = out / "stages.txt"
    return (proc, calls.read_text().splitlines() if calls.exists() else [],
            stages.read_text() if stages.exists() else "", out)


def _ready(tmp_path: Path, seeds=(1, 2)) -> None:
    """The data and, per seed, a decided plateau: what the RL stages start from."""
    exp, out = tmp_path / "exp", tmp_path / "runs"
    for f in ("experiment.json", "rl/train.parquet", "rl/val.parquet", "rl/val2.parquet", "sft/sft_train.parquet",
              "tokenizer/t.json"):
        (exp / f).parent.mkdir(parents=True, exist_ok=True)
        (exp / f).write_text("")
    for n in seeds:
        seed = out / f"seed_{n}"
        for step in (500, 1000):
            (seed / f"sft_ckpt/global_step_{step}/huggingface").mkdir(parents=True)
            (seed / f"sft_ckpt/global_step_{step}/huggingface/config.json").write_text("{}")
        (seed / "sft_ckpt/latest_checkpointed_iteration.txt").write_text("1000")
        (seed / "plateau_model").mkdir()
        (seed / "plateau_model/config.json").write_text("{}")
        (seed / "plateau.json").write_text(json.dumps({"status": "plateau", "step": 1000, "score": 0.3,
                                                       "decided_at": 1500, "why": "w"}))


def test_the_whole_study_for_two_seeds_then_the_same_command_runs_nothing(repo_root, tmp_path):
    """data once; per seed: its random model, SFT chunks (the next one trains while the last is evaluated) until the
    rule fires (best 0.30 first at 1000, flat to 1500: the plateau is step 1000; the chunk trained ahead, 2000, is not
    used), GRPO from the plateau model, the control from step 1000 for GRPO's 25 s of steps, five evaluations; the
    table. The same command again runs nothing and needs no GPU."""
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "1,2", "--sft-max-steps", "3000")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.count("learnability data") == 1 and calls.count("learnability model") == 2
    for n in (1, 2):
        seed = out / f"seed_{n}"
        assert [c for c in calls if c.startswith(f"sft seed {n} ")] == [f"sft seed {n} to {k}" for k in
                                                                          (500, 1000, 1500, 2000)]
        assert [c.split()[1] for c in calls if c.startswith(f"eval seed_{n}/sft_eval")] == [
            f"seed_{n}/sft_eval/step_{k}" for k in (500, 1000, 1500)]
        decision = json.loads((seed / "plateau.json").read_text())
        assert (decision["status"], decision["step"], decision["decided_at"]) == ("plateau", 1000, 1500)
        assert decision["points"] == [[500, 0.1], [1000, 0.3], [1500, 0.29]]
        assert (seed / "plateau_model/config.json").is_file() and (seed / "plateau_model/t.json").is_file()
        assert f"control seed {n} from 1000 for 25.000" in calls
        assert (seed / "control_ckpt/global_step_1100/huggingface/config.json").is_file()
        evals = [" ".join(c.split()[1:]) for c in calls if c.startswith(f"eval seed_{n}/eval/")]
        assert evals == [f"seed_{n}/eval/start_val2 val2.parquet", f"seed_{n}/eval/grpo_val val.parquet",
                         f"seed_{n}/eval/grpo_val2 val2.parquet", f"seed_{n}/eval/control_val val.parquet",
                         f"seed_{n}/eval/control_val2 val2.parquet"]
        assert f"grpo grpo_k2_s{n}" in calls and (seed / "grpo_k2.done").is_file()
    grpo_eval = next(c for c in calls if c.startswith("evalargs") and "eval/grpo_val " in c + " ")
    assert f"--model {out}/seed_1/grpo_ckpt/grpo_k2/global_step_30 " in grpo_eval
    assert f"--merged-dir {out}/seed_1/grpo_model" in grpo_eval  # GRPO's checkpoint merged to HF format, once
    # the phases: every seed's plateau before any GRPO run, every control before any evaluation of the models
    assert max(calls.index(f"eval seed_{n}/sft_eval/step_1500 val.parquet") for n in (1, 2)) < calls.index(
        "grpo grpo_k2_s1")
    assert max(calls.index(f"control seed {n} from 1000 for 25.000") for n in (1, 2)) < calls.index(
        "eval seed_1/eval/start_val2 val2.parquet")
    table = (out / "seeds_table.md").read_text()
    assert "| mean of 2 | 30.0 | 90.0 | 40.0 | +50.0" in table and "**HOLDS**" in table
    assert "all done (rc=0)" in stages

    proc, again, stages, _ = _study(repo_root, tmp_path, "--seeds", "1,2", "--sft-max-steps", "3000", gpu=False)
    assert proc.returncode == 0, proc.stderr
    assert again == calls  # nothing ran
    for what in ("data", "seed 1: plateau", "seed 2: grpo_k2", "seed 1: control", "seed 2: eval", "table"):
        assert f"== {what} done before" in stages or f"== {what}: done before" in stages, what


def test_an_interrupted_chunk_resumes_from_the_last_checkpoint_and_evaluations_are_kept(repo_root, tmp_path):
    """The chunk to 1000 fails: seed 1 stops there (rc 1); the same command again trains from 1000 on (500 is not
    trained or evaluated again) and finishes the seed."""
    args = ("--seeds", "1", "--stages", "data,plateau", "--sft-max-steps", "3000")
    proc, calls, stages, out = _study(repo_root, tmp_path, *args, FAIL_CHUNK_ONCE="1000")
    assert proc.returncode == 1 and "SFT to step 1000 FAILED" in stages, proc.stderr + stages
    assert not (out / "seed_1/plateau.json").exists()
    n = len(calls)
    proc, calls, stages, out = _study(repo_root, tmp_path, *args)
    assert proc.returncode == 0, proc.stderr + stages
    again = calls[n:]
    assert [c for c in again if c.startswith("sft ")] == ["sft seed 1 to 1000", "sft seed 1 to 1500",
                                                          "sft seed 1 to 2000"]
    assert [c.split()[1] for c in again if c.startswith("eval ")] == ["seed_1/sft_eval/step_1000",
                                                                      "seed_1/sft_eval/step_1500"]
    assert json.loads((out / "seed_1/plateau.json").read_text())["step"] == 1000


def test_the_cap_ends_sft_and_says_not_at_plateau(repo_root, tmp_path):
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "3", "--stages", "data,plateau",
                                      "--sft-max-steps", "1500", SCORES="500:0.1 1000:0.2 1500:0.3")
    assert proc.returncode == 0, proc.stderr + stages
    decision = json.loads((out / "seed_3/plateau.json").read_text())
    assert (decision["status"], decision["step"]) == ("cap", 1500) and "NOT AT PLATEAU" in decision["why"]
    assert "seed 3: plateau done: NOT AT PLATEAU (the cap); start = step 1500" in stages
    assert [c for c in calls if c.startswith("sft ")] == ["sft seed 3 to 500", "sft seed 3 to 1000",
                                                          "sft seed 3 to 1500"]


def test_the_plateau_rules_numbers_are_options(repo_root, tmp_path):
    """With --plateau-extra 1 the run must go to 2 x 1000 (the best's step) before the rule fires; the rule's numbers
    are recorded with the decision."""
    proc, _, stages, out = _study(repo_root, tmp_path, "--seeds", "1", "--stages", "data,plateau",
                                  "--sft-max-steps", "3000", "--plateau-tolerance", "0", "--plateau-extra", "1")
    assert proc.returncode == 0, proc.stderr + stages
    decision = json.loads((out / "seed_1/plateau.json").read_text())
    assert (decision["status"], decision["step"], decision["decided_at"]) == ("plateau", 1000, 2000)
    assert decision["rule"] == {"window": 3, "tolerance": 0.0, "extra": 1.0, "max_steps": 3000}


def test_the_seeds_side_by_side_gate_their_grpo_runs_with_a_larger_share_each(repo_root, tmp_path):
    _ready(tmp_path)
    proc, calls, stages, _ = _study(repo_root, tmp_path, "--seeds", "1,2", "--stages", "grpo", "--parallel",
                                    FAKE_NEXT="grpo_k2_s1:grpo_k2_s2")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.index("trained grpo_k2_s1") < calls.index("grpo grpo_k2_s2") < calls.index("end grpo_k2_s1")
    assert [c for c in calls if c.startswith("grpomem")] == ["grpomem grpo_k2_s1 0.2", "grpomem grpo_k2_s2 0.3"]
    assert "(vLLM share 0.3)" in stages and "all done (rc=0)" in stages


def test_seeds_dealt_over_gpus_start_at_once_with_the_base_share(repo_root, tmp_path):
    _ready(tmp_path)
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "1,2", "--stages", "grpo,control,eval",
                                      "--parallel", "--gpus", "0,1", FAKE_HOLD="grpo_k2_s1:grpo_k2_s2")
    assert proc.returncode == 0, proc.stderr + stages
    assert {c for c in calls if c.startswith("grpogpu")} == {"grpogpu grpo_k2_s1 0", "grpogpu grpo_k2_s2 1"}
    assert calls.index("grpo grpo_k2_s2") < calls.index("trained grpo_k2_s1")  # alone on its GPU: no gate
    assert {c for c in calls if c.startswith("grpomem")} == {"grpomem grpo_k2_s1 0.4", "grpomem grpo_k2_s2 0.4"}
    assert {c for c in calls if c.startswith("evalmem")} == {"evalmem 0.15"}
    assert "on GPU 1" in stages


def test_a_run_that_dies_before_its_first_step_is_started_once_more(repo_root, tmp_path):
    _ready(tmp_path)
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "1,2", "--stages", "grpo", "--parallel",
                                      FAIL_START_ONCE="grpo_k2_s2")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.count("grpo grpo_k2_s2") == 2 and calls.count("grpo grpo_k2_s1") == 1
    assert "grpo_k2 failed before its first step" in stages
    assert "No available memory" in (out / "seed_2/grpo_k2.failed_start.log").read_text()


def test_a_failed_grpo_run_fails_its_seed_only(repo_root, tmp_path):
    """GRPO fails after training started: not started again, no .done; its seed gets no control and no evaluations,
    the run ends with 1 after the table."""
    _ready(tmp_path, seeds=(1,))
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "1", "--stages", "grpo,control,eval,table",
                                      GRPO_RC="1")
    assert proc.returncode == 1 and calls.count("grpo grpo_k2_s1") == 1 and "grpo_k2 FAILED" in stages
    assert not (out / "seed_1/grpo_k2.done").exists()
    assert not [c for c in calls if c.startswith(("control", "eval"))] and "table done" in stages


def test_a_failed_evaluation_is_tried_once_more(repo_root, tmp_path):
    _ready(tmp_path, seeds=(1,))
    proc, calls, stages, out = _study(repo_root, tmp_path, "--seeds", "1", "--stages", "grpo,control,eval",
                                      FAIL_EVAL_ONCE="eval/grpo_val2")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.count("eval seed_1/eval/grpo_val2 val2.parquet") == 2 and "eval grpo_val2 failed" in stages
    assert (out / "seed_1/eval/grpo_val2/summary.json").is_file()


def test_a_grpo_run_started_again_clears_its_evaluations_and_the_control_it_timed(repo_root, tmp_path):
    _ready(tmp_path, seeds=(1,))
    args = ("--seeds", "1", "--stages", "grpo,control,eval")
    proc, calls, stages, out = _study(repo_root, tmp_path, *args)
    assert proc.returncode == 0, proc.stderr + stages
    (out / "seed_1/grpo_k2.done").unlink()
    n = len(calls)
    proc, calls, stages, out = _study(repo_root, tmp_path, *args)
    assert proc.returncode == 0, proc.stderr + stages
    again = [c for c in calls[n:] if c.startswith(("grpo ", "control", "eval "))]
    assert again == ["grpo grpo_k2_s1", "control seed 1 from 1000 for 25.000",
                     *(f"eval seed_1/eval/{m}_{h} {h}.parquet" for m in ("grpo", "control") for h in ("val", "val2"))]


def test_grpo_needs_the_plateau(repo_root, tmp_path):
    proc, calls, stages, _ = _study(repo_root, tmp_path, "--seeds", "1", "--stages", "grpo")
    assert proc.returncode == 1 and "grpo_k2 FAILED: no plateau model yet" in stages and calls == []


def test_the_gpu_is_checked_first_before_any_stage_runs(repo_root, tmp_path):
    """No GPU: exit 3 before the data stage (12 minutes of CPU) starts; nothing written, nothing run."""
    proc, calls, stages, out = _study(repo_root, tmp_path, "--stages", "data,plateau", gpu=False)
    assert proc.returncode == 3 and "no NVIDIA GPU" in proc.stderr and "plateau (seed 1)" in proc.stderr
    assert calls == [] and stages == "" and not out.exists() and not (tmp_path / "exp").exists()


def test_cpu_stages_need_no_gpu(repo_root, tmp_path):
    proc, calls, stages, out = _study(repo_root, tmp_path, "--stages", "data", gpu=False)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["learnability data"] and "data done" in stages and (out / "data.log").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (("--stages", "plateau,grpo_atempt"), "unknown stage 'grpo_atempt'"),
    (("--seeds", "1,,2"), "--seeds"), (("--seeds", "1,1"), "--seeds"),
    (("--gpus", "0;1"), "--gpus"), (("--sft-chunk", "0"), "--sft-chunk")])
def test_a_bad_command_line_is_refused_before_anything_runs(repo_root, tmp_path, args, message):
    proc, calls, stages, _ = _study(repo_root, tmp_path, *args)
    assert proc.returncode == 2 and message in proc.stderr and calls == [] and stages == ""


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_stages_and_every_option_and_runs_nothing(repo_root, tmp_path, flag):
    proc = subprocess.run([sys.executable, RUN, flag], cwd=repo_root, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("usage: python experiments/learnability/run.py")
    assert "The learnability study" in proc.stdout and "plateau rule" in proc.stdout
    for stage in ("data", "plateau", "grpo", "grpo_attempt", "grpo_k0", "control", "eval", "table"):
        assert f"\n  {stage} " in proc.stdout, stage
    for option in ("--stages", "--seeds", "--parallel", "--gpus", "--run-tag", "--python", "--dry-run", "--exp-dir",
                   "--sft-chunk", "--sft-max-steps", "--plateau-window", "--plateau-tolerance", "--plateau-extra",
                   "--sft-lr", "--sft-lr-floor", "--eval-gpu-mem"):
        assert option in proc.stdout, option
    assert not (tmp_path / ".cache").exists()
