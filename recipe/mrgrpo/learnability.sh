#!/usr/bin/env bash
# The offline learnability check (docs/results/learning.md): does the recipe learn what only RL can teach?
# One GPU, no network. Stages (STAGES, comma-separated, in this order):
#   data      python -m mrgrpo.learn experiment: synthetic problems, splits, tokenizer, SFT transcripts (CPU)
#   sft       recipe/mrgrpo/sft_synth.sh: SFT warm start with verl's SFT trainer (SFT_STEPS)
#   grpo      GRPO, K=ROUNDS feedback rounds, self plan, with the unchanged recipe (PROFILE=synth); held-out
#             pass@1 (greedy, verl validation) per split before training and every TEST_FREQ steps
#   grpo_k0   the same with K=0 (one attempt): the feedback ablation
#   sft_more  the control: SFT continued for SFT_MORE_STEPS more steps (about GRPO's wall time), then one
#             validation of it with the same verl validation as the GRPO runs
# Each stage writes OUT_DIR/<stage>.log and, for verl runs, OUT_DIR/<stage>.jsonl (verl's `file` logger: every
# metric of every step). python benchmarks/learning_curves.py OUT_DIR turns them into CSV and PNG.
#
# usage: [VAR=value ...] bash recipe/mrgrpo/learnability.sh [extra hydra overrides for the GRPO runs ...]
set -euo pipefail

STAGES=${STAGES:-data,sft,grpo}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo}
EXP_DIR=${EXP_DIR:-$CACHE_DIR/learn_exp}
OUT_DIR=${OUT_DIR:-$EXP_DIR/runs}
SFT_STEPS=${SFT_STEPS:-600}
SFT_MORE_STEPS=${SFT_MORE_STEPS:-300}
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-60}
SEED=${SEED:-1}
PYTHON=${PYTHON:-python3}

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT_DIR"
has() { [[ ",$STAGES," == *",$1,"* ]]; }
stamp() { echo "== $1 $(date +%T)" | tee -a "$OUT_DIR/stages.txt"; }

grpo() {  # grpo NAME ROUNDS MODEL [overrides...]
  local name=$1 rounds=$2 model=$3; shift 3
  stamp "$name start"
  VERL_FILE_LOGGER_PATH="$OUT_DIR/$name.jsonl" PROFILE=synth EXP_DIR="$EXP_DIR" MODEL="$model" ROUNDS="$rounds" \
    STEPS="$STEPS" LOGGER=console,file EXPERIMENT="$name" PYTHON="$PYTHON" \
    bash "$SCRIPT_DIR/run_qwen3_apps.sh" trainer.seed="$SEED" "$@" > "$OUT_DIR/$name.log" 2>&1 \
    || { stamp "$name FAILED rc=$?"; return 1; }
  stamp "$name done"
}

if has data; then
  stamp "data start"
  "$PYTHON" -m mrgrpo.learn experiment --out "$EXP_DIR" > "$OUT_DIR/data.log" 2>&1
  stamp "data done"
fi
if has sft; then
  stamp "sft start"
  EXP_DIR="$EXP_DIR" SFT_STEPS="$SFT_STEPS" SEED="$SEED" PYTHON="$PYTHON" bash "$SCRIPT_DIR/sft_synth.sh" \
    > "$OUT_DIR/sft.log" 2>&1
  stamp "sft done"
fi
if has grpo; then
  grpo "grpo_k$ROUNDS" "$ROUNDS" "$EXP_DIR/sft_model" "$@"
fi
if has grpo_k0; then
  grpo grpo_k0 0 "$EXP_DIR/sft_model" "$@"
fi
if has sft_more; then
  stamp "sft_more start"
  EXP_DIR="$EXP_DIR" SFT_STEPS=$(( SFT_STEPS + SFT_MORE_STEPS )) SFT_MODEL="$EXP_DIR/sft_more_model" SEED="$SEED" \
    PYTHON="$PYTHON" bash "$SCRIPT_DIR/sft_synth.sh" > "$OUT_DIR/sft_more.log" 2>&1
  grpo sft_more_eval "$ROUNDS" "$EXP_DIR/sft_more_model" trainer.val_only=True
fi
stamp "all done"
