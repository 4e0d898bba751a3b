"""experiments/learnability/run.py without a GPU.

Its dry run prints every stage's command and writes nothing; the launch lines compose with verl 0.9.1's own hydra
configs, so a key verl does not have (``trainer.seed`` in main_ppo) or a setting verl's trainer trips on
(``test_freq`` > 0 without validation files) fails here, not 5 minutes into a GPU run. Its real run is driven with
fakes for the GPU (nvidia-smi), python (verl, `mrgrpo eval`) and torchrun: the GPU check comes first, stages run in
order and resume, the tracks run side by side, shares are refused before anything runs.
"""

from __future__ import annotations

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
         "EVAL_GPU_MEM", "RL_GPUS", "CUDA_VISIBLE_DEVICES", "GPUS_PER_NODE", "ROLLOUT_TP", "STEPS", "LR"}


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


def _sft_cfg(argv: list[str]):
    import verl

    assert Path(argv[0]).name == "torchrun" and argv[argv.index("-m") + 1] == "verl.trainer.sft_trainer"
    overrides = argv[argv.index("-m") + 2 :]
    return _compose(str(Path(verl.__file__).parent / "trainer/config"), "sft_trainer_engine", overrides)


def _validate(cfg) -> None:
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


# ------------------------------------------------------------------ the dry run's launch lines
def test_grpo_stages_compose_validate_and_carry_the_seed_and_rounds(repo_root, tmp_path):
    lines = _launches(repo_root, "--stages", "grpo_k0,grpo_attempt,grpo", "--seed", "7", "--rounds", "2",
                      "--exp-dir", str(tmp_path / "exp"))
    assert len(lines) == 3
    k2, attempt, k0 = (_grpo_cfg(argv) for argv in lines)  # in stage order, whatever the order given
    assert (k2.mrgrpo.agent_loop.rounds, attempt.mrgrpo.agent_loop.rounds, k0.mrgrpo.agent_loop.rounds) == (2, 2, 0)
    assert [c.algorithm.adv_estimator for c in (k2, attempt, k0)] == ["mrgrpo_grpo", "mrgrpo_attempt", "mrgrpo_grpo"]
    assert [c.trainer.experiment_name for c in (k2, attempt, k0)] == ["grpo_k2_s7", "grpo_k2_s7_attempt", "grpo_k0_s7"]
    for cfg in (k2, attempt, k0):
        assert cfg.data.seed == 7
        assert cfg.actor_rollout_ref.actor.fsdp_config.seed == 7 and cfg.actor_rollout_ref.rollout.seed == 7
        assert cfg.actor_rollout_ref.model.use_fused_kernels is True
        assert cfg.actor_rollout_ref.model.path == str(tmp_path / "exp/sft_model")
        _validate(cfg)


def test_the_grpo_stage_runs_the_unchanged_recipe_with_the_studys_model_and_data(repo_root, tmp_path):
    """What the run script's former `synth` profile set, the study passes as knobs and overrides of the default
    profile: its model and data, true sampling, greedy validation, 1 / 2 s per test, the small-model settings."""
    proc = _dry(repo_root, "--stages", "grpo", "--exp-dir", str(tmp_path / "exp"))
    assert proc.returncode == 0, proc.stderr
    (runner,) = [a for a in _commands(proc.stdout) if a[0] == "bash"]
    assert runner[1] == str(repo_root / "recipe/mrgrpo/run_qwen3_apps.sh")
    line = next(x for x in proc.stdout.splitlines() if "run_qwen3_apps.sh" in x and not x.startswith("#"))
    assert "PROFILE=default" in line and f"MODEL={tmp_path / 'exp/sft_model'}" in line
    (argv,) = [a for a in _commands(proc.stdout) if a[1:3] == ["-m", "verl.trainer.main_ppo"]]
    cfg = _grpo_cfg(argv)
    assert cfg.data.train_files == str(tmp_path / "exp/rl/train.parquet")
    assert cfg.actor_rollout_ref.model.path == str(tmp_path / "exp/sft_model")
    assert cfg.actor_rollout_ref.rollout.top_k == -1 and cfg.actor_rollout_ref.rollout.val_kwargs.temperature == 0
    assert (cfg.mrgrpo.limits.time_s, cfg.mrgrpo.limits.wall_s) == (1, 2)  # the loop's public tests and
    limits = cfg.reward.custom_reward_function.reward_kwargs.limits  # the reward's hidden tests alike
    assert (limits.time_s, limits.wall_s) == (1, 2)
    assert cfg.mrgrpo.agent_loop.sandbox_time_s is None  # the retired keys stay unset
    assert cfg.data.plan_source == "self"
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n, cfg.data.max_response_length) == (64, 8, 1024)
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.trainer.val_before_train is True and cfg.trainer.save_freq == -1
    _validate(cfg)


