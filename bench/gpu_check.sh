#!/usr/bin/env bash
# bench/gpu_check.sh — one call on the GPU machine after an interface change: the GPU tests, the
# attention and training benchmarks of this build side by side with a previous build ("base"), and
# stressed single-arm runs whose matched row residual must stay <= 1e-6 at every evaluation.
# Carry: .cuda-carry/carry.tar.xz (bin/{octet,octet-base,test_cuda}, lib/: bench/pack_gpu_carry.sh,
# then `tar -cJf` of its bin and lib), .cuda-carry/linux-docs.tar.xz and .cuda-carry/cache
# (OCTET_CARRY_CACHE). Usage: bench/gpu_check.sh [tests] [bench] [attn] [stress]; logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT" /tmp/oc && tar -xJf .cuda-carry/carry.tar.xz -C /tmp/oc
export LD_LIBRARY_PATH=/tmp/oc/lib:${LD_LIBRARY_PATH:-}
B=/tmp/oc/bin
for s in ${*:-tests bench stress}; do
  case $s in
    tests) timeout 240 $B/test_cuda --gtest_color=no > "$OUT/test_cuda.log" 2>&1; echo "test_cuda rc=$?"
           grep -E "FAILED|^\[  PASSED|tests ran" "$OUT/test_cuda.log" ;;
    bench) for v in base new; do
             bin=$B/octet; [ $v = base ] && bin=$B/octet-base
             timeout 100 $bin bench attention --json --peer '' | sed "s/^{/{\"build\":\"$v\",/" >> "$OUT/attention.jsonl"
             timeout 150 $bin bench train --json --no-peer --models gpt2-small 350m \
               --arms bf16 fp8-linear fp8-stale fp8-matched | sed "s/^{/{\"build\":\"$v\",/" >> "$OUT/train.jsonl"
           done
           python3 - "$OUT/attention.jsonl" "$OUT/train.jsonl" <<'PY'
import json, sys
ms = lambda x: f"{x:7.2f}" if isinstance(x, (int, float)) else "    n/a"  # null: not measured
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"attention {r['build']:4} {r['impl']:29} {r.get('input_dtype', '-'):4} {r.get('case', r['seq'])} "
          f"fwd {ms(r['fwd_ms'])} ms bwd {ms(r['bwd_ms'])} ms")
for line in open(sys.argv[2]):
    r = json.loads(line)
    print(f"train {r['build']:4} {r['model']:10} {r['arm']:12} {r['tokens_per_s']:9.0f} tokens/s")
PY
           ;;
    attn)  for c in false true; do  # this build's attention rows (fused forward too) and the SDPA peer
             timeout 200 $B/octet bench attention --json --causal $c --seq 1024,4096,8192 >> "$OUT/attention-new.jsonl"
           done
           python3 - "$OUT/attention-new.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    f = lambda k: f"{r[k]:8.3f}" if isinstance(r.get(k), (int, float)) else "     n/a"
    print(f"attention {r.get('impl','?'):18} causal {str(r.get('causal')):5} seq {r.get('seq'):5} fwd_ms {f('fwd_ms')} bwd_ms {f('bwd_ms')} fwd_tflops {f('fwd_tflops')} bwd_tflops {f('bwd_tflops')}")
PY
           ;;
    stress) mkdir -p data && tar -xJf .cuda-carry/linux-docs.tar.xz -C data
           for c in "rope 6e-3" "nope 3e-3"; do
             set -- $c; run=/tmp/stress-$1
             timeout 200 $B/octet train --config results/gpt2-small-compare.toml --arm fp8-matched \
               --set data.cache_dir=.cuda-carry/cache --set train.steps=300 --set train.lr=$2 \
               --set model.positions=$1 --out $run > "$OUT/stress-$1.log" 2>&1; echo "stress $1 lr $2 rc=$?"
             cp $run/metrics.jsonl "$OUT/stress-$1.jsonl"
             python3 - "$run/metrics.jsonl" <<'PY'
import json, sys
worst = 0.0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "val_loss" not in r: continue
    m = r["row_residual_max"]
    worst = max(worst, m)
    print(f"  eval step {r['step']:4d} val {r['val_loss']:.4f} matched row residual max {m:.3e}")
print(f"  worst over evaluations: {worst:.3e} ({'<=' if worst <= 1e-6 else '>'} 1e-6)")
PY
           done ;;
  esac
done
