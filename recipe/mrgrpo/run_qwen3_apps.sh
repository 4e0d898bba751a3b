#!/usr/bin/env bash
# mrGRPO: multi-round plan -> code -> feedback GRPO for Qwen3 on APPS+ with verl 0.9.1.
#
# usage: [VAR=value ...] bash recipe/mrgrpo/run_qwen3_apps.sh [extra hydra overrides ...]
#        bash recipe/mrgrpo/run_qwen3_apps.sh --help   every knob with its default (PROFILE=tiny ... --help: tiny's)
# Extra arguments are appended to the launch as hydra overrides, so they win over everything below.
set -euo pipefail
ME=run_qwen3_apps.sh
die() { echo "$ME: $*" >&2; exit 2; }

# ---- knobs -------------------------------------------------------------------------------------
# knob NAME DEFAULT DESCRIPTION [DEFAULT IN WORDS]: NAME from the environment, else DEFAULT; --help prints them.
HELP_ROWS=()
knob() {
  local name=$1 default=$2
  printf -v "$name" '%s' "${!name:-$default}"
  HELP_ROWS+=("$(printf '  %-17s %-22s %s' "$name" "${4:-${default:-(empty)}}" "$3")")
}
knob PROFILE default "default | tiny (a tiny random Qwen3 built offline: a smoke test)"
knob DRY_RUN 0 "1/true/yes/on: print the environment, every override and the launch command; change nothing"
knob CACHE_DIR "${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo" "where the prepared sample (and the tiny model) go" \
  "~/.cache/mrgrpo"
case "$PROFILE" in
  default) P=(Qwen/Qwen3-0.6B 8 32 2048 4096 200 0.5 4 8 1e-6 20 10) ;;
  tiny)    P=("$CACHE_DIR/tiny_qwen3" 2 4 4096 512 2 0.3 2 1 1e-6 2 2) ;;
  *) die "PROFILE must be 'default' or 'tiny', got '$PROFILE'" ;;
esac
knob MODEL "${P[0]}" "a local HF model directory, or a hub id org/name (any Qwen3 up to 8B)"
knob DATA_DIR "" \
  "holds train.parquet + val.parquet (mrgrpo data prepare); empty: the bundled APPS+ sample, prepared once"
knob TRAIN_FILE "" "empty: \$DATA_DIR/train.parquet"
knob VAL_FILE "" "empty: \$DATA_DIR/val.parquet"
knob PLAN_SOURCE self "self (the policy plans first) | teacher (plans in the data) | none"
knob ROUNDS 2 "K: feedback rounds on the public tests after a failed attempt"
knob GROUP_SIZE "${P[1]}" "GRPO group: responses per prompt (rollout.n)"
knob BATCH_SIZE "${P[2]}" "prompts per step (data.train_batch_size)"
knob MINI_BATCH "$BATCH_SIZE" "prompts per policy update (ppo_mini_batch_size); BATCH_SIZE/MINI_BATCH updates a step"
knob MICRO_BATCH "${P[7]}" "sequences per GPU per forward pass (actor, log-probs)"
knob MAX_PROMPT_LEN "${P[3]}" "tokens of the first prompt; longer problems are dropped"
knob MAX_RESPONSE_LEN "${P[4]}" "tokens of ALL turns of a trajectory together (plan, code, feedback, retries)"
knob PLAN_MAX_TOKENS "" "cap on the self-plan turn (PLAN_SOURCE=self), so a long plan leaves budget for code; null: none" \
  "MAX_RESPONSE_LEN / 2"
knob STEPS "${P[5]}" "training steps (or verl's trainer.total_epochs=30, whichever ends first)"
knob LR "${P[9]}" "actor learning rate"
knob SAVE_FREQ "${P[10]}" "checkpoint every N steps and at the last step (-1: never)"
knob TEST_FREQ "${P[11]}" "validation every N steps, before training and at the last step (-1: never)"
knob KEEP_CKPTS 3 "keep the newest N checkpoints (older ones are deleted; 0: keep all)"
knob PROJECT mrgrpo "tracking project (W&B project)"
knob EXPERIMENT "qwen3_apps_${PLAN_SOURCE}_k${ROUNDS}" "run name; checkpoints go to CKPT_DIR"
knob CKPT_DIR "$PWD/checkpoints/$PROJECT/$EXPERIMENT" "checkpoints: global_step_N/actor (FSDP shards; mrgrpo eval merges them)" \
  "./checkpoints/PROJECT/EXPERIMENT"
