#!/usr/bin/env bash
# bench/gpu_run.sh — one call on the GPU machine: environment check, the GPU tests, the GEMM and
# attention benchmarks (with the PyTorch SDPA peer), the end-to-end training benchmark (with the
# PyTorch peer bench/peers/gpt2_torch.py) and the four-arm comparison on the default corpus.
# Binaries are built on the development machine (nvcc, -arch sm_90a) and carried with their
# non-system shared libraries:
#   tools: bench/pack_gpu_carry.sh builds .cuda-carry/{bin,lib}; this script runs from the repo root.
# Usage: bench/gpu_run.sh [tests] [gemm] [quantize] [ops] [attention] [attention-ab] [attention-pack] [train] [bench-train] [hf-llama] [hf-llama-fsdp] [torch-tests] [torch-attention] [torch-varlen] [ncu-attention] [sanitize]
#   [bench-train-profile] [compare] (default: tests gemm quantize attention train); logs in $OUT (at
#   most 8 files come back).
#   bench-train: within OCTET_BENCH_TRAIN_TIMEOUT seconds (default 360) -> bench-train.jsonl, a table:
#     first `octet bench train --json --no-peer` (octet's 4 arms) for every model of OCTET_BENCH_MODELS
#     (default gpt2-small,350m,760m,1.3b), then the PyTorch peers bench/peers/gpt2_torch.py, one call
#     per arm of OCTET_BENCH_PEERS (default bf16,torchao-tensorwise,torchao-rowwise; torchao from the
#     carried wheel, bench/peers/install_wheels.sh), each over every model, each given what is left of
#     the time (rows are written as they finish, so a cut run keeps the rows before the cut).
#     OCTET_BENCH_SEQ (default 1024), OCTET_BENCH_TOKENS (tokens per optimizer step, default 8192),
#     OCTET_BENCH_GRAD_ACCUM (micro-batches per step, default 1; e.g. 32 with TOKENS=262144),
#     OCTET_BENCH_WARMUP/OCTET_BENCH_STEPS (3/10) apply to both; OCTET_BENCH_PEER_COMPILE (default
#     blocks: torch.compile per block, compile time independent of depth; "model" compiles the whole
#     model); OCTET_BENCH_TRAIN_ARGS adds options to octet's call (e.g. "--model-batch 1.3b=4"),
#     OCTET_BENCH_PEER_ARGS to the peers' (a CPU dry run: both "--device cpu --vocab 256", with
#     OCTET_BENCH_MODELS=tiny OCTET_BENCH_SEQ=32 OCTET_BENCH_TOKENS=64 OCTET_BENCH_PEER_COMPILE=none).
#   bench-train-profile: `octet bench train --profile` of GPT-2-small, bf16 and fp8-matched
#     -> bench-train-profile.jsonl, the op classes above 2 % of the step
#   hf-llama: bench/peers/hf_llama.py (a Hugging Face Llama of Llama-3.2-1B's shape, seq
#     OCTET_HF_SEQ (default 4096), batch OCTET_HF_BATCH (2), OCTET_HF_STEPS (10) timed steps) per arm
#     of OCTET_HF_ARMS (default sdpa:bf16,octet:fp8,octet-stale:fp8,sdpa:torchao-tensorwise, attention:
#     linears) -> hf-llama.jsonl, each within OCTET_HF_TIMEOUT seconds (240), on the bytes of
#     OCTET_HF_DATA (a file or directory: hf_llama.py --data) if set, else uniform tokens; needs liboctet_c in
#     .cuda-carry/lib and torchao for its arm (the carried wheel, as bench-train); OCTET_HF_ARGS adds options
#     to every arm's run (e.g. "--packed 1024": packed rows; "--profile": one profiled step, its kernels
#     by category printed; hf_llama.py --help)
#   hf-llama-fsdp: FSDP2 on every GPU of the machine (torchrun --nproc-per-node N, N from
#     nvidia-smi): per arm of OCTET_HF_ARMS (default octet:fp8,sdpa:bf16,sdpa:torchao-tensorwise),
#     first one GPU with --grad-accum N (the same global batch and micro-batches), then the N ranks
#     with --fsdp, OCTET_HF_STEPS (default 50) timed steps each on OCTET_HF_DATA if set, each run
#     within OCTET_HF_TIMEOUT seconds (default 300) -> hf-llama-fsdp.jsonl (rows in that order; a
#     table of the loss difference and the speed-up); OCTET_HF_ARGS adds options to every run
#     (not --grad-accum, which the pair sets; a CPU dry run: "--model tiny --device cpu
#     --no-compile" with OCTET_HF_GPUS=2, which otherwise comes from nvidia-smi)
#   torch-tests: pytest (the GPU image's) on OCTET_TORCH_TESTS (default
#     tests/python/test_torch_cuda.py) with liboctet_c (OCTET_LIBRARY, as torch-attention), within
#     OCTET_TORCH_TESTS_TIMEOUT seconds (300) -> torch-tests.log
#   torch-attention: bench/peers/torch_attention.py (octet.torch.attention, the same kernels through
#     the C ABI with and without the saved-state tensor, PyTorch SDPA; forward + backward) ->
#     torch-attention.jsonl, within OCTET_TORCH_ATTENTION_TIMEOUT seconds (300); needs liboctet_c
#     (OCTET_LIBRARY, default .cuda-carry/lib/liboctet_c.so: OCTET_CARRY_LIBC=1 in pack_gpu_carry.sh)
#   torch-varlen: bench/peers/torch_varlen_docs.py (packed documents through attention_varlen,
#     the dense call, PyTorch's varlen_attn) at H16 D128 8 x 4096 and H12 D64 8 x 1024, and the
#     varlen rows of every other library carried as .cuda-carry/variants/<name>/liboctet_c.so
#     (--tag -<name>: e.g. the tree before a change) -> torch-varlen.jsonl, each run within
#     OCTET_TORCH_VARLEN_TIMEOUT seconds (150); needs liboctet_c as torch-attention
#   attention-ab: one environment variable's values in one call (OCTET_AB_VAR, default
#     OCTET_FLASH_EXP2_POLY, over OCTET_AB_VALUES, default "0 1 2 3"; with OCTET_AB_VAR set and empty,
#     each value is its own comma-separated VAR=VALUE list, "base" none: e.g. OCTET_AB_VALUES="base
#     OCTET_FLASH_PINGPONG=1 OCTET_FLASH_PINGPONG=1,OCTET_FLASH_PERSISTENT=1"): test_cuda's OCTET_AB_TESTS (a
#     gtest filter; default the forward's suites; set and empty: none) under each -> test_cuda-ab.log, then `octet bench
#     attention --json --peer ''` on OCTET_AB_CASES (default bench) under each value in turn,
#     OCTET_AB_ROUNDS rounds (default 2; OCTET_AB_ROWS, if set, the rows: --rows) -> attention-ab.jsonl (rows tagged ab_var, ab_value,
#     ab_round) and a table of forward/backward TFLOP/s per value
#   attention-pack: the glue's non-default staged pack (OCTET_ATTN_PACK=staged): test_cuda's attention suites
#     (OCTET_PACK_TESTS, a gtest filter) under it -> test_cuda-pack-staged.log, then `octet bench
#     attention --json --peer ''` on OCTET_PACK_CASES (default bench) under staged and codes ->
#     attention-pack.jsonl (each row's pack_kernel says which)
#   ncu-attention: Nsight Compute (sections SpeedOfLight, Occupancy, LaunchStats, WarpStateStats,
#     ComputeWorkloadAnalysis, MemoryWorkloadAnalysis, InstructionStats, SchedulerStats, and the warp
#     stall reasons smsp__average_warps_issue_stalled_*_per_issue_active, printed above 0.1) of the flash
#     forward kernel and the backward's kernels at OCTET_NCU_CASE (default b4-h16-d128-s4096), one
#     call each -> ncu-attention.txt; OCTET_NCU_KERNELS (a regex of kernel names), OCTET_NCU_COUNT
#     (launches, default 6) and OCTET_NCU_ROWS (the bench rows run, default octet-fp8-flash-kernels)
#     narrow it; OCTET_NCU_SOURCE=1 adds one more profile of the first launch matching
#     OCTET_NCU_KERNELS (default wgmma_backward_kernel) with its warp-state samples per SASS
#     instruction -> ncu-source.txt (bench/ncu_stalls.py: by opcode, and the top instructions),
#     ncu-source-sass.csv
#   sanitize: compute-sanitizer memcheck and racecheck (--error-exitcode 3) of test_cuda's
#     OCTET_SANITIZE_TESTS (a gtest filter; default the flash backward's zeros-and-keyless tests, both
#     flavors and head_dims) under each of OCTET_SANITIZE_ENVS (default "base OCTET_FLASH_BWD_DQ_TMA=1
#     OCTET_FLASH_BWD_SDP_OVERLAP=1"; a value is base or a comma-separated VAR=VALUE list), each run
#     within OCTET_SANITIZE_TIMEOUT seconds (240) -> sanitize.log
#   compare: results/gpt2-small-compare.toml on data/linux-docs (carried as .cuda-carry/linux-docs.tar.xz
#     with its tokenizer cache, OCTET_CARRY_CACHE in pack_gpu_carry.sh); OCTET_COMPARE_ARGS adds
#     options (e.g. "--set train.steps=300"); summary, metrics and log -> compare.tgz. Its time
#     limit is OCTET_COMPARE_TIMEOUT seconds, or what is left until OCTET_DEADLINE seconds after
#     this script started.
set -uo pipefail
OUT=${OUT:-/tmp/octet-gpu}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.cuda-carry/lib:${LD_LIBRARY_PATH:-}
BIN=${OCTET_BIN_DIR:-$PWD/.cuda-carry/bin}  # where octet and test_cuda are (e.g. OCTET_BIN_DIR=build/cuda for bench steps)
steps=${*:-tests gemm quantize attention train}
known=" tests gemm quantize ops attention attention-ab attention-pack train bench-train bench-train-profile hf-llama hf-llama-fsdp torch-tests torch-attention torch-varlen ncu-attention sanitize compare "
for s in $steps; do  # every name checked before any step runs
  case $known in *" $s "*) ;; *) echo "gpu_run.sh: unknown step '$s' (steps:$known)" >&2; exit 2 ;; esac
