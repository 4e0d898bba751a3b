#!/usr/bin/env bash
# Prepare APPS+ with teacher plans, then train with them in the prompt (PLAN_SOURCE=teacher).
#   APPS_PLUS=/path/to/apps_plus.jsonl bash examples/prepare_with_plans.sh
# Plans come from qwen3-max through DashScope's OpenAI-compatible Batch API (key in $DASHSCOPE_API_KEY).
# The command is resumable: run it again after an interruption; a submitted batch is polled, never resubmitted.
set -euo pipefail
APPS_PLUS=${APPS_PLUS:?set APPS_PLUS to the APPS+ file (JSONL or JSON array)}
OUT=${OUT:-data/apps_plus_qwen3max}
PLANS=${PLANS:-batch}        # batch | sync | vllm | none
MODEL=${MODEL:-qwen3-max}
mrgrpo data prepare --input "$APPS_PLUS" --out "$OUT" --plans "$PLANS" --model "$MODEL" "$@"
if [[ "$PLANS" == none ]]; then  # no teacher plans in the prompts: the policy plans itself
  echo "next: DATA_DIR=$OUT PLAN_SOURCE=self bash recipe/mrgrpo/run_qwen3_apps.sh"
else
  echo "next: DATA_DIR=$OUT PLAN_SOURCE=teacher bash recipe/mrgrpo/run_qwen3_apps.sh"
fi
