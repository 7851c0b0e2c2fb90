#!/usr/bin/env bash
# bench/gpu_run.sh — one call on the GPU machine: environment check, the GPU tests, the GEMM and
# attention benchmarks (with the PyTorch SDPA peer), the end-to-end training benchmark (with the
# PyTorch peer bench/peers/gpt2_torch.py) and the four-arm comparison on the default corpus.
# Binaries are built on the development machine (nvcc, -arch sm_90a) and carried with their
# non-system shared libraries:
#   tools: bench/pack_gpu_carry.sh builds .cuda-carry/{bin,lib}; this script runs from the repo root.
# Usage: bench/gpu_run.sh [tests] [gemm] [quantize] [ops] [attention] [train] [bench-train] [compare]
#   (default: tests gemm quantize attention train); logs in $OUT (at most 8 files come back).
#   bench-train: `octet bench train --json` (OCTET_BENCH_TRAIN_ARGS adds options, e.g. "--no-peer" to
#     skip the PyTorch peer) -> bench-train.jsonl; then --profile of GPT-2-small -> bench-train-profile.jsonl
#   compare: results/gpt2-small-compare.toml on data/linux-docs (carried as .cuda-carry/linux-docs.tar.xz
#     with its tokenizer cache, OCTET_CARRY_CACHE in pack_gpu_carry.sh); OCTET_COMPARE_ARGS adds
#     options (e.g. "--set train.steps=300"); summary, metrics and log -> compare.tgz. Its time
#     limit is OCTET_COMPARE_TIMEOUT seconds, or what is left until OCTET_DEADLINE seconds after
#     this script started.
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
    ops) timeout 120 "$BIN/octet" bench ops --json > "$OUT/ops.jsonl" 2> "$OUT/ops.err"
          echo "ops rc=$?"; tail -5 "$OUT/ops.err"; python3 bench/summarize.py "$OUT/ops.jsonl" ;;
    attention) timeout 300 "$BIN/octet" bench attention --json > "$OUT/attention.jsonl" 2> "$OUT/attention.err"
          echo "attention rc=$?"; tail -5 "$OUT/attention.err"; python3 bench/summarize.py "$OUT/attention.jsonl" ;;
    train) for arm in bf16 fp8-linear fp8-stale fp8-matched; do
             timeout 120 "$BIN/octet" train --config configs/tiny.toml --device cuda --arm $arm \
               --set data.path=docs --set train.steps=30 --out "/tmp/octet-train-$arm" > "$OUT/train-$arm.log" 2>&1
             echo "train $arm rc=$?"; grep -E "^step +(1|30)/|^eval|^done|rror" "$OUT/train-$arm.log"
           done ;;
    bench-train)
          # shellcheck disable=SC2086
          timeout 420 "$BIN/octet" bench train --json ${OCTET_BENCH_TRAIN_ARGS:-} > "$OUT/bench-train.jsonl" 2> "$OUT/bench-train.err"
          echo "bench-train rc=$?"; tail -5 "$OUT/bench-train.err"; python3 bench/summarize.py "$OUT/bench-train.jsonl"
          # where the time goes: every backend op timed by class, GPT-2-small, bf16 and fp8-matched
          timeout 240 "$BIN/octet" bench train --json --profile --models gpt2-small --arms bf16,fp8-matched \
            --warmup 2 --steps 3 > "$OUT/bench-train-profile.jsonl" 2>> "$OUT/bench-train.err"
          echo "bench-train --profile rc=$?"
          python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("bench") == "train-profile" and r["share_of_ops"] > 0.02:
        print(f"{r["arm"]:12} {r["op"]:34} {r["ms_per_step"]:9.2f} ms/step {100 * r["share_of_ops"]:5.1f}%")' "$OUT/bench-train-profile.jsonl" ;;
    compare)
          mkdir -p data && tar -xJf .cuda-carry/linux-docs.tar.xz -C data
          rm -rf /tmp/octet-compare
          # shellcheck disable=SC2086
          limit=${OCTET_COMPARE_TIMEOUT:-540}
          [ -n "${OCTET_DEADLINE:-}" ] && limit=$(( OCTET_DEADLINE - SECONDS ))
          echo "compare: time limit ${limit} s"
          timeout "$limit" "$BIN/octet" compare --config results/gpt2-small-compare.toml \
            --set data.cache_dir=.cuda-carry/cache ${OCTET_COMPARE_ARGS:-} --out /tmp/octet-compare > "$OUT/compare.log" 2>&1
          echo "compare rc=$? (a gnuplot error at the end is expected where gnuplot is missing)"
          grep -E "^corpus|^=== arm|^step +[0-9]+/|^eval|rror" "$OUT/compare.log" | grep -vE "^step +[0-9]*[1-9]/" | tail -60
          (cd /tmp/octet-compare && tar -czf "$OUT/compare.tgz" summary.json ./*/metrics.jsonl ./*/config.toml 2>/dev/null)
          cat /tmp/octet-compare/summary.json ;;
  esac
done
