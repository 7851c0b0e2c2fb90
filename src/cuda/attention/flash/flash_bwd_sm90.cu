// src/cuda/attention/flash/flash_bwd_sm90.cu — the Hopper (sm_90a) flavor of the flash FP8 attention
// backward: flash.h's semantics (CPU twin: src/cpu/attention_flash.cpp backward_flash,
// attention_backward_tile.cpp) with every product on warpgroup MMA (wgmma, QGMMA in SASS) in
// FlashAttention-3's transposed orientation (arXiv 2407.08608 §3; Delta-Matching's matched delta,
// arXiv 2609.37852). docs/attention.md §"Backward". Supported: head_dim 64 and 128, block_q =
// block_k = 128, not deterministic; block_q = block_k = 64 goes to flash_bwd_ws_sm90.cu (bwd_sm90_launch),
// and flash_bwd_launch.cu runs the sm89 kernels for the rest (bwd_sm90_supported).
//
// Main kernel: one CTA (two warpgroups, flash_bwd_tile_sm90.cuh geometry) per (b, KV head, block
// of 128 keys); K̂, V̂ (A operands, [key][d]) and K̂ᵀ ([d][key]) of the block stay in shared memory.
// For each of the rep = H/G query heads and each 128-query block that sees the key block (a tile
// step), the step's Q̂ and dÔ rows (permuted), Q̂ᵀ and (dO/l)~ᵀ columns (group transposes) come
// through a 2-stage shared-memory ring of TMA boxes (BackwardMaps; thread 0 issues the next step's
// four boxes, one mbarrier per stage, while the CTA computes this one) and the queries' statistics
// through registers read a step ahead. Per step, warpgroup wg (keys 64wg..):
//   Sᵀ = K̂Q̂ᵀ (SS m64n64k32 per query half, below) → P = exp(S − m)/l in place, P̃ = E4M3(exp(S − m)·p_scale)
//   as A fragments; dV += P̃ᵀ(dO/l)~ (RS m64nDk32, A = P̃ᵀ, B = (dO/l)~ᵀ); dPᵀ = V̂dÔᵀ (SS) → dS = P∘(dP − D) in
//   place; the tile's |dS| amax over both warpgroups (bwd::cta_amax) → the power-of-two scale (fp8.h
//   scale_from_amax, pow2) → dŜᵀ A fragments (to_a_frags) and dŜ bytes into shared memory [query][key]
//   (K-major); dK += τ dŜᵀQ̂ (RS, B = Q̂ᵀ) and dQ = τ dŜK̂ (SS, A = dŜ rows 64wg.., B = K̂ᵀ) added to dq_acc by
//   16-byte FP32 atomics, or (dq_tma) staged in the spent operand stage and added by TMA bulk reduces
//   (stage_dq); sdp_overlap (head_dim 64) issues each half's Sᵀ and dPᵀ together.
// Sᵀ and dPᵀ are m64n64 products on the 64-query halves of the step at both head_dims (registers:
// at 128 the dK, dV accumulators take 128 a thread; at 64 one m64n128 product of each spilled), half
// 0's dS is parked in shared memory until the tile's amax covers both halves, and dV's product runs
// in 64-column parts of head_dim; at head_dim 128 dK's and dQ's products run one after the other
// (docs/attention.md §"Backward", head_dim 128).
// Every product is one tile's (≤ 128 terms) from a zero accumulator, added in FP32 outside the
// tensor core (Hopper's FP8 wgmma keeps ~13 bits in its accumulator; DeepSeek-V3 §3.3.2).
// The matched delta's pre-pass is flash_bwd_delta_sm90.cu (the same products with queries as rows).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/runtime/tensor_map.h"
#include "cuda/attention/act_layout.h"
#include "cuda/attention/flash/flash_tma.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm90.cuh"
#include "cuda/attention/flash/flash_bwd_parts_sm90.cuh"
#include "cuda/quantize/fp8_device.cuh"
#include "octet/delta_rule.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {
namespace {

using bwdw::ColStat;
using bwdw::ColStats;
using bwdw::dp_to_ds;
using bwdw::dv_product;
using bwdw::kBM;
using bwdw::kBN;
using bwdw::kThreads;
using bwdw::Lane;
using bwdw::stage_dq;
using bwdw::store_dkv_direct;
using bwdw::tile_ds;

/// The TMA descriptors of one call (make_maps): Q̂ and dÔ [B·H·Tq_p][D] with rows permuted per
/// 16-query group (flash_bwd_tile_sm90.cuh: tile row r holds query s_key(r / 8, r % 8) of its
/// block), boxes of kBM rows; Q̂ᵀ and (dO/l)~ᵀ [B·G·D][rep][Tq_p] (group transposes), boxes of
/// [kD][128 queries] of one query head; K̂, V̂ [B·G][Tk_p][D], boxes of kBN rows; K̂ᵀ [B·G][D][Tk_p],
/// boxes of [kD][kBN keys]; dq_acc FP32 [B·H][Tq_p][D] (dq_tma only), boxes of [kBM queries][kD/4
/// columns] (kD-byte swizzle) that the bulk reduces add.
struct BackwardMaps {
  CUtensorMap q, d_o, q_t, dvo_t, k, v, k_t, dq;
};

// The main kernel's shared memory (offsets from a 1024-byte aligned base; every tile 1024-aligned):
// K̂, V̂ [kBN][kD] (kD-byte swizzle), K̂ᵀ [kD][kBN], dŜ [kBM][kBN] (128-byte swizzle; the same
// space first parks half 0's FP32 dS, kPark bytes: [element][thread] float4s); 2
// stages of Q̂, dÔ [kBM][kD] (permuted rows, kD-byte swizzle), Q̂ᵀ, (dO/l)~ᵀ [kD][kBM] (128-byte
// swizzle); 2 ColStats; the mbarriers (the key block's, one per stage). head_dim 64: 126 KiB; 128:
// 214 KiB (of the 227 KiB an sm_90 CTA may have).
template <int kD>
struct MainLayout {
  static constexpr int kRows = kBN * kD;  // one K̂, V̂, K̂ᵀ, Q̂, dÔ, Q̂ᵀ or (dO/l)~ᵀ tile
  static constexpr int kK = 0, kV = kRows, kKt = 2 * kRows, kDs = 3 * kRows;
  static constexpr int kPark = kThreads * (bwdw::kCols<kD> / 8) * 4 * 4;
  static constexpr int kStage0 = kDs + (kPark > kBM * kBN ? kPark : kBM * kBN);
  static constexpr int kStage = 4 * kRows;  // + 0: Q̂, + kRows: dÔ, + 2 kRows: Q̂ᵀ, + 3: (dO/l)~ᵀ
  static constexpr int kStats = kStage0 + 2 * kStage;
  static constexpr int kBars = kStats + 2 * int(sizeof(ColStats));  // key block, stage 0, stage 1
  static constexpr int kBytes = kBars + 3 * 8 + 1024;               // + alignment slack
  static_assert(kRows % 1024 == 0 && kPark % 1024 == 0, "1024-aligned tiles");
  static_assert(kBytes + 64 <= 227 * 1024, "an sm_90 CTA's shared memory (+ amax_slots)");
};

__device__ __forceinline__ uint8_t* align1024(uint8_t* p) {
  return p + ((1024u - (smem_u32(p) & 1023u)) & 1023u);
}

/// A query block's tile steps in one CTA of the main kernel: step n = (head hr = n / per_head,
/// query block qb0 + n % per_head). 32-bit (rep · Tq/128 steps): 64-bit step arithmetic costs
/// the head_dim-128 kernel registers it does not have.
struct Steps {
  int qb0, per_head, count;
};

/// Every thread waits until the stage's boxes have landed; the mbarrier's phase k (parity k % 2)
/// is the stage's k-th use.
__device__ __forceinline__ void wait_stage(unsigned bar, int use) { mbar_wait(bar, unsigned(use) & 1u); }

// The dQ row-sum projection's r̂_i (BackwardParams::ds_row_sum): the tile's dŜ row sums, read
// from the [query][key] tile in shared memory while dK's and dQ's products run (row q = query i0 + q;
// the 128-byte swizzle permutes 16-byte chunks within a row, so a row's bytes are its own). Thread
// tid decodes 64 codes of row tid / 2 (fp8x2_to_f16x2: exact) and sums them in FP32,
// joins its neighbour's half and adds the row's sum · inv_scale (dS = code / scale) by one FP32
// atomic.
template <bool kDsE5M2>
__device__ __forceinline__ void add_ds_row_sums(const BackwardParams& p, const uint8_t* sds, int tid,
                                                int64_t bh, int64_t i0, float inv_scale) {
  const int q = tid / 2;
  const uint4* const row = reinterpret_cast<const uint4*>(sds + q * kBN + 64 * (tid % 2));
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < 4; ++c)
    sum = bwdw::sum_codes16<kDsE5M2>(row[(c + q) % 4], sum);  // rows start at different banks
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  if (tid % 2 == 0 && i0 + q < p.Tq) atomicAdd(p.ds_row_sum + bh * p.Tq + i0 + q, sum * inv_scale);
}

