#!/bin/bash
# What ran on the lent H200 for docs/results/gpu-e2e.md (after shared/gpu's install_site.sh put verl 0.9.1,
# vLLM 0.24.0 and Ray 2.60.0 under /tmp/site). Started detached (setsid) from the repository root;
# logs in /tmp/e2e. Four launches, one after the other:
#   recipe1  full recipe (self plan, 2 feedback rounds, sandbox reward), 5 steps, checkpoint at step 5
#   recipe2  the same command with STEPS=7: resumes from the step-5 checkpoint, runs steps 6-7
#   none     the recipe with PLAN_SOURCE=none ROUNDS=0 (single turn), 5 steps
#   stock    verl's own GRPO (python -m verl.trainer.main_ppo, ppo_trainer defaults, its own reward path for
#            data_source "apps"), same model, data, batch, lengths, group size and steps
set -u
L=/tmp/e2e; mkdir -p $L; : > $L/progress
export PYTHONPATH=/tmp/site:$PWD RAY_AUTH_MODE=disabled HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
  WANDB_MODE=disabled TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 VLLM_USE_FLASHINFER_SAMPLER=0 RAY_DEDUP_LOGS=0 \
  RAY_USAGE_STATS_ENABLED=0
# The checkout is imported through PYTHONPATH, not pip-installed: give it a dist-info so that verl finds
# mrgrpo's `verl.plugins` entry point exactly as it would after `pip install mrgrpo`.
D=/tmp/site/mrgrpo-0.1.0.dist-info; mkdir -p $D
printf 'Metadata-Version: 2.1\nName: mrgrpo\nVersion: 0.1.0\n' > $D/METADATA
printf '[verl.plugins]\nmrgrpo = mrgrpo.plugin\n' > $D/entry_points.txt
step() { echo "== $1 $(date +%T)" >> $L/progress; }
step prep
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import sys,torch,transformers,vllm,verl,ray; print(sys.version.split()[0], torch.__version__, transformers.__version__, vllm.__version__, verl.__version__, ray.__version__)"
  python3 -m mrgrpo.testing.tiny /tmp/tiny_qwen3
  python3 -m mrgrpo score --input mrgrpo/assets/apps_plus_sample.jsonl --all-tests --out /tmp/e2e/canonical.jsonl | tail -15
  python3 -m mrgrpo data prepare --out /tmp/data --plans none
  # fallback: the same command's output made on the CPU machine, carried along
  [ -f /tmp/data/train.parquet ] || { echo "prepare failed here: using the carried .devkit/data"; cp -r .devkit/data /tmp/data; }
  python3 - <<'PY'
import pandas as pd
for split in ("train", "val"):
    df = pd.read_parquet(f"/tmp/data/{split}.parquet")
    df["data_source"] = "apps"   # verl's default_compute_score routes "apps" to prime_code
    df.drop(columns=["agent_name"]).to_parquet(f"/tmp/data/stock_{split}.parquet")
PY
} > $L/prep.log 2>&1
step "prep rc=$?"
COMMON="PROFILE=tiny MODEL=/tmp/tiny_qwen3 DATA_DIR=/tmp/data"
# A random tiny model writes no code (every verdict is NO_CODE, correctness 0): a small length term makes the
# rewards differ within a group so that non-zero advantages reach the update; the plan turn is capped so the
# self-plan trajectories reach the code and feedback turns.
TINY_OVR="+reward.custom_reward_function.reward_kwargs.length_weight=0.1 +reward.custom_reward_function.reward_kwargs.length_target_chars=400 mrgrpo.agent_loop.plan_max_tokens=96"
run() { local name=$1; shift; step "$name start"; timeout ${RUN_TIMEOUT:-560} "$@" > $L/$name.log 2>&1; step "$name rc=$?"; }
run recipe1 env $COMMON STEPS=5 bash recipe/mrgrpo/run_qwen3_apps.sh $TINY_OVR \
  trainer.save_freq=5 trainer.default_local_dir=/tmp/ckpt_recipe trainer.resume_mode=auto
run recipe2 env $COMMON STEPS=7 bash recipe/mrgrpo/run_qwen3_apps.sh $TINY_OVR \
  trainer.save_freq=5 trainer.default_local_dir=/tmp/ckpt_recipe trainer.resume_mode=auto
run none env $COMMON STEPS=5 PLAN_SOURCE=none ROUNDS=0 bash recipe/mrgrpo/run_qwen3_apps.sh $TINY_OVR \
  trainer.save_freq=-1 trainer.default_local_dir=/tmp/ckpt_none
# verl stock: the GPU kit's proven launch (ppo_trainer defaults + required settings), same numbers as PROFILE=tiny
# (verl_run.sh takes a directory holding the model as qwen3/; this launch was re-run in a separate call after
# the first try passed the model directory itself: stock.log is that second run)
mkdir -p /tmp/stockm && ln -sfn /tmp/tiny_qwen3 /tmp/stockm/qwen3
run stock env VERL_CKPT_DIR=/tmp/ckpt_stock bash .devkit/scripts/verl_run.sh /tmp/stockm \
  data.train_files=/tmp/data/stock_train.parquet data.val_files=/tmp/data/stock_val.parquet \
  data.train_batch_size=4 data.max_prompt_length=4096 data.max_response_length=512 \
  trainer.total_training_steps=5 trainer.experiment_name=stock
step ALLDONE
