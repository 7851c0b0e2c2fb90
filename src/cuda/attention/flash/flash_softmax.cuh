// src/cuda/attention/flash/flash_softmax.cuh — the online softmax of the flash FP8 attention forward, per
// query row, independent of the MMA flavor (flash_mma_sm89.cuh): the state (m, l) of one row and
// its update by one key tile, the CPU flash form's semantics (src/cpu/attention_flash.cpp;
// FlashAttention-2, arXiv 2307.08691, with FlashAttention-3's FP8 P, arXiv 2407.08608):
//   m_new = max(m, rowmax S_tile);  α = exp(m − m_new) (0 while m = −inf);
//   l = α·l + Σ exp(S − m_new);  P̃ = E4M3(exp(S − m_new)·p_scale);  l̃ = α·l̃ + Σ decoded P̃.
// S = c·ŝ (ŝ the code products, c = τ·sq·sk). The max is taken over ŝ and scaled once: m =
// RN(c·max ŝ), the bits of max RN(c·ŝ) (rounding is monotone and c > 0), so the saved m is the max
// of the logits kernel's S. Each exponential is one FFMA and one ex2 (FlashAttention-3's form):
//   exp(S − m)·p_scale = 2^(ŝ·RN(c·log2 e) + RN(log2 p_scale − RN(m·log2 e)))   (exp2_scaled),
// which folds the scale, the subtraction, the log2 e factor and p_scale into the FFMA. Its
// argument differs from the backward's RN(RN(c·ŝ) − m)·log2 e (exp_rel) by a few FP32 ulp of
// |S|·log2 e (the CPU twin computes std::exp(S − m) on its own S), so P̃ codes and l differ from
// the twin's where a value lies within that of a rounding boundary (the tolerances the tests
// state). l is summed in p_scale units (every term times the same power of two: the same
// roundings in FP32's normal range) and divided by p_scale once at the end (exact unless a lane's
// partial is below 2^-118: subnormal after the division, negligible beside l ≥ 1).
// run_forward checks that p_scale is a power of two (its log2 is read from the exponent bits).
// The caller scales its O accumulator by the returned α. A row's values are spread over the 4
// lanes of a quad (the accumulator layout of mma.sync and of a wgmma row alike): the max is reduced
// over the quad at every tile; l stays a per-lane partial sum (rescaled by α) reduced once at the
// end. l̃ is kept in code units (Σ decode(code) = p_scale · Σ P̃, exact: p_scale is a power of two),
// which is what the P̃V̂ accumulator is in; the kernel gets it from the tensor core (a column of
// ones), so each tile's Σ P̃ is summed there and added in FP32, exactly as every column of O.
// FP32 order vs the CPU twin: the CPU sums l key by key in key order; here each lane sums its keys
// of a tile pairwise, adds that to its α-scaled partial, then the quad adds its 4 partials.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/quantize/fp8_device.cuh"

namespace octet::cuda::flash {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
}

/// 2^(s·c2 + b) by one FFMA and the SFU's ex2.approx.ftz (PTX ex2.approx: max relative error 2^-22,
/// results below 2^-126 flush to 0, 2^−inf = 0): exp(S − m)·p_scale of a code product s with
/// c2 = RN(c·log2 e) and b = RowSoftmax::bias (file comment).
__device__ __forceinline__ float exp2_scaled(float s, float c2, float b) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(__fmaf_rn(s, c2, b)));
  return y;
}

/// The online-softmax state of one query row (this lane's share of l). l̃ = Σ decoded P̃ is not
/// kept here: the kernel sums it on the tensor core, as one more column of P̃V̂ with V = 1
/// (flash_fwd_sm89.cu), so it is rescaled with O by the same α.
struct RowSoftmax {
  float m = -INFINITY;  ///< running max of S (quad-uniform)
  float l = 0.0f;       ///< this lane's Σ exp(S − m)·p_scale, unrounded (p_scale units)

  /// Starts a tile whose largest value of S in this lane is `lane_max` (−inf for masked keys):
  /// sets m to the new running max and returns α = exp(m_old − m_new), by which l (done here) and
  /// the caller's O and l̃ accumulators are rescaled.
  __device__ __forceinline__ float begin_tile(float lane_max) {
    const float m_new = fmaxf(m, quad_max(lane_max));
    const float alpha = m == -INFINITY ? 0.0f : exp_rel(m - m_new);
    m = m_new;
    l *= alpha;
    return alpha;
  }
  /// exp2_scaled's b for this tile: log2(p_scale) − RN(m·log2 e) (log2_p = log2 p_scale, an
  /// integer), or log2_p while the row has seen no key (all S = −inf: 2^−inf = 0, never
  /// 2^(−inf + inf)).
  __device__ __forceinline__ float bias(float log2_p) const {
    return m == -INFINITY ? log2_p : log2_p - __fmul_rn(m, 1.4426950408889634f);
  }
  /// The row's Σ exp(S − m) over this lane's keys: l / p_scale (exact).
  __device__ __forceinline__ float lane_sum(float p_scale) const { return __fdiv_rn(l, p_scale); }
};

}  // namespace octet::cuda::flash
