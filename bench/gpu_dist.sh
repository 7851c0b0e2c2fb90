#!/usr/bin/env bash
# bench/gpu_dist.sh — data-parallel training on a 2×H200 machine (docs/distributed.md), in one call of
# at most ~6 minutes (default: equal speed comm):
#   equal   the same bf16 config (124M, 30 steps, global batch 8) on 1 GPU and on 2 GPUs (`--nproc 2`,
#           NCCL) with gradient buckets of 0 (one, after the backward), 1 and 25 MiB (reduced while the
#           backward runs): step losses side by side. The 2-GPU runs sum the same two gradients
#           whatever the buckets, so they must agree to the gradient norm's summation order (~1e-6);
#           1 vs 2 GPUs differ by BF16 rounding of differently split GEMMs;
#   speed   tokens/s of 350M (24 layers, d 1024) on 1 GPU and on 2 GPUs with dist.bucket_mb 0 and 25,
#           bf16 and fp8-matched, as JSON lines {"model","arm","gpus","bucket_mb","tokens_per_s"}, and
#           the speed-ups over 1 GPU;
#   comm    `octet bench comm --nproc 2 --json`: NCCL all-reduce / reduce-scatter / all-gather bus
#           bandwidth, 1 MiB..1 GiB (comm.jsonl);
#   fp8ag   (not in the default list) dist.allgather_fp8 (the FP8 weight all-gather): fp8-matched,
#           tensor-current, 124M, 20 steps on 2 GPUs with the option off and on: the step losses and
#           the final weights must be bitwise equal (if off twice is: off_vs_off_differing_steps
#           empty); then 350M, 25 steps, off and on: the mean step
#           time of steps 6-25 of each and their difference (the all-gather time saved per step).
#   kill    (not in the default list) a 2-GPU run whose rank 1 is killed: rank 0 must end non-zero
#           within 60 s, checkpoint intact.
# Carry (bench/pack_gpu_carry.sh with OCTET_CARRY_CACHE, then `tar -cJf .cuda-carry/carry.tar.xz -C
# .cuda-carry bin lib`): .cuda-carry/carry.tar.xz, .cuda-carry/linux-docs.tar.xz, .cuda-carry/cache.
# NCCL comes from the machine's CUDA (pack_gpu_carry.sh does not carry libnccl).
# Usage: bench/gpu_dist.sh [equal] [speed] [comm] [fp8ag] [kill]; logs, dist.jsonl and comm.jsonl in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT" /tmp/oc data && tar -xJf .cuda-carry/carry.tar.xz -C /tmp/oc
tar -xJf .cuda-carry/linux-docs.tar.xz -C data
export LD_LIBRARY_PATH=/tmp/oc/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=/tmp/oc/bin/octet
CFG=results/gpt2-small-compare.toml
COMMON=(--config $CFG --set data.cache_dir=.cuda-carry/cache --set train.eval_every=1000 --set train.log_every=10)
M350=(--set model.n_layer=24 --set model.d_model=1024 --set model.n_head=16 --set model.n_kv_head=16
      --set model.d_ff=2816)
