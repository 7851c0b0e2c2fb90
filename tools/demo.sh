#!/usr/bin/env bash
# The main job of ./dev demo: train the same small GPT in the four precision arms of docs/design.md §"Precision arms"
# (bf16, fp8-linear, fp8-stale, fp8-matched) on a real corpus and compare them side by side.
#
# Corpus: the .rst files of Documentation/admin-guide and Documentation/process of the Linux
# kernel sources shipped by Debian's linux-source-6.1 package (English technical prose, ~3.3 MB).
# tools/corpus.sh installs the package if missing (apt-get, needs root or sudo) and extracts the
# files once into data/linux-docs (git-ignored) in a fixed order, so every machine trains on the same bytes.
#
# Environment: OCTET_BIN (default build/octet), OCTET_CONFIG (default configs/demo.toml),
# OCTET_OUT (default runs/demo), OCTET_DEMO_ARGS (extra arguments for `octet compare`, e.g.
# "--set train.steps=50").
set -euo pipefail
cd "$(dirname "$0")/.."
OCTET_BIN=${OCTET_BIN:-build/octet}
CONFIG=${OCTET_CONFIG:-configs/demo.toml}
OUT=${OCTET_OUT:-runs/demo}
CORPUS=${OCTET_HOME:-.}/data/linux-docs  # the default corpus of docs/cli.md §"Where octet keeps data"

log() { printf '\033[1m[demo]\033[0m %s\n' "$*" >&2; }

tools/corpus.sh "$CORPUS" admin-guide process
log "corpus: $(find "$CORPUS" -name '*.rst' | wc -l) files, $(cat $(find "$CORPUS" -name '*.rst') | wc -c) bytes"

start=$(date +%s)
# shellcheck disable=SC2086
"$OCTET_BIN" compare --config "$CONFIG" --arms bf16,fp8-linear,fp8-stale,fp8-matched --out "$OUT" ${OCTET_DEMO_ARGS:-}
log "comparison finished in $(( $(date +%s) - start )) s: $OUT/summary.json, $OUT/curves.png"
