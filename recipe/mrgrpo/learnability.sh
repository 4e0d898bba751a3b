#!/usr/bin/env bash
# The offline learnability check (docs/results/learning.md): does the recipe learn what only RL can teach?
# One GPU, no network. Stages (STAGES, comma-separated; they run in this order whatever the order given):
#   data      python -m mrgrpo.learn experiment: synthetic problems, splits, tokenizer, SFT transcripts (CPU)
#   sft       recipe/mrgrpo/sft_synth.sh: SFT warm start with verl's SFT trainer (SFT_STEPS, an HF checkpoint every
#             SAVE_FREQ steps)
# then two tracks that share nothing but the GPU (PARALLEL=1 runs them at once, as docs/results/learning.md did):
#   RL track
#   grpo      GRPO, K=ROUNDS feedback rounds, self plan, with the unchanged recipe (PROFILE=synth); held-out
#             pass@1 (greedy, verl validation) per split before training and every TEST_FREQ steps
#   grpo_attempt  the same with the attempt-aware estimator (algorithm.adv_estimator=mrgrpo_attempt,
#             docs/attempt_credit.md): its comparison with grpo from the same SFT model
#   grpo_k0   the same as grpo with K=0 (one attempt): the feedback ablation
#   The RL stages run one after the other, or side by side with RL_PARALLEL=1: each starts once the one before it
#   has trained a step, with a vLLM share 0.1 above the one before it (GPU_MEM_UTIL, +0.1, ...), and a start that
#   fails before its first step is tried once more (vLLM engines starting next to a running one: see EVAL_GPU_MEM).
#   With RL_GPUS (e.g. 0,1) the stages side by side are dealt over those GPUs in turn (CUDA_VISIBLE_DEVICES): a
#   stage alone on its GPU starts at once with GPU_MEM_UTIL; only stages sharing a GPU wait and step up the share
#   SFT track
#   sft_more  the control: SFT continued for SFT_MORE_STEPS more steps (GRPO's training wall time divided by the
#             SFT stage's seconds per step; checkpoints every SFT_MORE_SAVE_FREQ steps for sft_eval), then evaluated
#             as sft_eval does (OUT_DIR/sft_more_eval; with PARALLEL=1 again after the RL track if that failed)
#   sft_eval  held-out pass@1 (greedy, `mrgrpo eval`, the training agent loop and reward) of the SFT checkpoints
#             SFT_EVAL_STEPS (in that order; default: newest first, every one up to SFT_STEPS, and up to
#             SFT_STEPS + SFT_MORE_STEPS when sft_more is a stage, but not sft_more's last, the control): the
#             plateau curve (OUT_DIR/sft_eval/step_N/summary.json); evaluated ones are skipped. With PARALLEL=1 it
#             runs once more after the RL track, for what failed to start next to GRPO
# Each stage writes OUT_DIR/<stage>.log and, for verl runs, OUT_DIR/<stage>.jsonl (verl's `file` logger: every
# metric of every step); each appends its start and end to OUT_DIR/stages.txt. python benchmarks/learning_curves.py
# OUT_DIR turns them into CSV, PNG and the headline table. Exit status: 1 when a stage failed (after the others ran);
# 2, before anything runs, for an unknown stage or vLLM shares that cannot fit side by side.
# DRY_RUN=1 prints, for each GRPO stage, the launch command run_qwen3_apps.sh would run, and runs nothing.
# run_qwen3_apps.sh's own knobs (GPU_MEM_UTIL, BATCH_SIZE, LR, ...) pass through to the GRPO runs.
#
# The headline run of docs/results/learning.md (its settings are the defaults: GRPO from SFT's plateau, 2000 steps;
# the sixth lease took ~26 min of one H200 with PARALLEL=1, the control and four SFT evaluations beside GRPO):
#   PARALLEL=1 bash recipe/mrgrpo/learnability.sh && python benchmarks/learning_curves.py OUT_DIR
#
# usage: [VAR=value ...] bash recipe/mrgrpo/learnability.sh [extra hydra overrides for the GRPO runs ...]
set -euo pipefail
if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then  # the comment above, then the knobs with their defaults
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  echo
  echo "knobs (environment variables; NAME=\${NAME:-default}):"
  sed -n '/^STAGES=/,/^PYTHON=/p' "${BASH_SOURCE[0]}"
  exit 0
