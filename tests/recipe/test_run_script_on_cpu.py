"""recipe/mrgrpo/run_qwen3_apps.sh without a GPU: it refuses to train, and DRY_RUN prints the launch."""

from __future__ import annotations

import os
import shlex
import subprocess

SCRIPT = "recipe/mrgrpo/run_qwen3_apps.sh"


def run_script(repo_root, tmp_path, *args, timeout=120, **env):
    full_env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no nvidia-smi on this PATH
    full_env.update(env)
    return subprocess.run(["bash", SCRIPT, *args], cwd=repo_root, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


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
    assert argv[argv.index("--config-path") + 1] == str(repo_root / "mrgrpo/config")
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
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={repo_root}/mrgrpo/config/agent_loop.yaml",
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


def test_the_profiles_are_the_products_only(repo_root, tmp_path):
    """The learnability study's model is not a profile of the product's script: the study passes its own knobs
    and overrides (experiments/learnability/run.py), and --help lists default and tiny only."""
    proc = run_script(repo_root, tmp_path, DRY_RUN="1", PROFILE="synth")
    assert proc.returncode == 2 and "PROFILE must be 'default' or 'tiny'" in proc.stderr
    proc = run_script(repo_root, tmp_path, "--help")
    (row,) = [line for line in proc.stdout.splitlines() if line.split()[:1] == ["PROFILE"]]
    assert "default | tiny" in row and "synth" not in proc.stdout and "EXP_DIR" not in proc.stdout


def test_script_is_valid_bash(repo_root):
    assert subprocess.run(["bash", "-n", SCRIPT], cwd=repo_root).returncode == 0


# ---------------------------------------------------------------- issue 16: knob checks, --help, DRY_RUN output


def fake_bin(tmp_path, gpu: bool = True, python_ok: bool | None = None):
    """A PATH dir with an nvidia-smi that lists one GPU (a real run gets past the GPU check) and, optionally, a
    python3 that can or cannot import verl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA Fake (UUID: GPU-0)'\n" if gpu else "#!/bin/sh\nexit 6\n")
    smi.chmod(0o755)
    if python_ok is not None:
        py = bin_dir / "python3"
        body = "exit 0" if python_ok else "echo \"ModuleNotFoundError: No module named 'verl'\" >&2; exit 1"
        py.write_text(f"#!/bin/sh\n{body}\n")
        py.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def test_numeric_knobs_are_checked(repo_root, tmp_path):
    for name, value in (("GPUS_PER_NODE", "0"), ("GPUS_PER_NODE", "two"), ("ROUNDS", "-1"), ("STEPS", "1.5"),
                        ("BATCH_SIZE", "-4"), ("NNODES", "0"), ("GPU_MEM_UTIL", "1.5"), ("LR", "fast"),
                        ("MINI_BATCH", "64")):
        proc = run_script(repo_root, tmp_path, DRY_RUN="1", **{name: value})
        assert proc.returncode == 2, (name, value, proc.stderr)
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"run_qwen3_apps.sh: {name} must be") and proc.stdout == "", (name, value, line)
    assert run_script(repo_root, tmp_path, DRY_RUN="1", ROUNDS="0", GPU_MEM_UTIL="0.85", LR="3e-6").returncode == 0


def test_dry_run_accepts_true_and_rejects_nonsense(repo_root, tmp_path):
    for value in ("true", "TRUE", "yes", "on", "1"):
        proc = run_script(repo_root, tmp_path, DRY_RUN=value)
        assert proc.returncode == 0 and "verl.trainer.main_ppo" in proc.stdout.splitlines()[-1], value
    proc = run_script(repo_root, tmp_path, DRY_RUN="maybe")
    assert proc.returncode == 2 and "DRY_RUN must be" in proc.stderr


def test_help_prints_the_knobs(repo_root, tmp_path):
    for flag in ("--help", "-h"):
        proc = run_script(repo_root, tmp_path, flag)
        assert proc.returncode == 0, proc.stderr
        rows = {line.split()[0]: line.split()[1] for line in proc.stdout.splitlines() if line.startswith("  ")
                and len(line.split()) > 2 and line.split()[0].isupper()}
        for knob, default in (("MODEL", "Qwen/Qwen3-0.6B"), ("ROUNDS", "2"), ("STEPS", "200"), ("SAVE_FREQ", "20"),
                              ("TEST_FREQ", "10"), ("KEEP_CKPTS", "3"), ("RESUME", "auto"), ("LOGGER", "console"),
                              ("TRAIN_FILE", "(empty)"), ("VAL_FILE", "(empty)"), ("DATA_DIR", "(empty)"),
                              ("CKPT_DIR", "./checkpoints/PROJECT/EXPERIMENT"), ("PYTHON", "python3")):
            assert rows.get(knob) == default, (knob, rows.get(knob))
        for words in ("checkpoints:", "resume:", "W&B:", "mrgrpo eval --model CKPT_DIR/global_step_N"):
            assert words in proc.stdout, words
        assert "knob MODEL" not in proc.stdout and "${" not in proc.stdout  # words, not the script's source
        assert "no NVIDIA GPU" not in proc.stderr  # --help needs no GPU


def test_dry_run_prints_the_environment_and_one_override_per_line(repo_root, tmp_path):
    proc = run_script(repo_root, tmp_path, "trainer.val_before_train=False", DRY_RUN="1", PROFILE="tiny")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    argv = shlex.split(lines[-1])
    assert all(line.startswith("#") for line in lines[:-1])
    exports = [line.split("export ", 1)[1] for line in lines if line.startswith("#   export ")]
    assert f"PYTHONPATH={repo_root}" in exports and "HF_HUB_OFFLINE=1" in exports
    overrides = [shlex.split(line[4:])[0] for line in lines[:-1] if line.startswith("#   ") and "export " not in line]
    assert overrides == argv[7:]  # exactly the launch's overrides, in order, "$@" last
    assert overrides[-1] == "trainer.val_before_train=False"


def test_a_real_run_checks_paths_and_the_interpreter_before_anything(repo_root, tmp_path):
    path = fake_bin(tmp_path, python_ok=True)
    proc = run_script(repo_root, tmp_path, PATH=path, MODEL=str(tmp_path / "no_model"))
    assert proc.returncode == 2 and "MODEL" in proc.stderr and "not a directory" in proc.stderr
    proc = run_script(repo_root, tmp_path, PATH=path, DATA_DIR=str(tmp_path / "no_data"))
    assert proc.returncode == 2 and "DATA_DIR" in proc.stderr and "mrgrpo data prepare" in proc.stderr
    path = fake_bin(tmp_path, python_ok=False)
    proc = run_script(repo_root, tmp_path, PATH=path)
    assert proc.returncode == 2 and "cannot import verl and mrgrpo" in proc.stderr
    assert "source .venv/bin/activate" in proc.stderr and "PYTHON=" in proc.stderr
    proc = run_script(repo_root, tmp_path, PATH=path, PYTHON="/no/such/python")
    assert proc.returncode == 2 and "is not a command" in proc.stderr
    assert not (tmp_path / ".cache").exists()  # nothing prepared before the checks


def test_a_dry_run_only_warns_about_paths_of_another_machine(repo_root, tmp_path):
    path = fake_bin(tmp_path, python_ok=False)
    proc = run_script(repo_root, tmp_path, DRY_RUN="1", DATA_DIR="/data/elsewhere", PATH=path)
    assert proc.returncode == 0
    assert "warning: DATA_DIR /data/elsewhere" in proc.stderr and "warning: python3 cannot import" in proc.stderr
    assert "data.train_files=/data/elsewhere/train.parquet" in shlex.split(proc.stdout.splitlines()[-1])


# ---------------------------------------------------------------- the first GPU hour: defaults that keep the model,
# checks before work


def dry_argv(repo_root, tmp_path, *args, **env):
    proc = run_script(repo_root, tmp_path, *args, DRY_RUN="1", **env)
    assert proc.returncode == 0, proc.stderr
    return shlex.split(proc.stdout.strip().splitlines()[-1]), proc


def override(argv, key):
    (value,) = [a.split("=", 1)[1] for a in argv if a.startswith(key + "=")]
    return value


def test_default_launch_saves_validates_and_resumes_into_an_absolute_run_directory(repo_root, tmp_path):
    argv, proc = dry_argv(repo_root, tmp_path)
    assert override(argv, "trainer.save_freq") == "20" and override(argv, "trainer.test_freq") == "10"
    assert override(argv, "trainer.resume_mode") == "auto" and override(argv, "trainer.max_actor_ckpt_to_keep") == "3"
    assert override(argv, "trainer.default_local_dir") == f"{repo_root}/checkpoints/mrgrpo/qwen3_apps_self_k2"
    assert "# checkpoints: every 20 steps" in proc.stdout  # the dry run says where the model will land


def test_checkpoint_knobs(repo_root, tmp_path):
    argv, _ = dry_argv(repo_root, tmp_path, SAVE_FREQ="5", TEST_FREQ="-1", KEEP_CKPTS="0", CKPT_DIR="ck",
                       RESUME="ck/global_step_5")
    assert override(argv, "trainer.save_freq") == "5" and override(argv, "trainer.test_freq") == "-1"
    assert override(argv, "trainer.max_actor_ckpt_to_keep") == "null"
    assert override(argv, "trainer.default_local_dir") == f"{repo_root}/ck"
    assert override(argv, "trainer.resume_mode") == "resume_path"
    assert override(argv, "trainer.resume_from_path") == f"{repo_root}/ck/global_step_5"
    for env in ({"SAVE_FREQ": "0"}, {"TEST_FREQ": "x"}, {"RESUME": "yes"}, {"EXPERIMENT": "a b"}):
        proc = run_script(repo_root, tmp_path, DRY_RUN="1", **env)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (env, proc.stderr)


def test_relative_paths_reach_verl_absolute(repo_root, tmp_path):
    data = tmp_path / "d"
    data.mkdir()
    rel = os.path.relpath(data, repo_root)
    argv, _ = dry_argv(repo_root, tmp_path, DATA_DIR=rel, MODEL="Qwen/Qwen3-1.7B")
    assert override(argv, "data.train_files") == f"{data}/train.parquet"
    model = tmp_path / "m"
    model.mkdir()
    argv, _ = dry_argv(repo_root, tmp_path, MODEL=os.path.relpath(model, repo_root))
    assert override(argv, "actor_rollout_ref.model.path") == str(model)


def test_a_model_that_is_neither_a_directory_nor_a_hub_id_is_refused(repo_root, tmp_path):
    for model in ("qwen3-8b", "Qwen/Qwen3/8B", "Qwen Qwen3"):
        proc = run_script(repo_root, tmp_path, DRY_RUN="1", MODEL=model)
        assert proc.returncode == 2 and proc.stdout == "", model
        (line,) = proc.stderr.strip().splitlines()
        assert "neither a directory nor a hub id" in line, line


def test_a_profile_never_turns_off_a_logger_the_user_named(repo_root, tmp_path):
    _, proc = dry_argv(repo_root, tmp_path, PROFILE="tiny", LOGGER="console,wandb")
    assert "WANDB_MODE" not in proc.stdout  # tiny no longer exports WANDB_MODE=disabled
    _, proc = dry_argv(repo_root, tmp_path, LOGGER="console,wandb", WANDB_MODE="disabled")
    assert "warning: LOGGER has wandb but WANDB_MODE=disabled" in proc.stderr


def plan_less_data(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    rows = [{"source_id": f"p{i}", "plan": "", "plan_source": ""} for i in range(3)]
    for name in ("train", "val"):
        pq.write_table(pa.table({"extra_info": rows}), data / f"{name}.parquet")
    return data


def test_teacher_plans_are_checked_before_anything_starts(repo_root, tmp_path):
    import sys

    data = plan_less_data(tmp_path)
    path = fake_bin(tmp_path)
    # `import verl` takes seconds, or minutes on a busy login node: no verdict here depends on time
    proc = run_script(repo_root, tmp_path, PATH=path, PYTHON=sys.executable, PLAN_SOURCE="teacher", DATA_DIR=str(data),
                      MODEL="Qwen/Qwen3-0.6B", timeout=900)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "PLAN_SOURCE=teacher but 3 of 3 rows" in line and "mrgrpo data prepare --plans" in line


def test_the_gpu_stack_is_checked_before_anything_starts(repo_root, tmp_path):
    """The CPU test machine has torch's CPU build and no vLLM: a real launch stops with the install line."""
    import sys

    data = plan_less_data(tmp_path)
    proc = run_script(repo_root, tmp_path, PATH=fake_bin(tmp_path), PYTHON=sys.executable, PLAN_SOURCE="none",
                      DATA_DIR=str(data), MODEL="Qwen/Qwen3-0.6B", timeout=900)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("run_qwen3_apps.sh: ") and "pip install -e '.[gpu]'" in line, line
