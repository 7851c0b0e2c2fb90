// src/cuda/attention/flash/flash_bwd_parts_sm90.cuh — the step pieces both wgmma (Hopper, sm_90a)
// main kernels of the flash FP8 attention backward share: flash_bwd_sm90.cu (128 x 128 dS scale
// tiles, two warpgroups in step) and flash_bwd_ws_sm90.cu (64 x 64 tiles, a producer warpgroup and
// two independent consumers). The row residual sums, dS = P∘(dP − D) from the dPᵀ accumulator, dV's
// product, the staged dQ, and the epilogue into the caller's dK, dV. Semantics: flash.h (CPU twin:
// src/cpu/attention_backward_tile.cpp); Delta-Matching (arXiv 2609.37852) for the residual;
// docs/attention.md §"Backward".
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/act_layout.h"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm90.cuh"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_qkv_scales.cuh"
#include "cuda/attention/flash/flash_wgmma_sm90.cuh"
#include "cuda/quantize/fp8_device.cuh"
#include "octet/delta_rule.h"

namespace octet::cuda::flash::bwdw {

// The row residual sums of one product's kN queries q_off.. (flash_bwd_sm89.cu tile_ds's, per
// query column here): dS of this lane's elements by the main loop's formula, (Σ dS, Σ P(|dP| +
// |D|)) in FP64 summed over the lane's two keys and the 8 lanes of a column (column_sum8), added
// to res_sums by FP64 atomics.
template <bool kFull, int kNT>
__device__ __forceinline__ void residual_sums(const BackwardParams& p, const ColStats& cs, const Lane& ln,
                                              int64_t kbase, int q_off, float dp_scale, int64_t bh,
                                              int64_t i0, const float (&s)[kNT][4],
                                              const float (&dp)[kNT][4]) {
#pragma unroll
  for (int kk = 0; kk < kNT / 4; ++kk) {
    double rs[8], rm[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) rs[u] = rm[u] = 0.0;
    bwdw::for_each_dp<kFull>(cs, ln, kbase, q_off, dp_scale, dp,
                             [&](int nt, int el, int q, bool in, float dpv) {
                               if (nt / 4 != kk || !in) return;
                               const int u = 2 * (nt % 4) + el % 2;
                               const float d = cs.delta[q];
                               rs[u] += double(RowDelta<float>{d}.ds(s[nt][el], dpv));
                               rm[u] += double(s[nt][el]) * (fabs(double(dpv)) + fabs(double(d)));
                             });
    const double x = bwdw::column_sum8(rs, ln.g), y = bwdw::column_sum8(rm, ln.g);
    const int64_t i = i0 + q_off + bwdw::column_sum8_query(kk, ln.g, ln.t);
    if (i < p.Tq) {
      atomicAdd(p.res_sums + 2 * (bh * p.Tq + i), x);
      atomicAdd(p.res_sums + 2 * (bh * p.Tq + i) + 1, y);
    }
  }
}

// One head_dim part of dV's product, issued and committed as one group but not waited for: acc =
// P̃ᵀ(dO/l)~ over kQs queries (A = P̃ᵀ fragments pa, queries 32kk.. at pa[kk]; B = kNd rows of
// (dO/l)~ᵀ [kD][kQs] at `dvo_rows`, kQs-byte swizzle), k-steps kk = 0.. in order from a zero
// accumulator. acc and pa are the tensor core's until the caller's wgmma_wait and fence_regs.
template <bool kDoE5M2, int kNd, int kQs>
__device__ __forceinline__ void dv_issue(unsigned dvo_rows, uint32_t (&pa)[kQs / 32][4],
                                         float (&acc)[kNd / 8][4]) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kQs / 32; ++kk)
    WgmmaFp8<kNd, false, kDoE5M2>::rs(acc, pa[kk], kmajor_desc<kQs>(dvo_rows + 32 * kk), kk);
  wgmma_commit();
}

