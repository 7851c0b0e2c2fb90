// src/cuda/attention/flash/flash_bwd_sm89.cu — the flash FP8 attention backward's main kernels on
// mma.sync (flash.h run_backward_main; launched by flash_bwd_launch.cu through bwd_sm89_launch; CPU twin:
// src/cpu/attention_flash.cpp backward_flash's main pass and attention_backward_tile.cpp ds_step).
// docs/attention.md §"Backward".
//
// backward_kernel: one CTA (8 warps) per (b, KV head, key block of block_k keys), FlashAttention-2's
// backward (arXiv 2307.08691, Algorithm 2): K̂, V̂, K̂ᵀ of the key block are loaded once into shared
// memory; for each of the rep = H/G query heads and each query block of block_q rows that sees the
// key block, per tile:
//   S → P, then dP → dS = P∘(dP − D) in the same registers (flash_bwd_tile_sm89.cuh: the
//   pre-pass's bits; octet/delta_rule.h),
//   the row residual sums (FP64 atomics), the tile's amax over all 8 warps → a power-of-two scale
//   (fp8.h scale_from_amax, pow2) → dŜ codes in ds_format, P̃ = E4M3(exp(S − m)·p_scale);
//   dQ_i += τ dŜK̂ per warp (the dŜ accumulator is already the A fragment: s_key order), × 1/scale,
//   FP32 atomicAdd into dq_acc, 4 columns per instruction (sm_90 float4; unless deterministic);
//   P̃ᵀ and dŜᵀ go through shared memory ([key][query] bytes, swizzled), then each warp owns 32
//   keys x head_dim/kDP: dV += P̃ᵀ (dO/l)~ (FP32 accumulator in registers) and dK += τ dŜᵀ Q̂ ·
//   1/scale (FP32 accumulator in shared memory), the B operands — the query block's columns of
//   the group transposes — staged in shared memory by cp.async at the start of the tile step
//   (their load overlaps the S/dP phase). Every shared fragment is read by ldmatrix.
// Each tile's product is summed by the tensor core over at most 128 terms from a zero accumulator
// and added in FP32 outside it (Hopper's FP8 MMA accumulates with limited precision).
// The per-tile steps are flash_bwd_step_sm89.cuh's, shared with the deterministic dQ kernel
// (flash_bwd_dq_sm89.cu).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/check.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_bwd_step_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "octet/attention.h"
#include "octet/delta_rule.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

using bwd::kThreads;
using bwd::kWarps;

template <int kD, int kBM, int kBN>
struct MainSmem {
  using Gm = bwd::Geom<kD, kBM, kBN>;
  // The dK FP32 accumulator's rows padded by 8 floats: a warp's float2 read-modify-write of rows
  // g (+8), columns 2t.. then hits 32 distinct banks per half-warp (row stride ≡ 8 banks).
  static constexpr int kAccLd = kD + 8;
  static constexpr int kQT = kD * kBM;  // bytes of one Q̂ᵀ or (dO/l)~ᵀ query-block tile
  // K̂, V̂, K̂ᵀ; P̃ᵀ, dŜᵀ; Q̂ᵀ, (dO/l)~ᵀ; Q̂, dÔ; dK.
  static constexpr int kBytes = 3 * Gm::kKV + 2 * Gm::kPT + 4 * kQT + kBN * kAccLd * 4;
};

