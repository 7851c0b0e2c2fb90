#!/usr/bin/env bash
# bench/gpu_cudnn.sh — one call on the GPU machine for the cuDNN SDPA work (docs/attention.md §"cuDNN
# SDPA"), in about 5 minutes: the GPU tests of the BF16 routing and the attention (CudnnSdpa.*,
# CudaAttention.*, Flash*), the attention benchmark rows (octet's, octet-bf16-cudnn, and the cuDNN
# BF16/FP8 peers; B4 H16, D128 causal and not at S 1024..16384, D64 causal at S 4096), and
# `octet attention-check --device cuda` for the fused FP8 kernels (form flash), the unfused path
# (form whole) and cuDNN's BF16 SDPA against the FP64 oracle (B1 H8 T1024 D128 causal, GQA 8/2).
# Carry: .cuda-carry from bench/pack_gpu_carry.sh (bin/{octet,test_cuda}, lib/), as a directory or
# packed as .cuda-carry/carry.tar.xz. Usage: bench/gpu_cudnn.sh [tests] [bench] [check]; logs and
# JSON lines in $OUT (default /tmp/octet-gpu).
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT"
if [ -f .cuda-carry/carry.tar.xz ]; then
  mkdir -p /tmp/oc && tar -xJf .cuda-carry/carry.tar.xz -C /tmp/oc && C=/tmp/oc
else
  C=$PWD/.cuda-carry
fi
# cuDNN is not carried (pack_gpu_carry.sh): the image's, wherever the CUDA toolkit keeps it.
export LD_LIBRARY_PATH=$C/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
B=$C/bin
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
ldconfig -p | grep -m1 libcudnn.so.9 || ls /usr/local/cuda/lib*/libcudnn.so.9 2>/dev/null || echo "libcudnn.so.9 not found"
for s in ${*:-tests bench check}; do
  case $s in
    tests) timeout 200 $B/test_cuda --gtest_color=no --gtest_filter='CudnnSdpa.*:CudaAttention.*:Flash*' \
             > "$OUT/cudnn_tests.log" 2>&1; echo "test_cuda rc=$?"
           grep -E "^\[ +(OK|FAILED|PASSED) |cudnn-sdpa\]|Failure|error|expected|Which is" "$OUT/cudnn_tests.log" | head -80 ;;
    bench) : > "$OUT/attention-cudnn.jsonl"
           for c in true false; do
             timeout 150 $B/octet bench attention --json --peer '' --reps 5 --warmup 1 --causal $c \
               >> "$OUT/attention-cudnn.jsonl" 2>> "$OUT/bench.err"
           done
           timeout 60 $B/octet bench attention --json --peer '' --reps 5 --warmup 1 --head-dim 64 --seq 4096 \
             >> "$OUT/attention-cudnn.jsonl" 2>> "$OUT/bench.err"
           cat "$OUT/bench.err"
           python3 - "$OUT/attention-cudnn.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    f = lambda k: f"{r[k]:8.3f}" if isinstance(r.get(k), (int, float)) else "     n/a"
    print(f"{r['impl']:22} D{r['head_dim']:<3} causal {str(r['causal']):5} S {r['seq']:5} fwd_ms {f('fwd_ms')} "
          f"bwd_ms {f('bwd_ms')} fwd_tflops {f('fwd_tflops')} bwd_tflops {f('bwd_tflops')} cudnn {r.get('cudnn')}")
PY
           ;;
    check) : > "$OUT/attention-check-cuda.jsonl"
           for pf in "fp8 matched tiled" "fp8 stale tiled" "fp8 matched whole" "fp8 stale whole" \
                     "bf16 stale tiled" "bf16 stale whole"; do
             set -- $pf
             timeout 60 $B/octet attention-check --device cuda --json --batch 1 --heads 8 --kv-heads 2 \
               --seq 1024 --dim 128 --causal --precision $1 --delta $2 --form $3 \
               >> "$OUT/attention-check-cuda.jsonl" || echo "attention-check $pf failed"
           done
           python3 - "$OUT/attention-check-cuda.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"{r['device']} {r['precision']:4} {r['delta']:7} {r['form']:5} O {r['o_rel_err']:.2e} dQ {r['dq_rel_err']:.2e} "
          f"dK {r['dk_rel_err']:.2e} dV {r['dv_rel_err']:.2e} lse {r['lse_max_abs_err']:.1e} "
          f"residual max {r['row_residual_max']:.1e} mean {r['row_residual_mean']:.1e}")
PY
           ;;
  esac
done
