// src/cuda/flash/flash_softmax.cuh — the online softmax of the fused FP8 attention forward, per
// query row, independent of the MMA flavor (flash_mma_sm89.cuh): the state (m, l, l̃) of one row
// and its update by one key tile, as the CPU tiled form does it (src/cpu/attention_tiled.cpp;
// FlashAttention-2, arXiv 2307.08691, with FlashAttention-3's FP8 P, arXiv 2407.08608):
//   m_new = max(m, rowmax S_tile);  α = exp(m − m_new) (0 while m = −inf);
//   l = α·l + Σ exp(S − m_new);  P̃ = E4M3(exp(S − m_new)·p_scale);  l̃ = α·l̃ + Σ decoded P̃.
// The caller scales its O accumulator by the returned α. A row's values are spread over the 4
// lanes of a quad (the accumulator layout of mma.sync and of a wgmma row alike): the max is reduced
// over the quad at every tile; l and l̃ stay per-lane partial sums (each rescaled by the same α)
// and are reduced once at the end. l̃ is kept in code units (Σ decode(code) = p_scale · Σ P̃, exact:
// p_scale is a power of two), which is what the P̃V̂ accumulator is in.
// FP32 order vs the CPU twin: the CPU sums l and l̃ key by key in key order; here each lane sums its
// keys, then the quad adds its 4 partials — the same terms, another rounding order.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace octet::cuda::flash {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
}

/// E4M3 codes of (x0, x1) (round to nearest even, saturating: the CPU's fp8_round of a value in
/// [0, p_scale]), x0 in the low byte; adds their decoded values to *sum.
__device__ __forceinline__ uint16_t e4m3x2(float x0, float x1, float* sum) {
  const __nv_fp8x2_storage_t c =
      __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, __NV_E4M3);
  const float2 d = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(c, __NV_E4M3)));
  *sum += d.x + d.y;
  return uint16_t(c);
}

/// The online-softmax state of one query row (this lane's share of l and l̃).
struct RowSoftmax {
  float m = -INFINITY;  ///< running max of S (quad-uniform)
  float l = 0.0f;       ///< this lane's Σ exp(S − m), unrounded
  float l_hat = 0.0f;   ///< this lane's Σ decoded P̃ codes (p_scale · Σ P̃)

  /// Starts a tile whose largest value of S in this lane is `lane_max` (−inf for masked keys):
  /// sets m to the new running max and returns α = exp(m_old − m_new), by which l, l̃ (done here)
  /// and the caller's O accumulator are rescaled. After it, exp(S − pivot()) is the tile's P.
  __device__ __forceinline__ float begin_tile(float lane_max) {
    const float m_new = fmaxf(m, quad_max(lane_max));
    const float alpha = m == -INFINITY ? 0.0f : expf(m - m_new);
    m = m_new;
    l *= alpha;
    l_hat *= alpha;
    return alpha;
  }
  /// The value S is taken relative to: m, or 0 while the row has seen no key (all S = −inf, so
  /// exp(S − 0) = 0 and never exp(−inf + inf)).
  __device__ __forceinline__ float pivot() const { return m == -INFINITY ? 0.0f : m; }
  /// P̃ codes of two keys with logits s0, s1 (masked: −inf); adds to l and l̃.
  __device__ __forceinline__ uint16_t p_codes(float s0, float s1, float p_scale) {
    const float e0 = expf(s0 - pivot()), e1 = expf(s1 - pivot());
    l += e0;
    l += e1;
    return e4m3x2(e0 * p_scale, e1 * p_scale, &l_hat);
  }
};

}  // namespace octet::cuda::flash
