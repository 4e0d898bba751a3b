"""recipe/mrgrpo/run_qwen3_apps.sh without a GPU: it refuses to train, and DRY_RUN prints the launch."""

from __future__ import annotations

import os
import shlex
import subprocess

SCRIPT = "recipe/mrgrpo/run_qwen3_apps.sh"


def run_script(repo_root, tmp_path, *args, **env):
    full_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no nvidia-smi on this PATH
    full_env.update(env)
    return subprocess.run(["bash", SCRIPT, *args], cwd=repo_root, env=full_env, capture_output=True, text=True,
                          timeout=60)


def test_no_gpu_stops_at_once_with_a_clear_message(repo_root, tmp_path):
    proc = run_script(repo_root, tmp_path)
    assert proc.returncode != 0
    assert "no NVIDIA GPU found" in proc.stderr and "DRY_RUN=1" in proc.stderr
    assert proc.stdout == ""
    assert not (tmp_path / ".cache").exists()  # nothing prepared, nothing built


def test_no_gpu_even_with_a_fake_nvidia_smi_listing_nothing(repo_root, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'No devices were found'\nexit 6\n")
    fake.chmod(0o755)
    proc = run_script(repo_root, tmp_path, PATH=f"{bin_dir}:/usr/bin:/bin")
    assert proc.returncode != 0 and "no NVIDIA GPU found" in proc.stderr


def test_dry_run_prints_the_launch_as_last_line(repo_root, tmp_path):
    proc = run_script(repo_root, tmp_path, "trainer.val_before_train=False", DRY_RUN="1", MODEL="Qwen/Qwen3-8B",
                      GPUS_PER_NODE="8", NNODES="2", GROUP_SIZE="16", ROLLOUT="sglang", PLAN_SOURCE="none",
                      ROUNDS="0", MAX_PROMPT_LEN="1024", MAX_RESPONSE_LEN="2048", STEPS="5", LOGGER="console")
    assert proc.returncode == 0, proc.stderr
    argv = shlex.split(proc.stdout.strip().splitlines()[-1])
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert argv[argv.index("--config-path") + 1] == str(repo_root / "recipe/mrgrpo/config")
    assert argv[argv.index("--config-name") + 1] == "mrgrpo_trainer"
    for expected in (
        "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
        "trainer.n_gpus_per_node=8",
        "trainer.nnodes=2",
        "actor_rollout_ref.rollout.n=16",
        "actor_rollout_ref.rollout.name=sglang",
        "mrgrpo.agent_loop.plan_source=none",
        "mrgrpo.agent_loop.rounds=0",
        "data.max_prompt_length=1024",
        "data.max_response_length=2048",
        "trainer.total_training_steps=5",
        "trainer.logger=[console]",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={repo_root}/recipe/mrgrpo/config/agent_loop.yaml",
    ):
        assert expected in argv, expected
    assert argv[-1] == "trainer.val_before_train=False"  # "$@" is last
    # no data dir: the default prepared-sample dir, but nothing is prepared in a dry run
    assert f"data.train_files={tmp_path}/.cache/mrgrpo/data/apps_plus_sample/train.parquet" in argv
    assert not (tmp_path / ".cache").exists()


def test_bad_knobs_are_rejected(repo_root, tmp_path):
    for env in ({"ROLLOUT": "trtllm"}, {"PLAN_SOURCE": "oracle"}, {"PROFILE": "huge"}):
        proc = run_script(repo_root, tmp_path, DRY_RUN="1", **env)
        assert proc.returncode == 2 and "must be" in proc.stderr, env


def test_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", SCRIPT], cwd=os.path.dirname(os.path.dirname(__file__))).returncode == 0
