#!/usr/bin/env bash
# GPU checks for cortex_tvm, to run on a machine with an NVIDIA GPU (not runnable without one).
# Creates a venv, installs the project with its test extras (and torch if it installs), runs
# tests/gpu (codegen, CPU emulation, CUDA numbers vs numpy), then a small benchmark table.
# Total budget: under 8 minutes.   Usage: bash tests/gpu/run.sh [venv dir]
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-${TMPDIR:-/tmp}/cortex_tvm_gpu_venv}"
PY="${PYTHON:-python3}"
start=$(date +%s)
step() { echo; echo "=== $* ($(( $(date +%s) - start )) s)"; }

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi not found"
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc not found: PTX checks will skip"

step "venv $VENV"
if [ ! -x "$VENV/bin/python" ]; then timeout 120 "$PY" -m venv "$VENV"; fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
timeout 60 python -m pip install -q --upgrade pip || true
timeout 240 python -m pip install -q -e '.[test]'
# torch only for the benchmark's comparison rows; the tests do not need it
timeout 180 python -m pip install -q torch || echo "torch not installed: benchmark without PyTorch rows"
# TVM JIT-compiles CUDA at load time: nvrtc needs cuda-bindings; otherwise use nvcc
if ! python -c "import cuda.bindings" 2>/dev/null; then
    timeout 120 python -m pip install -q cuda-bindings || export TVM_CUDA_COMPILE_MODE=nvcc
fi
python -c "import tvm; d = tvm.cuda(0); print('tvm.cuda(0).exist =', d.exist, d.device_name if d.exist else '')"

step "tests/gpu"
export TVM_NUM_THREADS="${TVM_NUM_THREADS:-4}"
timeout 240 python -m pytest -q -rs tests/gpu

step "benchmark"
timeout 150 python tests/gpu/bench_gpu.py --hidden 256 --batches 1,10 --repeat 5 --num-batches 10

step "done"
