#!/usr/bin/env bash
# bench/peers/torch_results.sh — the PyTorch drop-in results run (results/torch-dropin/README.md),
# one call of < 8 minutes on a GPU machine (two GPUs: nvidia-h200-x2): bench/peers/gpt2_octet_torch.py
# trains GPT-2-small (124M, bytes of the default corpus, 8 x 1024 tokens per step) for
# $TORCH_RESULTS_STEPS steps in each arm, then the matched arm data-parallel on 2 GPUs:
#   bf16                PyTorch BF16 autocast + SDPA + torch.compile (the baseline)
#   octet-matched       octet.torch.attention (FP8, Delta-Matching) + octet FP8 linears + compile
#   octet-stale         the same with the stale delta
#   torchao-tensorwise  torchao float8 linears (tensorwise) + SDPA + compile
#   torchao-rowwise     torchao float8 linears (rowwise) + SDPA + compile
#   ddp-octet-matched   octet-matched under torch DDP on 2 GPUs (torchrun), $TORCH_RESULTS_DDP_STEPS steps
# With two or more GPUs the single-GPU arms run two at a time, one per GPU (CUDA_VISIBLE_DEVICES);
# each arm gets what is left of $TORCH_RESULTS_DEADLINE seconds (an arm that cannot start is
# recorded as skipped). Arm names as arguments run only those.
#
# Here (once, with network, after bench/pack_gpu_carry.sh, which empties .cuda-carry):
#   bench/peers/torch_results.sh fetch    # the pinned torchao wheel -> .cuda-carry/wheels
# There:  OCTET_LIBRARY=/tmp/oc/lib/liboctet_c.so bench/peers/torch_results.sh   (carry .cuda-carry)
# Environment: OCTET_LIBRARY (default /tmp/oc/lib/liboctet_c.so, else build/cuda/liboctet_c.so);
#   OCTET_CORPUS (default data/linux-docs; unpacked from .cuda-carry/linux-docs.tar.xz if missing);
#   OCTET_WHEELS (default .cuda-carry/wheels); PYTHON (default python3); OUT (default
#   /tmp/octet-torch-results); TORCH_RESULTS_ARGS: options added to every arm (a CPU dry run:
#   "--device cpu --models tiny --seq 64 --batch 2 --no-compile"). Results in $OUT (3 files): run.log, results.jsonl (one summary line
#   per arm, or its failure), metrics.tgz (<arm>/{metrics.jsonl,summary.json,log}). Tables and plot:
#   bench/peers/torch_results_report.py.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
PY=${PYTHON:-python3}
REQ=bench/peers/requirements-gpu.txt
WHEELS=${OCTET_WHEELS:-.cuda-carry/wheels}
if [ "${1:-}" = fetch ]; then
  mkdir -p "$WHEELS" && exec "$PY" -m pip download --no-deps -r "$REQ" -d "$WHEELS"
fi
OUT=${OUT:-/tmp/octet-torch-results}
STEPS=${TORCH_RESULTS_STEPS:-300}
DDP_STEPS=${TORCH_RESULTS_DDP_STEPS:-100}
DEADLINE=${TORCH_RESULTS_DEADLINE:-450}
W=/tmp/octet-torch-work
mkdir -p "$OUT" && rm -rf "$W" && mkdir -p "$W"

