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

#include "cuda/attention/act_layout.h"
#include "cuda/attention/glue/pack_codes_layout.h"
#include "cuda/attention/glue/pack_tile.cuh"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/quantize/qtensor.h"
#include "cuda/runtime/check.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {

// The four codes of v[0..3] · s in one word (v[0] in the low byte), each fp8_encode(v·s, saturate)
// with the staged pack's NaN rule (fp8_encode_sat: the input's sign on the NaN code).
__device__ __forceinline__ uint32_t codes4(const float* v, float s, bool e5m2) {
  const float y0 = v[0] * s, y1 = v[1] * s, y2 = v[2] * s, y3 = v[3] * s;
  uint32_t w = fp8x2(y0, y1, e5m2) | (fp8x2(y2, y3, e5m2) << 16);
  if (y0 != y0 || y1 != y1 || y2 != y2 || y3 != y3) {  // rare: rebuild with the per-code rule
    const Format f = e5m2 ? Format::E5M2 : Format::E4M3;
    w = uint32_t(fp8_encode_sat(y0, f)) | uint32_t(fp8_encode_sat(y1, f)) << 8 |
        uint32_t(fp8_encode_sat(y2, f)) << 16 | uint32_t(fp8_encode_sat(y3, f)) << 24;
  }
  return w;
}

static_assert(kCodesTileT == kPackTileT && kCodesTileD == kPackTileD, "the staging map covers the pack tile");

template <class X>
__global__ void __launch_bounds__(kPackThreads) pack_codes_kernel(const __grid_constant__ PackSet set) {
  __shared__ alignas(16) uint8_t tile[kPackTileT * kPackTileD];  // codes, rotated rows
  const PackArgs& a = set.a[blockIdx.z];
  const int D = int(a.D), T = int(a.T), T_p = int(a.T_p), heads = int(a.heads);
  const int ntd = (D + kPackTileD - 1) / kPackTileD;
  const int bh = int(blockIdx.x) / ntd;
  if (bh >= int(a.B) * heads || int(blockIdx.y) * kPackTileT >= T_p) return;  // uniform
  const int d0 = int(blockIdx.x) % ntd * kPackTileD, t0 = int(blockIdx.y) * kPackTileT;
  const int b = bh / heads, h = bh % heads;
  const int tid = threadIdx.x;
  const bool e5m2 = a.format == Format::E5M2;
  // The tile's scale: the tensor's, or its (head, token block)'s (a tile never straddles a block).
  const int64_t si = a.scale_block ? int64_t(bh) * ceil_div(a.T, a.scale_block) + t0 / a.scale_block : 0;
  const float s = scale_from_amax(amax_from_bits(a.amax_bits[si]), a.format);
  const bool writes_scale = d0 == 0 && (a.scale_block ? t0 % a.scale_block == 0 : bh == 0 && t0 == 0);
  if (writes_scale && tid == 0) a.scale_inv[si] = 1.0f / s;
  const X* x = static_cast<const X*>(a.x);
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool rows = a.row_kind == PackKind::Fp8Code, trans = a.trans_kind == PackKind::Fp8Code;

  // Phase 1: two tokens per thread, both loads issued before any use.
  const int dc = tid % 8, tr = tid / 8, d = d0 + 8 * dc;
  float v[2][8];
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int t = t0 + tr + 32 * p;
#pragma unroll
    for (int j = 0; j < 8; ++j) v[p][j] = 0.0f;
    if (t < T && d < D) {
      load8(x + act_row_offset_bh(a.tokens_major, b, h, t, heads, T, D) + d, vec, v[p]);
      if (a.row_factor) {
        const float f = a.row_factor[int64_t(bh) * T + t];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[p][j] *= f;
      }
    }
  }
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    const int tl = tr + 32 * p, t = t0 + tl;
    const bool in = t < T && d < D;
    const uint2 c = in ? make_uint2(codes4(v[p], s, e5m2), codes4(v[p] + 4, s, e5m2)) : make_uint2(0u, 0u);
    if (rows && t < T_p && d < D)
      *reinterpret_cast<uint2*>(static_cast<uint8_t*>(a.row) + (int64_t(bh) * T_p + t) * D + d) = c;
    if (trans) *reinterpret_cast<uint2*>(tile + codes_staged_at(tl, 8 * dc)) = c;
  }
  if (!trans) return;  // uniform over the block
  __syncthreads();

  // Phase 2: chunk (c, dl): tokens t0 + 16c .. + 15 of column d0 + dl, one 16-byte store at
  // ((b·G + g)·D + d)·rep·T_p + l·T_p + t.
  const int c = tid % 4, dl = tid / 4, dd = d0 + dl, ts = t0 + 16 * c;
  if (dd >= D || ts >= T_p) return;  // T_p % 16 == 0: a chunk is all in or all out
  uint32_t w[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) word |= uint32_t(tile[codes_staged_at(16 * c + 4 * q + k, dl)]) << (8 * k);
    w[q] = word;
  }
  const int rep = int(a.rep), g = h / rep, l = h % rep;
  const int64_t at =
      ((int64_t(b) * (heads / rep) + g) * D + dd) * (int64_t(rep) * T_p) + int64_t(l) * T_p + ts;
  *reinterpret_cast<uint4*>(static_cast<uint8_t*>(a.trans) + at) = make_uint4(w[0], w[1], w[2], w[3]);
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
