#!/usr/bin/env bash
# SFT warm start of the learnability check (PROFILE=synth): a random 28M Qwen3 trained with verl's own SFT trainer
# on transcripts in the agent loop's exact token format (mrgrpo.learn.sft_dataset.TranscriptSFTDataset: the loss
# mask is the loop's response mask, so only the model's own turns train).
#
# usage: [VAR=value ...] bash recipe/mrgrpo/sft_synth.sh [extra hydra overrides for verl.trainer.sft_trainer ...]
# DRY_RUN=1 prints the launch command (its last line) and runs nothing.
# Builds what is missing under EXP_DIR (data: python -m mrgrpo.learn experiment; model_init: mrgrpo.learn model),
# resumes an interrupted run (trainer.resume_mode=auto), and copies the last HF checkpoint to SFT_MODEL.
set -euo pipefail
if [[ "${1:-}" == --help || "${1:-}" == -h ]]; then  # the comment above, then the knobs with their defaults
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
  echo
  echo "knobs (environment variables; NAME=\${NAME:-default}):"
  sed -n '/^CACHE_DIR=/,/^PYTHON=/p' "${BASH_SOURCE[0]}"
  exit 0
fi

CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mrgrpo}
EXP_DIR=${EXP_DIR:-$CACHE_DIR/learn_exp}
SFT_MODEL=${SFT_MODEL:-$EXP_DIR/sft_model}    # where the final HF model goes (the GRPO run's MODEL)
CKPT_DIR=${CKPT_DIR:-$EXP_DIR/sft_ckpt}       # verl's checkpoints (global_step_N/{huggingface,...})
SFT_STEPS=${SFT_STEPS:-2000}                 # SFT's plateau on the synthetic task (docs/results/learning.md, sixth lease)
SFT_BATCH=${SFT_BATCH:-64}
SFT_LR=${SFT_LR:-1e-3}                        # from-scratch small model (verl's SFT default is 1e-3 too)
SAVE_FREQ=${SAVE_FREQ:-500}                   # HF checkpoints along the way: evaluate them to see the plateau
NPROC=${NPROC:-1}
SEED=${SEED:-1}
DRY_RUN=${DRY_RUN:-0}
PYTHON=${PYTHON:-python3}

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
export TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
export TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-1} HF_DATASETS_OFFLINE=${HF_DATASETS_OFFLINE:-1}
export WANDB_MODE=${WANDB_MODE:-disabled}

if [[ "$DRY_RUN" != 1 && ! -f "$EXP_DIR/sft/sft_train.parquet" ]]; then
  "$PYTHON" -m mrgrpo.learn experiment --out "$EXP_DIR"
fi
if [[ "$DRY_RUN" != 1 && ! -f "$EXP_DIR/model_init/config.json" ]]; then
  "$PYTHON" -m mrgrpo.learn model --tokenizer "$EXP_DIR/tokenizer" --out "$EXP_DIR/model_init" --seed "$SEED"
fi
MAX_LEN=1024  # the longest transcript rounded up to 512 (at least 1024)
if [[ -f "$EXP_DIR/sft/sft_report.json" ]]; then
  MAX_LEN=$("$PYTHON" -c "import json,sys; r=json.load(open(sys.argv[1])); \
print(max(1024, -(-max(s['max_tokens'] for s in r['splits'].values()) // 512) * 512))" "$EXP_DIR/sft/sft_report.json")
fi
# verl 0.9.1's SFT trainer iterates a None val loader when test_freq > 0 and there are no val files: test only with them
VAL="data.val_files=null" TEST_FREQ=-1
[[ -f "$EXP_DIR/sft/sft_val.parquet" ]] && VAL="data.val_files=$EXP_DIR/sft/sft_val.parquet" TEST_FREQ=$SAVE_FREQ

ARGS=(
  torchrun --standalone --nnodes=1 --nproc_per_node="$NPROC" -m verl.trainer.sft_trainer
  data.train_files="$EXP_DIR/sft/sft_train.parquet" "$VAL"
  data.custom_cls.path=pkg://mrgrpo.learn.sft_dataset data.custom_cls.name=TranscriptSFTDataset
  data.train_batch_size="$SFT_BATCH" data.micro_batch_size_per_gpu=16 data.max_length="$MAX_LEN"
  data.max_token_len_per_gpu=$(( MAX_LEN > 32768 ? MAX_LEN : 32768 )) data.num_workers=2
  model.path="$EXP_DIR/model_init" model.use_remove_padding=False
  +model.override_config.attn_implementation=sdpa model.enable_gradient_checkpointing=False
  # Without flash-attn verl computes log-probs one token at a time (logprobs_from_logits_v2 loops over rows,
  # 5.4 s per step of 64); the fused kernels' torch backend does it in chunks of 512 tokens (0.28 s per step).
  model.use_fused_kernels=True
  engine.use_torch_compile=False optim.lr="$SFT_LR"
  trainer.total_training_steps="$SFT_STEPS" trainer.total_epochs=1000 trainer.save_freq="$SAVE_FREQ"
  trainer.test_freq="$TEST_FREQ" trainer.seed="$SEED" trainer.logger='[console]'
  trainer.default_local_dir="$CKPT_DIR" trainer.resume_mode=auto trainer.n_gpus_per_node="$NPROC"
  checkpoint.save_contents='[model,optimizer,extra,hf_model]' "$@"
)
if [[ "$DRY_RUN" == 1 ]]; then
  printf '%q ' "${ARGS[@]}"
  echo
  exit 0
fi
"${ARGS[@]}"

LAST=$(ls -d "$CKPT_DIR"/global_step_*/huggingface | sort -V | tail -1)
rm -rf "$SFT_MODEL" && mkdir -p "$SFT_MODEL"
cp -r "$LAST"/. "$SFT_MODEL"/
cp -n "$EXP_DIR"/tokenizer/* "$SFT_MODEL"/ 2>/dev/null || true
echo "sft_synth.sh: wrote the SFT warm start ($LAST) to $SFT_MODEL"
