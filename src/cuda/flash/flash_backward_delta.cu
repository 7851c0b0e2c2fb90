// src/cuda/flash/flash_backward_delta.cu — the fused FP8 attention backward's delta pre-pass
// (flash_backward.h delta_launch): D_i and dV's row factor 1/l_i per query row, before any dS.
// docs/cuda.md §"Fused FP8 attention backward"; CPU twin: src/cpu/attention_tiled.cpp
// backward_tiled's pre-pass.
//
// Matched (Delta-Matching, docs/delta-matching.md "The delta rule"): one CTA per (b, h, query
// block of block_q rows) walks the key blocks its rows see and recomputes each tile's P and dP with
// the main kernel's own device functions (flash_backward_tile.cuh Warp::s_ntile/dp_ntile,
// Rows::prob: the same warp tiles, the same bits), adding Σ_j P_ij dP_ij and Σ_j P_ij per row in
// FP64 (octet/delta_rule.h
// MatchedSums: products of two FP32 values are exact in FP64); the per-lane partials are joined
// over the quad and the key-part warps in a fixed order; D_i = Σ P dP / Σ P, rounded once. Key
// blocks go through a 2-stage cp.async ring (the next loads while this one computes). The cost
// of matching: two more FP8 GEMMs per visible tile (S and dP), the recompute candidate (a) of
// DESIGN §7.
// Stale (FlashAttention-2/3, cuDNN): D_i = dO_i·O_i from the forward's stored O, one warp per row.
// With the wgmma main kernel (select_backward_kernel) the matched pre-pass is its wgmma twin
// (flash_backward_wgmma.cu); the stale one is the same for both flavors.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/check.h"
#include "cuda/flash/flash_backward.h"
#include "cuda/flash/flash_backward_tile.cuh"
#include "cuda/typed.cuh"
#include "octet/delta_rule.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

using bwd::kThreads;
using bwd::kWarps;

__device__ __forceinline__ double quad_sum_f64(double x) {
  x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
}

template <int kD, int kBM, int kBN>
__global__ void __launch_bounds__(kThreads, 2) matched_delta_kernel(const BackwardParams p) {
  using Gm = bwd::Geom<kD, kBM, kBN>;
  extern __shared__ __align__(128) uint8_t smem[];  // [2 stages][K̂ tile, V̂ tile]
  __shared__ double2 part[kWarps][16];  // (Σ P dP, Σ P) per warp and row
  bwd::Warp<kD, kBM, kBN> w(p);
  const int g = w.g, t = w.t;
  int64_t bh, i0, bg;
  bwd::q_block_of(p, kBM, &bh, &i0, &bg);
  bwd::Rows rows;
  uint32_t qa[kD / 32][4], da[kD / 32][4];
  w.load_rows(p, bh, i0, rows, qa, da);

  const int64_t last = (i0 + kBM < p.Tq ? i0 + kBM : p.Tq) - 1;
  const int64_t n_keys = bwd::visible_keys(p, last);
  MatchedSums sums[2];
  // A 2-stage cp.async ring: key block n + 1 loads while block n computes (as the forward).
  const int n_blocks = int((n_keys + kBN - 1) / kBN);
  if (n_blocks > 0) bwd::load_kv<kD, kBN>(p, bg, 0, smem, smem + Gm::kKV, nullptr);
  cp_async_commit();
  for (int it = 0; it < n_blocks; ++it) {
    const int64_t j0 = int64_t(it) * kBN;
    if (it + 1 < n_blocks) {
      uint8_t* const next = smem + ((it + 1) % 2) * 2 * Gm::kKV;
      bwd::load_kv<kD, kBN>(p, bg, j0 + kBN, next, next + Gm::kKV, nullptr);
    }
    cp_async_commit();
    cp_async_wait<1>();  // this block's group is complete (the newest may still be in flight)
    __syncthreads();
    const uint8_t* const sk = smem + (it % 2) * 2 * Gm::kKV;
    const uint8_t* const sv = sk + Gm::kKV;
    // Element (nt, e): row e / 2, key j0 + key0 + s_key(nt, 0) + 4t + e % 2 (Rows::lim compares).
    // Per n-tile: S → P, dP (the main kernel's functions and bits), then the sums.
    const int lim[2] = {rows.lim(0, j0 + w.key0 + 4 * t), rows.lim(1, j0 + w.key0 + 4 * t)};
    w.set_scales(tile_scales(p, bh, i0, bg, j0));
    auto step = [&](auto full) {  // full: no per-element visibility test (bwd::tile_full)
#pragma unroll
      for (int nt = 0; nt < Gm::kNK / 8; ++nt) {
        float s[4], dp[4];
        w.s_ntile(sk, nt, qa, s);
        w.dp_ntile(sv, nt, da, dp);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool in = decltype(full)::value || s_key(nt, 0) + e % 2 < lim[e / 2];
          float ev;
          const float pr = rows.prob(e / 2, in, s[e], &ev);
          if (in) sums[e / 2].add(pr, dp[e]);
        }
      }
    };
    if (bwd::tile_full(p, i0, kBM, j0, kBN)) step(std::true_type{});
    else step(std::false_type{});
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  cp_async_wait<0>();
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    sums[r].p_dp = quad_sum_f64(sums[r].p_dp);
    sums[r].p = quad_sum_f64(sums[r].p);
    if (t == 0) part[w.warp][g + 8 * r] = make_double2(sums[r].p_dp, sums[r].p);
  }
  __syncthreads();
  if (w.kp != 0 || t != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = rows.row[r];
    if (i >= p.Tq) continue;
    MatchedSums tot;  // the key parts joined in a fixed order
    for (int k = 0; k < Gm::kKP; ++k) {
      const double2 x = part[w.qs + k * Gm::kQS][g + 8 * r];
      tot += MatchedSums{x.x, x.y};
    }
    p.delta[bh * p.Tq + i] = tot.delta<float>().value;
    p.row_factor[bh * p.Tq + i] = rows.vis[r] > 0 ? 1.0f / rows.l[r] : 0.0f;
  }
}

