#!/usr/bin/env bash
# bench/gpu_dist.sh — data-parallel training on a 2×H200 machine (docs/distributed.md), in one call of
# at most ~6 minutes:
#   equal   the same config on 1 GPU and on 2 GPUs (`--nproc 2`, NCCL): step losses side by side
#           (train.batch_size is the global batch, so the two runs are one run up to summation order),
#           fp8-matched with tensor-delayed scaling, so the amax exchange kernels and their NCCL max
#           run too;
#   speed   tokens/s of 1 vs 2 GPUs for 124M (results/gpt2-small-compare.toml) and 350M (24 layers,
#           d 1024), bf16 and fp8-matched, as JSON lines {"model","arm","gpus","tokens_per_s"} and
#           the speed-up 2 GPUs / 1 GPU;
#   kill    a 2-GPU run whose rank 1 is killed: rank 0 must end non-zero within 60 s, checkpoint intact.
# Carry (bench/pack_gpu_carry.sh with OCTET_CARRY_CACHE, then `tar -cJf .cuda-carry/carry.tar.xz -C
# .cuda-carry bin lib`): .cuda-carry/carry.tar.xz, .cuda-carry/linux-docs.tar.xz, .cuda-carry/cache.
# NCCL comes from the machine's CUDA (pack_gpu_carry.sh does not carry libnccl).
# Usage: bench/gpu_dist.sh [equal] [speed] [kill]; logs and dist.jsonl in $OUT.
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
for s in ${*:-equal speed kill}; do
  case $s in
    equal)
      for n in 1 2; do
        np=(); [ $n = 2 ] && np=(--nproc 2)
        timeout 120 $B train "${COMMON[@]}" --arm fp8-matched --set precision.recipe=tensor-delayed \
          --set train.steps=30 --set train.batch_size=8 \
          --out /tmp/eq$n "${np[@]}" > "$OUT/equal-$n.log" 2>&1; echo "equal gpus=$n rc=$?"
      done
      python3 - /tmp/eq1/metrics.jsonl /tmp/eq2/metrics.jsonl <<'PY' | tee -a "$OUT/dist.jsonl"
import json, sys
a, b = ([json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:3])
d = [abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, b) if x.get("loss") and y.get("loss")]
print(json.dumps({"test": "equal", "arm": "fp8-matched", "recipe": "tensor-delayed", "steps": len(d), "max_rel_loss_diff": max(d),
                  "first": [a[0]["loss"], b[0]["loss"]], "last": [a[-1]["loss"], b[-1]["loss"]]}))
PY
      ;;
    speed)
      for model in 124m 350m; do
        extra=(); [ $model = 350m ] && extra=("${M350[@]}")
        for arm in bf16 fp8-matched; do
          for n in 1 2; do
            np=(); [ $n = 2 ] && np=(--nproc 2)
            run=/tmp/speed-$model-$arm-$n; rm -rf $run
            timeout 100 $B train "${COMMON[@]}" "${extra[@]}" --arm $arm --set train.steps=25 \
              --set train.batch_size=16 --set train.eval_batches=4 --set train.checkpoint_every=0 --out $run "${np[@]}" \
              > "$OUT/speed-$model-$arm-$n.log" 2>&1 || echo "speed $model $arm gpus=$n failed rc=$?"
            [ -f $run/metrics.jsonl ] && echo "{\"test\":\"speed\",\"model\":\"$model\",\"arm\":\"$arm\",\"gpus\":$n,\"tokens_per_s\":$(tps $run)}" | tee -a "$OUT/dist.jsonl"
          done
        done
      done
      python3 - "$OUT/dist.jsonl" <<'PY'
import json, sys
r = {}
for l in open(sys.argv[1]):
    x = json.loads(l)
    if x["test"] == "speed": r[(x["model"], x["arm"], x["gpus"])] = x["tokens_per_s"]
for (m, a, g), v in sorted(r.items()):
    if g == 2 and (m, a, 1) in r: print(json.dumps({"test": "speedup", "model": m, "arm": a, "speedup_2_over_1": v / r[(m, a, 1)]}))
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
