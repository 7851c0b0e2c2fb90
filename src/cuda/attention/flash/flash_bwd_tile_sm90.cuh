// src/cuda/attention/flash/flash_bwd_tile_sm90.cuh — the tile pieces of the wgmma (Hopper, sm_90a) flavor
// of the flash FP8 attention backward: the tile geometry, the per-query statistics of a query block
// (also the matched-delta pre-pass's, flash_bwd_delta_sm90.cu), and the main kernel's (flash_bwd_sm90.cu)
// warpgroup products Sᵀ = K̂Q̂ᵀ and dPᵀ = V̂dÔᵀ and its P = exp(S − m)/l (the pre-pass forms S and dP with
// the same instruction shape and scale products and P by the same formula, so every (i, j) gets the
// same P and dP bits in both: the matched delta's zero row sum).
// Semantics: flash.h (CPU twin: src/cpu/attention_backward_tile.cpp compute_p_dp). PTX ISA §9.7.15 (wgmma);
// FlashAttention-3 (arXiv 2407.08608) for the transposed backward orientation. docs/attention.md §"Backward".
//
// Geometry: a tile is kBM = 128 queries x kBN = 128 keys (the dS scale tile block_q x block_k).
// Two warpgroups; warpgroup wg owns the 64 keys 64wg.. of the tile, its warp w the 16 keys
// 64wg + 16w.. . One Sᵀ or dPᵀ product covers kCols<kD> queries of the tile: a 64-query half at
// both head_dims (m64n64k32, queries 64h.. of half h: at head_dim 128 the dK, dV accumulators take
// 128 of the 255 registers; at 64 a whole-tile m64n128 product spilled; docs/cuda.md). Its accumulator
// (flash_wgmma_sm90.cuh fragments) holds, for lane (g, t), keys 16w + g (elements 0, 1) and 16w + g + 8
// (2, 3) of n-tile i, columns 2t, 2t + 1. The query rows of the B operand (Q̂, dÔ) are stored
// permuted (flash_bwd_sm90.cu's TMA boxes land them so), row r = query s_key(r / 8, r % 8)
// (flash_mma_sm89.cuh; rows 64h.. hold queries 64h..,
// as s_key(nt + 8, n) = 64 + s_key(nt, n)), so column (i, n) of half h is query
// 64h + s_key(i, n) and the accumulator converts in place into the A fragments over queries in
// natural order (flash_bwd_tile_sm89.cuh to_a_frags) of the dV and dK products, whose B operands
// are the group transposes' natural query columns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_softmax.cuh"
#include "cuda/attention/flash/flash_wgmma_sm90.cuh"

