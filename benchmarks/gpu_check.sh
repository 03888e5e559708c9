#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA GPU and this repository's environment installed
# (docs/getting-started.md, "Installing for a GPU"). From the repository root:
#
#   bash benchmarks/gpu_check.sh [DATA_DIR] [OUT]
#
# 1. the test suite's CUDA-marked tests (tests/test_cuda.py), which skip on a machine without a GPU;
# 2. every family trained for a few steps on the GPU (float32 and bf16 autocast) and on the CPU, and EntityNLM's
#    settled SMC at 1,000 and 10,000 particles on both (and, with DATA_DIR, a 128K-token book at 1,000 on the
#    GPU), by benchmarks/gpu_check.py: a table on stdout and OUT/gpu_check.json (default benchmarks/results/gpu),
#    each figure a ratio against the CPU's in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
DATA_DIR="${1:-${ENTITYLM_DATA:-}}"
OUT="${2:-benchmarks/results/gpu}"
"$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: the GPU check needs one')"
"$PYTHON" -m pytest -n 0 -q -m cuda tests/test_cuda.py  # -n 0: one process (addopts holds -n auto)
# with the corpora, also LitBank's test split joined to a 128K-token book at 1,000 particles on the GPU
"$PYTHON" benchmarks/gpu_check.py --devices cpu cuda ${DATA_DIR:+--data-dir "$DATA_DIR" --book-tokens 128000} \
    --out "$OUT"
