#!/usr/bin/env bash
# bench/pack_gpu_carry.sh — collects what a GPU machine without the Debian -dev packages needs to run
# octet's CUDA build: the octet CLI and test_cuda from build/cuda, and every shared library they load
# that is neither glibc's, libstdc++/libgcc nor CUDA's own (which the GPU image has), into
# .cuda-carry/{bin,lib} (git-ignored via .git/info/exclude). Then: carry .cuda-carry and run
# bench/gpu_run.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .cuda-carry && mkdir -p .cuda-carry/bin .cuda-carry/lib
cp build/cuda/octet build/cuda/tests/test_cuda .cuda-carry/bin/
strip .cuda-carry/bin/* || true
ldd .cuda-carry/bin/* | awk '/=>/ {print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcudart*|libcublas*) ;;
    *) cp -L "$lib" .cuda-carry/lib/ ;;
  esac
done
grep -qx '/.cuda-carry/' .git/info/exclude 2>/dev/null || echo '/.cuda-carry/' >> .git/info/exclude
du -sh .cuda-carry