namespace octet::cuda::flash::bwdw {

constexpr int kThreads = 256;  // two warpgroups (= bwd::kWarps warps: bwd::cta_amax applies)
constexpr int kBM = 128;       // queries per tile
constexpr int kBN = 128;       // keys per tile
constexpr int kWgKeys = 64;    // keys per warpgroup
static_assert(kThreads == 32 * bwd::kWarps, "bwd::cta_amax's slots are one per warp");
/// Queries per Sᵀ / dPᵀ product (the N of its m64nNk32): half of the tile at both head_dims (at 64
/// the whole tile in one m64n128 product held Sᵀ's and dPᵀ's 64 + 64 registers beside dK, dV and
/// spilled). The pre-pass's products have the same shape (queries as rows: the same bits).
template <int kD>
inline constexpr int kCols = kBM / 2;

/// The per-query statistics of one query block, in natural query order (query i0 + q at q), from
/// Rows::init's values (m = 0, l = 1, delta = 0 for a row without keys or a pad): tile_prob's
/// exponent bias log2(p_scale) − RN(m·log2 e) and factor RN(1/(l·p_scale)), l, D, the keys the row
/// sees. The main kernel reads no l; dropping it (and its store) moved ptxas to 64 bytes of spill
/// in a head_dim 64 kernel (residual sums, dQ by TMA, the overlap), so the column stays.
struct ColStats {
  float bias[kBM], l[kBM], rcp_lp[kBM], delta[kBM];
  int vis[kBM];
};

/// A query's raw statistics (m, l, D) read ahead into registers, written to a ColStats later.
struct ColStat {
  float m = 0.0f, l = 1.0f, delta = 0.0f;
  int vis = 0;
  __device__ __forceinline__ void load(const BackwardParams& p, int64_t bh, int64_t i, bool with_delta) {
    const int64_t v = bwd::visible_keys(p, i);
    vis = int(v);
    m = v > 0 ? p.row_max[bh * p.Tq + i] : 0.0f;
    l = v > 0 ? p.row_sum[bh * p.Tq + i] : 1.0f;
    delta = with_delta && v > 0 ? p.delta[bh * p.Tq + i] : 0.0f;
  }
  /// tile_prob's exponent bias log2(p_scale) − RN(m·log2 e) (p_scale: P̃'s power-of-two scale,
  /// BackwardParams::p_scale, the same in every kernel).
  __device__ __forceinline__ float bias(float p_scale) const {
    const float log2_p = float(int(__float_as_uint(p_scale) >> 23) - 127);  // p_scale = 2^k
    return log2_p - __fmul_rn(m, 1.4426950408889634f);
  }
  /// tile_prob's factor RN(1/(l·p_scale)).
  __device__ __forceinline__ float rcp_lp(float p_scale) const { return __frcp_rn(l * p_scale); }
  __device__ __forceinline__ void store(ColStats& s, int q, float p_scale) const {
    s.bias[q] = bias(p_scale);
    s.l[q] = l, s.rcp_lp[q] = rcp_lp(p_scale), s.delta[q] = delta, s.vis[q] = vis;
  }
};

/// This lane's place: warpgroup wg (keys 64wg..), warp w in it (keys 16w.. of those), (g, t).
struct Lane {
  int wg, w, g, t;
  __device__ __forceinline__ Lane()
      : wg(threadIdx.x / 128), w(threadIdx.x / 32 % 4), g(threadIdx.x % 32 / 4), t(threadIdx.x % 4) {}
};

/// tile_product's wgmma batch, issued and committed as one group but not waited for: acc holds the
/// product only after the caller's wgmma_wait (N = the groups issued after this one) and
/// fence_regs(acc); nothing may read or write acc before that.
template <int kD, bool kBE5M2, int kNT>
__device__ __forceinline__ void tile_issue(unsigned a_tile, unsigned b_tile, float (&acc)[kNT][4]) {
  constexpr int kN = 8 * kNT;  // queries (kNT n-tiles of 8)
  static_assert(kN == kCols<kD>, "one product shape per head_dim in every kernel (same bits)");
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < kD / 32; ++kc)
    WgmmaFp8<kN, false, kBE5M2>::ss(acc, kmajor_desc<kD>(a_tile + 32 * kc), kmajor_desc<kD>(b_tile + 32 * kc),
                                    kc);
  wgmma_commit();
}

/// One warpgroup's m64nN product over head_dim (N = kN = kCols<kD> queries): acc = Σ_kc A[64 keys,
/// kc]·B[kN queries, kc]ᵀ, A the warpgroup's 64 rows of a K̂ or V̂ tile and B kN rows of a Q̂ or dÔ
/// query tile (both [rows][kD] K-major, kD-byte swizzle, by descriptor; b_tile: the first row, a
/// multiple of 8 rows in), k-steps kc = 0, 1, ... in order from a zero accumulator; committed and
/// waited for. Sᵀ: (a_tile = K̂, b_tile = Q̂, E4M3 x E4M3); dPᵀ: (V̂, dÔ, E4M3 x do_format: kBE5M2).
template <int kD, bool kBE5M2, int kNT>
__device__ __forceinline__ void tile_product(unsigned a_tile, unsigned b_tile, float (&acc)[kNT][4]) {
  tile_issue<kD, kBE5M2>(a_tile, b_tile, acc);
  wgmma_wait<0>();
  fence_regs(acc);
}

/// Keys from `kbase` on that query q sees, clamped to [−1, 2^20] (key kbase + k visible iff
/// k < lim; Rows::lim's rule).
__device__ __forceinline__ int col_lim(const ColStats& cs, int q, int64_t kbase) {
  const int64_t n = int64_t(cs.vis[q]) - kbase;
  return int(n < -1 ? -1 : (n > (1 << 20) ? (1 << 20) : n));
}