fi

STAGES=${STAGES:-data,sft,grpo,sft_more,sft_eval}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo}
EXP_DIR=${EXP_DIR:-$CACHE_DIR/learn_exp}
OUT_DIR=${OUT_DIR:-$EXP_DIR/runs}
SFT_STEPS=${SFT_STEPS:-2000}                  # SFT's plateau (sixth lease of docs/results/learning.md; 1000 before)
SFT_MORE_STEPS=${SFT_MORE_STEPS:-1800}       # GRPO's 30 steps of training wall time in SFT steps (sixth lease)
SFT_MORE_SAVE_FREQ=${SFT_MORE_SAVE_FREQ:-500}
SFT_EVAL_STEPS=${SFT_EVAL_STEPS:-}        # e.g. "1500 1000 600": checkpoints to evaluate, in this order
ROUNDS=${ROUNDS:-2}
STEPS=${STEPS:-30}
SAVE_FREQ=${SAVE_FREQ:-500}
SEED=${SEED:-1}
DRY_RUN=${DRY_RUN:-0}
PARALLEL=${PARALLEL:-0}                  # 1: the RL track and the SFT track at once on the one GPU
RL_PARALLEL=${RL_PARALLEL:-0}            # 1: the RL stages side by side (see above)
RL_GPUS=${RL_GPUS:-}                     # with RL_PARALLEL=1: GPUs to deal the RL stages over (e.g. 0,1)
RUN_TAG=${RUN_TAG:-}                     # appended to the GRPO run names (e.g. _attempt), see below
# vLLM's share of the GPU for the evaluations (`mrgrpo eval`); default 0.15, or, with PARALLEL=1, 0.1 above the
# largest GRPO share (GPU_MEM_UTIL, default 0.2 there, plus 0.1 per further RL stage with RL_PARALLEL=1), which it
# must exceed: an engine that starts next to a GRPO run counts the KV cache GRPO frees and takes back every step
# (sleep/wake) as its own use, and with a smaller share it has "No available memory for the cache blocks" (seen
# 2026-12-01: 0.1 next to 0.25 failed, 0.4 next to 0.25 started). All shares running at once must sum to <= 0.9.
EVAL_GPU_MEM=${EVAL_GPU_MEM:-}
PYTHON=${PYTHON:-python3}

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT_DIR"
has() { [[ ",$STAGES," == *",$1,"* ]]; }
for stage in ${STAGES//,/ }; do
  case $stage in
    data|sft|grpo|grpo_attempt|grpo_k0|sft_more|sft_eval) ;;
    *) echo "learnability.sh: unknown stage '$stage' in STAGES=$STAGES (stages: data, sft, grpo, grpo_attempt," \
         "grpo_k0, sft_more, sft_eval)" >&2; exit 2 ;;
  esac
done
stamp() { echo "== $1 $(date +%T)" | tee -a "$OUT_DIR/stages.txt"; }
# The RL seed: data order, the actor's init and the rollout's sampling (verl 0.9.1 has no trainer.seed).
SEEDS=(data.seed="$SEED" actor_rollout_ref.actor.fsdp_config.seed="$SEED" actor_rollout_ref.rollout.seed="$SEED")
# GRPO run names (OUT_DIR/<name>.jsonl, verl's experiment name): grpo_k2, grpo_k0, plus _s<SEED> for another seed and
# RUN_TAG (e.g. RUN_TAG=_attempt with algorithm.adv_estimator=mrgrpo_attempt), so that runs side by side never clash.
TAG=$RUN_TAG
[[ "$SEED" == 1 ]] || TAG="_s$SEED$TAG"

