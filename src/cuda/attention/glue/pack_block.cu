// src/cuda/attention/glue/pack_block.cu — the one-pass block pack (glue.h PackKernel::Block): with
// per-(head, block) scales a block's amax is local to the tokens of that block, so one CTA per
// (head, block of 64 or 128 tokens) loads the block's values once (all of head_dim <= 128, held in
// registers: up to 2 × 2 tiles of 64 tokens × 64 columns, 64 values per thread), reduces their
// amax over the CTA, writes it and 1/s, and packs the same values into the row copy and the group
// transpose with the code pack's tile phases (pack_codes_tile.cuh). The separate amax launch and its
// read of the input are gone: the forward's Q, K, V are read once instead of twice. Bits: those of
// pack_block_amax_launch followed by the code pack (the same amax over the same values, the same
// encode), which tests/cuda/attention/glue/pack_variants_test.cpp checks. ptxas (sm_90a, three CTAs
// of 256 threads per SM asked for): 80 registers, 16.1 KiB of shared memory, 16 bytes of spill
// stores in the BF16 instance (106-112 registers and two CTAs per SM without the bound). Where it
// writes: pack_codes_layout.h, whose CPU test simulates every CTA. Not yet timed on a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/glue/pack_codes_tile.cuh"
#include "cuda/attention/glue/pack_tile.cuh"
#include "cuda/ops/reduce_util.cuh"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

// The most 64 × 64 tiles a CTA covers along the tokens (a 128-token block) and along head_dim (128).
constexpr int kBlockTilesT = 2, kBlockTilesD = 2;
constexpr int64_t kMaxBlockTokens = kBlockTilesT * kPackTileT, kMaxBlockD = kBlockTilesD * kPackTileD;

// f(i, j, t0, d0) for each tile (i, j) of token block k that block_pack_tile names (unrolled: the
// tile indices are compile-time, so v[i][j] stays in registers).
template <class F>
__device__ __forceinline__ void for_each_block_tile(int k, int block, int T_p, int D, F&& f) {
#pragma unroll
  for (int i = 0; i < kBlockTilesT; ++i)
#pragma unroll
    for (int j = 0; j < kBlockTilesD; ++j) {
      int t0, d0;
      if (block_pack_tile(k, block, i, j, T_p, D, t0, d0)) f(i, j, t0, d0);
    }
}

// Grid: x = (b·heads + h)·nb + k for block k of nb = ⌈T/scale_block⌉ (the widest tensor's), y = the
// tensor; a CTA past its tensor's blocks returns.
template <class X>
__global__ void __launch_bounds__(kPackThreads, 3) pack_block_kernel(const __grid_constant__ PackSet set) {
  __shared__ alignas(16) uint8_t tiles[kBlockTilesT * kBlockTilesD][kPackTileT * kPackTileD];
  __shared__ unsigned scratch[32];
  const PackArgs& a = set.a[blockIdx.y];
  const int heads = int(a.heads), block = int(a.scale_block), T_p = int(a.T_p);
  const int nb = int(ceil_div(a.T, a.scale_block));
  const int bh = int(blockIdx.x) / nb, k = int(blockIdx.x) % nb;
  if (bh >= int(a.B) * heads) return;  // uniform over the block
  const int b = bh / heads, h = bh % heads, tid = threadIdx.x;
  const int D = int(a.D);

  // One read of the block: the values stay in registers for the encode.
  float v[kBlockTilesT][kBlockTilesD][2][8];
  unsigned m = 0;
  for_each_block_tile(k, block, T_p, D, [&](int i, int j, int t0, int d0) {
    codes_tile_load<X>(a, b, h, t0, d0, tid, v[i][j]);
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int e = 0; e < 8; ++e) m = max(m, __float_as_uint(v[i][j][p][e]) & 0x7FFFFFFFu);
  });
  m = block_max(m, scratch, 0u);  // every thread gets the block's amax
  const float s = scale_from_amax(amax_from_bits(m), a.format);
  const CodesTensor ct = codes_tensor(a);  // before this CTA's first store
  if (tid == 0) {
    const int64_t si = int64_t(bh) * nb + k;
    set.amax_out[blockIdx.y][si] = m;
    a.scale_inv[si] = 1.0f / s;
  }
  for_each_block_tile(k, block, T_p, D, [&](int i, int j, int t0, int d0) {
    codes_tile_encode(ct, bh, t0, d0, tid, v[i][j], s, tiles[i * kBlockTilesD + j]);
  });
  if (!ct.transposed) return;  // uniform over the block
  __syncthreads();
  for_each_block_tile(k, block, T_p, D, [&](int i, int j, int t0, int d0) {
    codes_tile_transpose(ct, b, h, t0, d0, tid, tiles[i * kBlockTilesD + j]);
  });
}

}  // namespace

bool pack_block_takes(const PackSet& set) {
  if (!pack_codes_takes(set)) return false;  // FP8 codes (or nothing) in both copies, under 2^31
  for (int i = 0; i < set.count; ++i) {
    const PackArgs& a = set.a[i];
    const bool block_ok = a.scale_block > 0 && a.scale_block <= kMaxBlockTokens &&
                          a.scale_block % kPackTileT == 0 && a.scale_block == set.a[0].scale_block;
    if (!block_ok || a.row_factor || a.D > kMaxBlockD) return false;
  }
  return true;
}

void pack_block_launch(const PackSet& set, cudaStream_t s) {
  OCTET_CHECK(pack_block_takes(set),
              "attention pack: the block pack takes FP8-code copies with per-(head, block) scales of 64 or "
              "128 tokens, head_dim <= 128, under 2^31 elements");
  int64_t gx = 1;
  for (int i = 0; i < set.count; ++i) OCTET_CHECK(set.amax_out[i], "attention pack: a null amax output");
  for (int i = 0; i < set.count; ++i)
    gx = std::max(gx, set.a[i].B * set.a[i].heads * ceil_div(set.a[i].T, set.a[i].scale_block));
  OCTET_CHECK(gx <= 0x7FFFFFFF, "attention pack: tensor too large for the grid");
  dispatch_act(
      [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        pack_block_kernel<T><<<dim3(unsigned(gx), unsigned(set.count)), kPackThreads, 0, s>>>(set);
      },
      set.a[0].x_dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