// kDoE5M2, kDsE5M2: do_format, ds_format are E5M2; kRes: res_sums is given; kDqTma: dQ by TMA
// bulk reduces (stage_dq) instead of atomics; kOverlap: Sᵀ and dPᵀ issued together
// (BackwardParams::sdp_overlap); kDirect: dK, dV into the caller's tensors (store_dkv_direct).
template <int kD, bool kDoE5M2, bool kDsE5M2, bool kRes, bool kDqTma, bool kOverlap, bool kDirect>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_backward_kernel(const BackwardParams p, const __grid_constant__ BackwardMaps maps) {
  // At head_dim 128 the in-flight dPᵀ beside dK, dV, Sᵀ and P̃ does not fit the registers (ptxas
  // spilled 164 bytes a thread): the overlap exists at head_dim 64 only (255 registers, no spill).
  static_assert(!kOverlap || kD == 64, "the Sᵀ/dPᵀ overlap at head_dim 64 only");
  // dK, dV into the caller's tensors at head_dim 64 (at 128 its addresses cost 32 more bytes of
  // spill in the loop and it measured no faster), with the TMA dQ and no residual sums.
  static_assert(!kDirect || (kD == 64 && kDqTma && !kRes), "the direct dK, dV epilogue's kernels");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = MainLayout<kD>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = align1024(smem_raw);
  const unsigned sb = smem_u32(smem);
  ColStats* const stats = reinterpret_cast<ColStats*>(smem + L::kStats);
  __shared__ unsigned amax_slots[bwd::kWarps];
  const Lane ln;
  const int tid = threadIdx.x;

  const int64_t rep = p.H / p.G;
  int64_t bg = 0, j0 = 0;
  bwd::k_block_of(p, kBN, &bg, &j0);
  const int64_t b = bg / p.G, gh = bg % p.G;
  // Query blocks that see key j0 (causal bottom-right: rows i >= j0 − (Tk − Tq)).
  const int64_t n_qblocks = (p.Tq + kBM - 1) / kBM;
  const int64_t first = p.causal ? j0 - (p.Tk - p.Tq) : 0;
  Steps st;
  st.qb0 = first > 0 ? int(first / kBM) : 0;
  st.per_head = st.qb0 < n_qblocks ? int(n_qblocks) - st.qb0 : 0;
  st.count = int(rep) * st.per_head;
  auto bh_of = [&](int n) { return b * p.H + gh * rep + n / st.per_head; };
  auto i0_of = [&](int n) { return int64_t(st.qb0 + n % st.per_head) * kBM; };
  const unsigned key_bar = sb + L::kBars;
  auto stage_bar = [&](int n) { return sb + L::kBars + 8u * unsigned(1 + n % 2); };
  // Step n's four boxes into stage n % 2 (thread 0; its statistics: load_stat / store_stat).
  auto load_step = [&](int n) {
    const unsigned s = sb + L::kStage0 + unsigned(n % 2) * L::kStage, bar = stage_bar(n);
    const int64_t bh = bh_of(n), i0 = i0_of(n);
    const int group = int((bh * p.Tq_p + i0) / 16), hr = n / st.per_head, row = int(bg * kD);
    mbar_arrive_expect_tx(bar, 4 * L::kRows);
    tma_load_5d(s, &maps.q, bar, 0, 0, 0, 0, group);
    tma_load_5d(s + L::kRows, &maps.d_o, bar, 0, 0, 0, 0, group);
    tma_load_3d(s + 2 * L::kRows, &maps.q_t, bar, int(i0), hr, row);
    tma_load_3d(s + 3 * L::kRows, &maps.dvo_t, bar, int(i0), hr, row);
  };
  ColStat next;  // thread tid < kBM: query i0 + tid of the next step, read ahead
  auto load_stat = [&](int n) {
    if (tid < kBM) next.load(p, bh_of(n), i0_of(n) + tid, true);
  };
  auto store_stat = [&](int n) {
    if (tid < kBM) next.store(stats[n % 2], tid, p.p_scale);
  };

  if (tid == 0) {
    for (int i = 0; i < 3; ++i) mbar_init(key_bar + 8u * unsigned(i), 1);
    fence_mbar_init();
  }
  __syncthreads();  // the mbarriers are initialized
  if (tid == 0) {   // the key block, then step 0
    mbar_arrive_expect_tx(key_bar, 3 * L::kRows);
    tma_load_3d(sb + L::kK, &maps.k, key_bar, 0, int(j0), int(bg));
    tma_load_3d(sb + L::kV, &maps.v, key_bar, 0, int(j0), int(bg));
    tma_load_3d(sb + L::kKt, &maps.k_t, key_bar, int(j0), 0, int(bg));
    if (st.count > 0) load_step(0);
  }
  if (st.count > 0) {
    load_stat(0);
    store_stat(0);
  }
  wait_stage(key_bar, 0);

  float dv[kD / 8][4], dk[kD / 8][4];  // this lane's keys 64wg + 16w + g (+ 8) x head_dim
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[dn][e] = dk[dn][e] = 0.0f;
  const float k_inv = k_inv_at(p, bg, j0);                       // the key block's K̂ 1/scale
  const int64_t kbase = j0 + bwdw::kWgKeys * ln.wg + 16 * ln.w;  // this warp's first key
  const unsigned a_k = sb + L::kK + bwdw::kWgKeys * ln.wg * kD;  // the warpgroup's K̂ rows
  const unsigned a_v = sb + L::kV + bwdw::kWgKeys * ln.wg * kD;  // ... V̂ rows
  const unsigned a_ds = sb + L::kDs + 64 * ln.wg * kBN;          // dQ's A: dŜ rows 64wg..

  // The next step's boxes into stage (n + 1) % 2, step n − 1's: at once with atomics; with kDqTma
  // after this step's first Sᵀ product, once step n − 1's dQ reduces have read that stage (by then
  // they long have: thread 0 rarely waits).
  auto prefetch = [&](int n) {
    if (tid != 0 || n + 1 >= st.count) return;
    if constexpr (kDqTma) bulk_wait_read<0>();
    load_step(n + 1);
  };
  for (int n = 0; n < st.count; ++n) {
    __syncthreads();  // the step's statistics are published; stage (n + 1) % 2 is free (step n − 1's)
    if (n + 1 < st.count) {
      if constexpr (!kDqTma) prefetch(n);
      load_stat(n + 1);
    }
    wait_stage(stage_bar(n), n / 2);  // this step's boxes have landed
    const int64_t bh = bh_of(n), i0 = i0_of(n);
    const TileScales sc = tile_scales(p, bh, i0, bg, j0);
    const unsigned stage = sb + L::kStage0 + unsigned(n % 2) * L::kStage;
    const ColStats& cs = stats[n % 2];
    const bool full = bwd::tile_full(p, i0, kBM, j0, kBN);  // CTA-uniform

    // Sᵀ → P → dV; dPᵀ → dS = P∘(dP − D) (kOverlap: dS before dV); the lane's |dS| amax bits; the
    // tile's power-of-two scale over both warpgroups (bwd::cta_amax) and dŜᵀ's A fragments over
    // the 128 queries.
    unsigned amax = 0;
    uint32_t dsa[kBM / 32][4];
    float scale;
    {
      // Two 64-query halves h (bwdw::kCols): Sᵀ_h → P_h, P̃_h fragments; after half 1's P, dV +=
      // P̃ᵀ(dO/l)~ over all 128 queries in 64-column parts of head_dim; dPᵀ_h → dS_h (kOverlap:
      // Sᵀ_h and dPᵀ_h issued together, P_h formed while dPᵀ_h runs, dV after half 1's dS). Half
      // 0's dS waits in shared memory (each thread its own FP32 values, in the dŜ tile's space)
      // until the amax covers the whole 128 x 128 scale tile.
      constexpr int kN = bwdw::kCols<kD>;
      float4* const park = reinterpret_cast<float4*>(smem + L::kDs) + tid;
      uint32_t pa[kBM / 32][4];  // P̃ᵀ fragments over the 128 queries (half h: pa[kN / 32 · h..])
      float s[kN / 8][4];        // half h's P, then dS
#pragma unroll
      for (int h = 0; h < kBM / kN; ++h) {
        uint32_t(*const pa_h)[4] = pa + kN / 32 * h;
        auto prob_h = [&] {  // once Sᵀ_h has landed: the next step's boxes (kDqTma), then P_h
          if constexpr (kDqTma)
            if (h == 0) prefetch(n);
          if (full)
            bwdw::tile_prob<true>(cs, ln, kbase, kN * h, sc.s_scale, s, pa_h);
          else
            bwdw::tile_prob<false>(cs, ln, kbase, kN * h, sc.s_scale, s, pa_h);
        };
        if constexpr (kOverlap) {
          // Sᵀ_h and dPᵀ_h issued together; P_h formed while dPᵀ_h runs; dS_h, then (half 1) dV
          // (its accumulator not live beside dP's).
          float dp[kN / 8][4];
          bwdw::tile_issue<kD, false>(a_k, stage + kN * h * kD, s);
          bwdw::tile_issue<kD, kDoE5M2>(a_v, stage + L::kRows + kN * h * kD, dp);
          wgmma_wait<1>();
          fence_regs(s);
          prob_h();
          wgmma_wait<0>();
          fence_regs(dp);
          dp_to_ds<kRes>(p, cs, ln, kbase, kN * h, sc, bh, i0, full, dp, s, amax);
          if (h == 1) dv_product<kD, kDoE5M2, 64, kBM>(stage + 3 * L::kRows, pa, dv);
        } else {
          bwdw::tile_product<kD, false>(a_k, stage + kN * h * kD, s);
          prob_h();
          if (h == 1) {
            dv_product<kD, kDoE5M2, 64, kBM>(stage + 3 * L::kRows, pa, dv);
          }
          tile_ds<kD, kDoE5M2, kRes>(p, cs, ln, kbase, kN * h, sc, bh, i0, full, a_v,
                                     stage + L::kRows + kN * h * kD, s, amax);
        }
        if (h == 0) {
#pragma unroll
          for (int i = 0; i < kN / 8; ++i)
            park[i * kThreads] = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        }
      }
      float s0[kN / 8][4];  // half 0's dS back (this thread's own values: no barrier needed)
#pragma unroll
      for (int i = 0; i < kN / 8; ++i) {
        const float4 x = park[i * kThreads];
        s0[i][0] = x.x, s0[i][1] = x.y, s0[i][2] = x.z, s0[i][3] = x.w;
      }
      // cta_amax's barrier also orders every thread's park reads before the dŜ bytes below.
      scale = scale_from_amax(bwd::cta_amax(amax, amax_slots), p.ds_format, 0, true);
      uint32_t d0[kN / 32][4], d1[kN / 32][4];
      bwd::to_a_frags<kN>(s0, scale, p.ds_format, d0);
      bwd::to_a_frags<kN>(s, scale, p.ds_format, d1);
#pragma unroll
      for (int kk = 0; kk < kN / 32; ++kk)
#pragma unroll
        for (int r = 0; r < 4; ++r) dsa[kk][r] = d0[kk][r], dsa[kN / 32 + kk][r] = d1[kk][r];
    }
    const float g_scale = p.tau * (1.0f / scale);  // τ · dŜ's 1/scale (a power of two: exact)
    // dK's and dQ's factors: g_scale, × Q̂'s / K̂'s block 1/scale with per-block scales.
    const float gk_scale = g_scale * grad_factor(p, q_inv_at(p, bh, i0));
    const float gq_scale = g_scale * grad_factor(p, k_inv);
    // dŜ into shared memory [query][key] (K-major for dQ's A).
#pragma unroll
    for (int kk = 0; kk < kBM / 32; ++kk) bwdw::store_ds_bytes(smem + L::kDs, ln, kk, dsa[kk]);
    fence_proxy_async_smem();
    __syncthreads();  // both warpgroups' dŜ columns are in place
    // dK += τ dŜᵀQ̂ (A = dŜᵀ fragments, B = Q̂ᵀ) and dQ = τ dŜK̂ (A = dŜ rows 64wg.., B = K̂ᵀ), each
    // from a zero accumulator: in one wgmma batch at head_dim 64; one after the other at 128 (two
    // m64n128 accumulators do not fit beside dK, dV).
    float ak[kD / 8][4], aq[kD / 8][4];
    auto fold_dk = [&] {  // after dK's product has landed: dk += its FP32 values · τ/scale
      fence_regs(ak);
      fence_regs(dsa);
#pragma unroll
      for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[dn][e] += ak[dn][e] * gk_scale;
    };
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBM / 32; ++kk)
      WgmmaFp8<kD, kDsE5M2, false>::rs(ak, dsa[kk], kmajor_desc<128>(stage + 2 * L::kRows + 32 * kk), kk);
    if constexpr (kD == 128) {
      wgmma_commit();
      wgmma_wait<0>();
      fold_dk();
      // With kDqTma the stage takes dQ after this: both warpgroups' dK products (B = Q̂ᵀ, all 128
      // queries) must be done with it.
      if constexpr (kDqTma) __syncthreads();
      wgmma_fence();
    }
#pragma unroll
    for (int kk = 0; kk < kBN / 32; ++kk)
      WgmmaFp8<kD, kDsE5M2, false>::ss(aq, kmajor_desc<128>(a_ds + 32 * kk),
                                       kmajor_desc<128>(sb + L::kKt + 32 * kk), kk);
    wgmma_commit();
    if (p.ds_row_sum) add_ds_row_sums<kDsE5M2>(p, smem + L::kDs, tid, bh, i0, 1.0f / scale);
    wgmma_wait<0>();
    fence_regs(aq);
    if constexpr (kD == 64) fold_dk();
    if constexpr (kDqTma) {
      // The stage is spent (Q̂ by Sᵀ, dÔ by dPᵀ and (dO/l)~ᵀ by dV before the tile's amax barrier;
      // Q̂ᵀ by dK before the barrier above, or at head_dim 64 in this batch, hence the barrier
      // here): dQ into it, then thread 0 adds its four boxes to dq_acc. A full barrier, not an
      // arrive for warps 1..7: they would wait at the next step's first barrier anyway, and with
      // the arrive compute-sanitizer's racecheck reported hazards between accesses that other
      // full barriers order (it seems not to follow bar.arrive; 0 hazards with this barrier).
      if constexpr (kD == 64) __syncthreads();
      stage_dq<kD, kBM>(stage, ln, 64 * ln.wg + 16 * ln.w + ln.g, aq, gq_scale);
      fence_proxy_async_smem();
      __syncthreads();  // every thread's dQ values are in the stage
      if (tid == 0) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          tma_reduce_add_3d(&maps.dq, stage + unsigned(c * L::kRows), c * kD / 4, int(i0), int(bh));
        bulk_commit();
      }
    } else {
      // dQ rows: query 64wg + 16w + g (+ 8 for an odd t: bwd::atomic_add_dq's lane pairing)
      const bool odd = ln.t % 2 != 0;
      const int q = 64 * ln.wg + 16 * ln.w + ln.g + (odd ? 8 : 0);
      const bool my_vis = cs.vis[q] > 0;  // else dS = 0 in the row: nothing to add (pads too)
      bwd::atomic_add_dq<kD>(p.dq_acc + (bh * p.Tq_p + i0 + q) * kD + 4 * (ln.t / 2), aq, gq_scale, odd,
                             my_vis);
    }
    if (n + 1 < st.count) store_stat(n + 1);  // published by the next step's barrier
  }
  if constexpr (kDqTma)
    if (tid == 0) bulk_wait<0>();  // the last reduces are done with shared memory before the CTA exits
  // dV = Σ P̃_code (dO/l)_code · (1/p_scale) · its 1/scale; dK in Q̂'s code units (× sq later),
  // or in values with per-block scales.
  const float dv_scale = (1.0f / p.p_scale) * *p.dvo_scale_inv;
  if constexpr (kDirect)
    store_dkv_direct<kD>(p, ln, bg, kbase, dk, dv, dv_scale);
  else
    bwdw::store_dkv_acc<kD>(p, ln, bg, kbase, dk, dv, dv_scale);
