#!/usr/bin/env bash
# The first GPU hour, walked as a user walks it, on one GPU machine without network:
#   versions (the launcher's pre-flight) -> a random-weight model of Qwen3-0.6B's exact architecture with the real
#   Qwen3 tokenizer -> `mrgrpo data prepare` on the bundled sample -> the run script's DEFAULT profile (default
#   lengths and batch) for STEPS steps, saving and validating every step -> `mrgrpo eval` on the checkpoint ->
#   a second launch that resumes from it for one more step.
#
# usage: bash benchmarks/gpu_walk.sh TOKENIZER_DIR [WORK_DIR]     (from the repository root; logs in WORK_DIR)
#   TOKENIZER_DIR: the real Qwen3 tokenizer, built offline with `python tests/qwen3_tokenizer/build.py DIR`
#   STEPS=1 (first launch), EVAL_N=1 (samples per problem in the eval), EXTRA="..." (overrides for both launches)
# Each stage appends one line to WORK_DIR/stages.tsv (stage, exit status, seconds), so a poller sees progress.
set -uo pipefail
TOK=${1:?usage: gpu_walk.sh TOKENIZER_DIR [WORK_DIR]}
W=${2:-/tmp/walk}
STEPS=${STEPS:-1}
EVAL_N=${EVAL_N:-1}
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$W"
MODEL=$W/qwen3-0.6b-random
DATA=$W/data
CKPT=$W/checkpoints
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled RAY_DEDUP_LOGS=0

stage() {  # NAME COMMAND...: run, log to W/NAME.log, record status and seconds
  local name=$1; shift
  local t0 rc
  t0=$(date +%s)
  echo "== $(date +%T) $name: $*" | tee -a "$W/walk.log"
  "$@" > "$W/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$W/stages.tsv"
  return $rc
}
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > "$W/gpu_memory.csv" 2>&1 &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT

stage versions python3 -m mrgrpo.preflight --rollout vllm || exit 1
stage model python3 benchmarks/random_qwen3.py --arch 0.6B --tokenizer "$TOK" --out "$MODEL" || exit 1
stage data python3 -m mrgrpo data prepare --out "$DATA" --plans none || exit 1
launch() {  # the README's command, with a local model and data
  MODEL=$MODEL DATA_DIR=$DATA CKPT_DIR=$CKPT SAVE_FREQ=1 TEST_FREQ=1 EXPERIMENT=walk STEPS=$1 \
    bash recipe/mrgrpo/run_qwen3_apps.sh trainer.val_before_train=False "${EXTRA[@]}"
}
stage train launch "$STEPS" || exit 1
LAST=$(ls -d "$CKPT"/global_step_* 2>/dev/null | sort -V | tail -n 1)
stage eval python3 -m mrgrpo eval --model "$LAST" --data "$DATA/val.parquet" --out "$W/eval" --n "$EVAL_N" --k 1
stage resume launch $(( STEPS + 1 ))
echo "== $(date +%T) done" | tee -a "$W/walk.log"
