#!/usr/bin/env bash
# bench/gpu_run.sh — one call on the GPU machine: environment check, the GPU tests, the GEMM and
# attention benchmarks (with the PyTorch SDPA peer). Binaries are built on the development machine
# (nvcc, -arch sm_90a) and carried with their non-system shared libraries:
#   tools: bench/pack_gpu_carry.sh builds .cuda-carry/{bin,lib}; this script runs from the repo root.
# Usage: bench/gpu_run.sh [tests] [gemm] [quantize] [attention] [train]  (default: all); logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.cuda-carry/lib:${LD_LIBRARY_PATH:-}
BIN=$PWD/.cuda-carry/bin
steps=${*:-tests gemm quantize attention train}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libcudart.so* 2>&1
  ldd "$BIN/octet" | grep -E "not found|cublas|cudart" ; "$BIN/octet" version
} 2>&1 | tee "$OUT/env.log"
for s in $steps; do
  case $s in
    tests) timeout 300 "$BIN/test_cuda" --gtest_color=no 2>&1 | tee "$OUT/test_cuda.log" | grep -vE "^\[ +(RUN|OK) " ;;
    gemm) timeout 300 "$BIN/octet" bench gemm --json > "$OUT/gemm.jsonl" 2> "$OUT/gemm.err"
          echo "gemm rc=$?"; tail -5 "$OUT/gemm.err"; python3 bench/summarize.py "$OUT/gemm.jsonl" ;;
    quantize) timeout 120 "$BIN/octet" bench quantize --json > "$OUT/quantize.jsonl" 2> "$OUT/quantize.err"
          echo "quantize rc=$?"; tail -5 "$OUT/quantize.err"; python3 bench/summarize.py "$OUT/quantize.jsonl" ;;
    attention) timeout 300 "$BIN/octet" bench attention --json > "$OUT/attention.jsonl" 2> "$OUT/attention.err"
          echo "attention rc=$?"; tail -5 "$OUT/attention.err"; python3 bench/summarize.py "$OUT/attention.jsonl" ;;
    train) for arm in bf16 fp8-linear fp8-stale fp8-matched; do
             timeout 120 "$BIN/octet" train --config configs/tiny.toml --device cuda --arm $arm \
               --set data.path=docs --set train.steps=30 --out "/tmp/octet-train-$arm" > "$OUT/train-$arm.log" 2>&1
             echo "train $arm rc=$?"; grep -E "^step +(1|30)/|^eval|^done|rror" "$OUT/train-$arm.log"
           done ;;
  esac
done