// dv's n-tiles part·kNd/8.. += acc (FP32, outside the tensor core), after acc's wgmma_wait.
template <int kD, int kNd>
__device__ __forceinline__ void dv_fold(int part, float (&acc)[kNd / 8][4], float (&dv)[kD / 8][4]) {
  fence_regs(acc);
#pragma unroll
  for (int dn = 0; dn < kNd / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[part * kNd / 8 + dn][e] += acc[dn][e];
}

// dV += P̃ᵀ(dO/l)~ over a step's kQs queries (128 or 64): dv_issue at `dvo_t` in head_dim parts of
// kNd columns (rows of B), each waited for and added in FP32 to dv's n-tiles of that part (kNd = kD
// at head_dim 64; 64 at 128: a 32-register accumulator beside dK, dV).
template <int kD, bool kDoE5M2, int kNd, int kQs>
__device__ __forceinline__ void dv_product(unsigned dvo_t, uint32_t (&pa)[kQs / 32][4],
                                           float (&dv)[kD / 8][4]) {
#pragma unroll
  for (int part = 0; part < kD / kNd; ++part) {
    float acc[kNd / 8][4];
    dv_issue<kDoE5M2, kNd, kQs>(dvo_t + unsigned(part * kNd * kQs), pa, acc);
    wgmma_wait<0>();
    fence_regs(pa);
    dv_fold<kD, kNd>(part, acc, dv);
  }
}

// dS = P∘(dP − D) of the kN queries q_off.. from their dPᵀ product dp, in place of s (P); the
// lane's |dS| amax bits into amax; the residual sums first when kRes.
template <bool kRes, int kNT>
__device__ __forceinline__ void dp_to_ds(const BackwardParams& p, const ColStats& cs, const Lane& ln,
                                         int64_t kbase, int q_off, const TileScales& sc, int64_t bh,
                                         int64_t i0, bool full, const float (&dp)[kNT][4], float (&s)[kNT][4],
                                         unsigned& amax) {
  if constexpr (kRes) {  // FP64 (Σ dS, Σ P(|dP| + |D|)) per query, only when asked for
    if (full)
      residual_sums<true>(p, cs, ln, kbase, q_off, sc.dp_scale, bh, i0, s, dp);
    else
      residual_sums<false>(p, cs, ln, kbase, q_off, sc.dp_scale, bh, i0, s, dp);
  }
  auto ds = [&](int nt, int el, int q, bool in, float dpv) {
    const float x = in ? RowDelta<float>{cs.delta[q]}.ds(s[nt][el], dpv) : 0.0f;
    s[nt][el] = x;
    amax = max(amax, __float_as_uint(x) & 0x7FFFFFFFu);
  };
  if (full)
    bwdw::for_each_dp<true>(cs, ln, kbase, q_off, sc.dp_scale, dp, ds);
  else
    bwdw::for_each_dp<false>(cs, ln, kbase, q_off, sc.dp_scale, dp, ds);
}

// dPᵀ of the kN queries q_off.. (B rows at do_rows), then dp_to_ds.
template <int kD, bool kDoE5M2, bool kRes, int kNT>
__device__ __forceinline__ void tile_ds(const BackwardParams& p, const ColStats& cs, const Lane& ln,
                                        int64_t kbase, int q_off, const TileScales& sc, int64_t bh,
                                        int64_t i0, bool full, unsigned a_v, unsigned do_rows,
                                        float (&s)[kNT][4], unsigned& amax) {
  float dp[kNT][4];
  bwdw::tile_product<kD, kDoE5M2>(a_v, do_rows, dp);
  dp_to_ds<kRes>(p, cs, ln, kbase, q_off, sc, bh, i0, full, dp, s, amax);
}

// dQ by TMA (BackwardParams::dq_tma): this lane's part of a step's τ dŜK̂ (aq · gq_scale, a
// warpgroup's 64 query rows, the lane's rows row0 and row0 + 8 of the staged tile) into shared
// memory at `stage` as the four boxes of the dq map, box c = head_dim columns kD/4·c.. at stage +
// c·kRows·kD ([kRows][kD/4] FP32: rows of kD bytes, kD-byte swizzle; float2 stores, two wavefronts
// a warp). Rows past Tq hold zeros (dS = 0 there), and rows past Tq_p are outside the map: the
// reduce adds nothing to another head's rows.
template <int kD, int kRows>
__device__ __forceinline__ void stage_dq(unsigned stage, const Lane& ln, int row0,
                                         const float (&aq)[kD / 8][4], float g_scale) {
  constexpr int kNtPerBox = kD / 32;  // n-tiles of 8 columns in one box of kD/4 columns
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn) {
    const unsigned box = stage + unsigned((dn / kNtPerBox) * (kRows * kD));
    const int col = 8 * (dn % kNtPerBox) + 2 * ln.t;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = row0 + 8 * r;
      st_shared_f32x2(box + unsigned(swizzle<kD>(q * kD + 4 * col)), aq[dn][2 * r] * g_scale,
                      aq[dn][2 * r + 1] * g_scale);
    }
  }
}