knob RESUME auto "auto: continue from the newest checkpoint in CKPT_DIR | disable | a global_step_N path"
knob LOGGER console "comma-separated: console,wandb (wandb needs WANDB_API_KEY or wandb login)"
knob ROLLOUT vllm "vllm | sglang"
knob GPUS_PER_NODE 1 "GPUs per node"
knob NNODES 1 "nodes (a Ray cluster: see docs/docker.md)"
knob ROLLOUT_TP 1 "tensor parallel size of each rollout engine"
knob GPU_MEM_UTIL "${P[6]}" "the rollout engine's share of GPU memory"
knob AGENT_WORKERS "${P[8]}" "agent-loop worker processes"
knob SYS_PROMPT_FILE "" "a text file replacing every prompt's system message"
knob PYTHON python3 "the interpreter with verl and mrgrpo (a venv's python)"

if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  echo
  echo "knobs (environment variables; defaults of PROFILE=$PROFILE):"
  printf '  %-17s %-22s %s\n' NAME DEFAULT MEANING
  printf '%s\n' "${HELP_ROWS[@]}"
  cat <<EOF

checkpoints: every SAVE_FREQ steps and at the last step, into CKPT_DIR/global_step_N (the newest KEEP_CKPTS
  are kept). Evaluate one with: mrgrpo eval --model CKPT_DIR/global_step_N --data VAL_FILE --out DIR
resume: launching again with the same EXPERIMENT (or CKPT_DIR) continues from the newest checkpoint (RESUME=auto);
  RESUME=disable starts over; RESUME=CKPT_DIR/global_step_N resumes from that one.
W&B: LOGGER=console,wandb with WANDB_API_KEY set (or after wandb login); PROJECT and EXPERIMENT name the run.
exit status: 0 launched (or DRY_RUN printed); 2 a knob, path, package or data problem found before launching;
  3 no GPU.
examples:
  bash recipe/mrgrpo/run_qwen3_apps.sh                                    # Qwen3-0.6B on the bundled sample
  MODEL=Qwen/Qwen3-1.7B GPUS_PER_NODE=4 DATA_DIR=data/apps_plus STEPS=100 bash recipe/mrgrpo/run_qwen3_apps.sh
  DRY_RUN=1 bash recipe/mrgrpo/run_qwen3_apps.sh trainer.val_before_train=False
EOF
  exit 0
fi

# ---- checks (each one line, exit 2, before anything runs) ---------------------------------------
case "${DRY_RUN,,}" in 1|true|yes|on) DRY_RUN=1;; 0|false|no|off|'') DRY_RUN=0;;
  *) die "DRY_RUN must be 1/true/yes/on or 0/false/no/off, got '$DRY_RUN'";; esac