grpo() {  # grpo NAME ROUNDS MODEL [overrides...]
  local name=$1 rounds=$2 model=$3; shift 3
  local env=(VERL_FILE_LOGGER_PATH="$OUT_DIR/$name.jsonl" PROFILE=synth EXP_DIR="$EXP_DIR" MODEL="$model"
             ROUNDS="$rounds" STEPS="$STEPS" LOGGER=console,file EXPERIMENT="$name" PYTHON="$PYTHON")
  if [[ "$DRY_RUN" == 1 ]]; then
    env "${env[@]}" DRY_RUN=1 bash "$SCRIPT_DIR/run_qwen3_apps.sh" "${SEEDS[@]}" "$@" | tail -1
    return
  fi
  local try
  for try in 1 2; do
    stamp "$name start${GPU_MEM_UTIL:+ (vLLM share $GPU_MEM_UTIL)}${CUDA_VISIBLE_DEVICES:+ on GPU $CUDA_VISIBLE_DEVICES}"
    if env "${env[@]}" bash "$SCRIPT_DIR/run_qwen3_apps.sh" "${SEEDS[@]}" "$@" > "$OUT_DIR/$name.log" 2>&1; then
      stamp "$name done"
      return 0
    fi
    if (( try == 2 )) || trained "$name"; then break; fi
    # failed before its first step (e.g. its vLLM engine next to another one): once more, the log kept aside
    mv "$OUT_DIR/$name.log" "$OUT_DIR/$name.failed_start.log"
    stamp "$name failed before its first step (see $OUT_DIR/$name.failed_start.log): starting it again"
    sleep "${RETRY_WAIT_S:-20}"
  done
  stamp "$name FAILED"
  return 1
}

trained() { grep -q "step:1 " "$OUT_DIR/$1.log" 2>/dev/null; }  # verl's console logger printed step 1