// The FP32 sum of the 16 FP8 codes of w in order (fp8x2_to_f16x2: exact), pairs summed first: the
// dQ row-sum projection's row sums (add_ds_row_sums in both wgmma kernels).
template <bool kDsE5M2>
__device__ __forceinline__ float sum_codes16(const uint4& w, float sum) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int hw = 0; hw < 2; ++hw) {
      const uint32_t h = fp8x2_to_f16x2<kDsE5M2>(uint16_t(words[k] >> (16 * hw)));
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
      sum += f.x + f.y;
    }
  return sum;
}

// One value pair of the caller's dK or dV at element offset i: FP32, or each rounded once to BF16
// (bf16_from_float, as unpad_scale_launch stores).
__device__ __forceinline__ void store_pair(void* out, bool bf16, int64_t i, float x, float y) {
  if (bf16)
    *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(out) + i) =
        uint32_t(bf16_from_float(x)) | uint32_t(bf16_from_float(y)) << 16;
  else
    *reinterpret_cast<float2*>(static_cast<float*>(out) + i) = make_float2(x, y);
}

// The epilogue into the caller's tensors (BackwardParams::dk_out, dv_out): this lane's keys
// kbase + g (+ 8) below Tk of KV head row bg (= b·G + g), dK × sq (per-tensor scales; the values with
// per-block scales) and dV already scaled, each product formed as unpad_scale_launch forms it (x ·
// f, f = 1 · sq) and rounded once: the same bits as dk_acc, dv_acc through that pass.
template <int kD>
__device__ __forceinline__ void store_dkv_direct(const BackwardParams& p, const Lane& ln, int64_t bg,
                                                 int64_t kbase, const float (&dk)[kD / 8][4],
                                                 const float (&dv)[kD / 8][4], float dv_scale) {
  const float dk_f = p.qkv_head_block ? 1.0f : *p.q_scale_inv;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = kbase + ln.g + 8 * r;
    if (j >= p.Tk) continue;
    const int64_t row = act_row_offset(p.tokens_major, bg, j, p.G, p.Tk, kD) + 2 * ln.t;
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      store_pair(p.dk_out, p.dkv_bf16, row + 8 * dn, dk[dn][2 * r] * dk_f, dk[dn][2 * r + 1] * dk_f);
      store_pair(p.dv_out, p.dkv_bf16, row + 8 * dn, dv[dn][2 * r] * dv_scale, dv[dn][2 * r + 1] * dv_scale);
    }
  }
}

// The epilogue into the FP32 accumulators (BackwardParams::dk_acc, dv_acc [B·G][Tk_p][kD]): this
// lane's keys kbase + g (+ 8) below Tk_p of KV head row bg, dV × dv_scale, dK as summed (Q̂'s code
// units per tensor, values with per-block scales).
template <int kD>
__device__ __forceinline__ void store_dkv_acc(const BackwardParams& p, const Lane& ln, int64_t bg,
                                              int64_t kbase, const float (&dk)[kD / 8][4],
                                              const float (&dv)[kD / 8][4], float dv_scale) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = kbase + ln.g + 8 * r;
    if (j >= p.Tk_p) continue;
    float* const ov = p.dv_acc + (bg * p.Tk_p + j) * kD + 2 * ln.t;
    float* const ok = p.dk_acc + (bg * p.Tk_p + j) * kD + 2 * ln.t;
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      *reinterpret_cast<float2*>(ov + 8 * dn) =
          make_float2(dv[dn][2 * r] * dv_scale, dv[dn][2 * r + 1] * dv_scale);
      *reinterpret_cast<float2*>(ok + 8 * dn) = make_float2(dk[dn][2 * r], dk[dn][2 * r + 1]);
    }
  }
}

}  // namespace octet::cuda::flash::bwdw
