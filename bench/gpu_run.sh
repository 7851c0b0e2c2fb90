#!/usr/bin/env bash
# bench/gpu_run.sh — one call on the GPU machine: environment check, the GPU tests, the GEMM and
# attention benchmarks (with the PyTorch SDPA peer). Binaries are built on the development machine
# (nvcc, -arch sm_90a) and carried with their non-system shared libraries:
#   tools: bench/pack_gpu_carry.sh builds .cuda-carry/{bin,lib}; this script runs from the repo root.
# Usage: bench/gpu_run.sh [tests] [gemm] [attention]   (default: all three); logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.cuda-carry/lib:${LD_LIBRARY_PATH:-}
BIN=$PWD/.cuda-carry/bin
steps=${*:-tests gemm attention}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libcudart.so* 2>&1
  ldd "$BIN/octet" | grep -E "not found|cublas|cudart" ; "$BIN/octet" version
} 2>&1 | tee "$OUT/env.log"
for s in $steps; do
  case $s in
    tests) timeout 300 "$BIN/test_cuda" --gtest_color=no 2>&1 | tee "$OUT/test_cuda.log" | grep -vE "^\[ +(RUN|OK) " ;;
    gemm) timeout 240 "$BIN/octet" bench gemm --json > "$OUT/gemm.jsonl" 2> "$OUT/gemm.err";
          echo "gemm rc=$?"; tail -3 "$OUT/gemm.err"; grep summary "$OUT/gemm.jsonl" | python3 -c '
import json,sys
for l in sys.stdin:
  j=json.loads(l); print(f"d_model {j[\"d_model\"]:5} {j[\"mode\"]:11} total {j[\"total_ms\"]:8.3f} ms  bf16 {j[\"bf16_total_ms\"]:8.3f} ms  speedup {j[\"speedup_vs_bf16\"]:.2f}x")' ;;
    attention) timeout 240 "$BIN/octet" bench attention --json > "$OUT/attention.jsonl" 2> "$OUT/attention.err";
          echo "attention rc=$?"; tail -3 "$OUT/attention.err"; python3 -c '
import json,sys
for l in open(sys.argv[1]):
  j=json.loads(l)
  if "error" in j: print(j["impl"], j["seq"], "error", j["error"]); continue
  print(f"{j[\"impl\"]:24} S={j[\"seq\"]:5} fwd {j[\"fwd_ms\"]:8.3f} ms {j[\"fwd_tflops\"]:6.1f} TF/s  bwd {j[\"bwd_ms\"]:8.3f} ms {j[\"bwd_tflops\"]:6.1f} TF/s")' "$OUT/attention.jsonl" ;;
  esac
done