evaluate() {  # evaluate MODEL_DIR OUT: greedy pass@1 per split with the training agent loop and reward
  local model=$1 out=$2
  [[ -f "$out/summary.json" ]] && return
  cp -n "$EXP_DIR"/tokenizer/* "$model"/ 2>/dev/null || true
  "$PYTHON" -m mrgrpo eval --model "$model" --data "$EXP_DIR/rl/val.parquet" --out "$out" --n 1 --k 1 \
    --temperature 0 --rounds "$ROUNDS" --max-prompt-length 768 --max-response-length 1024 \
    --reward-kwargs '{"time_s": 1, "wall_s": 2}' --gpu-memory-utilization "$EVAL_GPU_MEM" --enforce-eager \
    --seed "$SEED" --quiet > "$out.log" 2>&1 || { stamp "eval of $model FAILED (see $out.log)"; return 1; }
}

rl_stages() {  # one line per RL stage in STAGES: NAME ROUNDS [extra override]
  if has grpo; then echo "grpo_k$ROUNDS$TAG $ROUNDS"; fi
  if has grpo_attempt; then echo "grpo_k$ROUNDS${TAG}_attempt $ROUNDS algorithm.adv_estimator=mrgrpo_attempt"; fi
  if has grpo_k0; then echo "grpo_k0$TAG 0"; fi
}

rl_track() {
  local rc=0 name rounds extra i=0 prev names=() pids=()
  while read -r name rounds extra; do
    if [[ "$RL_PARALLEL" != 1 || "$DRY_RUN" == 1 ]]; then
      grpo "$name" "$rounds" "$EXP_DIR/sft_model" ${extra:+"$extra"} "$@" < /dev/null || rc=1  # stdin: the list
      continue
    fi
    # side by side: stage i runs on GPU i mod n_gpu and, if one runs there already, starts once the one before it
    # on that GPU has trained a step (or has ended)
    if (( i >= n_gpu )); then
      prev=$(( i - n_gpu ))
      until trained "${names[prev]}" || ! kill -0 "${pids[prev]}" 2>/dev/null; do sleep "${GATE_POLL_S:-10}"; done
    fi
    (  # a subshell of its own, so that its GPU is its own
      if (( ${#GPU_LIST[@]} )); then export CUDA_VISIBLE_DEVICES=${GPU_LIST[i % n_gpu]}; fi
      GPU_MEM_UTIL=${RL_SHARES[i]} grpo "$name" "$rounds" "$EXP_DIR/sft_model" ${extra:+"$extra"} "$@"
    ) < /dev/null &
    names+=("$name") pids+=("$!") i=$((i + 1))
  done < <(rl_stages)
  for pid in ${pids[@]+"${pids[@]}"}; do wait "$pid" || rc=1; done
  return "$rc"
}

# vLLM shares, refused here, before anything runs, when engines side by side could not start. The RL stages side by
# side get GPU_MEM_UTIL, +0.1, ... on each GPU (RL_SHARES); one after the other, GPU_MEM_UTIL each.
if [[ -n "$RL_GPUS" && ! "$RL_GPUS" =~ ^[0-9]+(,[0-9]+)*$ ]]; then
  echo "learnability.sh: RL_GPUS must be GPU numbers separated by commas (e.g. 0,1), got '$RL_GPUS'" >&2
  exit 2
fi
IFS=, read -r -a GPU_LIST <<< "$RL_GPUS"
n_gpu=${#GPU_LIST[@]}
(( n_gpu )) || n_gpu=1
n_rl=$(rl_stages | wc -l)
side=0
if [[ "$RL_PARALLEL" == 1 ]] && (( n_rl > 1 )); then side=1; fi
if (( side )) || [[ "$PARALLEL" == 1 ]]; then export GPU_MEM_UTIL=${GPU_MEM_UTIL:-0.2}; fi
mapfile -t RL_SHARES < <(awk -v g="${GPU_MEM_UTIL:-0.2}" -v n="$n_rl" -v s="$side" -v k="$n_gpu" \
  'BEGIN { for (i = 0; i < (n > 0 ? n : 1); i++) print g + 0.1 * int(i / k) * s }')
top=${RL_SHARES[-1]} sum=${RL_SHARES[-1]}  # the largest share, and what the stages on one GPU take at once
if (( side )); then  # the first GPU has the most stages
  sum=$(printf '%s\n' "${RL_SHARES[@]}" | awk -v k="$n_gpu" '(NR - 1) % k == 0 { a += $1 } END { print a }')
fi
if [[ "$PARALLEL" == 1 ]]; then
  EVAL_GPU_MEM=${EVAL_GPU_MEM:-$(awk -v t="$top" 'BEGIN { print t + 0.1 }')}
  if ! awk -v e="$EVAL_GPU_MEM" -v t="$top" -v s="$sum" 'BEGIN { exit !(e > t && e + s <= 0.9 + 1e-9) }'; then
    echo "learnability.sh: with PARALLEL=1, EVAL_GPU_MEM ($EVAL_GPU_MEM) must be above the largest GRPO share ($top)" \
      "and all shares together ($sum for GRPO) at most 0.9: see EVAL_GPU_MEM in --help" >&2
    exit 2
  fi
elif (( side )) && awk -v s="$sum" 'BEGIN { exit !(s > 0.9 + 1e-9) }'; then
  echo "learnability.sh: RL_PARALLEL=1 with $n_rl RL stages from GPU_MEM_UTIL=$GPU_MEM_UTIL needs $sum of the GPU" \
    "(at most 0.9): lower GPU_MEM_UTIL" >&2
  exit 2
fi
EVAL_GPU_MEM=${EVAL_GPU_MEM:-0.15}
if [[ "$DRY_RUN" == 1 ]]; then  # grpo() prints each launch instead of running it
  rl_track "$@"
  exit
fi
if has data; then
  stamp "data start"
  "$PYTHON" -m mrgrpo.learn experiment --out "$EXP_DIR" > "$OUT_DIR/data.log" 2>&1 \
    || { stamp "data FAILED (see $OUT_DIR/data.log)"; exit 1; }
  stamp "data done"
fi
if has sft; then
  stamp "sft start"
  EXP_DIR="$EXP_DIR" SFT_STEPS="$SFT_STEPS" SAVE_FREQ="$SAVE_FREQ" SEED="$SEED" PYTHON="$PYTHON" \
    bash "$SCRIPT_DIR/sft_synth.sh" > "$OUT_DIR/sft.log" 2>&1 || { stamp "sft FAILED (see $OUT_DIR/sft.log)"; exit 1; }
  stamp "sft done"
fi
sft_eval_stage() {
  stamp "sft_eval start"
  mkdir -p "$OUT_DIR/sft_eval"
  local steps=$SFT_EVAL_STEPS step ckpt last=$SFT_STEPS failed=0
  if [[ -z "$steps" ]]; then
    if has sft_more; then last=$(( SFT_STEPS + SFT_MORE_STEPS )); fi
    for ckpt in $(ls -d "$EXP_DIR"/sft_ckpt/global_step_*/huggingface 2>/dev/null | sort -Vr); do
      step=$(basename "$(dirname "$ckpt")"); step=${step#global_step_}
      if (( step > last )); then continue; fi
      # sft_more's last checkpoint is the control, evaluated as OUT_DIR/sft_more_eval
      if (( step == SFT_STEPS + SFT_MORE_STEPS )) && has sft_more; then continue; fi
      steps+="$step "
    done
  fi
  for step in $steps; do
    ckpt=$EXP_DIR/sft_ckpt/global_step_$step/huggingface
    if [[ ! -d "$ckpt" ]]; then stamp "sft_eval: no checkpoint $ckpt"; continue; fi
    evaluate "$ckpt" "$OUT_DIR/sft_eval/step_$step" || failed=1
  done
  stamp "sft_eval done"
  return "$failed"
}

