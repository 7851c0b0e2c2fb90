#!/usr/bin/env bash
# The main job of ./dev demo (replaced by the precision comparison once the trainer exists).
set -euo pipefail
cd "$(dirname "$0")/.."
build/octet version