main() {  # everything below is logged to $OUT/run.log
lib=${OCTET_LIBRARY:-/tmp/oc/lib/liboctet_c.so}
[ -f "$lib" ] || lib=build/cuda/liboctet_c.so
LD_LIBRARY_PATH=$(dirname "$lib"):${LD_LIBRARY_PATH:-}
export OCTET_LIBRARY=$lib LD_LIBRARY_PATH PYTHONUNBUFFERED=1
CORPUS=${OCTET_CORPUS:-data/linux-docs}
if [ ! -d "$CORPUS" ] && [ -f .cuda-carry/linux-docs.tar.xz ]; then
  mkdir -p data && tar -xJf .cuda-carry/linux-docs.tar.xz -C data
fi
# torchao, pinned, from the carried wheel (pip --no-deps into a target dir on PYTHONPATH).
EXT=$W/pyext
OCTET_WHEELS=$WHEELS PYTHON=$PY bench/peers/install_wheels.sh "$EXT"
export PYTHONPATH=$EXT:$PWD/python${PYTHONPATH:+:$PYTHONPATH}
date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
"$PY" -c 'import torch, octet; print("torch", torch.__version__, "cuda", torch.version.cuda, "octet", octet.library_path())'
"$PY" -c 'import torchao; print("torchao", torchao.__version__)' 2>&1 | tail -1
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
echo "corpus $CORPUS ($(du -shL "$CORPUS" | cut -f1)); $GPUS GPU(s); $STEPS steps per arm; deadline ${DEADLINE}s"

P=bench/peers/gpt2_octet_torch.py
# shellcheck disable=SC2206
COMMON=(--models gpt2-small --data "$CORPUS" --warmup 3 --eval-every 50 --eval-batches 4 ${TORCH_RESULTS_ARGS:-})
declare -A ARGS=(
  [bf16]="--attention sdpa --linears bf16"
  [octet-matched]="--attention octet-matched --linears fp8"
  [octet-stale]="--attention octet-stale --linears fp8"
  [torchao-tensorwise]="--attention sdpa --linears torchao-tensorwise"
  [torchao-rowwise]="--attention sdpa --linears torchao-rowwise"
  [ddp-octet-matched]="--attention octet-matched --linears fp8 --ddp"
)

# run_arm NAME GPU: one arm, its log and metrics in $W/NAME; its summary (or failure) -> results.jsonl
run_arm() {
  local name=$1 gpu=$2 left=$((DEADLINE - SECONDS)) rc=0
  mkdir -p "$W/$name"
  if [ "$left" -lt 60 ]; then
    echo "{\"arm_name\": \"$name\", \"status\": \"skipped\", \"why\": \"deadline\"}" > "$W/$name/status.json"
    echo "$name: skipped (${left}s left)"; return
  fi
  echo "$name: start on GPU $gpu, limit $((left - 10))s"
  # shellcheck disable=SC2086
  if [ "${name#ddp-}" != "$name" ]; then
    timeout $((left - 10)) "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 $P \
      "${COMMON[@]}" --steps "$DDP_STEPS" ${ARGS[$name]} --log-dir "$W/$name" > "$W/$name/log" 2>&1 || rc=$?
  else
    CUDA_VISIBLE_DEVICES=$gpu timeout $((left - 10)) "$PY" $P "${COMMON[@]}" --steps "$STEPS" \
      ${ARGS[$name]} --log-dir "$W/$name" > "$W/$name/log" 2>&1 || rc=$?
  fi
  if [ $rc = 0 ] && [ -f "$W/$name/summary.json" ]; then
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); r.update(arm_name=sys.argv[2], status="ok", gpu=sys.argv[3]); print(json.dumps(r))' \
      "$W/$name/summary.json" "$name" "$gpu" > "$W/$name/status.json"
  else
    "$PY" -c 'import json,sys; print(json.dumps({"arm_name": sys.argv[1], "status": "failed", "rc": int(sys.argv[2]), "log_tail": open(sys.argv[3], errors="replace").read()[-2000:]}))' \
      "$name" "$rc" "$W/$name/log" > "$W/$name/status.json"
  fi
  echo "$name: rc=$rc; $(tail -c 300 "$W/$name/log" | tr '\n' ' ' | cut -c1-300)"
}

arms=${*:-bf16 octet-matched octet-stale torchao-tensorwise torchao-rowwise ddp-octet-matched}
single=() ddp=()
for a in $arms; do
  [ -n "${ARGS[$a]+x}" ] || { echo "unknown arm $a (known: ${!ARGS[*]})"; exit 2; }
  if [ "${a#ddp-}" != "$a" ]; then ddp+=("$a"); else single+=("$a"); fi
done
i=0
while [ $i -lt ${#single[@]} ]; do
  if [ "$GPUS" -ge 2 ] && [ $((i + 1)) -lt ${#single[@]} ]; then  # two arms at once, one GPU each
    run_arm "${single[$i]}" 0 & run_arm "${single[$((i + 1))]}" 1 & wait
    i=$((i + 2))
  else
    run_arm "${single[$i]}" 0; i=$((i + 1))
  fi
done
for a in "${ddp[@]}"; do
  if [ "$GPUS" -ge 2 ]; then run_arm "$a" 0,1; else
    mkdir -p "$W/$a"
    echo "{\"arm_name\": \"$a\", \"status\": \"skipped\", \"why\": \"needs 2 GPUs\"}" > "$W/$a/status.json"
  fi
done
cat "$W"/*/status.json > "$OUT/results.jsonl"
tar -czf "$OUT/metrics.tgz" -C "$W" --exclude pyext .
"$PY" bench/peers/torch_results_report.py "$W" --no-plot || true
echo "done in ${SECONDS}s"
}

main "$@" 2>&1 | tee "$OUT/run.log"