case "$ROLLOUT" in vllm|sglang) ;; *) die "ROLLOUT must be vllm or sglang, got '$ROLLOUT'";; esac
case "$PLAN_SOURCE" in self|teacher|none) ;; *) die "PLAN_SOURCE must be self, teacher or none, got '$PLAN_SOURCE'";; esac
int_at_least() {  # NAME MIN: the knob must be an integer >= MIN
  local v=${!1}
  [[ "$v" =~ ^[0-9]+$ ]] && (( 10#$v >= $2 )) || die "$1 must be an integer >= $2, got '$v'"
}
for knob in GPUS_PER_NODE NNODES STEPS BATCH_SIZE MINI_BATCH MICRO_BATCH GROUP_SIZE MAX_PROMPT_LEN \
            MAX_RESPONSE_LEN AGENT_WORKERS ROLLOUT_TP; do
  int_at_least "$knob" 1
done
int_at_least ROUNDS 0
[[ -n "$PLAN_MAX_TOKENS" ]] || PLAN_MAX_TOKENS=$(( 10#$MAX_RESPONSE_LEN / 2 ))
[[ "$PLAN_MAX_TOKENS" == null ]] || int_at_least PLAN_MAX_TOKENS 1
int_at_least KEEP_CKPTS 0
for knob in SAVE_FREQ TEST_FREQ; do
  [[ "${!knob}" =~ ^(-1|[1-9][0-9]*)$ ]] || die "$knob must be -1 (never) or an integer >= 1, got '${!knob}'"
done
(( 10#$MINI_BATCH <= 10#$BATCH_SIZE )) || die "MINI_BATCH must be <= BATCH_SIZE ($BATCH_SIZE), got '$MINI_BATCH'"
[[ "$GPU_MEM_UTIL" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] || die "GPU_MEM_UTIL must be a number in (0, 1], got '$GPU_MEM_UTIL'"
[[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "LR must be a positive number like 1e-6, got '$LR'"
[[ "$EXPERIMENT" =~ ^[A-Za-z0-9._-]+$ ]] || die "EXPERIMENT must be letters, digits, '.', '_' or '-', got '$EXPERIMENT'"
[[ "$RESUME" == auto || "$RESUME" == disable || "$RESUME" == */global_step_* ]] \
  || die "RESUME must be auto, disable or a .../global_step_N checkpoint path, got '$RESUME'"
if [[ "$DRY_RUN" != 1 ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "$ME: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU)." >&2
    echo "mrGRPO training needs at least one GPU for the rollout engine and the actor." >&2
    echo "Use DRY_RUN=1 to print the launch command without running it." >&2
    exit 3
  fi
fi

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
# Ray workers import mrgrpo from the checkout even when it is not pip-installed.
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
# Paths of another machine are warnings in a dry run, fatal in a real one.
need() { if [[ "$DRY_RUN" == 1 ]]; then echo "$ME: warning: $*" >&2; else die "$*"; fi; }
abspath() {  # an absolute path for $1 (normalised through the nearest existing directory)
  local p=$1 parent
  [[ "$p" == /* ]] || p="$PWD/$p"
  if [[ -d "$p" ]]; then (cd "$p" && pwd); return; fi
  parent=$(dirname "$p")
  if [[ -d "$parent" ]]; then echo "$(cd "$parent" && pwd)/$(basename "$p")"; else echo "$p"; fi
}
# MODEL: a directory (made absolute: Ray workers do not share this cwd), else a hub id org/name.
if [[ -d "$MODEL" ]]; then
  MODEL=$(cd "$MODEL" && pwd)
elif [[ "$PROFILE" == tiny ]]; then
  MODEL=$(abspath "$MODEL")  # tiny builds its model when missing
elif [[ "$MODEL" =~ ^(/|\./|\.\./|~) ]]; then
  need "MODEL $MODEL is a path but not a directory: point it at an HF model directory, or use a hub id like Qwen/Qwen3-0.6B"
elif ! [[ "$MODEL" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$ ]]; then
  die "MODEL $MODEL is neither a directory nor a hub id like Qwen/Qwen3-0.6B"
fi
if [[ -n "$DATA_DIR" ]]; then
  DATA_DIR=$(abspath "$DATA_DIR")
  [[ -d "$DATA_DIR" ]] || need "DATA_DIR $DATA_DIR is not a directory: prepare it with \`mrgrpo data prepare --out $DATA_DIR\`, or leave DATA_DIR unset for the bundled sample"
fi
[[ -z "$SYS_PROMPT_FILE" || -f "$SYS_PROMPT_FILE" ]] || need "SYS_PROMPT_FILE $SYS_PROMPT_FILE is not a file"
[[ -z "$SYS_PROMPT_FILE" ]] || SYS_PROMPT_FILE=$(abspath "$SYS_PROMPT_FILE")
CKPT_DIR=$(abspath "$CKPT_DIR")
[[ "$RESUME" == auto || "$RESUME" == disable ]] || RESUME=$(abspath "$RESUME")
PY_HINT="activate the venv that has verl and mrgrpo (source .venv/bin/activate), or set PYTHON=/path/to/.venv/bin/python"
PY_OK=0
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  need "PYTHON=$PYTHON is not a command: $PY_HINT"
elif ! PY_OUT=$("$PYTHON" -c 'import verl, mrgrpo.config as c; print(c.CONFIG_DIR)' 2>&1); then
  need "$PYTHON cannot import verl and mrgrpo ($(printf '%s' "$PY_OUT" | tail -n 1)): $PY_HINT"
else
  PY_OK=1
fi
# The config ships in the package: the interpreter's mrgrpo's (the checkout's when not installed).
CONFIG_DIR=$( ((PY_OK)) && printf '%s' "$PY_OUT" | tail -n 1 || true)
[[ -f "$CONFIG_DIR/mrgrpo_trainer.yaml" ]] || CONFIG_DIR="$REPO_ROOT/mrgrpo/config"
# W&B: a profile never turns off a logger the user asked for.
if [[ ",$LOGGER," == *,wandb,* && "${WANDB_MODE:-}" == disabled ]]; then
  echo "$ME: warning: LOGGER has wandb but WANDB_MODE=disabled is set in your environment: nothing reaches W&B" >&2
fi

# ---- data and model ----------------------------------------------------------------------------
if [[ -z "$DATA_DIR" ]]; then
  DATA_DIR="$CACHE_DIR/data/apps_plus_sample"
  if [[ "$DRY_RUN" != 1 && ! -f "$DATA_DIR/train.parquet" ]]; then
    echo "$ME: preparing the bundled APPS+ sample into $DATA_DIR (no plans)" >&2
    "$PYTHON" -m mrgrpo data prepare --out "$DATA_DIR" --plans none
  fi
fi
TRAIN_FILE=$(abspath "${TRAIN_FILE:-$DATA_DIR/train.parquet}")
VAL_FILE=$(abspath "${VAL_FILE:-$DATA_DIR/val.parquet}")
if [[ "$DRY_RUN" != 1 ]]; then
  for f in "$TRAIN_FILE" "$VAL_FILE"; do
    [[ -f "$f" ]] || die "missing data file $f"
  done
fi
# The GPU stack (torch, verl, the rollout engine: installed, at mrgrpo's pins, importable) and the data (teacher
# plans present): one line and exit 2 on the first problem. A dry run checks versions only and only warns.
if ((PY_OK)); then
  PRE=("$PYTHON" -m mrgrpo.preflight --rollout "$ROLLOUT" --plan-source "$PLAN_SOURCE")
  if [[ "$DRY_RUN" == 1 ]]; then
    PRE+=(--no-import --warn-only)
    for f in "$TRAIN_FILE" "$VAL_FILE"; do [[ -f "$f" ]] && PRE+=(--data "$f"); done
  else
    PRE+=(--data "$TRAIN_FILE" --data "$VAL_FILE")
  fi
  STACK=$("${PRE[@]}") || exit 2
  echo "$ME: $STACK" >&2
fi
if [[ "$DRY_RUN" != 1 ]]; then
  if [[ "$PROFILE" == tiny && ! -f "$MODEL/config.json" ]]; then
    echo "$ME: building the tiny random Qwen3 into $MODEL" >&2
    "$PYTHON" -m mrgrpo.tiny_model "$MODEL"
  fi
fi

# ---- environment -------------------------------------------------------------------------------
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
export PYTHONUNBUFFERED=1
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}
EXPORTED=(PYTHONPATH TOKENIZERS_PARALLELISM PYTHONUNBUFFERED RAY_AUTH_MODE RAY_USAGE_STATS_ENABLED)
if [[ "$PROFILE" == tiny ]]; then
  # Built offline, run offline (the GPU kit has no flashinfer and no network).
  export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
  export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}
  export HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1}
  EXPORTED+=(VLLM_USE_FLASHINFER_SAMPLER HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_DATASETS_OFFLINE)
fi

# Optional kernels: without flash-attn verl's remove-padding path cannot run, and without flashinfer vLLM's
# flashinfer sampler cannot; say so and use what is there (sdpa, verl's fused log-prob kernels, vLLM's sampler).
NO_FLASH_ATTN=0
if ((PY_OK)) && [[ "$PROFILE" == default ]]; then
  has() { "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)" 2>/dev/null; }
  if ! has flash_attn; then
    NO_FLASH_ATTN=1
    echo "$ME: note: flash-attn is not installed: the actor uses sdpa attention with padding (slower; docs/install.md)" >&2
  fi
  if [[ "$ROLLOUT" == vllm ]] && ! has flashinfer && [[ -z "${VLLM_USE_FLASHINFER_SAMPLER:-}" ]]; then
    echo "$ME: note: flashinfer is not installed: vLLM samples with its own sampler (VLLM_USE_FLASHINFER_SAMPLER=0)" >&2
    export VLLM_USE_FLASHINFER_SAMPLER=0
    EXPORTED+=(VLLM_USE_FLASHINFER_SAMPLER)
  fi
fi

# ---- launch ------------------------------------------------------------------------------------
ARGS=(
  "$PYTHON" -m verl.trainer.main_ppo
  --config-path "$CONFIG_DIR" --config-name mrgrpo_trainer
  data.train_files="$TRAIN_FILE"
  data.val_files="$VAL_FILE"
  data.train_batch_size="$BATCH_SIZE"
  data.max_prompt_length="$MAX_PROMPT_LEN"
  data.max_response_length="$MAX_RESPONSE_LEN"
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.actor.optim.lr="$LR"
  actor_rollout_ref.actor.ppo_mini_batch_size="$MINI_BATCH"
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="$MICRO_BATCH"
  actor_rollout_ref.rollout.name="$ROLLOUT"
  actor_rollout_ref.rollout.n="$GROUP_SIZE"
  actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP"
  actor_rollout_ref.rollout.gpu_memory_utilization="$GPU_MEM_UTIL"
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH"
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu="$MICRO_BATCH"
  actor_rollout_ref.rollout.agent.num_workers="$AGENT_WORKERS"
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$CONFIG_DIR/agent_loop.yaml"
  mrgrpo.agent_loop.rounds="$ROUNDS"
  mrgrpo.agent_loop.plan_source="$PLAN_SOURCE"
  mrgrpo.agent_loop.plan_max_tokens="$PLAN_MAX_TOKENS"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.nnodes="$NNODES"
  trainer.total_training_steps="$STEPS"
  trainer.save_freq="$SAVE_FREQ"
  trainer.test_freq="$TEST_FREQ"
  trainer.default_local_dir="$CKPT_DIR"
  trainer.resume_mode="$([[ $RESUME == auto || $RESUME == disable ]] && echo "$RESUME" || echo resume_path)"
  trainer.max_actor_ckpt_to_keep="$([[ $KEEP_CKPTS == 0 ]] && echo null || echo "$KEEP_CKPTS")"
  trainer.logger="[$LOGGER]"
  trainer.project_name="$PROJECT"
  trainer.experiment_name="$EXPERIMENT"
)
[[ "$RESUME" == auto || "$RESUME" == disable ]] || ARGS+=(trainer.resume_from_path="$RESUME")
[[ -z "$SYS_PROMPT_FILE" ]] || ARGS+=(data.adjust_sys_prompt="$SYS_PROMPT_FILE")
if [[ "$PROFILE" == tiny ]]; then
  # Small models on a machine without flash-attn: sdpa, eager vLLM, no torch.compile.
  ARGS+=(
    actor_rollout_ref.model.use_remove_padding=False
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa
    actor_rollout_ref.model.enable_gradient_checkpointing=False
    # Without flash-attn verl computes log-probs one token at a time (torch_functional.logprobs_from_logits_v2
    # loops over rows: ~300k tiny kernels per SFT step, 40x below the hardware); the fused kernels' torch backend
    # computes them in chunks of 512 tokens instead (docs/results/learning.md, "Speed").
    actor_rollout_ref.model.use_fused_kernels=True
    actor_rollout_ref.actor.use_torch_compile=False
    actor_rollout_ref.actor.fsdp_config.use_torch_compile=False
    actor_rollout_ref.rollout.enforce_eager=True
    transfer_queue.backend.SimpleStorage.num_data_storage_units=2
  )
fi
if ((NO_FLASH_ATTN)); then
  ARGS+=(
    actor_rollout_ref.model.use_remove_padding=False
    +actor_rollout_ref.model.override_config.attn_implementation=sdpa
    # log-probs in chunks (the fused kernels' torch backend) instead of verl's per-row loop without flash-attn
    actor_rollout_ref.model.use_fused_kernels=True
  )
fi
if [[ "$PROFILE" == tiny ]]; then
  ARGS+=(
    reward.num_workers=1
    data.dataloader_num_workers=0
    mrgrpo.agent_loop.sandbox_concurrency=2
    trainer.val_before_train=False
  )
fi
ARGS+=("$@")

if [[ "$DRY_RUN" == 1 ]]; then
  # comment lines, then the launch command alone on the last line (tests and tools parse it)
  echo "# DRY_RUN: PROFILE=$PROFILE MODEL=$MODEL DATA_DIR=$DATA_DIR ROLLOUT=$ROLLOUT PLAN_SOURCE=$PLAN_SOURCE ROUNDS=$ROUNDS"
  echo "# checkpoints: every $SAVE_FREQ steps and at the last into $CKPT_DIR (resume: $RESUME); validation every $TEST_FREQ steps"
  echo "# exported environment:"
  for name in "${EXPORTED[@]}"; do printf '#   export %s=%q\n' "$name" "${!name}"; done
  echo "# overrides of $CONFIG_DIR/mrgrpo_trainer.yaml (extra arguments last, so they win):"
  for arg in "${ARGS[@]:7}"; do printf '#   %q\n' "$arg"; done
  printf '%q ' "${ARGS[@]}"
  echo
  exit 0
fi
echo "$ME: checkpoints every $SAVE_FREQ steps and at the last into $CKPT_DIR (resume: $RESUME)" >&2
exec "${ARGS[@]}"