done
{
  date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.total --format=csv
  ls /usr/local/cuda/lib64/libcublasLt.so* /usr/local/cuda/lib64/libcudart.so* 2>&1
  ldd "$BIN/octet" | grep -E "not found|cublas|cudart" ; "$BIN/octet" version
} 2>&1 | tee "$OUT/env.log"
for s in $steps; do
  case $s in
    tests) timeout 420 "$BIN/test_cuda" --gtest_color=no 2>&1 | tee "$OUT/test_cuda.log" | grep -vE "^\[ +(RUN|OK) " ;;
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
          deadline=$(( SECONDS + ${OCTET_BENCH_TRAIN_TIMEOUT:-360} ))
          common=(--models "${OCTET_BENCH_MODELS:-gpt2-small,350m,760m,1.3b}" --seq "${OCTET_BENCH_SEQ:-1024}"
                  --tokens-per-step "${OCTET_BENCH_TOKENS:-8192}" --grad-accum "${OCTET_BENCH_GRAD_ACCUM:-1}"
                  --warmup "${OCTET_BENCH_WARMUP:-3}"
                  --steps "${OCTET_BENCH_STEPS:-10}" --json)
          : > "$OUT/bench-train.jsonl"; : > "$OUT/bench-train.err"
          # shellcheck disable=SC2086
          timeout $(( deadline - SECONDS )) "$BIN/octet" bench train "${common[@]}" --no-peer ${OCTET_BENCH_TRAIN_ARGS:-} \
            >> "$OUT/bench-train.jsonl" 2>> "$OUT/bench-train.err"
          echo "bench-train octet rc=$? ($SECONDS s)"
          pyext=${OCTET_PYEXT:-/tmp/octet-pyext}  # torchao, installed from the carried wheel
          bench/peers/install_wheels.sh "$pyext" >> "$OUT/bench-train.err" 2>&1
          for peer in $(echo "${OCTET_BENCH_PEERS:-bf16,torchao-tensorwise,torchao-rowwise}" | tr , ' '); do
            left=$(( deadline - SECONDS ))
            if [ "$left" -lt 30 ]; then echo "bench-train peer $peer: skipped (${left} s left)"; continue; fi
            fp8=none; [ "$peer" = bf16 ] || fp8=${peer#torchao-}
            # shellcheck disable=SC2086
            PYTHONPATH=$pyext${PYTHONPATH:+:$PYTHONPATH} timeout "$left" python3 bench/peers/gpt2_torch.py \
              "${common[@]}" --fp8 "$fp8" --compile "${OCTET_BENCH_PEER_COMPILE:-blocks}" ${OCTET_BENCH_PEER_ARGS:-} \
              >> "$OUT/bench-train.jsonl" 2>> "$OUT/bench-train.err"
            echo "bench-train peer $peer rc=$? ($SECONDS s)"
          done
          grep -iE "error|Traceback|no wheel" "$OUT/bench-train.err" | tail -5
          python3 bench/summarize.py "$OUT/bench-train.jsonl" ;;
    bench-train-profile)
          # where the time goes: every backend op timed by class, GPT-2-small, bf16 and fp8-matched
          timeout 240 "$BIN/octet" bench train --json --profile --models gpt2-small --arms bf16,fp8-matched \
            --warmup 2 --steps 3 > "$OUT/bench-train-profile.jsonl" 2> "$OUT/bench-train-profile.err"
          echo "bench-train --profile rc=$?"
          python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("bench") == "train-profile" and r["share_of_ops"] > 0.02:
        print(f"{r["arm"]:12} {r["op"]:34} {r["ms_per_step"]:9.2f} ms/step {100 * r["share_of_ops"]:5.1f}%")' "$OUT/bench-train-profile.jsonl" ;;
    attention-pack)
          # the glue's two pack kernels: their bitwise tests and the whole attention suite under the
          # staged pack (the code pack is the default), then octet's attention rows under each
          OCTET_ATTN_PACK=staged timeout 200 "$BIN/test_cuda" --gtest_color=no \
            --gtest_filter="${OCTET_PACK_TESTS:-AttentionGlue.*:*CudaAttention*:*FlashForward*:FlashBackward.*:*QkvHeadBlock*:*AttentionCases*}" \
            > "$OUT/test_cuda-pack-staged.log" 2>&1
          echo "test_cuda (OCTET_ATTN_PACK=staged) rc=$?"; grep -E "FAILED|PASSED" "$OUT/test_cuda-pack-staged.log" | tail -5
          : > "$OUT/attention-pack.jsonl"
          for pk in staged codes; do
            OCTET_ATTN_PACK=$pk timeout 200 "$BIN/octet" bench attention --json --peer '' \
              --cases "${OCTET_PACK_CASES:-bench}" >> "$OUT/attention-pack.jsonl" 2>> "$OUT/attention-pack.err"
            echo "attention OCTET_ATTN_PACK=$pk rc=$?"
          done
          python3 bench/summarize.py "$OUT/attention-pack.jsonl" ;;
    attention-ab)
          # one environment variable's values against each other in one call: the tests under each
          # value, then octet's rows (no peers) for every value in turn, OCTET_AB_ROUNDS rounds
          var=${OCTET_AB_VAR-OCTET_FLASH_EXP2_POLY}
          values=${OCTET_AB_VALUES:-0 1 2 3}
          assigns() {  # the environment assignments of value $1 (in the array `set_env`)
            set_env=()
            if [ -n "$var" ]; then set_env=("$var=$1"); elif [ "$1" != base ]; then IFS=, read -ra set_env <<< "$1"; fi
          }
          : > "$OUT/test_cuda-ab.log"; : > "$OUT/attention-ab.jsonl"
          tests=${OCTET_AB_TESTS-*FlashForward*:*Exp2Poly*:*AttentionRows*:*CudaAttention*}
          for v in $values; do
            [ -n "$tests" ] || break  # OCTET_AB_TESTS= (empty): timings only
            assigns "$v"
            env "${set_env[@]}" timeout 200 "$BIN/test_cuda" --gtest_color=no --gtest_filter="$tests" \
              >> "$OUT/test_cuda-ab.log" 2>&1
            echo "test_cuda ${var:+$var=}$v rc=$?"; grep -E "FAILED|PASSED" "$OUT/test_cuda-ab.log" | tail -3
          done
          for round in $(seq "${OCTET_AB_ROUNDS:-2}"); do
            for v in $values; do
              assigns "$v"
              env "${set_env[@]}" timeout 200 "$BIN/octet" bench attention --json --peer '' \
                --cases "${OCTET_AB_CASES:-bench}" --rows "${OCTET_AB_ROWS:-}" 2>> "$OUT/attention-ab.err" |
                python3 -c 'import json,sys
