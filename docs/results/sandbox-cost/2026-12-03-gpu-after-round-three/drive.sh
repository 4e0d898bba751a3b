#!/bin/bash
# One GPU-machine call, detached: the sandbox's cost (per-test overhead, against verl's prime_code, whole problems
# per second per vCPU) on the idle machine first, then both verl trainers with a Qwen3-0.6B-architecture model
# (checkpoint, resume, the mrgrpo dashboard, injected INFRA excluded).
cd /tmp/repo
R=/tmp/res; mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false
stage() { echo "$1 $(date +%s) $(date +%T)" >> $R/stages.tsv; }
stage start; { nproc; uname -r; python3 --version; nvidia-smi -L; git log -1 --format=%H 2>/dev/null; cat COMMIT; } > $R/machine.txt 2>&1
stage overhead
python3 benchmarks/bench_reward.py --workers 2 --problems 10 --skip-verl --overhead-tests 2000 --overhead-rounds 5 > $R/overhead.txt 2>&1
stage model
python3 benchmarks/random_qwen3.py --arch 0.6B --tokenizer /tmp/tok --out /tmp/q06 > $R/model.log 2>&1
stage trainers
( while sleep 5; do nvidia-smi --query-gpu=timestamp,memory.used --format=csv,noheader >> $R/gpu_memory.csv; done ) &
MEM=$!
MODEL=/tmp/q06 STEPS=2 KEEP_CKPTS=1 CLEAN=1 OUT=$R/trainers bash benchmarks/gpu_trainers_check.sh > $R/trainers.txt 2>&1
echo "rc=$?" >> $R/trainers.txt
kill $MEM
stage vs_prime_code
python3 benchmarks/bench_reward.py --workers 16 --processes 8 --max-program-cpu 0.5 --repeat 3 --overhead-tests 100 --overhead-rounds 1 > $R/vs_prime_code_16.txt 2>&1
stage tasks
python3 benchmarks/bench_reward.py --workers 16 --processes 8 --tasks --repeat 2 --overhead-tests 100 --overhead-rounds 1 > $R/tasks_16.txt 2>&1
stage done
