// src/cuda/attention/glue/pack_codes_tile.cuh — the two phases of packing one 64-token × 64-column
// tile of one head into FP8 codes, shared by the code pack (pack_codes.cu: one CTA per tile, the
// amax measured by an earlier launch) and the one-pass block pack (pack_block.cu: one CTA per
// (head, token block), its amax measured from the values it already holds). 256 threads per tile:
//   phase 1  thread (tr, dc) holds columns 8dc .. 8dc + 7 of tokens tr and tr + 32 as FP32, writes
//            their 8 codes to the row copy (one 8-byte store each) and to the staging tile;
//   phase 2  after a __syncthreads, thread (c, dl) gathers tokens 16c .. 16c + 15 of column dl from
//            the staging tile and writes them as one 16-byte store into the group transpose.
// Staging layout: pack_codes_layout.h. Internal to src/cuda/attention/glue/.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/act_layout.h"
#include "cuda/attention/glue/pack_codes_layout.h"
#include "cuda/attention/glue/pack_tile.cuh"
#include "cuda/quantize/fp8_device.cuh"

namespace octet::cuda {

static_assert(kCodesTileT == kPackTileT && kCodesTileD == kPackTileD, "the staging map covers the pack tile");

/// The four codes of v[0..3] · s in one word (v[0] in the low byte), each fp8_encode(v·s, saturate)
/// with the staged pack's NaN rule (fp8_encode_sat: the input's sign on the NaN code).
__device__ __forceinline__ uint32_t codes4(const float* v, float s, bool e5m2) {
  const float y0 = v[0] * s, y1 = v[1] * s, y2 = v[2] * s, y3 = v[3] * s;
  uint32_t w = fp8x2(y0, y1, e5m2) | (fp8x2(y2, y3, e5m2) << 16);
  if (y0 != y0 || y1 != y1 || y2 != y2 || y3 != y3) {  // rare: rebuild with the per-code rule
    const Format f = e5m2 ? Format::E5M2 : Format::E4M3;
    w = uint32_t(fp8_encode_sat(y0, f)) | uint32_t(fp8_encode_sat(y1, f)) << 8 |
        uint32_t(fp8_encode_sat(y2, f)) << 16 | uint32_t(fp8_encode_sat(y3, f)) << 24;
  }
  return w;
}

/// One tensor's fields as the tile phases use them, read from its PackArgs (a kernel parameter)
/// once, before any store: the phases take these values rather than the PackArgs, whose fields the
/// compiler would otherwise keep or reload around stores that might alias them (ptxas: 31-32
/// registers for the code pack this way, 47-48 reading the PackArgs in each phase).
struct CodesTensor {
  const void* x;
  const float* row_factor;  ///< [B, heads, T] or null
  uint8_t* row;             ///< row copy [B, heads, T_p, D] (written when rows)
  uint8_t* trans;           ///< group transpose [B, G, D, rep·T_p] (written when transposed)
  int T, T_p, D, heads, rep;
  bool rows, transposed, e5m2, tokens_major;
};

__device__ __forceinline__ CodesTensor codes_tensor(const PackArgs& a) {
  CodesTensor c;
  c.x = a.x;
  c.row_factor = a.row_factor;
  c.row = static_cast<uint8_t*>(a.row);
  c.trans = static_cast<uint8_t*>(a.trans);
  c.rows = a.row_kind == PackKind::Fp8Code;
  c.transposed = a.trans_kind == PackKind::Fp8Code;
  c.T = int(a.T), c.T_p = int(a.T_p), c.D = int(a.D), c.heads = int(a.heads), c.rep = int(a.rep);
  c.e5m2 = a.format == Format::E5M2;
  c.tokens_major = a.tokens_major;
  return c;
}

/// v (codes_tile_load's values of thread tid) times each token's factor from a.row_factor [B,
/// heads, T] (one FP32 multiply), inside [0, T) × [0, D) only (the zeros outside stay zeros).
__device__ __forceinline__ void codes_tile_row_factor(const PackArgs& a, int b, int h, int t0, int d0,
                                                      int tid, float (&v)[2][8]) {
  const int d = codes_phase1_col(d0, tid), D = int(a.D), T = int(a.T), heads = int(a.heads);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int t = codes_phase1_token(t0, tid, p);
    if (t < T && d < D) {
      const float f = a.row_factor[int64_t(b * heads + h) * T + t];
#pragma unroll
      for (int j = 0; j < 8; ++j) v[p][j] *= f;
    }
  }
}

/// Phase-1 loads of thread tid for the tile at (t0, d0) of head (b, h): v[p] = the 8 columns from
/// codes_phase1_col of token codes_phase1_token(p) as FP32 (times the token's row factor, if any), zeros
/// outside [0, T) × [0, D). Both loads are issued before any use.
template <class X>
__device__ __forceinline__ void codes_tile_load(const PackArgs& a, int b, int h, int t0, int d0, int tid,
                                                float (&v)[2][8]) {
  const X* x = static_cast<const X*>(a.x);
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int d = codes_phase1_col(d0, tid), D = int(a.D), T = int(a.T), heads = int(a.heads);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int t = codes_phase1_token(t0, tid, p);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[p][j] = 0.0f;
    if (t < T && d < D) load8(x + act_row_offset_bh(a.tokens_major, b, h, t, heads, T, D) + d, vec, v[p]);
  }
  if (a.row_factor) codes_tile_row_factor(a, b, h, t0, d0, tid, v);
}

/// Phase 1's stores: the codes of v (codes_tile_load's values) times s into the row copy (rows
/// [T, T_p) zero) and, when the tensor has a transpose, into the staging tile.
__device__ __forceinline__ void codes_tile_encode(const CodesTensor& a, int bh, int t0, int d0, int tid,
                                                  const float (&v)[2][8], float s, uint8_t* tile) {
  const int d = codes_phase1_col(d0, tid);
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int t = codes_phase1_token(t0, tid, p);
    const bool in = t < a.T && d < a.D;
    const uint2 c =
        in ? make_uint2(codes4(v[p], s, a.e5m2), codes4(v[p] + 4, s, a.e5m2)) : make_uint2(0u, 0u);
    if (a.rows && t < a.T_p && d < a.D)
      *reinterpret_cast<uint2*>(a.row + codes_row_at(bh, t, d, a.T_p, a.D)) = c;
    if (a.transposed) *reinterpret_cast<uint2*>(tile + codes_staged_at(t - t0, d - d0)) = c;
  }
}

/// Phase 2 (after the block's __syncthreads): thread tid writes 16 consecutive tokens of one column
/// (codes_phase2_token, codes_phase2_col) as one 16-byte store into the group transpose.
/// Nothing when the tensor has no transpose.
__device__ __forceinline__ void codes_tile_transpose(const CodesTensor& a, int b, int h, int t0, int d0,
                                                     int tid, const uint8_t* tile) {
  if (!a.transposed) return;
  const int dd = codes_phase2_col(d0, tid), ts = codes_phase2_token(t0, tid);
  if (dd >= a.D || ts >= a.T_p) return;  // T_p % 16 == 0: a chunk is all in or all out
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      word |= uint32_t(tile[codes_staged_at(ts - t0 + 4 * q + k, dd - d0)]) << (8 * k);
    w[q] = word;
  }
  *reinterpret_cast<uint4*>(a.trans + codes_trans_at(b, h, ts, dd, a.heads, a.rep, a.T_p, a.D)) =
      make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace octet::cuda
