#!/usr/bin/env bash
# The offline learnability check (docs/results/learning.md): does the recipe learn what only RL can teach?
# One GPU, no network. Stages (STAGES, comma-separated, in this order):
#   data      python -m mrgrpo.learn experiment: synthetic problems, splits, tokenizer, SFT transcripts (CPU)
#   sft       recipe/mrgrpo/sft_synth.sh: SFT warm start with verl's SFT trainer (SFT_STEPS, an HF checkpoint every
#             SAVE_FREQ steps)
#   sft_eval  held-out pass@1 (greedy, `mrgrpo eval`, the training agent loop and reward) of the SFT checkpoints
#             SFT_EVAL_STEPS (in that order; default: every one up to SFT_STEPS, newest first): the plateau curve
#             (OUT_DIR/sft_eval/step_N/summary.json); evaluated ones are skipped
#   grpo      GRPO, K=ROUNDS feedback rounds, self plan, with the unchanged recipe (PROFILE=synth); held-out
#             pass@1 (greedy, verl validation) per split before training and every TEST_FREQ steps
#   grpo_k0   the same with K=0 (one attempt): the feedback ablation
#   sft_more  the control: SFT continued for SFT_MORE_STEPS more steps (GRPO's training wall time divided by the
#             SFT stage's seconds per step; checkpoints every SFT_MORE_SAVE_FREQ steps for sft_eval), then evaluated
#             as sft_eval does (OUT_DIR/sft_more_eval)
# Each stage writes OUT_DIR/<stage>.log and, for verl runs, OUT_DIR/<stage>.jsonl (verl's `file` logger: every
# metric of every step). python benchmarks/learning_curves.py OUT_DIR turns them into CSV and PNG.
#
# Stages that share nothing but the GPU may run at once as two invocations with the same EXP_DIR and OUT_DIR (e.g.
# STAGES=grpo next to STAGES=sft_eval,sft_more); each stage appends to OUT_DIR/stages.txt.
# DRY_RUN=1 prints, for each GRPO stage, the launch command run_qwen3_apps.sh would run, and runs nothing.
#
# usage: [VAR=value ...] bash recipe/mrgrpo/learnability.sh [extra hydra overrides for the GRPO runs ...]
set -euo pipefail

STAGES=${STAGES:-data,sft,grpo}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo}
EXP_DIR=${EXP_DIR:-$CACHE_DIR/learn_exp}
OUT_DIR=${OUT_DIR:-$EXP_DIR/runs}
SFT_STEPS=${SFT_STEPS:-600}
SFT_MORE_STEPS=${SFT_MORE_STEPS:-300}
SFT_MORE_SAVE_FREQ=${SFT_MORE_SAVE_FREQ:-$SFT_MORE_STEPS}
SFT_EVAL_STEPS=${SFT_EVAL_STEPS:-}        # e.g. "1500 1000 600": checkpoints to evaluate, in this order
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-60}
SAVE_FREQ=${SAVE_FREQ:-200}
SEED=${SEED:-1}
DRY_RUN=${DRY_RUN:-0}
PYTHON=${PYTHON:-python3}

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT_DIR"
has() { [[ ",$STAGES," == *",$1,"* ]]; }
stamp() { echo "== $1 $(date +%T)" | tee -a "$OUT_DIR/stages.txt"; }
# The RL seed: data order, the actor's init and the rollout's sampling (verl 0.9.1 has no trainer.seed).
SEEDS=(data.seed="$SEED" actor_rollout_ref.actor.fsdp_config.seed="$SEED" actor_rollout_ref.rollout.seed="$SEED")

grpo() {  # grpo NAME ROUNDS MODEL [overrides...]
  local name=$1 rounds=$2 model=$3; shift 3
  local env=(VERL_FILE_LOGGER_PATH="$OUT_DIR/$name.jsonl" PROFILE=synth EXP_DIR="$EXP_DIR" MODEL="$model"
             ROUNDS="$rounds" STEPS="$STEPS" LOGGER=console,file EXPERIMENT="$name" PYTHON="$PYTHON")
  if [[ "$DRY_RUN" == 1 ]]; then
    env "${env[@]}" DRY_RUN=1 bash "$SCRIPT_DIR/run_qwen3_apps.sh" "${SEEDS[@]}" "$@" | tail -1
    return
  fi
  stamp "$name start"
  env "${env[@]}" bash "$SCRIPT_DIR/run_qwen3_apps.sh" "${SEEDS[@]}" "$@" > "$OUT_DIR/$name.log" 2>&1 \
    || { stamp "$name FAILED rc=$?"; return 1; }
  stamp "$name done"
}

