// src/cuda/attention/glue/pack_codes.cu — the code pack (glue.h PackKernel::Codes): the FP8 row
// copy and group transpose of a tensor whose copies are both FP8 codes (or absent), the bits of the
// staged pack (glue.cu) with fewer instructions per element:
//   * each value is encoded once (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 on pairs, fp8x2), and the
//     codes, not FP32 values, are staged in shared memory for the transpose (a quarter of the bytes);
//   * index arithmetic in 32 bits, the head's divisions once per thread.
// Tile and grid as the staged pack's (pack_tile.cuh): one CTA of 256 threads per 64 tokens × 64
// columns of one head. Phase 1: thread (tr, dc) loads columns 8dc .. 8dc + 7 of tokens tr and
// tr + 32, writes their 8 codes to the row copy (one 8-byte store) and to the staging tile (one
// 8-byte shared store). Phase 2: thread (c, dl) gathers tokens 16c .. 16c + 15 of column dl and
// writes them as one 16-byte store into the transpose; four lanes fill 64 contiguous bytes.
// Staging layout: pack_codes_layout.h (rows rotated so that both phases are conflict-free).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/glue/pack_codes_tile.cuh"
#include "cuda/attention/glue/pack_tile.cuh"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

template <class X>
__global__ void __launch_bounds__(kPackThreads) pack_codes_kernel(const __grid_constant__ PackSet set) {
  __shared__ alignas(16) uint8_t tile[kPackTileT * kPackTileD];  // codes, rotated rows
  const PackArgs& a = set.a[blockIdx.z];
  const int D = int(a.D), T_p = int(a.T_p), heads = int(a.heads);
  const int ntd = (D + kPackTileD - 1) / kPackTileD;
  const int bh = int(blockIdx.x) / ntd;
  if (bh >= int(a.B) * heads || int(blockIdx.y) * kPackTileT >= T_p) return;  // uniform
  const int d0 = int(blockIdx.x) % ntd * kPackTileD, t0 = int(blockIdx.y) * kPackTileT;
  const int b = bh / heads, h = bh % heads;
  const int tid = threadIdx.x;
  const CodesTensor ct = codes_tensor(a);  // before any store
  // The tile's scale: the tensor's, or its (head, token block)'s (a tile never straddles a block).
  const int64_t si = a.scale_block ? int64_t(bh) * ceil_div(a.T, a.scale_block) + t0 / a.scale_block : 0;
  const float s = scale_from_amax(amax_from_bits(a.amax_bits[si]), a.format);
  const bool writes_scale = d0 == 0 && (a.scale_block ? t0 % a.scale_block == 0 : bh == 0 && t0 == 0);
  if (writes_scale && tid == 0) a.scale_inv[si] = 1.0f / s;

  float v[2][8];
  codes_tile_load<X>(a, b, h, t0, d0, tid, v);
  codes_tile_encode(ct, bh, t0, d0, tid, v, s, tile);
  if (set.paired) {  // the second copy of the same values (uniform): scaled by its row factor
    const PackArgs& a1 = set.a[1];
    const CodesTensor c1 = codes_tensor(a1);
    const float s1 = scale_from_amax(amax_from_bits(a1.amax_bits[0]), a1.format);
    if (bh == 0 && t0 == 0 && d0 == 0 && tid == 0) a1.scale_inv[0] = 1.0f / s1;
    codes_tile_row_factor(a1, b, h, t0, d0, tid, v);
    codes_tile_encode(c1, bh, t0, d0, tid, v, s1, tile);
    __syncthreads();
    codes_tile_transpose(c1, b, h, t0, d0, tid, tile);
    return;
  }
  if (!ct.transposed) return;  // uniform over the block
  __syncthreads();
  codes_tile_transpose(ct, b, h, t0, d0, tid, tile);
}

}  // namespace

bool pack_codes_takes(const PackSet& set) {
  for (int i = 0; i < set.count; ++i) {
    const PackArgs& a = set.a[i];
    const bool row_ok = a.row_kind == PackKind::None || a.row_kind == PackKind::Fp8Code;
    const bool trans_ok = a.trans_kind == PackKind::None || a.trans_kind == PackKind::Fp8Code;
    if (!a.fp8 || !row_ok || !trans_ok || a.B * a.heads * a.T_p * a.D > 0x7FFFFFFF) return false;
  }
  return set.count >= 1;
}

void pack_codes_launch(const PackSet& set, cudaStream_t s) {
  OCTET_CHECK(pack_codes_takes(set),
              "attention pack: the code pack takes FP8-code copies under 2^31 elements");
  const dim3 grid = pack_grid(set);
  dispatch_act(
      [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        pack_codes_kernel<T><<<grid, kPackThreads, 0, s>>>(set);
      },
      set.a[0].x_dtype);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace octet::cuda
