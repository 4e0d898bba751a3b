"""The study's stages as commands: what each one runs (program, arguments, environment), where it writes, and when it
is done.

Nothing here runs or writes anything: `learnability.orchestrate` runs these commands, and a dry run prints them.

- ``data``: ``python -m learnability data`` (`learnability.data`, CPU): synthetic problems, splits, the two held-out
  sets, tokenizer, SFT transcripts into EXP_DIR, shared by every seed.
- Per seed, in ``OUT_DIR/seed_N/`` (`SeedDir`):
  - ``plateau``: the seed's random model (``python -m learnability model --seed N``), then SFT in chunks
    (`learnability.sft_run` over verl's SFT trainer: one run, cosine schedule over the cap) and ``mrgrpo eval`` of each
    chunk's checkpoint on val.parquet, until the rule of `learnability.plateau` stops it; the plateau checkpoint is
    copied to ``plateau_model/``.
  - ``grpo`` / ``grpo_attempt`` / ``grpo_k0``: the unchanged recipe, ``bash recipe/mrgrpo/run_qwen3_apps.sh``, given
    the study's model and data as its knobs (`GRPO_KNOBS`, environment variables) and hydra overrides
    (`GRPO_OVERRIDES`), from ``plateau_model/``; a checkpoint at the last step. K rounds; the attempt-aware
    estimator; K=0 (one attempt).
  - ``control``: SFT continued from the plateau checkpoint (its optimizer, schedule and data position) for as many
    seconds of training steps as the ``grpo`` run's steps took (the sum of verl's ``timing_s/step``).
  - ``eval``: ``mrgrpo eval`` of the plateau checkpoint, GRPO's last checkpoint (merged to Hugging Face format by
    ``mrgrpo eval`` into ``grpo_model/``) and the control on val.parquet and val2.parquet (the plateau on val.parquet
    is its chunk evaluation).
- ``table``: `learnability.seeds_table` over OUT_DIR: the table with paired intervals, the targets, the curves.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from learnability import REPO_ROOT, python_path
from learnability.plateau import Rule, chunk_steps

STAGES = ("data", "plateau", "grpo", "grpo_attempt", "grpo_k0", "control", "eval", "table")
DEFAULT_STAGES = ("data", "plateau", "grpo", "control", "eval", "table")
RL_STAGES = ("grpo", "grpo_attempt", "grpo_k0")
CPU_STAGES = frozenset({"data", "table"})
MODELS = ("start", "grpo", "control")  # the plateau checkpoint, GRPO's last checkpoint, the control
HELDOUT = ("val", "val2")  # EXP_DIR/rl/<name>.parquet
RUN_SCRIPT = REPO_ROOT / "recipe/mrgrpo/run_qwen3_apps.sh"
SEEDS_TABLE = Path(__file__).resolve().with_name("seeds_table.py")
TABLE = "seeds_table.md"

# The recipe's knobs for this study's model and data (run_qwen3_apps.sh --help): defaults, so that a value in the
# caller's environment wins, as it does over the run script's own defaults. MODEL, DATA_DIR, ROUNDS, STEPS, LOGGER,
# EXPERIMENT, SAVE_FREQ, CKPT_DIR, RESUME and PYTHON are the stage's own and always set.
GRPO_KNOBS = {
    "GROUP_SIZE": "8", "BATCH_SIZE": "64", "MICRO_BATCH": "64", "MAX_PROMPT_LEN": "768", "MAX_RESPONSE_LEN": "1024",
    "GPU_MEM_UTIL": "0.4", "AGENT_WORKERS": "8", "LR": "5e-5", "TEST_FREQ": "10",
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
# The evaluations' lengths and limits: the GRPO runs' (GRPO_KNOBS, GRPO_OVERRIDES); greedy, so the engine seed is 0.
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
    seeds: tuple[int, ...] = (1, 2, 3)
    sft_chunk: int = 500
    sft_max_steps: int = 6000
    plateau_window: int = 3
    plateau_tolerance: float = 0.02
    plateau_extra: float = 0.5
    sft_batch: int = 64
    sft_lr: str = "1e-3"
    sft_lr_floor: float = 0.1
    steps: int = 30
    parallel: bool = False
    gpus: tuple[str, ...] = ()
    run_tag: str = ""
    gpu_mem_util: str | None = None
    eval_gpu_mem: str | None = None
    grpo_overrides: tuple[str, ...] = ()
    sft_overrides: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))

    def has(self, stage: str) -> bool:
        return stage in self.stages

    def rule(self) -> Rule:
        return Rule(self.plateau_window, self.plateau_tolerance, self.plateau_extra, self.sft_max_steps)

    def seed_dir(self, seed: int) -> SeedDir:
        return SeedDir(self.out_dir / f"seed_{seed}", seed)

    def gpu(self, seed: int) -> str | None:
        """CUDA_VISIBLE_DEVICES of a seed's every stage: the seeds dealt over ``gpus`` in turn (None: not set)."""
        return self.gpus[self.seeds.index(seed) % len(self.gpus)] if self.gpus else None


