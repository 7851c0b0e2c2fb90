// src/cuda/attention/flash/flash_softmax.cuh — the online softmax of the flash FP8 attention forward, per
// query row, independent of the MMA flavor (flash_mma_sm89.cuh): the state (m, l, l̃) of one row
// and its update by one key tile, as the CPU flash form does it (src/cpu/attention_flash.cpp;
// FlashAttention-2, arXiv 2307.08691, with FlashAttention-3's FP8 P, arXiv 2407.08608):
//   m_new = max(m, rowmax S_tile);  α = exp(m − m_new) (0 while m = −inf);
//   l = α·l + Σ exp(S − m_new);  P̃ = E4M3(exp(S − m_new)·p_scale);  l̃ = α·l̃ + Σ decoded P̃.
// exp is flash_mma_sm89.cuh exp_rel (ex2.approx with log2 e folded in), the codes the hardware cvt.
// The caller scales its O accumulator by the returned α. A row's values are spread over the 4
// lanes of a quad (the accumulator layout of mma.sync and of a wgmma row alike): the max is reduced
// over the quad at every tile; l stays a per-lane partial sum (rescaled by α) reduced once at the
// end. l̃ is kept in code units (Σ decode(code) = p_scale · Σ P̃, exact: p_scale is a power of two),
// which is what the P̃V̂ accumulator is in; the kernel gets it from the tensor core (a column of
// ones), so each tile's Σ P̃ is summed there and added in FP32, exactly as every column of O.
// FP32 order vs the CPU twin: the CPU sums l and l̃ key by key in key order; here each lane sums its
// keys of l, then the quad adds its 4 partials — the same terms, another rounding order.
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

/// The online-softmax state of one query row (this lane's share of l). l̃ = Σ decoded P̃ is not
/// kept here: the kernel sums it on the tensor core, as one more column of P̃V̂ with V = 1
/// (flash_fwd_sm89.cu), so it is rescaled with O by the same α.
struct RowSoftmax {
  float m = -INFINITY;  ///< running max of S (quad-uniform)
  float l = 0.0f;       ///< this lane's Σ exp(S − m), unrounded

  /// Starts a tile whose largest value of S in this lane is `lane_max` (−inf for masked keys):
  /// sets m to the new running max and returns α = exp(m_old − m_new), by which l (done here) and
  /// the caller's O and l̃ accumulators are rescaled. After it, exp(S − pivot()) is the tile's P.
  __device__ __forceinline__ float begin_tile(float lane_max) {
    const float m_new = fmaxf(m, quad_max(lane_max));
    const float alpha = m == -INFINITY ? 0.0f : exp_rel(m - m_new);
    m = m_new;
    l *= alpha;
    return alpha;
  }
  /// The value S is taken relative to: m, or 0 while the row has seen no key (all S = −inf, so
  /// exp(S − 0) = 0 and never exp(−inf + inf)).
  __device__ __forceinline__ float pivot() const { return m == -INFINITY ? 0.0f : m; }
  /// P̃ E4M3 codes of two keys with logits s0, s1 (masked: −inf) relative to `piv` (= pivot()),
  /// s0 in the low byte (hardware RNE, saturating: fp8_encode's bits for these values in
  /// [0, p_scale]); adds their exp(S − m) to l.
  __device__ __forceinline__ uint32_t p_codes(float s0, float s1, float piv, float p_scale) {
    const float e0 = exp_rel(s0 - piv), e1 = exp_rel(s1 - piv);
    l += e0;
    l += e1;
    return fp8x2(e0 * p_scale, e1 * p_scale, false);
  }
};

}  // namespace octet::cuda::flash