sft_more_stage() {  # returns 1 when training failed, 2 when only its evaluation did
  stamp "sft_more start"
  EXP_DIR="$EXP_DIR" SFT_STEPS=$(( SFT_STEPS + SFT_MORE_STEPS )) SAVE_FREQ="$SFT_MORE_SAVE_FREQ" \
    SFT_MODEL="$EXP_DIR/sft_more_model" SEED="$SEED" PYTHON="$PYTHON" bash "$SCRIPT_DIR/sft_synth.sh" \
    > "$OUT_DIR/sft_more.log" 2>&1 || { stamp "sft_more FAILED (see $OUT_DIR/sft_more.log)"; return 1; }
  evaluate_control || return 2
  stamp "sft_more done"
}

evaluate_control() {  # the control's pass@1, and its SFT step (for learning_curves.py's SFT curve)
  evaluate "$EXP_DIR/sft_more_model" "$OUT_DIR/sft_more_eval" || return 1
  echo $(( SFT_STEPS + SFT_MORE_STEPS )) > "$OUT_DIR/sft_more_eval/step"
  echo "$SFT_STEPS" > "$OUT_DIR/sft_more_eval/start"  # where GRPO and the control started
}

rc=0
if [[ "$PARALLEL" == 1 ]]; then
  rl_track "$@" &
  rl_pid=$!
  more_rc=0
  if has sft_more; then sft_more_stage || more_rc=$?; fi
  if has sft_eval; then sft_eval_stage || true; fi  # what fails to start next to GRPO runs again below
  wait "$rl_pid" || rc=1
  if (( more_rc == 2 )); then  # the control trained but its evaluation failed next to GRPO: again, alone
    if evaluate_control; then more_rc=0; stamp "sft_more done"; fi
  fi
  (( more_rc == 0 )) || rc=1
  if has sft_eval; then sft_eval_stage || rc=1; fi
else
  rl_track "$@" || rc=1
  if has sft_more; then sft_more_stage || rc=1; fi
  if has sft_eval; then sft_eval_stage || rc=1; fi
fi
stamp "all done (rc=$rc)"
exit "$rc"
