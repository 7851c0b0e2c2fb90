// src/cuda/attention/glue/pack_codes_layout.h — where the code pack (pack_codes.cu) and the block
// pack (pack_block.cu) stage a tile's FP8 codes in shared memory, which elements each thread of a
// tile and each tile of a block handles, and where they go in the packed copies: host-and-device
// functions that the kernels call and the CPU tests check by simulating every access
// (tests/attention/pack_codes_layout_test.cpp: one byte per (token, column), the 8-byte phase-1
// stores aligned, both phases free of bank conflicts, every byte of both copies written once).
#pragma once

#include <cstdint>

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

/// Phase 1 of thread tid (0..255) of the tile at (t0, d0): its token p (0 or 1) and its first of 8
/// consecutive columns.
OCTET_HD int codes_phase1_token(int t0, int tid, int p) { return t0 + tid / 8 + 32 * p; }
OCTET_HD int codes_phase1_col(int d0, int tid) { return d0 + 8 * (tid % 8); }

/// Phase 2 of thread tid: its first of 16 consecutive tokens, and its column.
OCTET_HD int codes_phase2_token(int t0, int tid) { return t0 + 16 * (tid % 4); }
OCTET_HD int codes_phase2_col(int d0, int tid) { return d0 + tid / 4; }

/// Byte offset of (token t, column d) of head bh = b·heads + h in the row copy [B, heads, T_p, D].
OCTET_HD int64_t codes_row_at(int bh, int t, int d, int T_p, int D) {
  return (int64_t(bh) * T_p + t) * D + d;
}

/// Byte offset of (token t, column d) of head h of batch b in the group transpose [B, G, D, rep·T_p]
/// (G = heads / rep; head h = g·rep + l at column l·T_p + t).
OCTET_HD int64_t codes_trans_at(int b, int h, int t, int d, int heads, int rep, int T_p, int D) {
  const int g = h / rep, l = h % rep;
  return ((int64_t(b) * (heads / rep) + g) * D + d) * (int64_t(rep) * T_p) + int64_t(l) * T_p + t;
}

/// The block pack's tile (i, j) of token block k (block tokens, a multiple of 64): tokens from
/// t0 = k·block + 64i, columns from d0 = 64j; false when the block has no such tile (i ≥ block/64,
/// j ≥ ⌈D/64⌉, or t0 ≥ T_p).
OCTET_HD bool block_pack_tile(int k, int block, int i, int j, int T_p, int D, int& t0, int& d0) {
  t0 = k * block + i * kCodesTileT;
  d0 = j * kCodesTileD;
  return i < block / kCodesTileT && d0 < D && t0 < T_p;
}

}  // namespace octet::cuda
