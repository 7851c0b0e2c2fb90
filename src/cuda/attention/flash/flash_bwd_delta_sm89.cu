// src/cuda/attention/flash/flash_bwd_delta_sm89.cu — the matched delta pre-pass of the flash FP8
// attention backward on mma.sync (flash.h run_delta; launched by flash_bwd_launch.cu through
// bwd_delta_sm89_launch): D_i and dV's row factor 1/l_i per query row, before any dS.
// docs/attention.md §"Backward"; CPU twin: src/cpu/attention_flash.cpp
// backward_flash's pre-pass.
//
// Matched (Delta-Matching, docs/delta-matching.md "The delta rule"): one CTA per (b, h, query
// block of block_q rows) walks the key blocks its rows see and recomputes each tile's P and dP with
// the main kernel's own device functions (flash_bwd_tile_sm89.cuh Warp::s_ntile/dp_ntile,
// Rows::prob: the same warp tiles, the same bits), adding Σ_j P_ij dP_ij and Σ_j P_ij per row in
// FP64 (octet/delta_rule.h
// MatchedSums: products of two FP32 values are exact in FP64); the per-lane partials are joined
// over the quad and the key-part warps in a fixed order; D_i = Σ P dP / Σ P, rounded once. Key
// blocks go through a 2-stage cp.async ring (the next loads while this one computes). The cost
// of matching: two more FP8 GEMMs per visible tile (S and dP).
// The stale delta (D_i = dO_i·O_i) is flash_bwd_rows.cu's; with the wgmma main kernel the matched
// pre-pass is its sm90 twin (flash_bwd_sm90.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention/row_factor.h"
#include "cuda/runtime/check.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/runtime/typed.cuh"
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
  __shared__ double2 part[kWarps][16];              // (Σ P dP, Σ P) per warp and row
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
    if (bwd::tile_full(p, i0, kBM, j0, kBN))
      step(std::true_type{});
    else
      step(std::false_type{});
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
    p.row_factor[bh * p.Tq + i] = rows.vis[r] > 0 ? row_factor_of(rows.l[r]) : 0.0f;
  }
}

}  // namespace

void bwd_delta_sm89_launch(const BackwardParams& p, cudaStream_t stream) {
  bwd::dispatch_sizes(p, [&](auto d, auto bm, auto bn) {
    constexpr int kD = decltype(d)::value, kBM = decltype(bm)::value, kBN = decltype(bn)::value;
    bwd::launch_kernel(matched_delta_kernel<kD, kBM, kBN>, p.B * p.H * ((p.Tq + kBM - 1) / kBM),
                       4 * bwd::Geom<kD, kBM, kBN>::kKV, p, stream);
  });
}

}  // namespace octet::cuda::flash