# mean tokens/s of the steps after the first 5 (warm-up), from a run's metrics.jsonl
tps() { python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; t=[x['tokens_per_s'] for x in r if 'tokens_per_s' in x][5:]; print(sum(t)/len(t))" "$1/metrics.jsonl"; }
for s in ${*:-equal speed comm}; do
  case $s in
    equal)
      for v in 1:0 2:0 2:1 2:25; do
        n=${v%%:*}; mb=${v##*:}; np=(); [ $n = 2 ] && np=(--nproc 2)
        run=/tmp/eq-$n-$mb; rm -rf $run
        timeout 80 $B train "${COMMON[@]}" --arm bf16 --set train.steps=30 --set train.batch_size=8 \
          --set dist.bucket_mb=$mb --out $run "${np[@]}" > "$OUT/equal-$n-$mb.log" 2>&1; echo "equal gpus=$n bucket_mb=$mb rc=$?"
      done
      python3 - <<'PY' | tee -a "$OUT/dist.jsonl"
import json
def losses(run): return [json.loads(l)["loss"] for l in open(f"/tmp/{run}/metrics.jsonl") if '"loss"' in l]
def rel(a, b):
    d = [abs(x - y) / x for x, y in zip(a, b) if x and y]
    return max(d) if d else None
one, b0, b1, b25 = (losses(r) for r in ("eq-1-0", "eq-2-0", "eq-2-1", "eq-2-25"))
print(json.dumps({"test": "equal", "arm": "bf16", "steps": len(b0),
                  "max_rel_loss_diff_1gpu_vs_2gpu_bucket0": rel(one, b0),
                  "max_rel_loss_diff_bucket0_vs_1MiB": rel(b0, b1), "max_rel_loss_diff_bucket0_vs_25MiB": rel(b0, b25),
                  "last": {"1gpu": one[-1], "bucket0": b0[-1], "bucket1": b1[-1], "bucket25": b25[-1]}}))
PY
      ;;
    speed)
      for arm in bf16 fp8-matched; do
        for v in 1:0 2:0 2:25; do
          n=${v%%:*}; mb=${v##*:}; np=(); [ $n = 2 ] && np=(--nproc 2)
          run=/tmp/speed-350m-$arm-$n-$mb; rm -rf $run
          timeout 75 $B train "${COMMON[@]}" "${M350[@]}" --arm $arm --set train.steps=25 --set dist.bucket_mb=$mb \
            --set train.batch_size=16 --set train.eval_batches=4 --set train.checkpoint_every=0 --out $run "${np[@]}" \
            > "$OUT/speed-350m-$arm-$n-$mb.log" 2>&1 || echo "speed 350m $arm gpus=$n bucket_mb=$mb failed rc=$?"
          [ -f $run/metrics.jsonl ] && echo "{\"test\":\"speed\",\"model\":\"350m\",\"arm\":\"$arm\",\"gpus\":$n,\"bucket_mb\":$mb,\"tokens_per_s\":$(tps $run)}" | tee -a "$OUT/dist.jsonl"
        done
      done
      python3 - "$OUT/dist.jsonl" <<'PY'
import json, sys
r = {}
for l in open(sys.argv[1]):
    x = json.loads(l)
    if x["test"] == "speed": r[(x["model"], x["arm"], x["gpus"], x.get("bucket_mb", 0))] = x["tokens_per_s"]
for (m, a, g, mb), v in sorted(r.items()):
    if g == 2 and (m, a, 1, 0) in r:
        print(json.dumps({"test": "speedup", "model": m, "arm": a, "bucket_mb": mb, "speedup_2_over_1": v / r[(m, a, 1, 0)]}))
PY
      ;;
    comm)
      timeout 120 $B bench comm --device cuda --nproc 2 --json > "$OUT/comm.jsonl" 2> "$OUT/comm.log"; echo "comm rc=$?"
      python3 - "$OUT/comm.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    x = json.loads(l)
    print(f'{x["op"]:15s} {x["bytes"] / 2**20:7.0f} MiB {x["ms"]:9.3f} ms  busbw {x["busbw_gbs"]:7.1f} GB/s  ({x["library"]}, {x["gpu"]})')
PY
      # ZeRO-1's weight all-gather at 350M (P = 316.7M, f = 0.973 of it in FP8 linears) in FP32 and,
      # were it built, with the FP8 linears' weights as E4M3 codes (docs/distributed.md §"FP8 all-gather"),
      # from the largest all-gather's bus bandwidth: t = bytes·(N-1)/N / busbw
      python3 - "$OUT/comm.jsonl" <<'PY' | tee -a "$OUT/dist.jsonl"