evaluate() {  # evaluate MODEL_DIR OUT: greedy pass@1 per split with the training agent loop and reward
  local model=$1 out=$2
  [[ -f "$out/summary.json" ]] && return
  cp -n "$EXP_DIR"/tokenizer/* "$model"/ 2>/dev/null || true
  "$PYTHON" -m mrgrpo eval --model "$model" --data "$EXP_DIR/rl/val.parquet" --out "$out" --n 1 --k 1 \
    --temperature 0 --rounds "$ROUNDS" --max-prompt-length 768 --max-response-length 1024 \
    --reward-kwargs '{"time_s": 1, "wall_s": 2}' --gpu-memory-utilization "${EVAL_GPU_MEM:-0.15}" --enforce-eager \
    --seed "$SEED" --quiet > "$out.log" 2>&1 || { stamp "eval of $model FAILED (see $out.log)"; return 1; }
}

if [[ "$DRY_RUN" == 1 ]]; then
  has grpo && grpo "grpo_k$ROUNDS" "$ROUNDS" "$EXP_DIR/sft_model" "$@"
  has grpo_k0 && grpo grpo_k0 0 "$EXP_DIR/sft_model" "$@"
  exit 0
fi
if has data; then
  stamp "data start"
  "$PYTHON" -m mrgrpo.learn experiment --out "$EXP_DIR" > "$OUT_DIR/data.log" 2>&1
  stamp "data done"
fi
if has sft; then
  stamp "sft start"
  EXP_DIR="$EXP_DIR" SFT_STEPS="$SFT_STEPS" SAVE_FREQ="$SAVE_FREQ" SEED="$SEED" PYTHON="$PYTHON" \
    bash "$SCRIPT_DIR/sft_synth.sh" > "$OUT_DIR/sft.log" 2>&1
  stamp "sft done"
fi
if has sft_eval; then
  stamp "sft_eval start"
  mkdir -p "$OUT_DIR/sft_eval"
  if [[ -z "$SFT_EVAL_STEPS" ]]; then
    for ckpt in $(ls -d "$EXP_DIR"/sft_ckpt/global_step_*/huggingface | sort -Vr); do
      step=$(basename "$(dirname "$ckpt")"); step=${step#global_step_}
      (( step <= SFT_STEPS )) && SFT_EVAL_STEPS+="$step "
    done
  fi
  for step in $SFT_EVAL_STEPS; do
    ckpt=$EXP_DIR/sft_ckpt/global_step_$step/huggingface
    [[ -d "$ckpt" ]] || { stamp "sft_eval: no checkpoint $ckpt"; continue; }
    evaluate "$ckpt" "$OUT_DIR/sft_eval/step_$step" || true
  done
  stamp "sft_eval done"
fi
if has grpo; then
  grpo "grpo_k$ROUNDS" "$ROUNDS" "$EXP_DIR/sft_model" "$@"
fi
if has grpo_k0; then
  grpo grpo_k0 0 "$EXP_DIR/sft_model" "$@"
fi
if has sft_more; then
  stamp "sft_more start"
  EXP_DIR="$EXP_DIR" SFT_STEPS=$(( SFT_STEPS + SFT_MORE_STEPS )) SAVE_FREQ="$SFT_MORE_SAVE_FREQ" \
    SFT_MODEL="$EXP_DIR/sft_more_model" SEED="$SEED" PYTHON="$PYTHON" bash "$SCRIPT_DIR/sft_synth.sh" \
    > "$OUT_DIR/sft_more.log" 2>&1
  evaluate "$EXP_DIR/sft_more_model" "$OUT_DIR/sft_more_eval"
  stamp "sft_more done"
fi
stamp "all done"