template <int kD, int kBM, int kBN>
__global__ void __launch_bounds__(kThreads) backward_kernel(const BackwardParams p) {
  using Gm = bwd::Geom<kD, kBM, kBN>;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const sk = smem;
  uint8_t* const sv = sk + Gm::kKV;
  uint8_t* const skt = sv + Gm::kKV;
  uint8_t* const spt = skt + Gm::kKV;   // P̃ᵀ codes [kBN][kBM]
  uint8_t* const sdst = spt + Gm::kPT;  // dŜᵀ codes [kBN][kBM]
  using Sm = MainSmem<kD, kBM, kBN>;
  uint8_t* const sqt = sdst + Gm::kPT;  // Q̂ᵀ codes of the query block [kD][kBM]
  uint8_t* const sdot = sqt + Sm::kQT;  // (dO/l)~ᵀ codes of the query block [kD][kBM]
  uint8_t* const sq = sdot + Sm::kQT;   // Q̂ codes of the query block [kBM][kD]
  uint8_t* const sdo = sq + Sm::kQT;    // dÔ codes of the query block [kBM][kD]
  constexpr int kLd = Sm::kAccLd;
  float* const sdk = reinterpret_cast<float*>(sdo + Sm::kQT);  // dK [kBN][kLd]
  __shared__ unsigned amax_slots[kWarps];
  bwd::Warp<kD, kBM, kBN> w(p);
  const int g = w.g, t = w.t, qs = w.qs, key0 = w.key0;
  const int ks = w.warp % Gm::kKS, dpart = w.warp / Gm::kKS;  // the dK/dV phase's split

  const int64_t rep = p.H / p.G;
  int64_t bg = 0, j0 = 0;
  bwd::k_block_of(p, kBN, &bg, &j0);
  const int64_t b = bg / p.G, gh = bg % p.G;
  for (int c = threadIdx.x; c < kBN * kLd; c += kThreads) sdk[c] = 0.0f;
  // dV in registers: this warp's 32 keys (m-tiles mt: keys 32ks + 16mt..) x kDW head_dim columns
  // of the dK/dV phase (below).
  float dv[2][Gm::kDW / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int dn = 0; dn < Gm::kDW / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) dv[mt][dn][e] = 0.0f;
  const bool do_e5m2 = w.do_e5m2, ds_e5m2 = w.ds_e5m2;
  // Query blocks that see key j0 (causal bottom-right: rows i >= j0 − (Tk − Tq)).
  const int64_t n_qblocks = (p.Tq + kBM - 1) / kBM;
  const int64_t first = p.causal ? j0 - (p.Tk - p.Tq) : 0;
  const int64_t qb0 = first > 0 ? first / kBM : 0;
  const int64_t width = rep * p.Tq_p;  // a group transpose's row
  // cp.async groups, in commit order: the key block; then per tile step (hr, qb) its Q̂/dÔ rows
  // (committed one step ahead: the first here, the next one mid-step, once every warp has its
  // fragments) and its Q̂ᵀ/(dO/l)~ᵀ columns (at the step's start). A wait_group 1 at the step's
  // start finds the step's Q̂/dÔ complete; one before the dK/dV phase its transposes.
  bwd::load_kv<kD, kBN>(p, bg, j0, sk, sv, skt);
  cp_async_commit();
  if (qb0 < n_qblocks) bwd::load_q_do<kD, kBM>(p, b * p.H + gh * rep, qb0 * kBM, sq, sdo);
  cp_async_commit();
  for (int64_t hr = 0; hr < rep; ++hr) {
    const int64_t h = gh * rep + hr, bh = b * p.H + h;
    const uint8_t* const gqt = p.q_t + bg * kD * width + hr * p.Tq_p;
    const uint8_t* const gdot = p.dv_o_t + bg * kD * width + hr * p.Tq_p;
    for (int64_t qb = qb0; qb < n_qblocks; ++qb) {
      const int64_t i0 = qb * kBM;
      // The dK/dV phase's B operands, the query block's columns of the group transposes, go to
      // shared memory now (cp.async, [kD][kBM], v_chunk-swizzled like V̂ᵀ in the forward) and are
      // waited for only after the S/dP phase. Queries >= Tq_p read as zero codes (whole chunks).
      for (int c = threadIdx.x; c < kD * kBM / 16; c += kThreads) {
        const int r = c / (kBM / 16), cc = c % (kBM / 16);
        const bool in = i0 + 16 * cc < p.Tq_p;
        const int at = r * kBM + 16 * v_chunk<kBM>(r, cc);
        const int64_t off = in ? r * width + i0 + 16 * cc : 0;
        cp_async16(sqt + at, gqt + off, in);
        cp_async16(sdot + at, gdot + off, in);
      }
      cp_async_commit();
      cp_async_wait<1>();  // this step's Q̂/dÔ rows (and the key block) have landed
      __syncthreads();
      bwd::Rows rows;
      float dp[Gm::kNK / 8][4];  // P, then dS
      unsigned amax;
      w.set_scales(tile_scales(p, bh, i0, bg, j0));
      {
        uint32_t qa[kD / 32][4], da[kD / 32][4];
        bwd::ldsm_row_frags<kD>(qa, sq, qs);
        bwd::ldsm_row_frags<kD>(da, sdo, qs);
        rows.init(p, bh, i0 + 16 * qs + g);
        rows.load_delta(p, bh);
        const int lim[2] = {rows.lim(0, j0 + key0 + 4 * t), rows.lim(1, j0 + key0 + 4 * t)};
        if (bwd::tile_full(p, i0, kBM, j0, kBN)) {  // CTA-uniform: no per-element visibility test
          tile_p<true>(p, w, rows, sk, qa, lim, dp, spt);
          amax = tile_ds<true>(p, p.res_sums, w, rows, bh, sv, da, lim, dp);
        } else {
          tile_p<false>(p, w, rows, sk, qa, lim, dp, spt);
          amax = tile_ds<false>(p, p.res_sums, w, rows, bh, sv, da, lim, dp);
        }
      }
      const float sc = scale_from_amax(bwd::cta_amax(amax, amax_slots), p.ds_format, 0, true);
      {  // cta_amax's barrier: every warp has its Q̂/dÔ fragments; prefetch the next step's rows
        const bool last_qb = qb + 1 == n_qblocks;
        if (!last_qb || hr + 1 < rep)
          bwd::load_q_do<kD, kBM>(p, last_qb ? bh + 1 : bh, last_qb ? qb0 * kBM : i0 + kBM, sq, sdo);
        cp_async_commit();
      }
      const float g_scale = p.tau * (1.0f / sc);  // τ · dŜ's 1/scale (a power of two: exact)
      // dK's and dQ's factors: g_scale, × Q̂'s / K̂'s block 1/scale with per-block scales.
      const float gk_scale = g_scale * grad_factor(p, q_inv_at(p, bh, i0));
      const float gq_scale = g_scale * grad_factor(p, k_inv_at(p, bg, j0));
      uint32_t dsa[Gm::kNK / 32][4];
      bwd::to_a_frags<Gm::kNK>(dp, sc, p.ds_format, dsa);
      // dŜᵀ into shared memory: the bytes of dsa, a[kk][r] byte c = key 32kk + 16(r/2) + 4t + c
      // (of the warp's keys), query row 16qs + g + 8(r % 2) (chunk qs, pt_chunk-swizzled).
#pragma unroll
      for (int kk = 0; kk < Gm::kNK / 32; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int key = key0 + 32 * kk + 16 * (r / 2) + 4 * t + c;
            sdst[key * kBM + 16 * pt_chunk<kBM>(key, qs) + g + 8 * (r % 2)] = uint8_t(dsa[kk][r] >> (8 * c));
          }
      if (!p.deterministic) {
        float acc[kD / 8][4];
        tile_dq<kD, kBN, Gm::kNK>(smem_u32(skt), key0, dsa, w.ds_e5m2, acc);
        const bool odd = t % 2 != 0;  // bwd::atomic_add_dq's row: g + 8 for an odd t
        const int64_t my_row = odd ? rows.row[1] : rows.row[0];
        const bool my_vis = (odd ? rows.vis[1] : rows.vis[0]) > 0;  // else dS = 0: nothing to add
        bwd::atomic_add_dq<kD>(p.dq_acc + (bh * p.Tq_p + my_row) * kD + 4 * (t / 2), acc, gq_scale, odd,
                               my_vis);
      }
      cp_async_wait<1>();  // this step's Q̂ᵀ, (dO/l)~ᵀ (the next step's rows may be in flight)
      __syncthreads();     // P̃ᵀ, dŜᵀ, Q̂ᵀ and (dO/l)~ᵀ complete
      // dV, dK on this warp's 32 keys (two m-tiles of 16) x kDW columns; A from P̃ᵀ / dŜᵀ rows
      // 32ks + 16mt + g (+8), queries 32qc + 4t (+16), by ldmatrix: lane 8i + r reads key row
      // 32ks + 16mt + r + 8(i % 2), query chunk 2qc + i/2 (the a0..a3 order); B from the staged
      // Q̂ᵀ / (dO/l)~ᵀ rows (head_dim columns) dpart·kDW + 8dn + g: lane 8i + r reads row
      // dpart·kDW + 8dn + r, chunk 4h + i (the b0, b1 of qc = 2h, 2h + 1), each B fragment feeding
      // both m-tiles. The products over qc = 0, 1, ... from zero, as before.
      uint32_t pa[2][kBM / 32][4], sa[2][kBM / 32][4];
      const int lane = threadIdx.x % 32, mi = lane / 8, mr = lane % 8;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        const int key = 32 * ks + 16 * mt + mr + 8 * (mi % 2);
        const unsigned at = unsigned(key * kBM + 16 * pt_chunk<kBM>(key, mi / 2));
        const unsigned pt_u = smem_u32(spt), st_u = smem_u32(sdst);
#pragma unroll
        for (int qc = 0; qc < kBM / 32; ++qc) {  // chunk (2qc + i/2) ^ f = 2qc ^ (i/2 ^ f)
          ldsm<4>(pa[mt][qc], pt_u + (at ^ (32u * qc)));
          ldsm<4>(sa[mt][qc], st_u + (at ^ (32u * qc)));
        }
      }
      const unsigned b_row = unsigned((dpart * Gm::kDW + mr) * kBM);
      const int bx = v_chunk<kBM>(mr, 0) ^ mi;
      const unsigned qt_u = smem_u32(sqt) + b_row, dot_u = smem_u32(sdot) + b_row;
#pragma unroll
      for (int dn = 0; dn < Gm::kDW / 8; ++dn) {
        float av[2][4], ak[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) av[mt][e] = ak[mt][e] = 0.0f;
#pragma unroll
        for (int hq = 0; hq < kBM / 64; ++hq) {
          const unsigned off = unsigned(8 * dn * kBM + 16 * (bx ^ (4 * hq)));
          uint32_t bv[4], bq[4];
          ldsm<4>(bv, dot_u + off);
          ldsm<4>(bq, qt_u + off);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            bwd::mma_fp8(av[mt], pa[mt][2 * hq], bv[0], bv[1], false, do_e5m2);
            bwd::mma_fp8(ak[mt], sa[mt][2 * hq], bq[0], bq[1], ds_e5m2, false);
            bwd::mma_fp8(av[mt], pa[mt][2 * hq + 1], bv[2], bv[3], false, do_e5m2);
            bwd::mma_fp8(ak[mt], sa[mt][2 * hq + 1], bq[2], bq[3], ds_e5m2, false);
          }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) dv[mt][dn][e] += av[mt][e];
#pragma unroll
          for (int r = 0; r < 2; ++r) {  // rows g, g + 8: float2 read-modify-write (padded rows)
            const int at = (32 * ks + 16 * mt + g + 8 * r) * kLd + dpart * Gm::kDW + 8 * dn + 2 * t;
            float2 k = *reinterpret_cast<float2*>(sdk + at);
            k.x += ak[mt][2 * r] * gk_scale, k.y += ak[mt][2 * r + 1] * gk_scale;
            *reinterpret_cast<float2*>(sdk + at) = k;
          }
        }
      }
      __syncthreads();  // before the next tile rewrites P̃ᵀ, dŜᵀ and the amax slots
    }
  }
  cp_async_wait<0>();  // nothing left in flight (a CTA whose key block no query block sees)
  // dV = Σ P̃_code (dO/l)_code · (1/p_scale) · its 1/scale, from each warp's registers; dK in Q̂'s
  // code units (× sq later; values with per-block scales), from shared memory once every warp has
  // added its last tile.
  const float dv_scale = (1.0f / p.p_scale) * *p.dvo_scale_inv;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = j0 + 32 * ks + 16 * mt + g + 8 * r;
      if (j >= p.Tk_p) continue;
      float* const out = p.dv_acc + (bg * p.Tk_p + j) * kD + dpart * Gm::kDW + 2 * t;
