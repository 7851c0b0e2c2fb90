#!/usr/bin/env bash
# bench/peers/install_wheels.sh DIR — installs the pinned packages of bench/peers/requirements-gpu.txt
# (torchao) from the wheels carried to the GPU machine, which has no network: pip --no-deps into the
# target folder DIR (a wheel is a zip: unpacked if this python has no pip); put DIR on PYTHONPATH.
# The wheels are fetched on a machine with network by `bench/peers/torch_results.sh fetch`.
# Environment: OCTET_WHEELS (default .cuda-carry/wheels), PYTHON (default python3). Run from the
# repository root. A missing wheel is reported and skipped (the peers that need it then fail alone).
set -uo pipefail
EXT=${1:?usage: bench/peers/install_wheels.sh DIR}
PY=${PYTHON:-python3}
WHEELS=${OCTET_WHEELS:-.cuda-carry/wheels}
grep -v '^#' bench/peers/requirements-gpu.txt | while read -r req; do
  [ -n "$req" ] || continue
  whl=$(find "$WHEELS" -name "${req%%==*}-${req##*==}-*.whl" 2>/dev/null | head -1)
  if [ -z "$whl" ]; then echo "no wheel for $req in $WHEELS (run: bench/peers/torch_results.sh fetch)"; continue; fi
  "$PY" -m pip install -q --no-deps --target "$EXT" "$whl" || "$PY" -m zipfile -e "$whl" "$EXT"
done