import json, sys
ag = [json.loads(l) for l in open(sys.argv[1]) if '"all_gather"' in l]
big = max(ag, key=lambda x: x["bytes"]); n = big["ranks"]; P, f = 316.7e6, 0.973
t = lambda b: b * P * (n - 1) / n / (big["busbw_gbs"] * 1e9) * 1e3
print(json.dumps({"test": "allgather-350m", "ranks": n, "busbw_gbs": big["busbw_gbs"], "at_bytes": big["bytes"],
                  "fp32_ms": t(4), "fp8_linears_ms": t(4 - 3 * f), "saved_ms": t(3 * f)}))
PY
      ;;
    fp8ag)
      for ag in false true false2; do  # false2: off again, the run-to-run baseline (atomics in a kernel?)
        run=/tmp/fp8ag-eq-$ag; rm -rf $run
        timeout 90 $B train "${COMMON[@]}" --arm fp8-matched --set precision.recipe=tensor-current \
          --set train.steps=20 --set train.batch_size=8 --set dist.allgather_fp8=${ag%2} --out $run --nproc 2 \
          > "$OUT/fp8ag-eq-$ag.log" 2>&1; echo "fp8ag equal allgather_fp8=$ag rc=$?"
      done
      cmp /tmp/fp8ag-eq-false/model.safetensors /tmp/fp8ag-eq-true/model.safetensors && echo "fp8ag: final weights bitwise equal"
      for ag in false true; do
        run=/tmp/fp8ag-350m-$ag; rm -rf $run
        timeout 90 $B train "${COMMON[@]}" "${M350[@]}" --arm fp8-matched --set precision.recipe=tensor-current \
          --set train.steps=25 --set train.batch_size=16 --set train.eval_batches=4 --set train.checkpoint_every=0 \
          --set dist.allgather_fp8=$ag --out $run --nproc 2 > "$OUT/fp8ag-350m-$ag.log" 2>&1 \
          || echo "fp8ag 350m allgather_fp8=$ag failed rc=$?"
      done
      python3 - <<'PY' | tee -a "$OUT/dist.jsonl"
import json
def rows(run): return [json.loads(l) for l in open(f"/tmp/{run}/metrics.jsonl") if '"loss"' in l]
off, on, off2 = (rows(f"fp8ag-eq-{a}") for a in ("false", "true", "false2"))
diff = [i + 1 for i, (a, b) in enumerate(zip(off, on)) if a["loss"] != b["loss"]]
base = [i + 1 for i, (a, b) in enumerate(zip(off, off2)) if a["loss"] != b["loss"]]
ms = {a: rows(f"fp8ag-350m-{a}")[5:] for a in ("false", "true")}
mean = {a: sum(r["ms"] for r in v) / len(v) for a, v in ms.items()}
print(json.dumps({"test": "fp8ag", "equal_steps": len(off), "bitwise_equal_losses": not diff and len(off) == len(on),
                  "differing_steps": diff, "off_vs_off_differing_steps": base, "350m_step_ms_fp32_gather": mean["false"],
                  "350m_step_ms_fp8_gather": mean["true"], "saved_ms_per_step": mean["false"] - mean["true"],
                  "tokens_per_s": {a: sum(r["tokens_per_s"] for r in v) / len(v) for a, v in ms.items()}}))
PY
      ;;
    kill)
      run=/tmp/kill; rm -rf $run
      ( timeout 120 $B train "${COMMON[@]}" --arm bf16 --set train.steps=400 --set train.checkpoint_every=20 \
          --out $run --nproc 2 > "$OUT/kill.log" 2>&1; echo "kill: job rc=$?" ) &
      for i in $(seq 60); do [ -f $run/checkpoint.safetensors ] && break; sleep 1; done
      pid=$(pgrep -n -f "octet train.*--out $run")  # the newest process of the job: rank 1
      t0=$(date +%s); kill -9 "$pid"; echo "killed rank 1 (pid $pid)"
      wait; echo "kill: ended $(( $(date +%s) - t0 )) s after the kill"
      python3 - $run/checkpoint.safetensors <<'PY' && echo "kill: checkpoint intact"
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
assert len(b) == 8 + n + max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
print("checkpoint state", h["__metadata__"].get("octet_state"))
PY
      tail -3 "$OUT/kill.log"
      ;;
  esac
done
