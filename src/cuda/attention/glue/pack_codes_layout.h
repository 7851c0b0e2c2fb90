// src/cuda/attention/glue/pack_codes_layout.h — where the code pack (pack_codes.cu) stages a tile's
// FP8 codes in shared memory, a host-and-device function so that the CPU tests can check the map
// (tests/attention/pack_codes_layout_test.cpp: one byte per (token, column), the 8-byte phase-1
// stores aligned, both phases free of bank conflicts).
#pragma once

#include "octet/fp8.h"  // OCTET_HD

namespace octet::cuda {

/// The tile the code pack stages: 64 tokens × 64 columns of one head, one byte each.
constexpr int kCodesTileT = 64, kCodesTileD = 64;

/// Byte offset of column d's code of token t in the staging tile: token t's 64 codes are 16 words
/// (4 bytes each) rotated by 2·(t / 16) words, so that phase 2's four 16-token chunks of a column
/// lie in four different banks and phase 1's 8-byte stores (8 consecutive columns) stay aligned.
OCTET_HD int codes_staged_at(int t, int d) {
  return t * kCodesTileD + (((d >> 2) + 2 * (t >> 4)) & 15) * 4 + (d & 3);
}

}  // namespace octet::cuda