@dataclass(frozen=True)
class SeedDir:
    """Where one seed's stages write (OUT_DIR/seed_N)."""

    root: Path
    seed: int

    @property
    def model_init(self) -> Path:
        return self.root / "model_init"

    @property
    def sft_ckpt(self) -> Path:
        return self.root / "sft_ckpt"

    def ckpt(self, step: int | str, ckpt_dir: Path | None = None) -> Path:
        return (ckpt_dir or self.sft_ckpt) / f"global_step_{step}" / "huggingface"

    def chunk_eval(self, step: int | str) -> Path:
        return self.root / "sft_eval" / f"step_{step}"

    @property
    def plateau_json(self) -> Path:
        return self.root / "plateau.json"

    @property
    def plateau_model(self) -> Path:
        return self.root / "plateau_model"

    @property
    def control_ckpt(self) -> Path:
        return self.root / "control_ckpt"

    @property
    def control_json(self) -> Path:
        return self.root / "control.json"

    @property
    def grpo_model(self) -> Path:
        return self.root / "grpo_model"

    def grpo_ckpt(self, run: RLRun) -> Path:
        return self.root / "grpo_ckpt" / run.name

    def evaluation(self, model: str, heldout: str, plateau_step: int | str | None = None) -> Path:
        """``mrgrpo eval``'s output of a model (one of `MODELS`) on a held-out set: the plateau's on val.parquet is
        its chunk evaluation."""
        if model == "start" and heldout == "val":
            return self.chunk_eval(plateau_step if plateau_step is not None else "PLATEAU")
        return self.root / "eval" / f"{model}_{heldout}"

    def log(self, name: str) -> Path:
        return self.root / f"{name}.log"


@dataclass(frozen=True)
class RLRun:
    stage: str
    seed: int
    name: str  # OUT_DIR/seed_N/<name>.{jsonl,log,done}; verl's experiment name is <name>_s<seed>
    rounds: int
    overrides: tuple[str, ...] = ()

    @property
    def experiment(self) -> str:
        return f"{self.name}_s{self.seed}"


# ------------------------------------------------------------------ what is done
def data_done(s: Settings) -> bool:
    return all((s.exp_dir / f).is_file() for f in ("experiment.json", "rl/train.parquet", "rl/val.parquet",
                                                   "rl/val2.parquet", "sft/sft_train.parquet"))


def trained_steps(d: SeedDir, ckpt_dir: Path | None = None) -> list[int]:
    """The steps whose SFT checkpoint is complete, ascending: verl names its newest complete one in
    ``latest_checkpointed_iteration.txt`` once the save is over, so a later folder is an interrupted save."""
    ckpt_dir = ckpt_dir or d.sft_ckpt
    tracker = ckpt_dir / "latest_checkpointed_iteration.txt"
    try:
        newest = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return []
    found = []
    for path in ckpt_dir.glob("global_step_*"):
        step = path.name.removeprefix("global_step_")
        if step.isdigit() and int(step) <= newest and (path / "huggingface" / "config.json").is_file():
            found.append(int(step))
    return sorted(found)


def evaluated(out: Path) -> bool:
    return (out / "summary.json").is_file()


def nodemo_score(out: Path) -> float:
    """Greedy no-demonstration pass@1 of an evaluation (its summary.json)."""
    return json.loads((out / "summary.json").read_text())["by_data_source"]["synth_nodemo"]["final"]["pass@1"]


def plateau_done(d: SeedDir) -> bool:
    """The decision is written last, once the plateau model is in place."""
    return d.plateau_json.is_file() and (d.plateau_model / "config.json").is_file()


def plateau_step(d: SeedDir) -> int | None:
    return json.loads(d.plateau_json.read_text())["step"] if d.plateau_json.is_file() else None


def grpo_done(d: SeedDir, run: RLRun) -> bool:
    return (d.root / f"{run.name}.done").is_file()


def grpo_final(s: Settings, d: SeedDir, run: RLRun) -> Path:
    """The run's checkpoint of its last step (run_qwen3_apps.sh: CKPT_DIR/global_step_N, FSDP shards)."""
    return d.grpo_ckpt(run) / f"global_step_{s.steps}"


