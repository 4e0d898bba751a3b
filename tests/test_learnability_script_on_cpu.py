"""recipe/mrgrpo/learnability.sh and sft_synth.sh without a GPU: their DRY_RUN launch lines compose with verl 0.9.1's
own hydra configs, so a key verl does not have (``trainer.seed`` in main_ppo) or a setting verl's trainer trips on
(``test_freq`` > 0 without validation files) fails here, not 5 minutes into a GPU lease.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf


def _run(repo_root: Path, script: str, *args: str, **env: str) -> list[list[str]]:
    full_env = {k: v for k, v in os.environ.items() if k not in {"PROFILE", "MODEL", "DATA_DIR", "ROUNDS", "STAGES"}}
    full_env.update(env, DRY_RUN="1", PATH=f"{Path(os.sys.executable).parent}:/usr/bin:/bin",
                    PYTHON=os.sys.executable)
    proc = subprocess.run(["bash", script, *args], cwd=repo_root, env=full_env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [shlex.split(line) for line in proc.stdout.strip().splitlines()]


def _compose(config_dir: str, name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=name, overrides=overrides)


def _grpo_cfg(argv: list[str]):
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"]
    name_at = argv.index("--config-name")
    return _compose(argv[argv.index("--config-path") + 1], argv[name_at + 1], argv[name_at + 2 :])


def _sft_cfg(argv: list[str]):
    import verl

    assert argv[0] == "torchrun" and argv[argv.index("-m") + 1] == "verl.trainer.sft_trainer"
    overrides = argv[argv.index("-m") + 2 :]
    return _compose(str(Path(verl.__file__).parent / "trainer/config"), "sft_trainer_engine", overrides)


def test_grpo_stages_compose_validate_and_carry_the_seed_and_rounds(repo_root, tmp_path):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    lines = _run(repo_root, "recipe/mrgrpo/learnability.sh", STAGES="grpo_k0,grpo_attempt,grpo", SEED="7", ROUNDS="2",
                 EXP_DIR=str(tmp_path / "exp"))
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
        cfg = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_runs_side_by_side_get_their_own_names_and_logs(repo_root, tmp_path):
    """Another seed or a RUN_TAG names the run (verl experiment, OUT_DIR/<name>.jsonl), so runs launched side by side
    on one GPU (the K=0 ablation, a second seed, another estimator) never write into each other."""
    names = {}
    for env in ({"SEED": "1"}, {"SEED": "2"}, {"SEED": "1", "RUN_TAG": "_attempt"}):
        lines = _run(repo_root, "recipe/mrgrpo/learnability.sh", "algorithm.adv_estimator=mrgrpo_attempt",
                     STAGES="grpo,grpo_k0", EXP_DIR=str(tmp_path / "exp"), OUT_DIR=str(tmp_path / "runs"), **env)
        cfgs = [_grpo_cfg(argv) for argv in lines]
        for cfg in cfgs:
            assert cfg.algorithm.adv_estimator == "mrgrpo_attempt"  # extra overrides reach every GRPO run
        names[tuple(env.values())] = [c.trainer.experiment_name for c in cfgs]
    assert names == {("1",): ["grpo_k2", "grpo_k0"], ("2",): ["grpo_k2_s2", "grpo_k0_s2"],
                     ("1", "_attempt"): ["grpo_k2_attempt", "grpo_k0_attempt"]}


def test_sft_composes_with_verl_and_tests_only_with_validation_files(repo_root, tmp_path):
    exp = tmp_path / "exp"
    (argv,) = _run(repo_root, "recipe/mrgrpo/sft_synth.sh", EXP_DIR=str(exp), SAVE_FREQ="250", SFT_STEPS="900")
    cfg = _sft_cfg(argv)
    assert cfg.data.val_files is None and cfg.trainer.test_freq == -1
    assert cfg.trainer.save_freq == 250 and cfg.trainer.total_training_steps == 900
    assert cfg.model.use_fused_kernels is True and cfg.model.use_remove_padding is False
    assert cfg.data.custom_cls.name == "TranscriptSFTDataset"

    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_val.parquet").write_bytes(b"")
    (argv,) = _run(repo_root, "recipe/mrgrpo/sft_synth.sh", EXP_DIR=str(exp), SAVE_FREQ="250")
    cfg = _sft_cfg(argv)
    assert cfg.data.val_files == str(exp / "sft/sft_val.parquet") and cfg.trainer.test_freq == 250


def test_sft_max_length_follows_the_longest_transcript(repo_root, tmp_path):
    exp = tmp_path / "exp"
    (exp / "sft").mkdir(parents=True)
    (exp / "sft/sft_report.json").write_text('{"splits": {"train": {"max_tokens": 1500}}}')
    (argv,) = _run(repo_root, "recipe/mrgrpo/sft_synth.sh", EXP_DIR=str(exp))
    assert _sft_cfg(argv).data.max_length == 1536


def _sft_eval(repo_root, tmp_path, **env_extra):
    exp, out = tmp_path / "exp", tmp_path / "runs"
    (exp / "tokenizer").mkdir(parents=True)
    (exp / "tokenizer/tokenizer.json").write_text("{}")
    for step in (200, 400, 600, 800):
        (exp / f"sft_ckpt/global_step_{step}/huggingface").mkdir(parents=True)
    (out / "sft_eval/step_400").mkdir(parents=True)
    (out / "sft_eval/step_400/summary.json").write_text("{}")
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "fake_python"
    fake.write_text(f'#!/bin/bash\necho "$@" >> {calls}\nwhile [[ $# -gt 0 ]]; do [[ $1 == --out ]] && '
                    'mkdir -p "$2" && echo "{{}}" > "$2/summary.json"; shift; done\n')
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in {"STAGES", "DRY_RUN", "ROUNDS"}}
    env.update(STAGES="sft_eval", EXP_DIR=str(exp), OUT_DIR=str(out), SFT_STEPS="600", PYTHON=str(fake), **env_extra)
    proc = subprocess.run(["bash", "recipe/mrgrpo/learnability.sh"], cwd=repo_root, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = calls.read_text().splitlines() if calls.exists() else []
    evaluated = [int(line.split("--out ")[1].split()[0].rsplit("_", 1)[1]) for line in lines]
    return exp, out, lines, evaluated, (out / "stages.txt").read_text()


def test_sft_eval_evaluates_each_checkpoint_up_to_sft_steps_once(repo_root, tmp_path):
    """sft_eval runs `mrgrpo eval` (greedy, one sample) on every SFT checkpoint up to SFT_STEPS, newest first (the
    end of the plateau curve matters most when time runs out), with the tokenizer beside the weights, and skips a
    checkpoint that already has its summary."""
    exp, out, lines, evaluated, _ = _sft_eval(repo_root, tmp_path)
    assert evaluated == [600, 200]
    for line in lines:
        assert line.startswith("-m mrgrpo eval --model ") and "--temperature 0" in line and "--n 1 --k 1" in line
        assert f"--data {exp}/rl/val.parquet" in line
    assert (exp / "sft_ckpt/global_step_200/huggingface/tokenizer.json").is_file()


def test_sft_eval_takes_an_explicit_order_and_names_a_missing_checkpoint(repo_root, tmp_path):
    *_, evaluated, stages = _sft_eval(repo_root, tmp_path, SFT_EVAL_STEPS="800 200 1000 600")
    assert evaluated == [800, 200, 600]
    assert "sft_eval: no checkpoint" in stages and "global_step_1000/huggingface" in stages


_FAKE_PYTHON = """#!/bin/bash
# mrgrpo eval: fails once for step_1000 (as an eval that cannot start next to GRPO), else writes its summary
if [[ "$1 $2 $3" == "-m mrgrpo eval" ]]; then
  while [[ $# -gt 0 ]]; do [[ $1 == --out ]] && out=$2; [[ $1 == --gpu-memory-utilization ]] && mem=$2; shift; done
  echo "eval $(basename "$out")" >> CALLS
  echo "evalmem $mem" >> CALLS
  if [[ "$out" == */step_1000 && ! -e "$out.failed_once" ]]; then touch "$out.failed_once"; exit 1; fi
  if [[ "$out" == */sft_more_eval && -n "$FAIL_CONTROL_ONCE" && ! -e "$out.failed_once" ]]; then
    touch "$out.failed_once"; exit 1
  fi
  mkdir -p "$out" && echo "{}" > "$out/summary.json"; exit 0
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
for (( s=f; s<=n; s+=f )); do (( s > ${last:-0} )) && mkdir -p "$d/global_step_$s/huggingface"; done
"""


def _orchestrate(repo_root, tmp_path, **env_extra):
    """learnability.sh with fakes for the GPU, python (verl, mrgrpo eval) and torchrun."""
    exp, out, bin_dir = tmp_path / "exp", tmp_path / "runs", tmp_path / "bin"
    for d in ("tokenizer", "rl", "sft", "model_init", "sft_model"):
        (exp / d).mkdir(parents=True)
    for f in ("rl/train.parquet", "rl/val.parquet", "sft/sft_train.parquet", "model_init/config.json",
              "sft_model/config.json"):
        (exp / f).write_text("")
    for step in (200, 400, 600, 800, 1000):
        (exp / f"sft_ckpt/global_step_{step}/huggingface").mkdir(parents=True)
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    for name, text in (("python", _FAKE_PYTHON), ("torchrun", _FAKE_TORCHRUN),
                       ("nvidia-smi", "#!/bin/bash\necho 'GPU 0: fake'\n")):
        (bin_dir / name).write_text(text.replace("CALLS", str(calls)))
        (bin_dir / name).chmod(0o755)
    knobs = {"STAGES", "DRY_RUN", "ROUNDS", "PROFILE", "MODEL", "PARALLEL", "RL_PARALLEL", "GPU_MEM_UTIL",
             "EVAL_GPU_MEM", "RL_GPUS", "CUDA_VISIBLE_DEVICES"}
    env = {k: v for k, v in os.environ.items() if k not in knobs}
    env.update({"STAGES": "grpo,sft_more,sft_eval", "EXP_DIR": str(exp), "OUT_DIR": str(out), "SFT_STEPS": "1000",
                "SFT_MORE_STEPS": "1000", "SFT_MORE_SAVE_FREQ": "500", "PYTHON": str(bin_dir / "python"),
                "PATH": f"{bin_dir}:/usr/bin:/bin", "RETRY_WAIT_S": "0", "GATE_POLL_S": "0.1", **env_extra})
    proc = subprocess.run(["bash", "recipe/mrgrpo/learnability.sh"], cwd=repo_root, env=env, capture_output=True,
                          text=True, timeout=120)
    stages = out / "stages.txt"
    return (proc, calls.read_text().splitlines() if calls.exists() else [],
            stages.read_text() if stages.exists() else "", out)


def test_parallel_runs_both_tracks_and_retries_what_failed_next_to_grpo(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, PARALLEL="1")
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
    _, calls, _, _ = _orchestrate(repo_root, tmp_path, PARALLEL="1")
    assert {c for c in calls if c.startswith(("grpomem", "evalmem"))} == {"grpomem 0.2", "evalmem 0.3"}
    _, calls, _, _ = _orchestrate(repo_root, tmp_path / "seq")
    assert {c for c in calls if c.startswith("evalmem")} == {"evalmem 0.15"}
    _, calls, _, _ = _orchestrate(repo_root, tmp_path / "set", PARALLEL="1", GPU_MEM_UTIL="0.25", EVAL_GPU_MEM="0.4")
    assert {c for c in calls if c.startswith(("grpomem", "evalmem"))} == {"grpomem 0.25", "evalmem 0.4"}


def test_parallel_refuses_an_evaluation_share_that_cannot_start_next_to_grpo(repo_root, tmp_path):
    for mem in ({"EVAL_GPU_MEM": "0.2"}, {"GPU_MEM_UTIL": "0.4", "EVAL_GPU_MEM": "0.3"},
                {"GPU_MEM_UTIL": "0.4", "EVAL_GPU_MEM": "0.6"}):
        proc, calls, stages, _ = _orchestrate(repo_root, tmp_path / "_".join(mem.values()), PARALLEL="1", **mem)
        assert proc.returncode == 2 and "EVAL_GPU_MEM" in proc.stderr, mem
        assert calls == [] and "start" not in stages  # refused before anything ran


def test_parallel_evaluates_the_control_again_when_it_failed_next_to_grpo(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, PARALLEL="1", FAIL_CONTROL_ONCE="1")
    assert proc.returncode == 0, proc.stderr + stages
    evals = [c.removeprefix("eval ") for c in calls if c.startswith("eval ")]
    assert evals[0] == "sft_more_eval" and evals.count("sft_more_eval") == 2
    assert evals.index("sft_more_eval", 1) > evals.index("step_200")  # after the RL track, not in a loop
    assert (out / "sft_more_eval/summary.json").is_file() and "sft_more done" in stages
    assert (out / "sft_more_eval/step").read_text().strip() == "2000"  # SFT_STEPS + SFT_MORE_STEPS: on the SFT curve
    assert (out / "sft_more_eval/start").read_text().strip() == "1000"  # where GRPO and the control started


def test_rl_stages_side_by_side_start_once_the_one_before_trains_with_a_larger_share(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, STAGES="grpo,grpo_attempt,grpo_k0", RL_PARALLEL="1",
                                          FAKE_STARTUP_S="0.5",
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
    """RL_GPUS=0,1: three stages go to GPUs 0, 1, 0; the first two start at once with the base share, the third waits
    for the first (its GPU's) to train a step and takes 0.1 more; the second never waits for the first."""
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, STAGES="grpo,grpo_attempt,grpo_k0", RL_PARALLEL="1",
                                          RL_GPUS="0,1", GPU_MEM_UTIL="0.4", FAKE_HOLD="grpo_k2:grpo_k2_attempt",
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
                                              STAGES="grpo,grpo_attempt", RL_PARALLEL="1", RL_GPUS=bad)
        assert proc.returncode == 2 and "RL_GPUS" in proc.stderr and calls == [] and stages == "", bad


def test_a_run_that_dies_before_its_first_step_is_started_once_more(repo_root, tmp_path):
    proc, calls, stages, out = _orchestrate(repo_root, tmp_path, STAGES="grpo,grpo_attempt", RL_PARALLEL="1",
                                            FAIL_START_ONCE="grpo_k2_attempt")
    assert proc.returncode == 0, proc.stderr + stages
    assert calls.count("grpo grpo_k2_attempt") == 2 and calls.count("grpo grpo_k2") == 1
    assert "grpo_k2_attempt failed before its first step" in stages
    assert "No available memory" in (out / "grpo_k2_attempt.failed_start.log").read_text()
    assert "trained grpo_k2_attempt" in calls


def test_a_run_that_fails_after_training_started_is_not_started_again(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, STAGES="grpo", GRPO_RC="1")
    assert proc.returncode == 1 and calls.count("grpo grpo_k2") == 1 and "grpo_k2 FAILED" in stages


def test_shares_that_cannot_fit_side_by_side_are_refused_before_anything_runs(repo_root, tmp_path):
    # three RL runs (0.2, 0.3, 0.4) and evaluations above them (0.5): 1.4 of the GPU
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, STAGES="sft,grpo,grpo_attempt,grpo_k0,sft_eval",
                                          RL_PARALLEL="1", PARALLEL="1")
    assert proc.returncode == 2 and "EVAL_GPU_MEM" in proc.stderr and calls == [] and stages == ""
    proc, calls, _, _ = _orchestrate(repo_root, tmp_path / "rl", STAGES="grpo,grpo_attempt,grpo_k0", RL_PARALLEL="1",
                                     GPU_MEM_UTIL="0.3")
    assert proc.returncode == 2 and "lower GPU_MEM_UTIL" in proc.stderr and calls == []


def test_an_unknown_stage_is_refused(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, STAGES="sft,grpo_atempt")
    assert proc.returncode == 2 and "unknown stage 'grpo_atempt'" in proc.stderr and calls == []


def test_a_failed_stage_fails_the_run_after_the_others_ran(repo_root, tmp_path):
    proc, calls, stages, _ = _orchestrate(repo_root, tmp_path, GRPO_RC="1")
    assert proc.returncode == 1
    assert "grpo_k2 FAILED" in stages and "all done (rc=1)" in stages
    assert "sft 2000 every 500" in calls and "eval sft_more_eval" in calls  # the SFT track still ran
    evals = [c for c in calls if c.startswith("eval step_")]
    assert evals[-1] == "eval step_200" and evals.count("eval step_1000") == 1  # sequential: no retry pass


def test_help_prints_the_stages_and_every_knob_and_runs_nothing(repo_root, tmp_path):
    learn_knobs = ("STAGES=", "PARALLEL=", "RL_GPUS=", "RUN_TAG=", "PYTHON=")
    for script, knobs in (("recipe/mrgrpo/learnability.sh", learn_knobs),
                          ("recipe/mrgrpo/sft_synth.sh", ("EXP_DIR=", "SFT_STEPS=", "SFT_LR=", "PYTHON="))):
        for flag in ("--help", "-h"):
            proc = subprocess.run(["bash", script, flag], cwd=repo_root, capture_output=True, text=True, timeout=30,
                                  env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
            assert proc.returncode == 0 and proc.stderr == "", proc.stderr
            assert proc.stdout.splitlines()[0].startswith(("The offline learnability check", "SFT warm start"))
            assert "usage: [VAR=value ...] bash " + script in proc.stdout
            for knob in knobs:
                assert f"\n{knob}${{" in proc.stdout, (script, knob)
    assert not (tmp_path / ".cache").exists()
