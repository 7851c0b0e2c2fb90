#!/usr/bin/env bash
# bench/study.sh — the stale-delta study's driver (results/stale-delta-study/README.md): runs study
# conditions as parallel `octet compare --seeds N` processes on one GPU, each under its own time
# limit and resumable (--resume: a condition cut by its limit continues from its checkpoints at the
# next call), then packs every condition's files except the weights (*.safetensors) into
# $OUT/study.tgz and writes the report (tools/study_report.py) into $OUT/report.
#
# Usage: bench/study.sh [CONDITION...]   (default: every condition of the conditions file)
# Environment (defaults in brackets):
#   OCTET_BIN        the octet binary [/tmp/oc/bin/octet if it exists, else build/octet]
#   OUT              where study.tgz, the logs and the report go [/tmp/octet-study-out]
#   STUDY_RUNS       where the compare folders live (kept between calls: resume) [/tmp/octet-study]
#   STUDY_CONFIG     the base config [results/gpt2-small-compare.toml]
#   STUDY_CONDITIONS NAME OVERRIDES... per line [results/stale-delta-study/conditions.txt]
#   STUDY_ARMS       [bf16,fp8-stale,fp8-matched]     STUDY_SEEDS  [3]
#   STUDY_TIMEOUT    seconds per condition [540]      STUDY_DEVICE [cuda]
#   STUDY_SET        extra --set overrides for every run, space-separated [data.cache_dir=<repo>/.cuda-carry/cache
#                    if that folder exists (the tokenizer cache bench/pack_gpu_carry.sh carries), else none]
# The conditions run at the same time on the one device: their time limits are wall-clock, and
# the report reads whatever each compare finished (a cut condition has no summary.json yet and is
# left out of the report, said on stderr).
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in -h|--help) sed -n '2,21p' bench/study.sh | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ -z "${OCTET_BIN:-}" ]; then
  if [ -x /tmp/oc/bin/octet ]; then OCTET_BIN=/tmp/oc/bin/octet; else OCTET_BIN=$PWD/build/octet; fi
fi
OUT=${OUT:-/tmp/octet-study-out}
RUNS=${STUDY_RUNS:-/tmp/octet-study}
CONFIG=${STUDY_CONFIG:-results/gpt2-small-compare.toml}
CONDITIONS=${STUDY_CONDITIONS:-results/stale-delta-study/conditions.txt}
ARMS=${STUDY_ARMS:-bf16,fp8-stale,fp8-matched}
SEEDS=${STUDY_SEEDS:-3}
LIMIT=${STUDY_TIMEOUT:-540}
DEVICE=${STUDY_DEVICE:-cuda}
if [ -z "${STUDY_SET+x}" ] && [ -d .cuda-carry/cache ]; then STUDY_SET="data.cache_dir=$PWD/.cuda-carry/cache"; fi
common=()
for kv in ${STUDY_SET:-}; do common+=(--set "$kv"); done
[ -x "$OCTET_BIN" ] || { echo "study.sh: no octet binary at $OCTET_BIN (set OCTET_BIN)" >&2; exit 2; }
[ -f "$CONDITIONS" ] || { echo "study.sh: no conditions file $CONDITIONS" >&2; exit 2; }
# the corpora, as bench/pack_gpu_carry.sh carries them (data/linux-docs, data/linux-docs-en)
for corpus in linux-docs linux-docs-en; do
  if [ ! -d "data/$corpus" ] && [ -f ".cuda-carry/$corpus.tar.xz" ]; then
    mkdir -p data && tar -xJf ".cuda-carry/$corpus.tar.xz" -C data
  fi
done

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  mapfile -t names < <(grep -vE '^\s*(#|$)' "$CONDITIONS" | awk '{print $1}')
  [ ${#names[@]} -gt 0 ] || { echo "study.sh: no conditions in $CONDITIONS (lines: NAME OVERRIDES...)" >&2; exit 2; }
fi
# Every name checked before anything runs: a known condition (matched literally, not as a regex),
# a plain name (it becomes a folder and a log file), given once.
declare -A seen=()
for name in "${names[@]}"; do
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "study.sh: condition name '$name' must be letters, digits, '.', '_' or '-'" >&2; exit 2; }
  awk -v n="$name" '$1 == n {found = 1} END {exit !found}' "$CONDITIONS" \
    || { echo "study.sh: no condition '$name' in $CONDITIONS (bench/study.sh --help)" >&2; exit 2; }
  [ -z "${seen[$name]:-}" ] || { echo "study.sh: condition '$name' is given twice" >&2; exit 2; }
  seen[$name]=1
done
# The BPE tokenizer of each (vocabulary size, corpus) pair is trained once before the parallel runs
# (they would all train it at once and write the same cache file): a one-step, one-layer run per pair.
mkdir -p "$OUT" "$RUNS"  # only once every name is known good
mapfile -t pairs < <(for name in "${names[@]}"; do
  awk -v n="$name" '$1 == n' "$CONDITIONS" | tr -s ' \t' '\n' | grep -E '^(model\.vocab_size|data\.path)=' | LC_ALL=C sort | paste -sd' '
done | LC_ALL=C sort -u)
for pair in "${pairs[@]}"; do
  psets=()
  for kv in $pair; do psets+=(--set "$kv"); done
  "$OCTET_BIN" train --config "$CONFIG" --device "$DEVICE" "${common[@]}" ${psets[@]+"${psets[@]}"} --set model.n_layer=1 \
    --set train.steps=1 --set train.eval_every=1 --set train.eval_batches=1 --set train.batch_size=1 \
    --out "$RUNS/.tokenizer-warmup-$$" > "$OUT/tokenizer-warmup.log" 2>&1 || { echo "study.sh: warm-up failed:" >&2; tail -3 "$OUT/tokenizer-warmup.log" >&2; exit 2; }
  rm -rf "$RUNS/.tokenizer-warmup-$$"
done
pids=()
for name in "${names[@]}"; do
  line=$(awk -v n="$name" '$1 == n' "$CONDITIONS" | head -1)
  sets=("${common[@]}")
  for kv in $(echo "$line" | awk '{$1 = ""; print}'); do sets+=(--set "$kv"); done  # any whitespace, as the name
  echo "$(date -u +%H:%M:%S) start $name: ${sets[*]}"
  timeout --signal=TERM --kill-after=30 "$LIMIT" "$OCTET_BIN" compare --config "$CONFIG" --device "$DEVICE" \
    --arms "$ARMS" --seeds "$SEEDS" --resume "${sets[@]}" --out "$RUNS/$name" > "$OUT/$name.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"
  r=$?
  echo "$(date -u +%H:%M:%S) ${names[$i]}: rc=$r$([ $r -eq 124 ] && echo ' (time limit: resumable)')"
  [ $r -eq 0 ] || rc=1
  sed -n "/^over .* seeds/,/^$/p" "$OUT/${names[$i]}.log"
done
tar --exclude='*.safetensors' -czf "$OUT/study.tgz" -C "$RUNS" "${names[@]}"
done_dirs=()
for name in "${names[@]}"; do
  if [ -f "$RUNS/$name/summary.json" ]; then done_dirs+=("$name=$RUNS/$name"); else echo "study.sh: $name has no summary.json yet (left out of the report)" >&2; fi
done
if [ ${#done_dirs[@]} -gt 0 ]; then
  python3 tools/study_report.py --out "$OUT/report" --octet "$OCTET_BIN" "${done_dirs[@]}"
fi
exit $rc
