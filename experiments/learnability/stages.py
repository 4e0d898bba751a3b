"""The study's stages as commands: what each one runs (program, arguments, environment) and when it is done.

Nothing here runs or writes anything: `learnability.orchestrate` runs these commands, and a dry run prints them.

- ``data``: ``python -m learnability data`` (`learnability.data`, CPU): synthetic problems, splits, tokenizer, SFT
  transcripts into EXP_DIR.
- ``sft``: verl's SFT trainer (torchrun) on the transcripts to ``sft_steps``, then the checkpoint of that step is
  copied to EXP_DIR/sft_model: the GRPO start.
- ``grpo`` / ``grpo_attempt`` / ``grpo_k0``: the unchanged recipe, ``bash recipe/mrgrpo/run_qwen3_apps.sh``, given
  the study's model and data as its knobs (`GRPO_KNOBS`, environment variables) and hydra overrides
  (`GRPO_OVERRIDES`), from EXP_DIR/sft_model; the attempt-aware estimator; K=0 (one attempt).
- ``sft_more``: the control, SFT continued for ``sft_more_steps`` more steps, evaluated as ``sft_eval`` does.
- ``sft_eval``: greedy held-out pass@1 (`mrgrpo eval`) of the SFT checkpoints: the plateau curve.
- ``table``: `learnability.learning_curves` over OUT_DIR: CSV, PNG and the headline table.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from learnability import REPO_ROOT, python_path

STAGES = ("data", "sft", "grpo", "grpo_attempt", "grpo_k0", "sft_more", "sft_eval", "table")
DEFAULT_STAGES = ("data", "sft", "grpo", "sft_more", "sft_eval", "table")
CPU_STAGES = frozenset({"data", "table"})
RUN_SCRIPT = REPO_ROOT / "recipe/mrgrpo/run_qwen3_apps.sh"
LEARNING_CURVES = Path(__file__).resolve().with_name("learning_curves.py")
TABLE = "learning_curves_output.md"

# The recipe's knobs for this study's model and data (run_qwen3_apps.sh --help): defaults, so that a value in the
# caller's environment wins, as it does over the run script's own defaults. MODEL, DATA_DIR, ROUNDS, STEPS, LOGGER,
# EXPERIMENT and PYTHON are the stage's own and always set.
GRPO_KNOBS = {
    "GROUP_SIZE": "8", "BATCH_SIZE": "64", "MICRO_BATCH": "64", "MAX_PROMPT_LEN": "768", "MAX_RESPONSE_LEN": "1024",
    "GPU_MEM_UTIL": "0.4", "AGENT_WORKERS": "8", "LR": "5e-5", "SAVE_FREQ": "-1", "TEST_FREQ": "10",
}
# Built offline, run offline (the GPU machine has no flashinfer and no network).
OFFLINE_ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
               "HF_DATASETS_OFFLINE": "1"}
GRPO_OVERRIDES = (
    # A 28M model without flash-attn: sdpa with padding, eager vLLM, no torch.compile; log-probs in chunks of 512
    # tokens (the fused kernels' torch backend) instead of verl's per-row loop (docs/results/learning.md, "Speed").
    # ++: the run script adds the same attention key itself where flash-attn is missing.
    "actor_rollout_ref.model.use_remove_padding=False",
    "++actor_rollout_ref.model.override_config.attn_implementation=sdpa",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.model.use_fused_kernels=True",
    "actor_rollout_ref.actor.use_torch_compile=False",
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=2",
    # True sampling at T=1 (no top-k / top-p cut) for training; greedy held-out pass@1 for validation.
    "actor_rollout_ref.rollout.temperature=1.0",
    "actor_rollout_ref.rollout.top_k=-1",
    "actor_rollout_ref.rollout.top_p=1.0",
    "actor_rollout_ref.rollout.val_kwargs.temperature=0",
    "actor_rollout_ref.rollout.val_kwargs.n=1",
    # Synthetic programs need milliseconds: 1 CPU-s / 2 wall-s per test, public and hidden tests alike (the run's
    # one limits override; the sandbox default is 4 / 8).
    "mrgrpo.limits.time_s=1",
    "mrgrpo.limits.wall_s=2",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=5",
    "trainer.val_before_train=True",
)
# The evaluations' lengths and limits: the GRPO runs' (GRPO_KNOBS, GRPO_OVERRIDES).
EVAL_ARGS = ("--n", "1", "--k", "1", "--temperature", "0")
EVAL_LENGTHS = ("--max-prompt-length", "768", "--max-response-length", "1024")
EVAL_LIMITS = ("--time-s", "1", "--wall-s", "2")


@dataclass(frozen=True)
class Settings:
    """One invocation of the study (`learnability.run` builds it from the command line)."""

    exp_dir: Path
    out_dir: Path
    rounds: int
    python: str
    stages: tuple[str, ...] = DEFAULT_STAGES
    sft_steps: int = 2000
    save_freq: int = 500
    sft_more_steps: int = 1800
    sft_more_save_freq: int = 500
    sft_eval_steps: tuple[int, ...] | None = None  # None: every checkpoint found (see `sft_eval_steps`)
    sft_batch: int = 64
    sft_lr: str = "1e-3"
    nproc: int = 1
    steps: int = 30
    seed: int = 1
    parallel: bool = False
    rl_parallel: bool = False
    rl_gpus: tuple[str, ...] = ()
    run_tag: str = ""
    gpu_mem_util: str | None = None
    eval_gpu_mem: str | None = None
    grpo_overrides: tuple[str, ...] = ()
    sft_overrides: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def has(self, stage: str) -> bool:
        return stage in self.stages


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    base_env: Mapping[str, str] = field(default_factory=dict)  # what `env` was made from: shown as the difference

    def shown(self) -> str:
        """A shell line that runs it: ``env NAME=VALUE ... PROGRAM ARGS`` with the variables it sets or changes."""
        removed = [word for k in self.base_env if k not in self.env for word in ("-u", k)]
        changed = [f"{k}={v}" for k, v in self.env.items() if self.base_env.get(k) != v]
        words = ["env", *removed, *changed] if removed or changed else []
        return " ".join(shlex.quote(w) for w in [*words, *self.argv])


@dataclass(frozen=True)
class RLRun:
    stage: str
    name: str  # verl's experiment name and OUT_DIR/<name>.{jsonl,log}
    rounds: int
    overrides: tuple[str, ...] = ()


# ------------------------------------------------------------------ paths and what is done
def ckpt(s: Settings, step: int) -> Path:
    return s.exp_dir / "sft_ckpt" / f"global_step_{step}" / "huggingface"


def ckpt_steps(s: Settings) -> list[int]:
    """The steps of the SFT checkpoints on disk, ascending."""
    found = []
    for path in (s.exp_dir / "sft_ckpt").glob("global_step_*/huggingface"):
        match = re.fullmatch(r"global_step_(\d+)", path.parent.name)
        if match and path.is_dir():
            found.append(int(match.group(1)))
    return sorted(found)


def data_done(s: Settings) -> bool:
    return all((s.exp_dir / f).is_file() for f in ("experiment.json", "rl/train.parquet", "rl/val.parquet",
                                                   "sft/sft_train.parquet"))


def sft_done(s: Settings, steps: int, model_dir: Path) -> bool:
    """Trained to ``steps`` (its checkpoint is there) and copied to ``model_dir``."""
    return ckpt(s, steps).is_dir() and (model_dir / "config.json").is_file()


def control_steps(s: Settings) -> int:
    return s.sft_steps + s.sft_more_steps


def grpo_done(s: Settings, run: RLRun) -> bool:
    return (s.out_dir / f"{run.name}.done").is_file()


def evaluated(out: Path) -> bool:
    return (out / "summary.json").is_file()


def table_done(s: Settings) -> bool:
    """The table is newer than everything it reads."""
    table = s.out_dir / TABLE
    if not table.is_file():
        return False
    inputs = [*s.out_dir.glob("*.jsonl"), *s.out_dir.glob("sft_eval/step_*/summary.json"),
              *s.out_dir.glob("sft_more_eval/*")]
    return all(p.stat().st_mtime <= table.stat().st_mtime for p in inputs)


# ------------------------------------------------------------------ the RL runs and their GPU shares
def rl_runs(s: Settings) -> list[RLRun]:
    """The RL stages asked for, in stage order. Their names carry the seed (other than 1) and the run tag, so that
    runs side by side never write into each other: grpo_k2, grpo_k2_s2, grpo_k2_attempt, grpo_k0_s2_x, ..."""
    tag = s.run_tag if s.seed == 1 else f"_s{s.seed}{s.run_tag}"
    runs = []
    if s.has("grpo"):
        runs.append(RLRun("grpo", f"grpo_k{s.rounds}{tag}", s.rounds))
    if s.has("grpo_attempt"):
        runs.append(RLRun("grpo_attempt", f"grpo_k{s.rounds}{tag}_attempt", s.rounds,
                          ("algorithm.adv_estimator=mrgrpo_attempt",)))
    if s.has("grpo_k0"):
        runs.append(RLRun("grpo_k0", f"grpo_k0{tag}", 0))
    return runs


@dataclass(frozen=True)
class Shares:
    rl: tuple[str | None, ...]  # the vLLM share of each RL run (None: the caller's GPU_MEM_UTIL, else the knob's)
    gpus: tuple[str | None, ...]  # CUDA_VISIBLE_DEVICES of each RL run (None: not set)
    eval: str  # the evaluations' vLLM share
    side_by_side: bool


def _num(x: float) -> str:
    return f"{x:.6g}"


def shares(s: Settings, runs: list[RLRun]) -> Shares:
    """vLLM's share of the GPU for each run, refused (ValueError) when engines side by side could not start.

    One after the other, every RL run gets the base share (``gpu_mem_util``). Side by side (``rl_parallel`` and more
    than one run), the runs are dealt over ``rl_gpus`` in turn and the i-th run on a GPU gets the base + 0.1 x i
    (default base 0.2); the shares on one GPU must sum to <= 0.9. With ``parallel`` the evaluations run next to GRPO
    and need a share above the largest GRPO share (default: it + 0.1; an engine that starts next to a GRPO run counts
    the KV cache GRPO frees and takes back every step as its own use, and with a smaller share it has "No available
    memory for the cache blocks"); everything at once must fit in 0.9. Alone, the evaluations get 0.15."""
    n_gpu = max(1, len(s.rl_gpus))
    side = s.rl_parallel and len(runs) > 1
    base = s.gpu_mem_util
    if (side or s.parallel) and base is None:
        base = "0.2"
    g = float(base if base is not None else "0.2")
    values = [g + 0.1 * (i // n_gpu) * side for i in range(max(1, len(runs)))]
    top = values[-1]
    total = sum(v for i, v in enumerate(values) if i % n_gpu == 0) if side else values[-1]
    eval_mem = s.eval_gpu_mem
    if s.parallel:
        eval_mem = eval_mem or _num(top + 0.1)
        if not (float(eval_mem) > top and float(eval_mem) + total <= 0.9 + 1e-9):
            raise ValueError(f"with --parallel, --eval-gpu-mem ({eval_mem}) must be above the largest GRPO share "
                             f"({_num(top)}) and all shares together ({_num(total)} for GRPO) at most 0.9: see "
                             "--eval-gpu-mem in --help")
    elif side and total > 0.9 + 1e-9:
        raise ValueError(f"--rl-parallel with {len(runs)} RL stages from --gpu-mem-util {base} needs {_num(total)} of "
                         "the GPU (at most 0.9): lower --gpu-mem-util")
    rl = tuple((_num(v) if side else base) for v in values[: len(runs)])
    gpus = tuple((s.rl_gpus[i % n_gpu] if s.rl_gpus and side else None) for i in range(len(runs)))
    return Shares(rl, gpus, eval_mem or "0.15", side)


# ------------------------------------------------------------------ commands
def _env(s: Settings, **extra: str) -> dict[str, str]:
    return {**s.env, "PYTHONPATH": python_path(s.env), **extra}


def data_command(s: Settings) -> Command:
    return Command((s.python, "-m", "learnability", "data", "--out", str(s.exp_dir)), _env(s), s.env)


def model_init_command(s: Settings) -> Command:
    """The random model SFT starts from (built with the study's tokenizer)."""
    return Command((s.python, "-m", "learnability", "model", "--tokenizer", str(s.exp_dir / "tokenizer"), "--out",
                    str(s.exp_dir / "model_init"), "--seed", str(s.seed)), _env(s), s.env)


def sft_max_length(s: Settings) -> int:
    """The longest transcript rounded up to 512 tokens (at least 1024); 1024 before the data exists."""
    report = s.exp_dir / "sft" / "sft_report.json"
    if not report.is_file():
        return 1024
    longest = max(split["max_tokens"] for split in json.loads(report.read_text())["splits"].values())
    return max(1024, -(-longest // 512) * 512)


def _torchrun(s: Settings) -> str:
    beside = Path(s.python).parent / "torchrun"  # the interpreter's own, as in a venv that is not activated
    return str(beside) if Path(s.python).is_absolute() and beside.is_file() else "torchrun"


def sft_command(s: Settings, steps: int, save_freq: int) -> Command:
    """verl 0.9.1's SFT trainer on the transcripts (`TranscriptSFTDataset`: the loss mask is the loop's response
    mask, so only the model's own turns train), from EXP_DIR/model_init, resuming its checkpoints
    (``resume_mode=auto``), an HF checkpoint every ``save_freq`` steps."""
    max_len = sft_max_length(s)
    val = s.exp_dir / "sft" / "sft_val.parquet"
    # verl 0.9.1's SFT trainer iterates a None val loader when test_freq > 0 without val files: test only with them
    val_args = (f"data.val_files={val}", save_freq) if val.is_file() else ("data.val_files=null", -1)
    argv = (
        _torchrun(s), "--standalone", "--nnodes=1", f"--nproc_per_node={s.nproc}", "-m", "verl.trainer.sft_trainer",
        f"data.train_files={s.exp_dir / 'sft' / 'sft_train.parquet'}", val_args[0],
        "data.custom_cls.path=pkg://learnability.sft_dataset", "data.custom_cls.name=TranscriptSFTDataset",
        f"data.train_batch_size={s.sft_batch}", "data.micro_batch_size_per_gpu=16", f"data.max_length={max_len}",
        f"data.max_token_len_per_gpu={max(max_len, 32768)}", "data.num_workers=2",
        f"model.path={s.exp_dir / 'model_init'}", "model.use_remove_padding=False",
        "+model.override_config.attn_implementation=sdpa", "model.enable_gradient_checkpointing=False",
        # Without flash-attn verl computes log-probs one token at a time (5.4 s per step of 64); the fused kernels'
        # torch backend does it in chunks of 512 tokens (0.28 s per step).
        "model.use_fused_kernels=True",
        "engine.use_torch_compile=False", f"optim.lr={s.sft_lr}",
        f"trainer.total_training_steps={steps}", "trainer.total_epochs=1000", f"trainer.save_freq={save_freq}",
        f"trainer.test_freq={val_args[1]}", f"trainer.seed={s.seed}", "trainer.logger=[console]",
        f"trainer.default_local_dir={s.exp_dir / 'sft_ckpt'}", "trainer.resume_mode=auto",
        f"trainer.n_gpus_per_node={s.nproc}", "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        *s.sft_overrides,
    )
    env = _env(s, TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    for key, value in {**{k: v for k, v in OFFLINE_ENV.items() if k != "VLLM_USE_FLASHINFER_SAMPLER"},
                       "WANDB_MODE": "disabled"}.items():
        env.setdefault(key, value)
    return Command(argv, env, s.env)


def sft_commands(s: Settings, steps: int, save_freq: int, data_ready: bool = False,
                 model_ready: bool = False) -> list[Command]:
    """What an SFT stage runs: the data stage first when the transcripts are missing, the initial model when it is
    missing, then the trainer. ``data_ready`` / ``model_ready``: an earlier stage makes them (a dry run)."""
    commands = []
    if not data_ready and not (s.exp_dir / "sft" / "sft_train.parquet").is_file():
        commands.append(data_command(s))
    if not model_ready and not (s.exp_dir / "model_init" / "config.json").is_file():
        commands.append(model_init_command(s))
    return [*commands, sft_command(s, steps, save_freq)]


def seed_overrides(s: Settings) -> tuple[str, ...]:
    """The RL seed: data order, the actor's init and the rollout's sampling (verl 0.9.1 has no trainer.seed)."""
    return (f"data.seed={s.seed}", f"actor_rollout_ref.actor.fsdp_config.seed={s.seed}",
            f"actor_rollout_ref.rollout.seed={s.seed}")


def grpo_command(s: Settings, run: RLRun, share: str | None = None, gpu: str | None = None,
                 dry_run: bool = False) -> Command:
    """The unchanged recipe for one RL run: the study's knobs and overrides, then the seed, the stage's own override
    and the caller's, last (they win)."""
    env = {**GRPO_KNOBS, **OFFLINE_ENV, **s.env}
    env.update(PROFILE="default", MODEL=str(s.exp_dir / "sft_model"), DATA_DIR=str(s.exp_dir / "rl"),
               ROUNDS=str(run.rounds), STEPS=str(s.steps), LOGGER="console,file", EXPERIMENT=run.name,
               PYTHON=s.python, VERL_FILE_LOGGER_PATH=str(s.out_dir / f"{run.name}.jsonl"),
               DRY_RUN="1" if dry_run else "0")
    if share is not None:
        env["GPU_MEM_UTIL"] = share
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    argv = ("bash", str(RUN_SCRIPT), *GRPO_OVERRIDES, *seed_overrides(s), *run.overrides, *s.grpo_overrides)
    return Command(argv, env, s.env)


def eval_command(s: Settings, model: Path, out: Path, gpu_mem: str) -> Command:
    """Greedy held-out pass@1 per split (`mrgrpo eval`) with the training agent loop, reward and lengths."""
    argv = (s.python, "-m", "mrgrpo", "eval", "--model", str(model), "--data", str(s.exp_dir / "rl" / "val.parquet"),
            "--out", str(out), *EVAL_ARGS, "--rounds", str(s.rounds), *EVAL_LENGTHS, *EVAL_LIMITS,
            "--gpu-memory-utilization", gpu_mem, "--enforce-eager", "--seed", str(s.seed), "--quiet")
    return Command(argv, _env(s), s.env)


def table_command(s: Settings) -> Command:
    return Command((s.python, str(LEARNING_CURVES), str(s.out_dir)), _env(s), s.env)


def sft_eval_steps(s: Settings) -> list[int]:
    """The SFT checkpoints the sft_eval stage evaluates, in this order: ``sft_eval_steps`` as given, else every one
    on disk up to ``sft_steps`` (and up to the control's last step when sft_more is a stage, but not that last one,
    the control itself, which the sft_more stage evaluates), newest first: the end of the plateau curve matters most
    when time runs out."""
    if s.sft_eval_steps is not None:
        return list(s.sft_eval_steps)
    last = control_steps(s) if s.has("sft_more") else s.sft_steps
    return [step for step in reversed(ckpt_steps(s))
            if step <= last and not (s.has("sft_more") and step == control_steps(s))]
