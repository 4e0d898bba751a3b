#!/usr/bin/env bash
# mrGRPO: multi-round plan -> code -> feedback GRPO for Qwen3 on APPS+ with verl 0.9.1.
#
# usage: [VAR=value ...] bash recipe/mrgrpo/run_qwen3_apps.sh [extra hydra overrides ...]
#        bash recipe/mrgrpo/run_qwen3_apps.sh --help      the knobs below with their defaults
#   DRY_RUN=1 ...            print the exported environment, one override per line, and the launch command (its
#                            last line), then exit 0; needs no GPU, changes nothing (1/true/yes/on all count)
#   PROFILE=tiny ...         one small GPU: a tiny random Qwen3 built offline, eager vLLM, sdpa, small batches
#   PROFILE=synth ...        the offline learnability check: synthetic APPS+ problems, a 28M Qwen3 trained from
#                            scratch (tokenizer, SFT warm start with verl's SFT trainer: sft_synth.sh), then GRPO
#                            with the unchanged recipe; builds whatever is missing under EXP_DIR
# Extra arguments are appended to the launch as hydra overrides, so they win over everything below.
set -euo pipefail

if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then
  # the usage above, then every knob with its default (the lines of the knobs section)
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  echo
  echo "knobs (environment variables; NAME=\${NAME:-default}):"
  sed -n '/^# ---- knobs/,/^# ---- checks/{/^# ----/d;p}' "${BASH_SOURCE[0]}"
  echo
  echo "exit status: 0 launched (or DRY_RUN printed); 2 a knob or path is wrong, or \$PYTHON cannot import verl and"
  echo "mrgrpo; 3 no GPU. Example: MODEL=Qwen/Qwen3-1.7B GPUS_PER_NODE=4 STEPS=100 bash recipe/mrgrpo/run_qwen3_apps.sh"
  exit 0
fi

# ---- knobs (environment variables) -------------------------------------------------------------
PROFILE=${PROFILE:-default}               # default | tiny | synth
DRY_RUN=${DRY_RUN:-0}                     # 1 (or true/yes/on): print the launch command and exit
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo}   # where prepared data / the tiny model go
if [[ "$PROFILE" == tiny ]]; then
  MODEL=${MODEL:-$CACHE_DIR/tiny_qwen3}   # built offline by mrgrpo.testing.tiny when missing
  GROUP_SIZE=${GROUP_SIZE:-2}
  BATCH_SIZE=${BATCH_SIZE:-4}
  MAX_PROMPT_LEN=${MAX_PROMPT_LEN:-4096}
  MAX_RESPONSE_LEN=${MAX_RESPONSE_LEN:-512}
  STEPS=${STEPS:-2}
  GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.3}
  MICRO_BATCH=${MICRO_BATCH:-2}
  AGENT_WORKERS=${AGENT_WORKERS:-1}
  ROLLOUT_TP=${ROLLOUT_TP:-1}
elif [[ "$PROFILE" == synth ]]; then
  EXP_DIR=${EXP_DIR:-$CACHE_DIR/learn_exp}  # python -m mrgrpo.learn experiment --out EXP_DIR (built when missing)
  MODEL=${MODEL:-$EXP_DIR/sft_model}      # the SFT warm start (recipe/mrgrpo/sft_synth.sh, run when missing)
  DATA_DIR=${DATA_DIR:-$EXP_DIR/rl}
  GROUP_SIZE=${GROUP_SIZE:-8}
  BATCH_SIZE=${BATCH_SIZE:-64}
  MAX_PROMPT_LEN=${MAX_PROMPT_LEN:-768}
  MAX_RESPONSE_LEN=${MAX_RESPONSE_LEN:-1024}
  STEPS=${STEPS:-60}
  GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.4}
  MICRO_BATCH=${MICRO_BATCH:-64}
  AGENT_WORKERS=${AGENT_WORKERS:-8}
  ROLLOUT_TP=${ROLLOUT_TP:-1}
  LR=${LR:-5e-5}                          # 28M params from scratch: 5e-5 was stable, 2e-4 collapsed
  MINI_BATCH=${MINI_BATCH:-16}            # 4 policy updates per step of 64 prompts: a step costs ~23 s here,
                                          # almost all generation, so each batch of rollouts is used 4 times
  TEST_FREQ=${TEST_FREQ:-10}              # held-out pass@1 (greedy) every TEST_FREQ steps and before training
elif [[ "$PROFILE" == default ]]; then
  MODEL=${MODEL:-Qwen/Qwen3-0.6B}         # any Qwen3 up to 8B (raise GPUS_PER_NODE / ROLLOUT_TP for 4B-8B)
  GROUP_SIZE=${GROUP_SIZE:-8}
  BATCH_SIZE=${BATCH_SIZE:-32}
  MAX_PROMPT_LEN=${MAX_PROMPT_LEN:-2048}
  MAX_RESPONSE_LEN=${MAX_RESPONSE_LEN:-4096}
  STEPS=${STEPS:-200}
  GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.5}
  MICRO_BATCH=${MICRO_BATCH:-4}
  AGENT_WORKERS=${AGENT_WORKERS:-8}
  ROLLOUT_TP=${ROLLOUT_TP:-1}