/// P = exp(S − m)/l in place of this lane's Sᵀ accumulator over kN queries q_off.. of the tile
/// (code units ŝ, S = s_scale·ŝ), as the forward forms its exponentials (flash_softmax.cuh
/// exp2_scaled: one FFMA and ex2): x = exp(S − m)·p_scale = 2^(ŝ·RN(s_scale·log2 e) + bias), P =
/// RN(x·RN(1/(l·p_scale))) — one multiply instead of a division, so P rows sum to 1 only within a
/// few FP32 ulp (the matched delta divides by the same P's sum: delta_rule.h). 0 where the key is
/// not visible (unless kFull: the caller knows every query of the tile sees every key). kbase: the tile's
/// first key j0 + 64wg + 16w (this warp's keys kbase + g,
/// + 8). Into pa (non-null) the P̃ codes E4M3(exp(S − m)·p_scale) as the A fragments over queries
/// (to_a_frags' order: pa[kk] covers queries q_off + 32kk.., a0/a1 = rows g/g + 8 of n-tiles 4kk,
/// 4kk + 1, a2/a3 of 4kk + 2, 4kk + 3).
template <bool kFull, int kNT>
__device__ __forceinline__ void tile_prob(const ColStats& cs, const Lane& ln, int64_t kbase, int q_off,
                                          float s_scale, float (&s)[kNT][4], uint32_t (*pa)[4]) {
  const float c2 = __fmul_rn(s_scale, 1.4426950408889634f);
#pragma unroll
  for (int kk = 0; kk < kNT / 4; ++kk) {
    float e[4][4];  // exp(S − m)·p_scale of n-tiles 4kk + j
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int nt = 4 * kk + j, q0 = q_off + s_key(nt, 2 * ln.t);  // queries q0, q0 + 1 (even)
      const float2 b = *reinterpret_cast<const float2*>(cs.bias + q0);
      const float2 rl = *reinterpret_cast<const float2*>(cs.rcp_lp + q0);
      const int lim0 = kFull ? 0 : col_lim(cs, q0, kbase), lim1 = kFull ? 0 : col_lim(cs, q0 + 1, kbase);
#pragma unroll
      for (int el = 0; el < 4; ++el) {
        const int c = el % 2, key = ln.g + 8 * (el / 2);
        const bool in = kFull || key < (c ? lim1 : lim0);
        const float x = exp2_scaled(s[nt][el], c2, c ? b.y : b.x);
        s[nt][el] = in ? __fmul_rn(x, c ? rl.y : rl.x) : 0.0f;
        e[j][el] = in ? x : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int j = 2 * (r / 2), ro = r % 2;
      pa[kk][r] = fp8x2(e[j][2 * ro], e[j][2 * ro + 1], false) |
                  fp8x2(e[j + 1][2 * ro], e[j + 1][2 * ro + 1], false) << 16;
    }
  }
}

/// Visits this lane's (P, dP) elements of a product over kN queries q_off.. of the tile: f(n-tile,
/// element, query q, visible, dP) with dP = the dPᵀ accumulator × dp_scale (a rounded product);
/// the caller's P array holds tile_prob's P.
template <bool kFull, int kNT, typename F>
__device__ __forceinline__ void for_each_dp(const ColStats& cs, const Lane& ln, int64_t kbase, int q_off,
                                            float dp_scale, const float (&dp)[kNT][4], F&& f) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int q0 = q_off + s_key(nt, 2 * ln.t);
    const int lim0 = kFull ? 0 : col_lim(cs, q0, kbase), lim1 = kFull ? 0 : col_lim(cs, q0 + 1, kbase);
#pragma unroll
    for (int el = 0; el < 4; ++el) {
      const int c = el % 2, key = ln.g + 8 * (el / 2);
      f(nt, el, q0 + c, kFull || key < (c ? lim1 : lim0), __fmul_rn(dp[nt][el], dp_scale));
    }
  }
}