#else
  __trap();  // wgmma needs sm_90a; run_backward_main dispatches by device
#endif
}

/// The call's TMA descriptors (BackwardMaps): the seven loads, and dq when p.dq_tma is 1. Throws octet::Error
/// when a coordinate would not fit TMA's 32 bits or a base is not 16-byte aligned (make_tensor_map).
BackwardMaps make_maps(const BackwardParams& p) {
  OCTET_CHECK(p.B * p.H * p.Tq_p / 16 < (int64_t(1) << 31) && p.B * p.G * p.D < (int64_t(1) << 31) &&
                  p.Tq_p < (int64_t(1) << 31),
              "flash attention backward (wgmma): B·H·Tq/16, B·G·head_dim and Tq must stay below 2^31 "
              "(TMA coordinates)");
  BackwardMaps m{};
  const TmaSwizzle d_swizzle = p.D == 128 ? TmaSwizzle::B128 : TmaSwizzle::B64;
  auto make = [](const void* base, const TmaTiles& t, TmaSwizzle swizzle) {
    return make_tensor_map(base, TmaElement::U8, t.rank, t.dims, t.strides, t.box, swizzle);
  };
  const TmaTiles q_rows = permuted_row_tiles(p.D, p.B * p.H * p.Tq_p, kBM);
  m.q = make(p.q, q_rows, d_swizzle);
  m.d_o = make(p.d_o, q_rows, d_swizzle);
  const TmaTiles k_rows = row_tiles(p.D, p.Tk_p, p.B * p.G, kBN);
  m.k = make(p.k, k_rows, d_swizzle);
  m.v = make(p.v, k_rows, d_swizzle);
  const TmaTiles q_cols = group_transpose_tiles(p.Tq_p, p.H / p.G, p.B * p.G * p.D, p.D, kBM);
  m.q_t = make(p.q_t, q_cols, TmaSwizzle::B128);
  m.dvo_t = make(p.dv_o_t, q_cols, TmaSwizzle::B128);
  m.k_t = make(p.k_t, column_tiles(p.Tk_p, p.D, p.B * p.G, kBN), TmaSwizzle::B128);
  m.dq = m.q;  // not read with atomics
  if (p.dq_tma == 1) {
    // dq_acc [B·H][Tq_p][D] FP32; a box is kBM rows of one head, D/4 columns (D bytes: the kD-byte
    // swizzle's span). Rows past Tq_p are outside: a box never reaches the next head's rows.
    const uint64_t dims[3] = {uint64_t(p.D), uint64_t(p.Tq_p), uint64_t(p.B * p.H)};
    const uint64_t strides[2] = {uint64_t(p.D) * 4, uint64_t(p.Tq_p * p.D) * 4};
    const uint32_t box[3] = {uint32_t(p.D / 4), kBM, 1};
    m.dq = make_tensor_map(p.dq_acc, TmaElement::F32, 3, dims, strides, box, d_swizzle);
  }
  return m;
}

