// src/cuda/attention/glue/pack_tile.cuh — what the pack kernels share (glue.cu's staged pack,
// pack_codes.cu's code pack, pack_block.cu's one-pass block pack): the 64-token × 64-column tile of
// one head that a CTA of 256 threads packs, the set of up to kMaxPackSet tensors one launch takes
// (the grid's z), and the 8-element load; the launches of the code pack and the block pack.
// Internal to src/cuda/attention/glue/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/attention/glue/glue.h"
#include "cuda/runtime/typed.cuh"
#include "octet/error.h"

namespace octet::cuda {

constexpr int kPackThreads = 256;
constexpr int kPackTileT = 64, kPackTileD = 64;

/// The tensors one pack launch takes (blockIdx.z: the tensor). Grid: x = B·heads·⌈D/64⌉
/// (head-major), y = ⌈T_p/64⌉, each the largest tensor's (a CTA past its tensor's tiles returns).
struct PackSet {
  int count = 0;
  PackArgs a[kMaxPackSet];
  /// Where the one-pass block pack (pack_block.cu) writes each tensor's per-(head, block) amax
  /// bits, the entries pack_block_amax_launch would write (the other packs read a[i].amax_bits).
  unsigned* amax_out[kMaxPackSet] = {};
  /// a[0] and a[1] are two copies of one tensor (the same x, dims and layout; glue.h
  /// pack_d_o_launch): one CTA loads each tile once and encodes a[0]'s copies (rows only, no row
  /// factor) from the values and a[1]'s from the values times a[1].row_factor; z = 1. The code
  /// pack only.
  bool paired = false;
};

/// The grid of one pack launch over `set`: x = the widest tensor's B·heads·⌈D/64⌉, y = the longest
/// one's ⌈T_p/64⌉, z = the tensors (1 for a paired set). Throws octet::Error when a tensor is too large for
/// the grid.
inline dim3 pack_grid(const PackSet& set) {
  int64_t gx = 1, ntt = 1;
  for (int i = 0; i < set.count; ++i) {
    const PackArgs& a = set.a[i];
    gx = std::max(gx, a.B * a.heads * ((a.D + kPackTileD - 1) / kPackTileD));
    ntt = std::max(ntt, (a.T_p + kPackTileT - 1) / kPackTileT);
  }
  OCTET_CHECK(ntt <= 65535, "attention pack: sequence length " + std::to_string(ntt * kPackTileT) +
                                " (padded) is beyond the pack's " + std::to_string(65535 * kPackTileT) +
                                " tokens (the grid's y dimension, 65535 tiles of " +
                                std::to_string(kPackTileT) + ")");
  OCTET_CHECK(gx <= 0x7FFFFFFF, "attention pack: batch · heads · ⌈head_dim/" + std::to_string(kPackTileD) +
                                    "⌉ = " + std::to_string(gx) + " is beyond the grid's 2^31 − 1 CTAs");
  return dim3(unsigned(gx), unsigned(ntt), unsigned(set.paired ? 1 : set.count));
}

/// Eight consecutive elements as FP32: one vector load when `vec` (16-byte aligned), else scalars.
template <class T>
__device__ __forceinline__ void load8(const T* p, bool vec, float v[8]) {
  if (vec) {
    ld8(p, v);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = ld(p, j);
  }
}

/// True if pack_codes_launch takes every tensor of the set: FP8 codes (or nothing) in both copies.
bool pack_codes_takes(const PackSet& set);

/// The code pack of a checked set of one input dtype (pack_codes.cu): the staged pack's bits.
void pack_codes_launch(const PackSet& set, cudaStream_t s);

/// True if pack_block_launch takes every tensor of the set: FP8 codes (or nothing) in both copies,
/// per-(head, block) scales of 64 or 128 tokens (the same for all), head_dim <= 128, no row factor,
/// under 2^31 elements.
bool pack_block_takes(const PackSet& set);

/// The one-pass block pack of a checked set of one input dtype and one scale_block (pack_block.cu):
/// the amax entries into set.amax_out[i] and the copies, bitwise those of pack_block_amax_launch and
/// the code pack.
void pack_block_launch(const PackSet& set, cudaStream_t s);

}  // namespace octet::cuda