def test_the_run_scripts_knobs_pass_through_to_multi_gpu_launches(repo_root, tmp_path):
    """The study on a 2-GPU node (rollout TP 1 = two replicas, and TP 2): the run script's knobs in the environment
    reach the launch, and verl's own config checks accept it."""
    for tp in ("1", "2"):
        (argv,) = _launches(repo_root, "--stages", "grpo", "--exp-dir", str(tmp_path / "exp"), GPUS_PER_NODE="2",
                            ROLLOUT_TP=tp, HOME=str(tmp_path))
        cfg = _grpo_cfg(argv)
        assert (cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (2, 1)
        assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == int(tp)
        _validate(cfg)


def test_runs_side_by_side_get_their_own_names_and_logs(repo_root, tmp_path):
    """Another seed or a run tag names the run (verl experiment, OUT_DIR/<name>.jsonl), so runs launched side by side
    on one GPU (the K=0 ablation, a second seed, another estimator) never write into each other."""
    names = {}
    for flags in (("--seed", "1"), ("--seed", "2"), ("--seed", "1", "--run-tag", "_attempt")):
        lines = _launches(repo_root, *flags, "--stages", "grpo,grpo_k0", "--exp-dir", str(tmp_path / "exp"),
                          "--out-dir", str(tmp_path / "runs"), "algorithm.adv_estimator=mrgrpo_attempt")
        cfgs = [_grpo_cfg(argv) for argv in lines]
        for cfg in cfgs:
            assert cfg.algorithm.adv_estimator == "mrgrpo_attempt"  # extra overrides reach every GRPO run
        names[flags[1::2]] = [c.trainer.experiment_name for c in cfgs]
    assert names == {("1",): ["grpo_k2", "grpo_k0"], ("2",): ["grpo_k2_s2", "grpo_k0_s2"],
                     ("1", "_attempt"): ["grpo_k2_attempt", "grpo_k0_attempt"]}


def _sft_line(repo_root, *args) -> list[str]:
    proc = _dry(repo_root, "--stages", "sft", *args)
    assert proc.returncode == 0, proc.stderr
    (argv,) = [a for a in _commands(proc.stdout) if "verl.trainer.sft_trainer" in a]
    return argv


def test_sft_composes_with_verl_and_tests_only_with_validation_files(repo_root, tmp_path):
    exp = tmp_path / "exp"
    cfg = _sft_cfg(_sft_line(repo_root, "--exp-dir", str(exp), "--save-freq", "250", "--sft-steps", "900"))
    assert cfg.data.val_files is None and cfg.trainer.test_freq == -1
    assert cfg.trainer.save_freq == 250 and cfg.trainer.total_training_steps == 900
    assert cfg.model.use_fused_kernels is True and cfg.model.use_remove_padding is False
    assert cfg.data.custom_cls.name == "TranscriptSFTDataset"
    assert cfg.data.custom_cls.path == "pkg://learnability.sft_dataset"

    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_val.parquet").write_bytes(b"")
    cfg = _sft_cfg(_sft_line(repo_root, "--exp-dir", str(exp), "--save-freq", "250",
                             "--sft-override", "optim.lr_scheduler_type=cosine"))
    assert cfg.data.val_files == str(exp / "sft/sft_val.parquet") and cfg.trainer.test_freq == 250
    assert cfg.optim.lr_scheduler_type == "cosine"  # --sft-override reaches the trainer


def test_sft_max_length_follows_the_longest_transcript(repo_root, tmp_path):
    exp = tmp_path / "exp"
    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_report.json").write_text('{"splits": {"train": {"max_tokens": 1500}}}')
    assert _sft_cfg(_sft_line(repo_root, "--exp-dir", str(exp))).data.max_length == 1536


# ------------------------------------------------------------------ the dry run writes and starts nothing
_LOGGING_PYTHON = """#!/bin/bash
echo "$@" >> CALLS
exit 0
"""


def test_dry_run_prints_every_stage_and_writes_and_starts_nothing(repo_root, tmp_path):
    """No GPU, a fresh HOME: every stage's command is printed, in order, and no file appears anywhere (not the
    experiment folder, not OUT_DIR/stages.txt, not the cache); no stage's program ran (the run script's own dry run
    is the only thing asked, for the GRPO launch line)."""
    home, bin_dir, calls = tmp_path / "home", tmp_path / "bin", tmp_path / "calls.txt"
    home.mkdir()
    bin_dir.mkdir()
    for name in ("python", "torchrun"):
        (bin_dir / name).write_text(_LOGGING_PYTHON.replace("CALLS", str(calls)))
        (bin_dir / name).chmod(0o755)
    before = sorted(tmp_path.rglob("*"))
    env = _env(PATH=f"{bin_dir}:/usr/bin:/bin", HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)
    proc = _dry(repo_root, "--stages", "table,sft_eval,sft_more,grpo_k0,grpo,sft,data", "--python",
                str(bin_dir / "python"), env=env)
    assert proc.returncode == 0, proc.stderr
    heads = [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("# stage ")]
    assert heads == ["# stage data", "# stage sft", "# stage grpo", "# stage grpo_k0", "# stage sft_more",
                     "# stage sft_eval", "# stage table"]
    commands = _commands(proc.stdout)
    exp = home / ".cache/mrgrpo/learn_exp"
    assert [str(bin_dir / "python"), "-m", "learnability", "data", "--out", str(exp)] in commands
    assert sum("verl.trainer.sft_trainer" in a for a in commands) == 2  # sft, and the control
    assert sum(a[:2] == ["bash", str(repo_root / "recipe/mrgrpo/run_qwen3_apps.sh")] for a in commands) == 2
    assert sum(a[1:3] == ["-m", "verl.trainer.main_ppo"] for a in commands) == 2
    assert sum(a[1:4] == ["-m", "mrgrpo", "eval"] for a in commands) == 2  # the control, sft_eval's checkpoints
    assert commands[-1][1:] == [str(repo_root / "experiments/learnability/learning_curves.py"), str(exp / "runs")]
    assert set(tmp_path.rglob("*")) - set(before) <= {calls}
    ran = calls.read_text().splitlines() if calls.exists() else []
    assert not [c for c in ran if c.startswith(("-m learnability", "-m verl", "-m mrgrpo eval", "--standalone"))], ran


def test_dry_run_skips_what_is_done_and_refuses_what_cannot_fit(repo_root, tmp_path):
    exp = tmp_path / "exp"
    for f in ("experiment.json", "rl/train.parquet", "rl/val.parquet", "sft/sft_train.parquet"):
        (exp / f).parent.mkdir(parents=True, exist_ok=True)
        (exp / f).write_text("")
    proc = _dry(repo_root, "--stages", "data,table", "--exp-dir", str(exp))
    assert proc.returncode == 0 and "# stage data: done before, skipped" in proc.stdout, proc.stderr
    proc = _dry(repo_root, "--stages", "grpo,grpo_attempt,grpo_k0", "--rl-parallel", "--parallel", "--exp-dir",
                str(exp))
    assert proc.returncode == 2 and "--eval-gpu-mem" in proc.stderr and proc.stdout == ""


# ------------------------------------------------------------------ the real run, with fakes
_FAKE_PYTHON = """#!/bin/bash
# mrgrpo eval: fails once for step_1000 (as an eval that cannot start next to GRPO), else writes its summary
if [[ "$1 $2 $3" == "-m mrgrpo eval" ]]; then
  ARGS="$*"
  while [[ $# -gt 0 ]]; do [[ $1 == --out ]] && out=$2; [[ $1 == --gpu-memory-utilization ]] && mem=$2; shift; done
  echo "eval $(basename "$out")" >> CALLS
  echo "evalmem $mem" >> CALLS
  echo "evalargs $ARGS" >> CALLS
  if [[ "$out" == */step_1000 && ! -e "$out.failed_once" ]]; then touch "$out.failed_once"; exit 1; fi
  if [[ "$out" == */sft_more_eval && -n "$FAIL_CONTROL_ONCE" && ! -e "$out.failed_once" ]]; then
    touch "$out.failed_once"; exit 1
  fi
  mkdir -p "$out" && echo "{}" > "$out/summary.json"; exit 0
fi
if [[ "$1 $2" == "-m learnability" ]]; then
  echo "learnability $3" >> CALLS
  if [[ "$3" == data ]]; then  # what the data stage writes
    for f in experiment.json rl/train.parquet rl/val.parquet sft/sft_train.parquet; do
      mkdir -p "$(dirname "$5/$f")" && touch "$5/$f"; done
  fi
  exit 0
fi
if [[ "$1 $2" == "-m verl.trainer.main_ppo" ]]; then
  est=gae
  for a in "$@"; do case $a in trainer.experiment_name=*) name=${a#*=};; algorithm.adv_estimator=*) est=${a#*=};;
    *.rollout.gpu_memory_utilization=*) mem=${a#*=};; esac; done
  echo "grpo $name" >> CALLS
  echo "grpomem $mem" >> CALLS
  echo "grpoest $name $est" >> CALLS
  echo "grpogpu $name ${CUDA_VISIBLE_DEVICES-unset}" >> CALLS
  if [[ "$name" == "$FAIL_START_ONCE" && ! -e "CALLS.$name.failed" ]]; then  # dies before its first step, once
    touch "CALLS.$name.failed"; echo "No available memory for the cache blocks"; exit 1
  fi
  sleep "${FAKE_STARTUP_S:-0}"
  # FAKE_HOLD="a:b": run a does not train its first step until run b has started (at most 60 s), so "b started
  # without waiting for a's first step" needs no timing
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
  echo "end $name" >> CALLS
  exit "${GRPO_RC:-0}"
fi
exit 0
"""

_FAKE_TORCHRUN = """#!/bin/bash
for a in "$@"; do case $a in trainer.total_training_steps=*) n=${a#*=};; trainer.save_freq=*) f=${a#*=};;
  trainer.default_local_dir=*) d=${a#*=};; esac; done
echo "sft $n every $f" >> CALLS
last=$(ls "$d" 2>/dev/null | sed -n 's/^global_step_//p' | sort -n | tail -1)  # resumes from its last checkpoint
for (( s=f; s<=n; s+=f )); do
  if (( s > ${last:-0} )); then
    mkdir -p "$d/global_step_$s/huggingface" && echo {} > "$d/global_step_$s/huggingface/config.json"
  fi
done
"""


def _fakes(tmp_path: Path, gpu: bool = True) -> tuple[Path, Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.txt"
    bin_dir.mkdir(parents=True, exist_ok=True)
    fakes = [("python", _FAKE_PYTHON), ("torchrun", _FAKE_TORCHRUN)]
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
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=180)
    stages = out / "stages.txt"
    return (proc, calls.read_text().splitlines() if calls.exists() else [],
            stages.read_text() if stages.exists() else "", out)


def _orchestrate(repo_root, tmp_path, *args: str, **env_extra):
    """The SFT model, its checkpoints and the data there; the tracks (by default grpo, sft_more, sft_eval) run."""
    exp = tmp_path / "exp"
    for d in ("tokenizer", "rl", "sft", "model_init", "sft_model"):
        (exp / d).mkdir(parents=True)
    for f in ("rl/train.parquet", "rl/val.parquet", "sft/sft_train.parquet", "model_init/config.json",
              "sft_model/config.json"):
        (exp / f).write_text("")
    for step in (200, 400, 600, 800, 1000):
        (exp / f"sft_ckpt/global_step_{step}/huggingface").mkdir(parents=True)
        (exp / f"sft_ckpt/global_step_{step}/huggingface/config.json").write_text("{}")
    if not any(a.startswith("--stages") for a in args):
        args = ("--stages", "grpo,sft_more,sft_eval", *args)
    return _study(repo_root, tmp_path, "--sft-steps", "1000", "--sft-more-steps", "1000", "--sft-more-save-freq",
                  "500", *args, **env_extra)


def _sft_eval(repo_root, tmp_path, *args):
    exp, out = tmp_path / "exp", tmp_path / "runs"
    (exp / "tokenizer").mkdir(parents=True)
    (exp / "tokenizer/tokenizer.json").write_text("{}")
    for step in (200, 400, 600, 800):
        (exp / f"sft_ckpt/global_step_{step}/huggingface").mkdir(parents=True)
    (out / "sft_eval/step_400").mkdir(parents=True)
    (out / "sft_eval/step_400/summary.json").write_text("{}")
    proc, calls, stages, _ = _study(repo_root, tmp_path, "--stages", "sft_eval", "--sft-steps", "600", *args)
    assert proc.returncode == 0, proc.stderr
    lines = [c.removeprefix("eval ") for c in calls if c.startswith("eval ")]
    evaluated = [int(x.rsplit("_", 1)[1]) for x in lines]
    return exp, out, calls, evaluated, stages


def test_sft_eval_evaluates_each_checkpoint_up_to_sft_steps_once(repo_root, tmp_path):
    """sft_eval runs `mrgrpo eval` (greedy, one sample) on every SFT checkpoint up to --sft-steps, newest first (the
    end of the plateau curve matters most when time runs out), with the tokenizer beside the weights, and skips a
    checkpoint that already has its summary."""
    exp, out, calls, evaluated, _ = _sft_eval(repo_root, tmp_path)
    assert evaluated == [600, 200]
    lines = [c.removeprefix("evalargs ") for c in calls if c.startswith("evalargs ")]
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("-m mrgrpo eval --model ") and "--temperature 0" in line and "--n 1 --k 1" in line
        assert "--time-s 1 --wall-s 2" in line  # the GRPO runs' limits
        assert f"--data {exp}/rl/val.parquet" in line
    assert (exp / "sft_ckpt/global_step_200/huggingface/tokenizer.json").is_file()


def test_sft_eval_takes_an_explicit_order_and_names_a_missing_checkpoint(repo_root, tmp_path):
    *_, evaluated, stages = _sft_eval(repo_root, tmp_path, "--sft-eval-steps", "800 200 1000 600")
    assert evaluated == [800, 200, 600]
    assert "sft_eval: no checkpoint" in stages and "global_step_1000/huggingface" in stages


def test_the_gpu_is_checked_first_before_any_stage_runs(repo_root, tmp_path):
    """No GPU: exit 3 before the data stage (12 minutes of CPU) starts; nothing written, nothing run."""
    proc, calls, stages, out = _study(repo_root, tmp_path, "--stages", "data,sft", gpu=False)
    assert proc.returncode == 3 and "no NVIDIA GPU" in proc.stderr and "sft" in proc.stderr
    assert calls == [] and stages == "" and not out.exists() and not (tmp_path / "exp").exists()


def test_cpu_stages_need_no_gpu(repo_root, tmp_path):
    proc, calls, stages, out = _study(repo_root, tmp_path, "--stages", "data", gpu=False)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["learnability data"] and "data done" in stages and (out / "data.log").is_file()


def test_stages_whose_outputs_exist_are_skipped_and_a_second_run_runs_nothing(repo_root, tmp_path):
    """Resume: the first run does data, sft (the model init, the trainer, the copy of its last step) and grpo; the
    same command again runs nothing, says so, and needs no GPU."""
    proc, calls, stages, out = _study(repo_root, tmp_path, "--stages", "data,sft,grpo", "--sft-steps", "1000")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls[:3] == ["learnability data", "learnability model", "sft 1000 every 500"]
    assert "grpo grpo_k2" in calls and (out / "grpo_k2.done").is_file()
    assert (tmp_path / "exp/sft_model/config.json").is_file()
    proc, again, stages, _ = _study(repo_root, tmp_path, "--stages", "data,sft,grpo", "--sft-steps", "1000",
                                    gpu=False)
    assert proc.returncode == 0, proc.stderr
    assert again == calls  # nothing ran
    for stage in ("data", "sft", "grpo_k2"):
        assert f"== {stage}: done before" in stages, stage


def test_the_tracks_run_again_resume_from_what_is_done(repo_root, tmp_path):
    """The evaluation of step 1000 fails once: the first run ends with 1; the same command again runs that one
    evaluation only (GRPO, the control and the other evaluations are done) and ends with 0."""
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path)
    assert proc.returncode == 1 and "eval of" in stages and "step_1000" in stages, proc.stderr + stages
    n = len(calls)
    proc = subprocess.run([sys.executable, RUN, "--exp-dir", str(tmp_path / "exp"), "--out-dir", str(out), "--python",
                           str(tmp_path / "bin/python"), "--stages", "grpo,sft_more,sft_eval", "--sft-steps", "1000",
                           "--sft-more-steps", "1000", "--sft-more-save-freq", "500"],
                          cwd=repo_root, env=_env(PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin"), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    again = (tmp_path / "calls.txt").read_text().splitlines()[n:]
    assert [c for c in again if c.startswith("eval ")] == ["eval step_1000"] and len(again) == 3


def test_parallel_runs_both_tracks_and_retries_what_failed_next_to_grpo(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, "--parallel")
    assert proc.returncode == 0, proc.stderr + stages
    assert "grpo grpo_k2" in calls and "sft 2000 every 500" in calls
    evals = [c.removeprefix("eval ") for c in calls if c.startswith("eval ")]
    # the control first (sft_more), then newest first up to 2000 but not the control's checkpoint, then the retry
    assert evals == ["sft_more_eval", "step_1500", "step_1000", "step_800", "step_600", "step_400", "step_200",
                     "step_1000"]
    assert (out / "sft_eval/step_1000/summary.json").is_file() and "all done (rc=0)" in stages


def test_parallel_gives_evaluations_a_larger_gpu_share_than_grpo(repo_root, tmp_path):
    """A vLLM engine that starts next to a GRPO run counts the KV cache GRPO frees and takes back every step as its
    own use: side by side, the evaluations get a larger share than GRPO (0.3 vs 0.2 unless set), alone 0.15."""
    _, calls, _, _ = _orchestrate(repo_root, tmp_path, "--parallel")
    assert {c for c in calls if c.startswith(("grpomem", "evalmem"))} == {"grpomem 0.2", "evalmem 0.3"}
    _, calls, _, _ = _orchestrate(repo_root, tmp_path / "seq")
    assert {c for c in calls if c.startswith("evalmem")} == {"evalmem 0.15"}
    _, calls, _, _ = _orchestrate(repo_root, tmp_path / "set", "--parallel", "--gpu-mem-util", "0.25",
                                  "--eval-gpu-mem", "0.4")
    assert {c for c in calls if c.startswith(("grpomem", "evalmem"))} == {"grpomem 0.25", "evalmem 0.4"}
    _, calls, _, _ = _orchestrate(repo_root, tmp_path / "env", "--parallel", GPU_MEM_UTIL="0.25")
    assert {c for c in calls if c.startswith(("grpomem", "evalmem"))} == {"grpomem 0.25", "evalmem 0.35"}


def test_parallel_refuses_an_evaluation_share_that_cannot_start_next_to_grpo(repo_root, tmp_path):
    for mem in (("--eval-gpu-mem", "0.2"), ("--gpu-mem-util", "0.4", "--eval-gpu-mem", "0.3"),
                ("--gpu-mem-util", "0.4", "--eval-gpu-mem", "0.6")):
        proc, calls, stages, _ = _orchestrate(repo_root, tmp_path / "_".join(mem[1::2]), "--parallel", *mem)
        assert proc.returncode == 2 and "--eval-gpu-mem" in proc.stderr, mem
        assert calls == [] and "start" not in stages  # refused before anything ran


def test_parallel_evaluates_the_control_again_when_it_failed_next_to_grpo(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, "--parallel", FAIL_CONTROL_ONCE="1")
    assert proc.returncode == 0, proc.stderr + stages
    evals = [c.removeprefix("eval ") for c in calls if c.startswith("eval ")]
    assert evals[0] == "sft_more_eval" and evals.count("sft_more_eval") == 2
    assert evals.index("sft_more_eval", 1) > evals.index("step_200")  # after the RL track, not in a loop
    assert (out / "sft_more_eval/summary.json").is_file() and "sft_more done" in stages
    assert (out / "sft_more_eval/step").read_text().strip() == "2000"  # sft steps + sft_more steps: on the SFT curve
    assert (out / "sft_more_eval/start").read_text().strip() == "1000"  # where GRPO and the control started


def test_rl_stages_side_by_side_start_once_the_one_before_trains_with_a_larger_share(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, "--stages", "grpo,grpo_attempt,grpo_k0",
                                          "--rl-parallel", FAKE_STARTUP_S="0.5",
                                          FAKE_NEXT="grpo_k2:grpo_k2_attempt grpo_k2_attempt:grpo_k0")
    assert proc.returncode == 0, proc.stderr + stages
    runs = ["grpo_k2", "grpo_k2_attempt", "grpo_k0"]
    starts = [calls.index(f"grpo {r}") for r in runs]
    for before, after in zip(runs, runs[1:], strict=False):
        assert calls.index(f"trained {before}") < calls.index(f"grpo {after}")  # gated on its first step
        assert calls.index(f"grpo {after}") < calls.index(f"end {before}")  # and side by side, not after it
    assert starts == sorted(starts)
    assert [c for c in calls if c.startswith("grpomem")] == ["grpomem 0.2", "grpomem 0.3", "grpomem 0.4"]
    assert {c for c in calls if c.startswith("grpoest")} == {"grpoest grpo_k2 gae", "grpoest grpo_k0 gae",
                                                             "grpoest grpo_k2_attempt mrgrpo_attempt"}
    assert "(vLLM share 0.3)" in stages and "all done (rc=0)" in stages


def test_rl_stages_dealt_over_gpus_wait_only_for_the_one_before_them_on_their_gpu(repo_root, tmp_path):
    """--rl-gpus 0,1: three stages go to GPUs 0, 1, 0; the first two start at once with the base share, the third
    waits for the first (its GPU's) to train a step and takes 0.1 more; the second never waits for the first."""
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, "--stages", "grpo,grpo_attempt,grpo_k0",
                                          "--rl-parallel", "--rl-gpus", "0,1", "--gpu-mem-util", "0.4",
                                          FAKE_HOLD="grpo_k2:grpo_k2_attempt",
                                          FAKE_NEXT="grpo_k2:grpo_k2_attempt grpo_k2_attempt:grpo_k0")
    assert proc.returncode == 0, proc.stderr + stages
    gpus = {c.split()[1]: c.split()[2] for c in calls if c.startswith("grpogpu")}
    assert gpus == {"grpo_k2": "0", "grpo_k2_attempt": "1", "grpo_k0": "0"}
    mems = {n: c.split()[1] for n, c in zip(
        [c.split()[1] for c in calls if c.startswith("grpo ")], [c for c in calls if c.startswith("grpomem")],
        strict=True)}
    assert mems == {"grpo_k2": "0.4", "grpo_k2_attempt": "0.4", "grpo_k0": "0.5"}  # 0.4 + 0.5 fits one GPU
    assert calls.index("grpo grpo_k2_attempt") < calls.index("trained grpo_k2")  # alone on its GPU: no gate
    assert calls.index("trained grpo_k2") < calls.index("grpo grpo_k0")
    assert "on GPU 1" in stages and "all done (rc=0)" in stages


def test_rl_gpus_that_are_not_gpu_numbers_are_refused(repo_root, tmp_path):
    for bad in ("0;1", "gpu0", "0,,1"):
        proc, calls, stages, _ = _orchestrate(repo_root, tmp_path / str(len(bad)) / bad.replace(";", "_"),
                                              "--stages", "grpo,grpo_attempt", "--rl-parallel", "--rl-gpus", bad)
        assert proc.returncode == 2 and "--rl-gpus" in proc.stderr and calls == [] and stages == "", bad


def test_a_run_that_dies_before_its_first_step_is_started_once_more(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, "--stages", "grpo,grpo_attempt", "--rl-parallel",
                                            FAIL_START_ONCE="grpo_k2_attempt")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.count("grpo grpo_k2_attempt") == 2 and calls.count("grpo grpo_k2") == 1
    assert "grpo_k2_attempt failed before its first step" in stages
    assert "No available memory" in (out / "grpo_k2_attempt.failed_start.log").read_text()
    assert "trained grpo_k2_attempt" in calls


def test_a_run_that_fails_after_training_started_is_not_started_again(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, "--stages", "grpo", GRPO_RC="1")
    assert proc.returncode == 1 and calls.count("grpo grpo_k2") == 1 and "grpo_k2 FAILED" in stages
    assert not (out / "grpo_k2.done").exists()  # so the next run starts it again


def test_shares_that_cannot_fit_side_by_side_are_refused_before_anything_runs(repo_root, tmp_path):
    # three RL runs (0.2, 0.3, 0.4) and evaluations above them (0.5): 1.4 of the GPU
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, "--stages", "sft,grpo,grpo_attempt,grpo_k0,sft_eval",
                                          "--rl-parallel", "--parallel")
    assert proc.returncode == 2 and "--eval-gpu-mem" in proc.stderr and calls == [] and stages == ""
    proc, calls, _, _ = _orchestrate(repo_root, tmp_path / "rl", "--stages", "grpo,grpo_attempt,grpo_k0",
                                     "--rl-parallel", "--gpu-mem-util", "0.3")
    assert proc.returncode == 2 and "lower --gpu-mem-util" in proc.stderr and calls == []