else
  echo "run_qwen3_apps.sh: PROFILE must be 'default', 'tiny' or 'synth', got '$PROFILE'" >&2
  exit 2
fi
DATA_DIR=${DATA_DIR:-}                    # has train.parquet + val.parquet; empty: prepare the bundled sample
ROLLOUT=${ROLLOUT:-vllm}                  # vllm | sglang
GPUS_PER_NODE=${GPUS_PER_NODE:-1}
NNODES=${NNODES:-1}
ROUNDS=${ROUNDS:-2}                       # K feedback rounds on the public tests
PLAN_SOURCE=${PLAN_SOURCE:-self}          # self | teacher (needs data built with plans) | none
MINI_BATCH=${MINI_BATCH:-$BATCH_SIZE}     # ppo_mini_batch_size (prompts)
LR=${LR:-1e-6}
LOGGER=${LOGGER:-console}                 # comma-separated: console,wandb,...
SYS_PROMPT_FILE=${SYS_PROMPT_FILE:-}      # a text file replacing every prompt's system message
PYTHON=${PYTHON:-python3}
PROJECT=${PROJECT:-mrgrpo}
EXPERIMENT=${EXPERIMENT:-qwen3_apps_${PLAN_SOURCE}_k${ROUNDS}}

# ---- checks ------------------------------------------------------------------------------------
die() { echo "run_qwen3_apps.sh: $*" >&2; exit 2; }
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
(( 10#$MINI_BATCH <= 10#$BATCH_SIZE )) || die "MINI_BATCH must be <= BATCH_SIZE ($BATCH_SIZE), got '$MINI_BATCH'"
[[ "$GPU_MEM_UTIL" =~ ^(0?\.[0-9]*[1-9][0-9]*|1(\.0*)?)$ ]] || die "GPU_MEM_UTIL must be a number in (0, 1], got '$GPU_MEM_UTIL'"
[[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || die "LR must be a positive number like 1e-6, got '$LR'"
if [[ "$PROFILE" == synth ]]; then [[ "$TEST_FREQ" =~ ^-?[0-9]+$ ]] || die "TEST_FREQ must be an integer, got '$TEST_FREQ'"; fi
if [[ "$DRY_RUN" != 1 ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    echo "run_qwen3_apps.sh: no NVIDIA GPU found (nvidia-smi is missing or lists no GPU)." >&2
    echo "mrGRPO training needs at least one GPU for the rollout engine and the actor." >&2
    echo "Use DRY_RUN=1 to print the launch command without running it." >&2
    exit 3
  fi
fi

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CONFIG_DIR="$SCRIPT_DIR/config"
# Ray workers import mrgrpo from the checkout even when it is not pip-installed.
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# Paths and the interpreter: fatal in a real run, warnings in a dry run (which may be for another machine).
need() { if [[ "$DRY_RUN" == 1 ]]; then echo "run_qwen3_apps.sh: warning: $*" >&2; else die "$*"; fi; }
# A MODEL written as a path must exist (tiny/synth build theirs when missing); anything else is a HF hub id.
if [[ "$PROFILE" == default && "$MODEL" =~ ^(/|\./|\.\./|~) && ! -d "$MODEL" ]]; then
  need "MODEL $MODEL is a path but not a directory: point it at an HF model directory, or use a hub id like Qwen/Qwen3-0.6B"
fi
if [[ -n "$DATA_DIR" && "$PROFILE" != synth && ! -d "$DATA_DIR" ]]; then
  need "DATA_DIR $DATA_DIR is not a directory: prepare it with \`mrgrpo data prepare --out $DATA_DIR\`, or leave DATA_DIR unset for the bundled sample"
fi
[[ -z "$SYS_PROMPT_FILE" || -f "$SYS_PROMPT_FILE" ]] || need "SYS_PROMPT_FILE $SYS_PROMPT_FILE is not a file"
PY_HINT="activate the venv that has verl and mrgrpo (source .venv/bin/activate), or set PYTHON=/path/to/.venv/bin/python"
if ! command -v "$PYTHON" >/dev/null 2>&1; then
  need "PYTHON=$PYTHON is not a command: $PY_HINT"
elif ! PY_ERR=$("$PYTHON" -c 'import verl, mrgrpo' 2>&1); then
  need "$PYTHON cannot import verl and mrgrpo ($(printf '%s' "$PY_ERR" | tail -n 1)): $PY_HINT"
fi

# ---- data and model ----------------------------------------------------------------------------
if [[ "$PROFILE" == synth && "$DRY_RUN" != 1 && ! -f "$DATA_DIR/train.parquet" ]]; then
  echo "run_qwen3_apps.sh: building the synthetic learnability data into $EXP_DIR" >&2
  "$PYTHON" -m mrgrpo.learn experiment --out "$EXP_DIR"
fi
if [[ -z "$DATA_DIR" ]]; then
  DATA_DIR="$CACHE_DIR/data/apps_plus_sample"
  if [[ "$DRY_RUN" != 1 && ! -f "$DATA_DIR/train.parquet" ]]; then
    echo "run_qwen3_apps.sh: preparing the bundled APPS+ sample into $DATA_DIR (no plans)" >&2
    "$PYTHON" -m mrgrpo data prepare --out "$DATA_DIR" --plans none
  fi
fi
TRAIN_FILE=${TRAIN_FILE:-$DATA_DIR/train.parquet}
VAL_FILE=${VAL_FILE:-$DATA_DIR/val.parquet}
if [[ "$DRY_RUN" != 1 ]]; then
  for f in "$TRAIN_FILE" "$VAL_FILE"; do
    [[ -f "$f" ]] || { echo "run_qwen3_apps.sh: missing data file $f" >&2; exit 2; }
  done
  if [[ "$PROFILE" == synth && ! -f "$MODEL/config.json" ]]; then
    echo "run_qwen3_apps.sh: no SFT warm start at $MODEL: running recipe/mrgrpo/sft_synth.sh" >&2
    EXP_DIR="$EXP_DIR" SFT_MODEL="$MODEL" PYTHON="$PYTHON" bash "$SCRIPT_DIR/sft_synth.sh"
  fi
  if [[ "$PROFILE" == tiny && ! -f "$MODEL/config.json" ]]; then
    echo "run_qwen3_apps.sh: building the tiny random Qwen3 into $MODEL" >&2
    "$PYTHON" -m mrgrpo.testing.tiny "$MODEL"
  fi
fi

# ---- environment -------------------------------------------------------------------------------
export TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
export PYTHONUNBUFFERED=1
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}
EXPORTED=(PYTHONPATH TOKENIZERS_PARALLELISM PYTHONUNBUFFERED RAY_AUTH_MODE RAY_USAGE_STATS_ENABLED)
if [[ "$PROFILE" == tiny || "$PROFILE" == synth ]]; then
  # The GPU kit has no flashinfer and no network.
  export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0}
  export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1}
  export HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1} WANDB_MODE=${WANDB_MODE:-disabled}
  EXPORTED+=(VLLM_USE_FLASHINFER_SAMPLER HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_DATASETS_OFFLINE WANDB_MODE)
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
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.nnodes="$NNODES"
  trainer.total_training_steps="$STEPS"
  trainer.logger="[$LOGGER]"
  trainer.project_name="$PROJECT"
  trainer.experiment_name="$EXPERIMENT"
)
if [[ -n "$SYS_PROMPT_FILE" ]]; then
  ARGS+=(data.adjust_sys_prompt="$SYS_PROMPT_FILE")
fi
if [[ "$PROFILE" == tiny || "$PROFILE" == synth ]]; then
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
if [[ "$PROFILE" == synth ]]; then
  ARGS+=(
    # True sampling at T=1 (no top-k / top-p cut) for training; greedy held-out pass@1 for validation.
    actor_rollout_ref.rollout.temperature=1.0
    actor_rollout_ref.rollout.top_k=-1
    actor_rollout_ref.rollout.top_p=1.0
    actor_rollout_ref.rollout.val_kwargs.temperature=0
    actor_rollout_ref.rollout.val_kwargs.n=1
    # Synthetic programs need milliseconds: 1 CPU-s / 2 wall-s per test (the sandbox default is 4 / 8).
    mrgrpo.agent_loop.sandbox_time_s=1
    mrgrpo.agent_loop.sandbox_wall_s=2
    +reward.custom_reward_function.reward_kwargs.time_s=1
    +reward.custom_reward_function.reward_kwargs.wall_s=2
    actor_rollout_ref.actor.optim.lr_warmup_steps=5
    trainer.val_before_train=True
    trainer.test_freq="$TEST_FREQ"
    trainer.save_freq=-1
  )
fi
if [[ "$PROFILE" == tiny ]]; then
  ARGS+=(
    reward.num_workers=1
    data.dataloader_num_workers=0
    mrgrpo.agent_loop.sandbox_concurrency=2
    trainer.val_before_train=False
    trainer.test_freq=-1
    trainer.save_freq=-1
  )
fi
ARGS+=("$@")

if [[ "$DRY_RUN" == 1 ]]; then
  # comment lines, then the launch command alone on the last line (tests and tools parse it)
  echo "# DRY_RUN: PROFILE=$PROFILE MODEL=$MODEL DATA_DIR=$DATA_DIR ROLLOUT=$ROLLOUT PLAN_SOURCE=$PLAN_SOURCE ROUNDS=$ROUNDS"
  echo "# exported environment:"
  for name in "${EXPORTED[@]}"; do printf '#   export %s=%q\n' "$name" "${!name}"; done
  echo "# overrides of recipe/mrgrpo/config/mrgrpo_trainer.yaml (extra arguments last, so they win):"
  for arg in "${ARGS[@]:7}"; do printf '#   %q\n' "$arg"; done
  printf '%q ' "${ARGS[@]}"
  echo
  exit 0
fi
exec "${ARGS[@]}"