def control_end(d: SeedDir) -> int | None:
    """The control's last step, once its launch has saved and recorded it."""
    if not d.control_json.is_file():
        return None
    end = json.loads(d.control_json.read_text())["end_step"]
    return end if (d.ckpt(end, d.control_ckpt) / "config.json").is_file() else None


@dataclass(frozen=True)
class EvalJob:
    model: str  # one of MODELS
    heldout: str  # one of HELDOUT
    source: Path  # an HF model folder, or GRPO's verl checkpoint
    out: Path
    merged_dir: Path | None  # where mrgrpo eval merges a verl checkpoint to HF format


def eval_jobs(s: Settings, d: SeedDir) -> list[EvalJob]:
    """The eval stage's evaluations of a seed (the plateau on val.parquet is its chunk evaluation, made by the
    plateau stage); placeholders stand for steps not known yet."""
    step, end = plateau_step(d), control_end(d)
    sources = {"start": (d.plateau_model, None), "grpo": (grpo_final(s, d, headline(s, d.seed)), d.grpo_model),
               "control": (d.ckpt(end if end is not None else "END", d.control_ckpt), None)}
    return [EvalJob(model, heldout, sources[model][0], d.evaluation(model, heldout, step), sources[model][1])
            for model in MODELS for heldout in HELDOUT if (model, heldout) != ("start", "val")]


def table_done(s: Settings) -> bool:
    """The table is newer than everything it reads."""
    table = s.out_dir / TABLE
    if not table.is_file():
        return False
    inputs = [p for seed in s.seeds for pattern in ("plateau.json", "*.jsonl", "sft_eval/step_*/per_problem.csv",
                                                    "eval/*/per_problem.csv")
              for p in s.seed_dir(seed).root.glob(pattern)]
    return all(p.stat().st_mtime <= table.stat().st_mtime for p in inputs)


# ------------------------------------------------------------------ the RL runs and their GPU shares
def rl_runs(s: Settings, seeds: tuple[int, ...] | list[int] | None = None) -> list[RLRun]:
    """The RL stages asked for, seed by seed in stage order. The run tag names them (grpo_k2_x, ...), so that runs
    with other overrides never write over the others' files."""
    runs = []
    for seed in s.seeds if seeds is None else seeds:
        if s.has("grpo"):
            runs.append(headline(s, seed))
        if s.has("grpo_attempt"):
            runs.append(RLRun("grpo_attempt", seed, f"grpo_k{s.rounds}{s.run_tag}_attempt", s.rounds,
                              ("algorithm.adv_estimator=mrgrpo_attempt",)))
        if s.has("grpo_k0"):
            runs.append(RLRun("grpo_k0", seed, f"grpo_k0{s.run_tag}", 0))
    return runs


def headline(s: Settings, seed: int) -> RLRun:
    """The ``grpo`` run: the one the control and the table compare."""
    return RLRun("grpo", seed, f"grpo_k{s.rounds}{s.run_tag}", s.rounds)


@dataclass(frozen=True)
class Shares:
    rl: Mapping[RLRun, str | None]  # each RL run's vLLM share (None: the caller's GPU_MEM_UTIL, else the knob's)
    eval: str  # the evaluations' vLLM share


def _num(x: float) -> str:
    return f"{x:.6g}"


def shares(s: Settings, runs: list[RLRun]) -> Shares:
    """vLLM's share of the GPU for each RL run and for the evaluations, refused (ValueError) when engines side by side
    could not start.

    The phases (plateau, RL, control, eval) follow one another for all seeds, so evaluations never run next to a GRPO
    run. One after the other, every RL run gets the base share (``gpu_mem_util``, else the knob's). Side by side
    (``parallel``), the runs on one GPU (a seed's runs go to its GPU) start one after the other, each once the one
    before it has trained a step, the i-th with the base + 0.1 x i (default base 0.2): an engine that starts next to a
    GRPO run counts the KV cache GRPO frees and takes back every step as its own use, and with a share no larger it
    has "No available memory for the cache blocks". The shares on one GPU must sum to <= 0.9. Evaluations get 0.15
    each; side by side, one per seed of a GPU at once, at most 0.9 together."""
    by_gpu: dict[str | None, list[int]] = {}
    for i, run in enumerate(runs):
        by_gpu.setdefault(s.gpu(run.seed), []).append(i)
    side = s.parallel and any(len(ix) > 1 for ix in by_gpu.values())
    base = s.gpu_mem_util if s.gpu_mem_util is not None or not side else "0.2"
    rl: dict[RLRun, str | None] = dict.fromkeys(runs, base)
    if side:
        for ix in by_gpu.values():
            values = [float(base) + 0.1 * k for k in range(len(ix))]
            if sum(values) > 0.9 + 1e-9:
                raise ValueError(f"--parallel with {len(ix)} RL runs on one GPU from --gpu-mem-util {base} needs "
                                 f"{_num(sum(values))} of the GPU (at most 0.9): lower --gpu-mem-util, deal the seeds "
                                 "over more GPUs (--gpus) or run them one after the other")
            for i, v in zip(ix, values, strict=True):
                rl[runs[i]] = _num(v)
    eval_mem = s.eval_gpu_mem or "0.15"
    per_gpu = max((sum(1 for seed in s.seeds if s.gpu(seed) == g) for g in {s.gpu(x) for x in s.seeds}), default=1)
    at_once = per_gpu if s.parallel else 1
    if float(eval_mem) * at_once > 0.9 + 1e-9:
        raise ValueError(f"--eval-gpu-mem {eval_mem} for {at_once} evaluations at once on one GPU needs "
                         f"{_num(float(eval_mem) * at_once)} of it (at most 0.9): lower --eval-gpu-mem")
    return Shares(rl, eval_mem)