for l in sys.stdin:
    if l.startswith("{"):
        r = json.loads(l); r.update(ab_var=sys.argv[1], ab_value=sys.argv[2], ab_round=int(sys.argv[3]))
        print(json.dumps(r))' "$var" "$v" "$round" >> "$OUT/attention-ab.jsonl"
              echo "attention ${var:+$var=}$v round $round rc=${PIPESTATUS[0]} ($SECONDS s)"
            done
          done
          python3 -c 'import json,sys
rows = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows.setdefault((r["case"], r["impl"], r.get("input_dtype", "")), {}).setdefault(r["ab_value"], []).append(
        "%.0f/%.0f" % (r["fwd_tflops"] or 0, r["bwd_tflops"] or 0))
for (case, impl, dt), by in sorted(rows.items()):
    print(f"{case:28} {impl:30} {dt:5} " + "  ".join(f"{v}: " + " ".join(xs) for v, xs in by.items()))' \
            "$OUT/attention-ab.jsonl" ;;
    ncu-attention)
          timeout 420 ncu --clock-control none --kernel-name regex:"${OCTET_NCU_KERNELS:-tma_forward_kernel|wgmma_backward_kernel|delta_rows_kernel}" \
            --launch-count "${OCTET_NCU_COUNT:-6}" \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section InstructionStats \
            --section SchedulerStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
            "$BIN/octet" bench attention --cases "${OCTET_NCU_CASE:-b4-h16-d128-s4096}" \
            --rows "${OCTET_NCU_ROWS:-octet-fp8-flash-kernels}" --reps 1 --warmup 0 --peer '' > "$OUT/ncu-attention.txt" 2>&1
          echo "ncu-attention rc=$?"; grep -E "^  [a-z_].*\(|Duration|Registers Per|Issue Slots Busy|Executed Ipc A" \
            "$OUT/ncu-attention.txt" | head -60
          # the stall reasons above 0.1 cycles per issued instruction, per kernel
          awk '/^  [a-z_].*\(/ {print $1, $2} /issue_stalled_.*ratio/ && $NF + 0 > 0.1 {print "   ", $1, $NF}' \
            "$OUT/ncu-attention.txt" | head -60
          if [ "${OCTET_NCU_SOURCE:-0}" = 1 ]; then
            # where the warps wait, per SASS instruction: the first matching launch's warp-state
            # samples (SourceCounters), summed by opcode and listed for the top instructions
            timeout 300 ncu --clock-control none --kernel-name regex:"${OCTET_NCU_KERNELS:-wgmma_backward_kernel}" \
              --launch-count 1 --section SourceCounters --section WarpStateStats -f -o "$OUT/ncu-source" \
              "$BIN/octet" bench attention --cases "${OCTET_NCU_CASE:-b4-h16-d128-s4096}" \
              --rows "${OCTET_NCU_ROWS:-octet-fp8-flash-kernels}" --reps 1 --warmup 0 --peer '' > /dev/null 2>&1
            echo "ncu-source rc=$?"
            ncu --import "$OUT/ncu-source.ncu-rep" --page source --csv --print-source sass \
              > "$OUT/ncu-source-sass.csv" 2> "$OUT/ncu-source.err"
            python3 bench/ncu_stalls.py "$OUT/ncu-source-sass.csv" 2>&1 | tee "$OUT/ncu-source.txt" | head -70
            rm -f "$OUT/ncu-source.ncu-rep"
          fi ;;
    hf-llama)
          : > "$OUT/hf-llama.jsonl"; : > "$OUT/hf-llama.err"
          pyext=${OCTET_PYEXT:-/tmp/octet-pyext}
          libc=${OCTET_LIBRARY:-$PWD/.cuda-carry/lib/liboctet_c.so}
          bench/peers/install_wheels.sh "$pyext" >> "$OUT/hf-llama.err" 2>&1
          for arm in $(echo "${OCTET_HF_ARMS:-sdpa:bf16,octet:fp8,octet-stale:fp8,sdpa:torchao-tensorwise}" | tr , ' '); do
            (cd bench/peers && PYTHONPATH=$pyext${PYTHONPATH:+:$PYTHONPATH} \
              OCTET_LIBRARY=$libc timeout "${OCTET_HF_TIMEOUT:-240}" \
              python3 hf_llama.py --seq "${OCTET_HF_SEQ:-4096}" --batch "${OCTET_HF_BATCH:-2}" \
              --steps "${OCTET_HF_STEPS:-10}" --attention "${arm%%:*}" --linears "${arm##*:}" \
              ${OCTET_HF_DATA:+--data "$OCTET_HF_DATA"} ${OCTET_HF_ARGS:-}) \
              >> "$OUT/hf-llama.jsonl" 2>> "$OUT/hf-llama.err"
            echo "hf-llama $arm rc=$? ($SECONDS s)"
          done
          python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(f"{r["arm"]:28} {r["tokens_per_s"]:10.0f} tokens/s {r["tflops"]:7.1f} TFLOP/s loss {r["loss_last"]:.3f}"
          f" peak {r.get("peak_memory_gib") or 0:.1f} GiB")
    if r.get("profile"):  # OCTET_HF_ARGS=--profile
        pr = r["profile"]
        print("  profiled step, kernels", round(pr["kernel_ms"], 1), "ms:",
              {k: round(v, 1) for k, v in sorted(pr["by_category_ms"].items(), key=lambda kv: -kv[1])})
        for k in pr["top"][:12]:
            print(f"    {k["ms"]:8.2f} ms {k["calls"]:5} {k["name"][:90]}")' "$OUT/hf-llama.jsonl" ;;
    hf-llama-fsdp)
          : > "$OUT/hf-llama-fsdp.jsonl"; : > "$OUT/hf-llama-fsdp.err"
          pyext=${OCTET_PYEXT:-/tmp/octet-pyext}
          libc=${OCTET_LIBRARY:-$PWD/.cuda-carry/lib/liboctet_c.so}
          gpus=${OCTET_HF_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
          if [ "$gpus" -lt 1 ]; then echo "hf-llama-fsdp: no GPU found (nvidia-smi -L)"; continue; fi
          bench/peers/install_wheels.sh "$pyext" >> "$OUT/hf-llama-fsdp.err" 2>&1
          for arm in $(echo "${OCTET_HF_ARMS:-octet:fp8,sdpa:bf16,sdpa:torchao-tensorwise}" | tr , ' '); do
            args=(--seq "${OCTET_HF_SEQ:-4096}" --batch "${OCTET_HF_BATCH:-2}" --steps "${OCTET_HF_STEPS:-50}"
                  --attention "${arm%%:*}" --linears "${arm##*:}" ${OCTET_HF_DATA:+--data "$OCTET_HF_DATA"}
                  ${OCTET_HF_ARGS:-})
            for run in one fsdp; do
              if [ $run = one ]; then launch=(python3 hf_llama.py --grad-accum "$gpus")
              else launch=(torchrun --standalone --nproc-per-node "$gpus" hf_llama.py --fsdp); fi
              (cd bench/peers && PYTHONPATH=$pyext${PYTHONPATH:+:$PYTHONPATH} OCTET_LIBRARY=$libc \
                timeout "${OCTET_HF_TIMEOUT:-300}" "${launch[@]}" "${args[@]}") \
                >> "$OUT/hf-llama-fsdp.jsonl" 2>> "$OUT/hf-llama-fsdp.err"
              echo "hf-llama-fsdp $arm $run rc=$? ($SECONDS s)"
            done
          done
          python3 -c 'import json,sys
runs = {}
for l in open(sys.argv[1]):
    r = json.loads(l) if l.startswith("{") else {}
    if "losses" in r:
        runs.setdefault(r["arm"], {})[r["fsdp"]] = r
for arm, pair in runs.items():
    if len(pair) < 2:
        print(f"{arm:28} no pair: only the run with fsdp={list(pair)[0]}"); continue
    one, many = pair[False], pair[True]
    d = max(abs(a - b) / abs(a) for a, b in zip(one["losses"], many["losses"]))
    t1, tn, world = one["tokens_per_s"], many["tokens_per_s"], many["world"]
    print(f"{arm:28} 1 GPU {t1:9.0f} {world} GPUs {tn:9.0f} tokens/s ({tn / t1:.2f}x) "
          f"max loss rel diff {d:.2e}")' "$OUT/hf-llama-fsdp.jsonl" ;;
    sanitize)
          # compute-sanitizer's memcheck and racecheck of small flash tests under each environment
          : > "$OUT/sanitize.log"
          for env_set in ${OCTET_SANITIZE_ENVS:-base OCTET_FLASH_BWD_DQ_TMA=1 OCTET_FLASH_BWD_SDP_OVERLAP=1}; do
            set_env=()
            [ "$env_set" = base ] || IFS=, read -r -a set_env <<< "$env_set"
            for a in "${set_env[@]}"; do
              case $a in *=*) ;; *) echo "sanitize: '$a' in OCTET_SANITIZE_ENVS is not VAR=VALUE" >&2; continue 2 ;; esac
            done
            for tool in memcheck racecheck; do
              env "${set_env[@]}" timeout "${OCTET_SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool $tool \
                --error-exitcode 3 "$BIN/test_cuda" --gtest_color=no \
                --gtest_filter="${OCTET_SANITIZE_TESTS:-HeadDim/FlashBackwardWgmma.ZerosAndRowsWithoutKeys/*:FlashBackward.ZerosAndRowsWithoutKeys}" \
                > "$OUT/sanitize-run.log" 2>&1
              rc=$?
              { echo "== $tool under $env_set rc=$rc"; cat "$OUT/sanitize-run.log"; } >> "$OUT/sanitize.log"
              echo "$tool under $env_set rc=$rc"
              grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$OUT/sanitize-run.log" | tail -3
            done
          done
          rm -f "$OUT/sanitize-run.log" ;;
    torch-tests)
          PYTHONPATH=$PWD/python:$PWD/tests/python${PYTHONPATH:+:$PYTHONPATH} \
            OCTET_LIBRARY=${OCTET_LIBRARY:-$PWD/.cuda-carry/lib/liboctet_c.so} \
            timeout "${OCTET_TORCH_TESTS_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider \
            ${OCTET_TORCH_TESTS:-tests/python/test_torch_cuda.py} > "$OUT/torch-tests.log" 2>&1
          echo "torch-tests rc=$?"; tail -15 "$OUT/torch-tests.log" ;;
    torch-attention)
          PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} \
            OCTET_LIBRARY=${OCTET_LIBRARY:-$PWD/.cuda-carry/lib/liboctet_c.so} \
            timeout "${OCTET_TORCH_ATTENTION_TIMEOUT:-300}" python3 bench/peers/torch_attention.py --json \
            > "$OUT/torch-attention.jsonl" 2> "$OUT/torch-attention.err"
          echo "torch-attention rc=$?"; tail -5 "$OUT/torch-attention.err"
          python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "error" in r: print(r["case"], r["impl"], r["error"]); continue
    print(f"{r["case"]:26} {r["impl"]:26} fwd+bwd {r["fwd_bwd_ms"]:8.3f} ms {r["fwd_bwd_tflops"]:6.0f} TFLOP/s "
          f"x sdpa-cudnn {r.get("fwd_bwd_vs_torch-sdpa-cudnn-bf16", 0):.2f}")' "$OUT/torch-attention.jsonl" ;;
    torch-varlen)
          lib=${OCTET_LIBRARY:-$PWD/.cuda-carry/lib/liboctet_c.so}
          for shape in "" "--heads 12 --kv-heads 12 --head-dim 64 --doc-mean 300 --row-len 1024"; do
            for run in "$lib:" .cuda-carry/variants/*/liboctet_c.so; do
              [ -f "${run%%:*}" ] || continue
              tag=""; [ "$run" = "$lib:" ] || tag="-$(basename "$(dirname "$run")")"
              # shellcheck disable=SC2086  # shape holds several arguments
              (cd bench/peers && PYTHONPATH=$PWD/../../python${PYTHONPATH:+:$PYTHONPATH} \
                OCTET_LIBRARY=${run%%:*} timeout "${OCTET_TORCH_VARLEN_TIMEOUT:-150}" \
                python3 torch_varlen_docs.py --json ${tag:+--tag=$tag} $shape) \
                >> "$OUT/torch-varlen.jsonl" 2>> "$OUT/torch-varlen.err"
              echo "torch-varlen $shape ${tag:-this build} rc=$?"
            done
          done
          tail -5 "$OUT/torch-varlen.err"
          python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "error" in r: print(r["impl"], r["error"][:160]); continue
    print(f"{r["head_dim"]:4} {r["impl"]:34} docs {r["docs"]:4} fwd {r["fwd_ms"]:7.3f} fwd+bwd {r["fwd_bwd_ms"]:7.3f} ms")' \
            "$OUT/torch-varlen.jsonl" ;;
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