#pragma unroll
      for (int dn = 0; dn < Gm::kDW / 8; ++dn)
        *reinterpret_cast<float2*>(out + 8 * dn) =
            make_float2(dv[mt][dn][2 * r] * dv_scale, dv[mt][dn][2 * r + 1] * dv_scale);
    }
  __syncthreads();
  for (int c = threadIdx.x; c < kBN * kD; c += kThreads) {
    const int64_t j = j0 + c / kD;
    if (j >= p.Tk_p) continue;
    p.dk_acc[(bg * p.Tk_p + j) * kD + c % kD] = sdk[c / kD * kLd + c % kD];
  }
}

}  // namespace

void bwd_sm89_launch(const BackwardParams& p, cudaStream_t stream) {
  OCTET_CHECK(p.key_head_group >= 0,
              "flash attention backward: key_head_group unresolved (run_backward_main)");
  bwd::dispatch_sizes(p, [&](auto d, auto bm, auto bn) {
    constexpr int kD = decltype(d)::value, kBM = decltype(bm)::value, kBN = decltype(bn)::value;
    bwd::launch_kernel(backward_kernel<kD, kBM, kBN>, p.B * p.G * ((p.Tk + kBN - 1) / kBN),
                       MainSmem<kD, kBM, kBN>::kBytes, p, stream);
  });
}

}  // namespace octet::cuda::flash