# ------------------------------------------------------------------ commands
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


def _env(s: Settings, seed: int | None = None, **extra: str) -> dict[str, str]:
    env = {**s.env, "PYTHONPATH": python_path(s.env), **extra}
    if seed is not None and s.gpu(seed) is not None:
        env["CUDA_VISIBLE_DEVICES"] = s.gpu(seed)
    return env


def data_command(s: Settings) -> Command:
    return Command((s.python, "-m", "learnability", "data", "--out", str(s.exp_dir)), _env(s), s.env)


def model_init_command(s: Settings, seed: int) -> Command:
    """The seed's random model, SFT's start (built with the study's tokenizer)."""
    return Command((s.python, "-m", "learnability", "model", "--tokenizer", str(s.exp_dir / "tokenizer"), "--out",
                    str(s.seed_dir(seed).model_init), "--seed", str(seed)), _env(s), s.env)


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


def sft_command(s: Settings, seed: int, stop: tuple[str, str], ckpt_dir: Path, save_freq: int,
                resume_from: Path | None = None, record: Path | None = None) -> Command:
    """verl 0.9.1's SFT trainer through `learnability.sft_run` on the transcripts (`TranscriptSFTDataset`: the loss
    mask is the loop's response mask, so only the model's own turns train), from the seed's random model, resuming
    the newest checkpoint of ``ckpt_dir`` (or ``resume_from``). ``stop``: ("--stop-at-step", N) or ("--stop-after-s",
    S). The learning rate follows a cosine from ``sft_lr`` down to ``sft_lr_floor`` x it over ``sft_max_steps``
    (no warm-up), and stays there after."""
    d = s.seed_dir(seed)
    max_len = sft_max_length(s)
    val = s.exp_dir / "sft" / "sft_val.parquet"
    # verl 0.9.1's SFT trainer iterates a None val loader when test_freq > 0 without val files: test only with them
    val_args = (f"data.val_files={val}", save_freq) if val.is_file() else ("data.val_files=null", -1)
    argv = (
        _torchrun(s), "--standalone", "--nnodes=1", "--nproc_per_node=1", "-m", "learnability.sft_run", *stop,
        "--data-seed", str(seed), *(("--record", str(record)) if record else ()),
        f"data.train_files={s.exp_dir / 'sft' / 'sft_train.parquet'}", val_args[0],
        "data.custom_cls.path=pkg://learnability.sft_dataset", "data.custom_cls.name=TranscriptSFTDataset",
        f"data.train_batch_size={s.sft_batch}", "data.micro_batch_size_per_gpu=16", f"data.max_length={max_len}",
        f"data.max_token_len_per_gpu={max(max_len, 32768)}", "data.num_workers=2",
        f"model.path={d.model_init}", "model.use_remove_padding=False",
        "+model.override_config.attn_implementation=sdpa", "model.enable_gradient_checkpointing=False",
        # Without flash-attn verl computes log-probs one token at a time (5.4 s per step of 64); the fused kernels'
        # torch backend does it in chunks of 512 tokens (0.28 s per step).
        "model.use_fused_kernels=True",
        "engine.use_torch_compile=False", f"optim.lr={s.sft_lr}", "optim.lr_scheduler_type=cosine",
        f"optim.min_lr_ratio={s.sft_lr_floor}", f"trainer.total_training_steps={s.sft_max_steps}",
        "trainer.total_epochs=1000", f"trainer.save_freq={save_freq}", f"trainer.test_freq={val_args[1]}",
        f"trainer.seed={seed}", "trainer.logger=[console]", f"trainer.default_local_dir={ckpt_dir}",
        "trainer.resume_mode=auto", *((f"trainer.resume_from_path={resume_from}",) if resume_from else ()),
        "trainer.n_gpus_per_node=1", "checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        *s.sft_overrides,
    )
    env = _env(s, seed, TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    for key, value in {**{k: v for k, v in OFFLINE_ENV.items() if k != "VLLM_USE_FLASHINFER_SAMPLER"},
                       "WANDB_MODE": "disabled"}.items():
        env.setdefault(key, value)
    return Command(argv, env, s.env)


def chunk_command(s: Settings, seed: int, step: int | str) -> Command:
    """The plateau stage's SFT: the run continued to ``step`` (the next chunk), a checkpoint there."""
    return sft_command(s, seed, ("--stop-at-step", str(step)), s.seed_dir(seed).sft_ckpt, s.sft_chunk)


def control_command(s: Settings, seed: int, budget_s: float | str, start: int | str) -> Command:
    """The control: SFT continued from the plateau checkpoint (step ``start``) for ``budget_s`` seconds of training
    steps, into its own folder (the plateau run's later checkpoints stay as they are), one checkpoint at its end."""
    d = s.seed_dir(seed)
    budget = f"{budget_s:.3f}" if isinstance(budget_s, float) else budget_s
    return sft_command(s, seed, ("--stop-after-s", budget), d.control_ckpt, -1,
                       resume_from=d.sft_ckpt / f"global_step_{start}", record=d.control_json)


def candidate_steps(s: Settings) -> list[int]:
    return chunk_steps(s.sft_chunk, s.sft_max_steps)


def grpo_command(s: Settings, run: RLRun, share: str | None = None, dry_run: bool = False) -> Command:
    """The unchanged recipe for one RL run from the seed's plateau model: the study's knobs and overrides, a
    checkpoint at its last step, then the seed, the stage's own override and the caller's, last (they win)."""
    d = s.seed_dir(run.seed)
    env = {**GRPO_KNOBS, **OFFLINE_ENV, **s.env}
    env.update(PROFILE="default", MODEL=str(d.plateau_model), DATA_DIR=str(s.exp_dir / "rl"),
               ROUNDS=str(run.rounds), STEPS=str(s.steps), LOGGER="console,file", EXPERIMENT=run.experiment,
               SAVE_FREQ=str(s.steps), CKPT_DIR=str(d.grpo_ckpt(run)), RESUME="disable", PYTHON=s.python,
               VERL_FILE_LOGGER_PATH=str(d.root / f"{run.name}.jsonl"), DRY_RUN="1" if dry_run else "0")
    if share is not None:
        env["GPU_MEM_UTIL"] = share
    if s.gpu(run.seed) is not None:
        env["CUDA_VISIBLE_DEVICES"] = s.gpu(run.seed)
    seed = (f"data.seed={run.seed}", f"actor_rollout_ref.actor.fsdp_config.seed={run.seed}",
            f"actor_rollout_ref.rollout.seed={run.seed}")  # verl 0.9.1 has no trainer.seed
    argv = ("bash", str(RUN_SCRIPT), *GRPO_OVERRIDES, *seed, *run.overrides, *s.grpo_overrides)
    return Command(argv, env, s.env)


def eval_command(s: Settings, seed: int, model: Path, heldout: str, out: Path, gpu_mem: str,
                 merged_dir: Path | None = None) -> Command:
    """Greedy held-out pass@1 per split (`mrgrpo eval`) with the training agent loop, reward and lengths; a verl
    checkpoint is merged to Hugging Face format into ``merged_dir`` first (once)."""
    argv = (s.python, "-m", "mrgrpo", "eval", "--model", str(model), "--data",
            str(s.exp_dir / "rl" / f"{heldout}.parquet"), "--out", str(out), *EVAL_ARGS, "--rounds", str(s.rounds),
            *EVAL_LENGTHS, *EVAL_LIMITS, "--gpu-memory-utilization", gpu_mem, "--enforce-eager", "--seed", "0",
            *(("--merged-dir", str(merged_dir)) if merged_dir else ()), "--quiet")
    return Command(argv, _env(s, seed), s.env)


def table_command(s: Settings) -> Command:
    return Command((s.python, str(SEEDS_TABLE), str(s.out_dir), "--seeds", ",".join(map(str, s.seeds))), _env(s),
                   s.env)
