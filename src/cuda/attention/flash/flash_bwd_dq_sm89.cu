// src/cuda/attention/flash/flash_bwd_dq_sm89.cu — the deterministic dQ kernel of the flash FP8
// attention backward on mma.sync (flash.h BackwardParams::deterministic; launched by
// flash_bwd_launch.cu through bwd_dq_sm89_launch after the main kernel): one CTA per (b, h, query
// block) walks the key blocks its rows see, recomputes the main kernel's tiles with the same steps
// (flash_bwd_step_sm89.cuh: the same amax, scale and codes) and sums dQ in registers in a fixed
// order, so dQ has the same bits run to run (the main kernel's FP32 atomics do not). CPU twin:
// src/cpu/attention_flash.cpp backward_flash. docs/attention.md §"Backward".
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention/flash/flash_bwd_step_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/runtime/check.h"

namespace octet::cuda::flash {
namespace {

using bwd::kThreads;
using bwd::kWarps;

template <int kD, int kBM, int kBN>
__global__ void __launch_bounds__(kThreads) dq_kernel(const BackwardParams p) {
  using Gm = bwd::Geom<kD, kBM, kBN>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const sk = smem;
  uint8_t* const sv = sk + Gm::kKV;
  uint8_t* const skt = sv + Gm::kKV;
  float* const sred = reinterpret_cast<float*>(skt + Gm::kKV);  // [kBM][kD] (key part 1's dQ)
  __shared__ unsigned amax_slots[kWarps];
  bwd::Warp<kD, kBM, kBN> w(p);
  const int g = w.g, t = w.t, qs = w.qs, kp = w.kp, key0 = w.key0;
  int64_t bh, i0, bg;
  bwd::q_block_of(p, kBM, &bh, &i0, &bg);
  bwd::Rows rows;
  uint32_t qa[kD / 32][4], da[kD / 32][4];
  w.load_rows(p, bh, i0, rows, qa, da);
  rows.load_delta(p, bh);
  float dq[kD / 8][4];
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[dn][e] = 0.0f;

  const int64_t last = (i0 + kBM < p.Tq ? i0 + kBM : p.Tq) - 1;
  const int64_t n_keys = bwd::visible_keys(p, last);
  for (int64_t j0 = 0; j0 < n_keys; j0 += kBN) {
    bwd::load_kv<kD, kBN>(p, bg, j0, sk, sv, skt);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    float dp[Gm::kNK / 8][4];  // P, then dS
    unsigned amax;
    w.set_scales(tile_scales(p, bh, i0, bg, j0));
    {
      const int lim[2] = {rows.lim(0, j0 + key0 + 4 * t), rows.lim(1, j0 + key0 + 4 * t)};
      const bool full = bwd::tile_full(p, i0, kBM, j0, kBN);
      if (full)
        tile_p<true>(p, w, rows, sk, qa, lim, dp, nullptr);
      else
        tile_p<false>(p, w, rows, sk, qa, lim, dp, nullptr);
      // No residual sums here: the main kernel adds them.
      amax = full ? tile_ds<true>(p, nullptr, w, rows, bh, sv, da, lim, dp)
                  : tile_ds<false>(p, nullptr, w, rows, bh, sv, da, lim, dp);
    }
    const float sc = scale_from_amax(bwd::cta_amax(amax, amax_slots), p.ds_format, 0, true);
    const float g_scale = p.tau * (1.0f / sc) * grad_factor(p, k_inv_at(p, bg, j0));
    uint32_t dsa[Gm::kNK / 32][4];
    bwd::to_a_frags<Gm::kNK>(dp, sc, p.ds_format, dsa);
    float acc[kD / 8][4];
    tile_dq<kD, kBN, Gm::kNK>(smem_u32(skt), key0, dsa, w.ds_e5m2, acc);
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[dn][e] += acc[dn][e] * g_scale;
    __syncthreads();  // before the next load and amax
  }
  // Join the key parts in a fixed order (part 0 + part 1), then store the block's rows.
  if (Gm::kKP == 2 && kp == 1)
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) sred[(16 * qs + g + 8 * (e / 2)) * kD + 8 * dn + 2 * t + e % 2] = dq[dn][e];
  __syncthreads();
  if (kp != 0) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = rows.row[r];
    if (i >= p.Tq_p) continue;
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = 8 * dn + 2 * t + c;
        float x = dq[dn][2 * r + c];
        if (Gm::kKP == 2) x += sred[(16 * qs + g + 8 * r) * kD + d];
        p.dq_acc[(bh * p.Tq_p + i) * kD + d] = x;
      }
  }
}
}  // namespace

void bwd_dq_sm89_launch(const BackwardParams& p, cudaStream_t stream) {
  bwd::dispatch_sizes(p, [&](auto d, auto bm, auto bn) {
    constexpr int kD = decltype(d)::value, kBM = decltype(bm)::value, kBN = decltype(bn)::value;
    bwd::launch_kernel(dq_kernel<kD, kBM, kBN>, p.B * p.H * ((p.Tq + kBM - 1) / kBM),
                       3 * bwd::Geom<kD, kBM, kBN>::kKV + kBM * kD * 4, p, stream);
  });
}

}  // namespace octet::cuda::flash