// Stale: D_i = dO_i·O_i (FP32, lane partials then a warp sum), one warp per row; and 1/l_i. O and
// dO are read as they are given, F32 or BF16 (typed.cuh: BF16 widened exactly in registers).
template <class TO, class TDO>
__global__ void stale_delta_kernel(const BackwardParams p, const TO* o, const TDO* d_o) {
  const int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.B * p.H * p.Tq) return;
  float dot = 0.0f;
  for (int64_t c = lane; c < p.D; c += 32) dot += ld(d_o, row * p.D + c) * ld(o, row * p.D + c);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xFFFFFFFFu, dot, o);
  if (lane == 0) {
    const float l = p.row_sum[row];
    p.delta[row] = RowDelta<float>::stale(dot).value;
    p.row_factor[row] = l > 0.0f ? 1.0f / l : 0.0f;  // l = 0 exactly in a row without keys
  }
}

}  // namespace

void delta_launch(const BackwardParams& p, cudaStream_t stream) {
  check_backward_supported(p.D, p.block_q, p.block_k);
  OCTET_CHECK(p.B >= 1 && p.H >= 1 && p.G >= 1 && p.H % p.G == 0 && p.Tq >= 1 && p.Tk >= 1,
              "fused attention backward: need B, H, G, Tq, Tk >= 1 and H a multiple of G");
  OCTET_CHECK(p.delta && p.row_factor && p.row_sum,
              "fused attention backward: a null delta, row_factor or row_sum pointer");
  if (!p.matched) {
    OCTET_CHECK((p.o != nullptr) != (p.o_bf16 != nullptr) &&
                    (p.d_o_f32 != nullptr) != (p.d_o_bf16 != nullptr),
                "fused attention backward: the stale delta needs one of o / o_bf16 and one of "
                "d_o_f32 / d_o_bf16");
    const int64_t blocks = (p.B * p.H * p.Tq + kWarps - 1) / kWarps;
    OCTET_CHECK(blocks <= 0x7FFFFFFF, "fused attention backward: too many rows");
    const Bf16* o16 = reinterpret_cast<const Bf16*>(p.o_bf16);
    const Bf16* do16 = reinterpret_cast<const Bf16*>(p.d_o_bf16);
    const unsigned grid = unsigned(blocks);
    if (o16 && do16) stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, o16, do16);
    else if (o16) stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, o16, p.d_o_f32);
    else if (do16) stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, p.o, do16);
    else stale_delta_kernel<<<grid, kThreads, 0, stream>>>(p, p.o, p.d_o_f32);
    OCTET_CUDA_LAUNCH_CHECK();
    return;
  }
  OCTET_CHECK(p.Tq_p == (p.Tq + 15) / 16 * 16 && p.Tk_p == (p.Tk + 15) / 16 * 16,
              "fused attention backward: Tq_p, Tk_p must be Tq, Tk rounded up to 16");
  OCTET_CHECK(p.q && p.k && p.v && p.d_o && p.q_scale_inv && p.k_scale_inv && p.v_scale_inv &&
                  p.do_scale_inv && p.row_max,
              "fused attention backward: a null operand, scale or row_max pointer");
  OCTET_CHECK((reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.k) |
               reinterpret_cast<uintptr_t>(p.v) | reinterpret_cast<uintptr_t>(p.d_o)) % 16 == 0,
              "fused attention backward: the Q, K, V, dO code buffers must be 16-byte aligned");
  if (select_backward_kernel(p) == BackwardKernel::Wgmma) {  // the main kernel's instructions
    wgmma_delta_launch(p, stream);
    return;
  }
  bwd::dispatch_sizes(p, [&](auto d, auto bm, auto bn) {
    constexpr int kD = decltype(d)::value, kBM = decltype(bm)::value, kBN = decltype(bn)::value;
    bwd::launch_kernel(matched_delta_kernel<kD, kBM, kBN>, p.B * p.H * ((p.Tq + kBM - 1) / kBM),
                       4 * bwd::Geom<kD, kBM, kBN>::kKV, p, stream);
  });
}

}  // namespace octet::cuda::flash