template <typename Kernel>
void launch(Kernel kernel, int64_t blocks, int bytes, const BackwardParams& p, cudaStream_t stream) {
  // All of the SM's unified L1 / shared memory as shared.
  opt_in_shared_memory(kernel, bytes, /*max_carveout=*/true);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention backward (wgmma): too many blocks");
  const BackwardMaps maps = make_maps(p);
  kernel<<<unsigned(blocks), kThreads, bytes, stream>>>(p, maps);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool bwd_sm90_supported(const BackwardParams& p) {
  const bool tiles = (p.block_q == kBM && p.block_k == kBN) || (p.block_q == 64 && p.block_k == 64);
  return (p.D == 64 || p.D == 128) && tiles && !p.deterministic && p.Tk < (int64_t(1) << 31);
}

void bwd_sm90_launch(const BackwardParams& p, cudaStream_t stream) {
  if (p.block_q == 64 && p.block_k == 64) {  // 64 x 64 dS scale tiles: the warp-specialized kernel
    bwd_ws_sm90_launch(p, stream);
    return;
  }
  OCTET_CHECK(
      p.key_head_group >= 0 && (p.dq_tma == 0 || p.dq_tma == 1) && (p.sdp_overlap == 0 || p.sdp_overlap == 1),
      "flash attention backward (wgmma): key_head_group, dq_tma or sdp_overlap unresolved "
      "(run_backward_main)");
  OCTET_CHECK(bwd_sm90_supported(p),
              "flash attention backward (wgmma): supports head_dim 64 or 128, block_q = block_k = "
              "128, not deterministic");
  OCTET_CHECK(!p.dk_out || (p.D == 64 && p.dq_tma == 1 && !p.res_sums),
              "flash attention backward (wgmma): dk_out needs head_dim 64, dQ by TMA and no residual sums");
  const int64_t blocks = p.B * p.G * ((p.Tk + kBN - 1) / kBN);
  const bool do_e5m2 = p.do_format == Format::E5M2, ds_e5m2 = p.ds_format == Format::E5M2;
  using T = std::true_type;
  using F = std::false_type;
  // The one place where head_dim, the formats, the residual flag, the dQ path and the products'
  // order become template parameters.
  auto res = [&](auto d, auto d5, auto s5) {
    constexpr int kD = decltype(d)::value;
    constexpr bool kDo = decltype(d5)::value, kDs = decltype(s5)::value;
    const int bytes = MainLayout<kD>::kBytes;
    auto go = [&](auto with_res, auto tma, auto overlap) {
      constexpr bool kR = decltype(with_res)::value, kT = decltype(tma)::value, kO = decltype(overlap)::value;
      if constexpr (kD == 64 && kT && !kR) {  // dK, dV into the caller's tensors: these kernels only
        if (p.dk_out) {
          launch(wgmma_backward_kernel<kD, kDo, kDs, kR, kT, kO, true>, blocks, bytes, p, stream);
          return;
        }
      }
      launch(wgmma_backward_kernel<kD, kDo, kDs, kR, kT, kO, false>, blocks, bytes, p, stream);
    };
    // The overlap at head_dim 64 only (the kernel's static_assert says why).
    auto variant = [&](auto with_res) {
      if constexpr (kD == 64) {
        if (p.sdp_overlap) {
          p.dq_tma ? go(with_res, T{}, T{}) : go(with_res, F{}, T{});
          return;
        }
      }
      p.dq_tma ? go(with_res, T{}, F{}) : go(with_res, F{}, F{});
    };
    p.res_sums ? variant(T{}) : variant(F{});
  };
  auto formats = [&](auto d) {
    if (do_e5m2)
      ds_e5m2 ? res(d, T{}, T{}) : res(d, T{}, F{});
    else
      ds_e5m2 ? res(d, F{}, T{}) : res(d, F{}, F{});
  };
  if (p.D == 64)
    formats(std::integral_constant<int, 64>{});
  else
    formats(std::integral_constant<int, 128>{});
}

}  // namespace octet::cuda::flash