def test_an_unknown_stage_is_refused(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, "--stages", "sft,grpo_atempt")
    assert proc.returncode == 2 and "unknown stage 'grpo_atempt'" in proc.stderr and calls == []


def test_a_failed_stage_fails_the_run_after_the_others_ran(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, GRPO_RC="1")
    assert proc.returncode == 1
    assert "grpo_k2 FAILED" in stages and "all done (rc=1)" in stages
    assert "sft 2000 every 500" in calls and "eval sft_more_eval" in calls  # the SFT track still ran
    evals = [c for c in calls if c.startswith("eval step_")]
    assert evals[-1] == "eval step_200" and evals.count("eval step_1000") == 1  # sequential: no retry pass


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_the_stages_and_every_option_and_runs_nothing(repo_root, tmp_path, flag):
    proc = subprocess.run([sys.executable, RUN, flag], cwd=repo_root, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("usage: python experiments/learnability/run.py")
    assert "The learnability study" in proc.stdout
    for stage in ("data", "sft", "grpo", "grpo_attempt", "grpo_k0", "sft_more", "sft_eval", "table"):
        assert f"\n    {stage} " in proc.stdout or f"\n  {stage} " in proc.stdout, stage
    for option in ("--stages", "--parallel", "--rl-gpus", "--run-tag", "--python", "--dry-run", "--exp-dir",
                   "--sft-steps", "--sft-lr", "--sft-more-steps", "--eval-gpu-mem"):
        assert option in proc.stdout, option
    assert not (tmp_path / ".cache").exists()
