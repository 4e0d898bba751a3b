#!/bin/bash
# One GPU-machine call, detached: the split sandbox's per-test overhead on the idle machine, then verl 0.9.1's
# RayPPOTrainer (use_v1=false) and TrainerV1 (use_v1=true) with a Qwen3-0.6B-architecture model: checkpoint,
# resume, the mrgrpo dashboard, injected INFRA excluded.
cd /tmp/repo
R=/tmp/res; mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
stage() { echo "$1 $(date +%s) $(date +%T)" >> $R/stages.tsv; }
stage start; { nproc; uname -r; python3 --version; nvidia-smi -L; cat COMMIT; } > $R/machine.txt 2>&1
stage model
python3 benchmarks/random_qwen3.py --arch 0.6B --tokenizer /tmp/tok --out /tmp/q06 > $R/model.log 2>&1
( while sleep 5; do nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader >> $R/gpu_memory.csv; done ) &
MEM=$!
stage trainers_false
mkdir -p $R/trainers && cp /tmp/ref/*_v1_true.log $R/trainers/
MODEL=/tmp/q06 STEPS=1 KEEP_CKPTS=1 CLEAN=1 TRAINERS=false OUT=$R/trainers bash benchmarks/gpu_trainers_check.sh > $R/trainers_false.txt 2>&1
echo "rc=$?" >> $R/trainers_false.txt
stage trainers_true
MODEL=/tmp/q06 STEPS=1 KEEP_CKPTS=1 CLEAN=1 TRAINERS=true OUT=$R/trainers bash benchmarks/gpu_trainers_check.sh > $R/trainers_both.txt 2>&1
echo "rc=$?" >> $R/trainers_both.txt
kill $MEM
stage done
