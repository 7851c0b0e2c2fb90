#!/usr/bin/env bash
# bench/pack_gpu_carry.sh — collects what a GPU machine without the Debian -dev packages needs to run
# octet's CUDA build: the octet CLI and test_cuda from the CUDA build directory, and every shared
# library they load that is neither glibc's, libstdc++/libgcc nor CUDA's own (which the GPU image
# has; nor cuDNN, which the GPU image has too, nor libnccl, 218 MB), into .cuda-carry/{bin,lib}
# (git-ignored via .git/info/exclude). Then: carry .cuda-carry and
# run bench/gpu_run.sh there.
# Environment: OCTET_BUILD (default build/cuda) is the CUDA build directory. OCTET_CARRY_CACHE, if
# set, is a tokenizer cache directory (data.cache_dir of a BPE run made here) whose spm-*.model and
# tokens-*.bin files are copied to .cuda-carry/cache, and data/linux-docs (tools/demo.sh) is packed
# as .cuda-carry/linux-docs.tar.xz, for `bench/gpu_run.sh compare`; data/linux-docs-en
# (tools/corpus.sh, the study's larger corpus), if present, as .cuda-carry/linux-docs-en.tar.xz. OCTET_CARRY_LIBC=1 adds
# liboctet_c.so (the PyTorch package's library) to .cuda-carry/lib, for `bench/gpu_run.sh hf-llama`.
# OCTET_CARRY_VARIANTS, if set, names folders (space-separated) each holding another build's octet
# and/or test_cuda (e.g. a branch's, for an A/B in one call): each is copied, stripped, to
# .cuda-carry/variants/<folder name>/ (run them with OCTET_BIN_DIR). Everything must stay within the
# 64 MiB that one call carries (compressed: see the device tool's notes).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${OCTET_BUILD:-build/cuda}
rm -rf .cuda-carry && mkdir -p .cuda-carry/bin .cuda-carry/lib
cp "$BUILD/octet" "$BUILD/tests/test_cuda" .cuda-carry/bin/
strip .cuda-carry/bin/* || true
ldd .cuda-carry/bin/* | awk '/=>/ {print $3}' | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcudart*|libcublas*|libnccl*) ;;
    libcudnn*) ;;  # cuDNN 9 is on the GPU image (~500 MB: it would not fit the carry)
    *) cp -L "$lib" .cuda-carry/lib/ ;;
  esac
done
if [ -n "${OCTET_CARRY_CACHE:-}" ]; then
  test -f data/linux-docs.complete || { echo "data/linux-docs missing: run tools/demo.sh first" >&2; exit 1; }
  mkdir -p .cuda-carry/cache
  cp "$OCTET_CARRY_CACHE"/spm-*.model .cuda-carry/cache/
  cp "$OCTET_CARRY_CACHE"/tokens-*.bin .cuda-carry/cache/ 2>/dev/null || true  # re-encoded there if absent
  tar -cJf .cuda-carry/linux-docs.tar.xz -C data linux-docs linux-docs.complete
  if [ -f data/linux-docs-en.complete ]; then
    tar -cJf .cuda-carry/linux-docs-en.tar.xz -C data linux-docs-en linux-docs-en.complete
  fi
fi
if [ -n "${OCTET_CARRY_LIBC:-}" ]; then  # the PyTorch package's library (bench/gpu_run.sh hf-llama)
  cp "$BUILD/liboctet_c.so" .cuda-carry/lib/ && strip .cuda-carry/lib/liboctet_c.so || true
fi
for v in ${OCTET_CARRY_VARIANTS:-}; do
  mkdir -p ".cuda-carry/variants/$(basename "$v")"
  cp "$v"/octet "$v"/test_cuda "$v"/VERSION ".cuda-carry/variants/$(basename "$v")/" 2>/dev/null || true
  strip ".cuda-carry/variants/$(basename "$v")"/octet ".cuda-carry/variants/$(basename "$v")"/test_cuda 2>/dev/null || true
done
git check-ignore -q .cuda-carry || echo '/.cuda-carry/' >> "$(git rev-parse --git-path info/exclude)"
du -sh .cuda-carry
