// src/cuda/attention/flash/flash_bwd_step_sm89.cuh — one warp's tile step of the flash FP8
// attention backward on mma.sync, shared by its two kernels (flash_bwd_sm89.cu: the key-block-major
// main kernel; flash_bwd_dq_sm89.cu: the deterministic Q-block-major dQ kernel), so both form the
// same P, dS, dŜ and tile scales for the same (i, j): P = exp(S − m)/l and the P̃ codes (tile_p),
// dS = P∘(dP − D) with the row residual sums and the tile's power-of-two dŜ scale (tile_ds), and the
// warp's dQ product dŜK̂ (tile_dq). Semantics: flash.h; CPU twin: src/cpu/attention_backward_tile.cpp
// ds_step. docs/attention.md §"Backward".
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_kernels.h"
#include "octet/delta_rule.h"

namespace octet::cuda::flash {

// Phase 1 of one warp's tile step: P = exp(S − m)/l of its 16 rows x kNK keys into pd (n-tile by
// n-tile: S is never live as a whole), and the P̃ codes into pt ([kBN][kBM] bytes, chunks
// pt_chunk-swizzled, if given). Element (nt, e): row e / 2, tile key key0 + s_key(nt, 0) + 4t +
// e % 2, visible iff s_key(nt, 0) + e % 2 < lim[e / 2] (Rows::lim from j0 + key0 + 4t), or
// always when kFull (the caller knows every row of the block sees every key of the tile).
template <bool kFull, int kD, int kBM, int kBN>
__device__ __forceinline__ void tile_p(const BackwardParams& p, const bwd::Warp<kD, kBM, kBN>& w,
                                       const bwd::Rows& rows, const uint8_t* sk,
                                       const uint32_t (&qa)[kD / 32][4], const int (&lim)[2],
                                       float (&pd)[bwd::Geom<kD, kBM, kBN>::kNK / 8][4], uint8_t* pt) {
  constexpr int kNK = bwd::Geom<kD, kBM, kBN>::kNK;
#pragma unroll
  for (int nt = 0; nt < kNK / 8; ++nt) {
    float s[4];
    w.s_ntile(sk, nt, qa, s);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float ev[2];
#pragma unroll
      for (int c = 0; c < 2; ++c)
        pd[nt][2 * r + c] = rows.prob(r, kFull || s_key(nt, 0) + c < lim[r], s[2 * r + c], &ev[c]);
      if (pt) {  // P̃ = E4M3(exp(S − m)·p_scale) of keys kl, kl + 1 (two rows of P̃ᵀ), query q
        const uint32_t codes = fp8x2(ev[0] * p.p_scale, ev[1] * p.p_scale, false);
        const int kl = w.key0 + s_key(nt, 0) + 4 * w.t, q = 16 * w.qs + w.g + 8 * r;
        pt[kl * kBM + 16 * pt_chunk<kBM>(kl, q / 16) + q % 16] = uint8_t(codes);
        pt[(kl + 1) * kBM + 16 * pt_chunk<kBM>(kl + 1, q / 16) + q % 16] = uint8_t(codes >> 8);
      }
    }
  }
}

// Phase 2: dP n-tile by n-tile and dS = P∘(dP − D) in place of P (octet/delta_rule.h), the row
// residual sums (FP64, only when res_sums is given), and this lane's |dS| amax bits. kFull as
// tile_p's.
template <bool kFull, int kD, int kBM, int kBN>
__device__ __forceinline__ unsigned tile_ds(const BackwardParams& p, double* res_sums,
                                            const bwd::Warp<kD, kBM, kBN>& w, const bwd::Rows& rows,
                                            int64_t bh, const uint8_t* sv, const uint32_t (&da)[kD / 32][4],
                                            const int (&lim)[2],
                                            float (&pd)[bwd::Geom<kD, kBM, kBN>::kNK / 8][4]) {
  constexpr int kNK = bwd::Geom<kD, kBM, kBN>::kNK;
  unsigned amax = 0;
  double rs[2] = {0.0, 0.0}, rm[2] = {0.0, 0.0};
#pragma unroll
  for (int nt = 0; nt < kNK / 8; ++nt) {
    float dp[4];
    w.dp_ntile(sv, nt, da, dp);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e / 2;
      const bool in = kFull || s_key(nt, 0) + e % 2 < lim[r];
      const float pr = pd[nt][e];
      const float ds = in ? RowDelta<float>{rows.delta[r]}.ds(pr, dp[e]) : 0.0f;
      if (res_sums && in) {  // FP64 work only when the residual is asked for
        rs[r] += double(ds);
        rm[r] += double(pr) * (fabs(double(dp[e])) + fabs(double(rows.delta[r])));
      }
      pd[nt][e] = ds;
      amax = max(amax, __float_as_uint(ds) & 0x7FFFFFFFu);
    }
  }
  if (res_sums) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      for (int o = 1; o <= 2; o *= 2) {
        rs[r] += __shfl_xor_sync(0xFFFFFFFFu, rs[r], o);
        rm[r] += __shfl_xor_sync(0xFFFFFFFFu, rm[r], o);
      }
      if (w.t == 0 && rows.row[r] < p.Tq) {
        atomicAdd(res_sums + 2 * (bh * p.Tq + rows.row[r]), rs[r]);
        atomicAdd(res_sums + 2 * (bh * p.Tq + rows.row[r]) + 1, rm[r]);
      }
    }
  }
  return amax;
}

// One warp's dQ product over its kNK keys: acc[dn] = dŜ·K̂ (codes; head_dim columns 8dn + 2t..),
// A = dsa (to_a_frags of dS), B = K̂ᵀ rows 8dn + g of the shared tile (shared address skt),
// keys key0 + 32kk + 4t.. by ldmatrix: lane 8i + r reads row 8dn + r, chunk key0/16 + 4h + i
// (= key0/16 ^ 4h ^ i: key0 is a multiple of 32 and i < 4), the b0, b1 of kk = 2h, 2h + 1.
template <int kD, int kBN, int kNK>
__device__ __forceinline__ void tile_dq(unsigned skt, int key0, const uint32_t (&dsa)[kNK / 32][4],
                                        bool ds_e5m2, float (&acc)[kD / 8][4]) {
  constexpr int kX = kNK >= 64 ? 4 : 2;  // matrices per ldmatrix: 2 kk at a time, or the one kk
  const int lane = threadIdx.x % 32, mi = lane / 8 % kX, mr = lane % 8;
  const unsigned lane_addr = skt + mr * kBN;
  const int cx = v_chunk<kBN>(mr, 0) ^ mi ^ (key0 / 16);
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[dn][e] = 0.0f;
#pragma unroll
    for (int h = 0; h < kNK / 32 / (kX / 2); ++h) {
      uint32_t b[kX];
      ldsm<kX>(b, lane_addr + 8 * dn * kBN + 16 * (cx ^ (kX * h)));
#pragma unroll
      for (int x = 0; x < kX / 2; ++x)
        bwd::mma_fp8(acc[dn], dsa[(kX / 2) * h + x], b[2 * x], b[2 * x + 1], ds_e5m2, false);
    }
  }
}

}  // namespace octet::cuda::flash