/// The sum over the 8 lanes g (same t) of column g of an 8-column group: v[u] is this lane's
/// partial of column u; a reduce-scatter by shuffles (lane ^ 16: bit 2 of g keeps columns 4·g2..;
/// lane ^ 8: bit 1 keeps 2·g1 + 4·g2..; lane ^ 4: bit 0 keeps u = g). 7 additions per column in
/// a fixed tree. The main kernel's residual sums use it on the 8 columns of n-tiles 4kk..4kk + 3
/// (u = 2(nt − 4kk) + c): lane g gets query s_key(4kk + g / 2, 2t + g % 2).
__device__ __forceinline__ double column_sum8(const double (&v)[8], int g) {
  const bool g0 = g & 1, g1 = g & 2, g2 = g & 4;
  double w[4], x[2];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = (g2 ? v[k + 4] : v[k]) + __shfl_xor_sync(0xFFFFFFFFu, g2 ? v[k] : v[k + 4], 16);
#pragma unroll
  for (int k = 0; k < 2; ++k)
    x[k] = (g1 ? w[k + 2] : w[k]) + __shfl_xor_sync(0xFFFFFFFFu, g1 ? w[k] : w[k + 2], 8);
  return (g0 ? x[1] : x[0]) + __shfl_xor_sync(0xFFFFFFFFu, g0 ? x[0] : x[1], 4);
}

/// The query of column_sum8's result in group kk for lane (g, t) (group kk of half h is group
/// 2h + kk of the tile: s_key(nt + 8, n) = 64 + s_key(nt, n)).
__device__ __forceinline__ int column_sum8_query(int kk, int g, int t) {
  return s_key(4 * kk + g / 2, 2 * t + g % 2);
}

/// Stores the dŜ codes of one A fragment (to_a_frags' a[kk], over queries 32kk.. of the tile) into
/// the [query][key] tile sds (kBN-byte rows, 128-byte swizzle; K-major for dQ's A): byte c of a[r]
/// is key 16w + g + 8(r % 2) of the warpgroup's keys, query 32kk + 16(r / 2) + 4t + c, one byte
/// store each (the lockstep kernel's form: store_ds_frag's shuffles cost its head_dim 128 kernel 8
/// more bytes of spill).
__device__ __forceinline__ void store_ds_bytes(uint8_t* sds, const Lane& ln, int kk, const uint32_t (&a)[4]) {
  const int key = kWgKeys * ln.wg + 16 * ln.w + ln.g;
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int q = 32 * kk + 16 * (r / 2) + 4 * ln.t + c;
      sds[swizzle<128>(q * kBN + key + 8 * (r % 2))] = uint8_t(a[r] >> (8 * c));
    }
}

/// store_ds_bytes' stores as 32-bit words (the warp-specialized kernel's form). The four
/// lanes g0..g0 + 3 (g0 = g & 4) of one t transpose their 4 x 4 bytes by two shuffles (lane ^ 8,
/// lane ^ 4) and byte permutes, so that lane g0 + i stores one 32-bit word: query 32kk + 16(r / 2)
/// + 4t + i, keys g0..g0 + 3 (+ 8(r % 2)) — 4 stores a fragment instead of 16 byte stores.
__device__ __forceinline__ void store_ds_frag(uint8_t* sds, const Lane& ln, int kk, const uint32_t (&a)[4]) {
  const int i = ln.g & 3, g0 = ln.g & 4;
  // byte n of __byte_perm(x, y, s) is byte s_n of (y:x). After the lane ^ 8 swap lane i holds
  // queries 2(i >> 1), + 1 of keys i & 1 and (i & 1) + 2; after the lane ^ 4 swap query i of keys 0..3.
  const unsigned sel1 = (i & 2) ? 0x3276u : 0x5410u, sel2 = (i & 1) ? 0x3715u : 0x6240u;
  const int key = kWgKeys * ln.wg + 16 * ln.w + g0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const uint32_t w1 = __byte_perm(a[r], __shfl_xor_sync(0xFFFFFFFFu, a[r], 8), sel1);
    const uint32_t w2 = __byte_perm(w1, __shfl_xor_sync(0xFFFFFFFFu, w1, 4), sel2);
    const int q = 32 * kk + 16 * (r / 2) + 4 * ln.t + i;
    *reinterpret_cast<uint32_t*>(sds + swizzle<128>(q * kBN + key + 8 * (r % 2))) = w2;
  }
}

}  // namespace octet::cuda::flash::bwdw
