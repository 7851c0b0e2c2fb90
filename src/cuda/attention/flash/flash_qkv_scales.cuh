// src/cuda/attention/flash/flash_qkv_scales.cuh — where the flash FP8 attention kernels read the scales of
// Q̂, K̂ and V̂: one per tensor (QkvScaling::Tensor) or one per (batch, head, 128-token block)
// (QkvScaling::HeadBlock, octet/attention.h; the CPU twin's blocks, src/cpu/attention_quant.cpp
// round_qkv). Every kernel tile lies inside one block (query and key tiles of 64 or 128 tokens
// start at multiples of their size; T rounded up to 16 stays in T's last block), so a tile's S, dP
// and products take one scale of each operand: S = τ·(Q̂K̂ᵀ)·sq·sk and dP = (dÔV̂ᵀ)·sdo·sv per tile,
// in the per-tensor kernels' order (the same bits when the scales are per tensor).
// The 1/scale arrays: Q̂'s [B, H, ⌈Tq/128⌉], K̂'s and V̂'s [B, G, ⌈Tk/128⌉] (one float each per tensor).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quantize/qtensor.h"
#include "octet/attention.h"

namespace octet::cuda::flash {

inline constexpr int64_t kQkvBlock = kQkvScaleBlock;  ///< tokens per scale block (octet/attention.h)

/// 1/scale at token t of head `head` (of T tokens) from `inv`: one float per tensor, or with
/// `blocks` one per (head, 128-token block).
__device__ __forceinline__ float inv_at(const float* inv, bool blocks, int64_t head, int64_t T, int64_t t) {
  return blocks ? inv[head * ceil_div(T, kQkvBlock) + t / kQkvBlock] : *inv;
}

/// 1/scale of Q̂ at query row i of head bh = b·H + h, of K̂ and V̂ at key j of KV head bg = b·G + g.
/// P: ForwardParams or BackwardParams.
template <class P>
__device__ __forceinline__ float q_inv_at(const P& p, int64_t bh, int64_t i) {
  return inv_at(p.q_scale_inv, p.qkv_head_block, bh, p.Tq, i);
}
template <class P>
__device__ __forceinline__ float k_inv_at(const P& p, int64_t bg, int64_t j) {
  return inv_at(p.k_scale_inv, p.qkv_head_block, bg, p.Tk, j);
}
template <class P>
__device__ __forceinline__ float v_inv_at(const P& p, int64_t bg, int64_t j) {
  return inv_at(p.v_scale_inv, p.qkv_head_block, bg, p.Tk, j);
}

/// The factor a tile's dQ or dK product takes for the other operand's scale (x_inv: K̂'s for dQ,
/// Q̂'s for dK): x_inv with blocks (the accumulators hold values), 1 per tensor (they hold code
/// units, scaled once at the end: flash_bwd_launch.cu's unpad).
template <class P>
__device__ __forceinline__ float grad_factor(const P& p, float x_inv) {
  return p.qkv_head_block ? x_inv : 1.0f;
}

/// A backward tile's scalars for the query block of row i0 of head bh and the key block of key j0
/// of KV head bg: s_scale = τ·sq·sk (the forward's product, in its order) and dp_scale = sdo·sv.
/// P: BackwardParams.
struct TileScales {
  float s_scale, dp_scale;
};
template <class P>
__device__ __forceinline__ TileScales tile_scales(const P& p, int64_t bh, int64_t i0, int64_t bg,
                                                  int64_t j0) {
  return {p.tau * q_inv_at(p, bh, i0) * k_inv_at(p, bg, j0), *p.do_scale_inv * v_inv_at(p, bg, j0)};
}

}  // namespace octet::cuda::flash
