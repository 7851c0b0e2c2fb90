// src/cuda/attention/flash/flash_bwd_ws_sm90.cu — the Hopper (sm_90a) main kernel of the flash FP8
// attention backward for 64 x 64 dS scale tiles (block_q = block_k = 64), in FlashAttention-3's
// warp-specialized structure (arXiv 2407.08608 §3: a producer warpgroup that gives its registers
// back, a TMA/mbarrier ring, consumer warpgroups at full registers). Semantics: flash.h (CPU twin:
// src/cpu/attention_flash.cpp backward_flash with block_q = block_k = 64); Delta-Matching's matched
// delta (arXiv 2609.37852) comes from the row pre-pass (flash_bwd_delta_sm90.cu), whose S and dP
// carry this kernel's bits. docs/attention.md §"Backward"; docs/design.md for why 64 x 64.
//
// One CTA of three warpgroups per (b, KV head, block of 128 keys); K̂, V̂ ([key][d]) and K̂ᵀ
// ([d][key]) of the block stay in shared memory. A step is one query head's block of 64 queries
// that sees the key block (the rep = H/G heads' blocks in turn). Warpgroup 0 is the producer: its
// warp 0 loads the key block once and each step's Q̂, dÔ rows (permuted per 16-query group), Q̂ᵀ
// and (dO/l)~ᵀ columns (group transposes) by TMA into a kStages-deep ring, its warp 1 writes the
// step's query statistics (ColStat: exponent bias, 1/(l·p_scale), D, visible keys) beside them;
// one full mbarrier per stage completes on both and the TMA bytes, one empty mbarrier when the 256
// consumer threads are done with the stage. Consumer warpgroup c owns the keys 64c.. of the block
// (warp w the 16 keys 64c + 16w..), so one step is exactly one 64 x 64 scale tile per consumer and
// the consumers never wait for each other:
//   Sᵀ = K̂Q̂ᵀ (SS m64n64k32) → P = exp(S − m)/l in place, P̃ = E4M3(exp(S − m)·p_scale) as A
//   fragments; dV += P̃ᵀ(dO/l)~ (RS, B = (dO/l)~ᵀ); dPᵀ = V̂dÔᵀ (SS) → dS = P∘(dP − D) in place
//   (kOverlap, head_dim 64: Sᵀ and dPᵀ issued together, P formed while dPᵀ runs, dV's product waited
//   for with dK's and dQ's); the tile's |dS|
//   amax over the warpgroup's four warps (named barrier 1 + c) → the power-of-two scale (fp8.h
//   scale_from_amax) → dŜᵀ A fragments and dŜ bytes into the warpgroup's 64 columns of a [query][key]
//   tile; dK += τ dŜᵀQ̂ (RS, B = Q̂ᵀ); dQ_c = τ dŜ_c K̂_c (SS over the warpgroup's own 64 keys) staged
//   in the warpgroup's own shared buffer and added to dq_acc by four TMA bulk reduces (the two
//   consumers' parts add in L2, in no fixed order, as every CTA's do; with kOverlap the reduces are
//   issued at the next step's start, under its Sᵀ and dPᵀ).
// Every product is one tile's (64 terms of keys or queries, head_dim terms for Sᵀ and dPᵀ) from a
// zero accumulator, added in FP32 outside the tensor core (Hopper's FP8 wgmma keeps ~13 bits in its
// accumulator; DeepSeek-V3 §3.3.2).
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/attention/flash/flash_bwd_parts_sm90.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm90.cuh"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_tma.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/runtime/tensor_map.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {
namespace {

using bwdw::ColStat;
using bwdw::ColStats;
using bwdw::kBN;
using bwdw::Lane;

constexpr int kThreads = 384;  // warpgroup 0: the producer; 1 and 2: the consumers
constexpr int kQ = 64;         // queries per step: block_q
constexpr int kKeys = 64;      // keys per consumer warpgroup: block_k
constexpr int kStages = 2;     // the query ring
// setmaxnreg: 128·24 + 256·240 = 64512 = 384·168, the launch's allocation.
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
static_assert(kBN == 2 * kKeys, "two consumer warpgroups cover the CTA's key block");

/// The TMA descriptors of one call (make_maps): Q̂ and dÔ [B·H·Tq_p][D] with rows permuted per
/// 16-query group (flash_bwd_tile_sm90.cuh), boxes of kQ rows; Q̂ᵀ and (dO/l)~ᵀ [B·G·D][rep][Tq_p]
/// (group transposes), boxes of [kD][kQ queries] of one query head (64-byte swizzle); K̂, V̂
/// [B·G][Tk_p][D], boxes of kBN rows; K̂ᵀ [B·G][D][Tk_p], boxes of [kD][kBN keys]; dq_acc FP32
/// [B·H][Tq_p][D], boxes of [kQ queries][kD/4 columns] (kD-byte swizzle) that the reduces add.
struct Maps {
  CUtensorMap q, d_o, q_t, dvo_t, k, v, k_t, dq;
};

// Shared memory from a 1024-byte aligned base (every tile 1024-aligned): K̂, V̂ [kBN][kD] (kD-byte
// swizzle), K̂ᵀ [kD][kBN] (128-byte swizzle); dŜ [kQ][kBN] (128-byte swizzle; consumer c writes and
// reads only its columns 64c..); the two consumers' dQ buffers [4 boxes][kQ][kD/4] FP32; kStages
// stages of Q̂, dÔ [kQ][kD] (permuted rows, kD-byte swizzle), Q̂ᵀ, (dO/l)~ᵀ [kD][kQ] (64-byte
// swizzle); kStages ColStats (the first kQ queries used); the mbarriers key_full, full[kStages],
// empty[kStages]; the consumers' amax slots [2][4]. head_dim 64: 102 KiB; 128: 190 KiB (with the
// alignment slack).
template <int kD>
struct Layout {
  static constexpr int kKeyTile = kBN * kD;  // one K̂, V̂ or K̂ᵀ tile
  static constexpr int kQTile = kQ * kD;     // one Q̂, dÔ, Q̂ᵀ or (dO/l)~ᵀ tile
  static constexpr int kK = 0, kV = kKeyTile, kKt = 2 * kKeyTile;
  static constexpr int kDs = 3 * kKeyTile;
  static constexpr int kDqBytes = kQ * kD * 4;
  static constexpr int kDq = kDs + kQ * kBN;  // consumer c's dQ buffer at kDq + c·kDqBytes
  static constexpr int kStage0 = kDq + 2 * kDqBytes;
  static constexpr int kStage = 4 * kQTile;  // + 0: Q̂, + kQTile: dÔ, + 2 kQTile: Q̂ᵀ, + 3: (dO/l)~ᵀ
  static constexpr int kStats = kStage0 + kStages * kStage;
  static constexpr int kBars = kStats + kStages * int(sizeof(ColStats));
  static constexpr int kSlots = kBars + 8 * (1 + 2 * kStages);
  static constexpr int kBytes = kSlots + 2 * 4 * 4 + 1024;  // + alignment slack
  static_assert(kQTile % 1024 == 0 && kDqBytes % 1024 == 0 && (kQ * kBN) % 1024 == 0, "1024-aligned tiles");
  static_assert(sizeof(ColStats) % 8 == 0, "8-byte aligned mbarriers");
  static_assert(kBytes <= 227 * 1024, "an sm_90 CTA's shared memory");
};

// The dQ row-sum projection's r̂_i (BackwardParams::ds_row_sum) over consumer c's 64 keys: thread
// tid (0..127 of the warpgroup) decodes the 32 codes of its half of row tid / 2 of the [query][key]
// dŜ tile (the 128-byte swizzle stores 16-byte chunk k of row q at chunk k ^ (q % 8)), joins its
// neighbour's half and adds the sum · inv_scale (dS = code / scale) by one FP32 atomic.
template <bool kDsE5M2>
__device__ __forceinline__ void add_ds_row_sums(const BackwardParams& p, const uint8_t* sds, int c, int tid,
                                                int64_t bh, int64_t i0, float inv_scale) {
  const int q = tid / 2, h = tid % 2;
  const uint8_t* const row = sds + q * kBN;
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int chunk = 4 * c + 2 * h + k;
    sum = bwdw::sum_codes16<kDsE5M2>(*reinterpret_cast<const uint4*>(row + 16 * (chunk ^ (q % 8))), sum);
  }
  sum += __shfl_xor_sync(0xFFFFFFFFu, sum, 1);
  if (h == 0 && i0 + q < p.Tq) atomicAdd(p.ds_row_sum + bh * p.Tq + i0 + q, sum * inv_scale);
}

// kDoE5M2, kDsE5M2: do_format, ds_format are E5M2; kRes: res_sums is given; kOverlap: Sᵀ and dPᵀ
// issued together (BackwardParams::sdp_overlap, head_dim 64); kDirect: dK, dV into the caller's
// tensors (store_dkv_direct).
template <int kD, bool kDoE5M2, bool kDsE5M2, bool kRes, bool kOverlap, bool kDirect>
__global__ void __launch_bounds__(kThreads, 1)
    ws_backward_kernel(const BackwardParams p, const __grid_constant__ Maps maps) {
  static_assert(!kOverlap || kD == 64, "the Sᵀ/dPᵀ overlap at head_dim 64 only");
  static_assert(!kDirect || (kD == 64 && !kRes), "the direct dK, dV epilogue's kernels");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<kD>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned sb = smem_u32(smem);
  ColStats* const stats = reinterpret_cast<ColStats*>(smem + L::kStats);
  unsigned* const slots = reinterpret_cast<unsigned*>(smem + L::kSlots);
  const unsigned key_full = sb + L::kBars;
  const auto full = [&](int s) { return key_full + 8u * unsigned(1 + s); };
  const auto empty = [&](int s) { return key_full + 8u * unsigned(1 + kStages + s); };
  const int wg = threadIdx.x / 128;

  const int64_t rep = p.H / p.G;
  int64_t bg = 0, j0 = 0;
  bwd::k_block_of(p, kBN, &bg, &j0);
  const int64_t b = bg / p.G, gh = bg % p.G;
  // Query blocks that see key j0 (causal bottom-right: rows i >= j0 − (Tk − Tq)).
  const int64_t n_qblocks = (p.Tq + kQ - 1) / kQ;
  const int64_t first = p.causal ? j0 - (p.Tk - p.Tq) : 0;
  const int qb0 = first > 0 ? int(first / kQ) : 0;
  const int per_head = qb0 < n_qblocks ? int(n_qblocks) - qb0 : 0;
  const int count = int(rep) * per_head;  // steps; per_head > 0 whenever a step exists
  const auto bh_of = [&](int n) { return b * p.H + gh * rep + n / per_head; };
  const auto i0_of = [&](int n) { return int64_t(qb0 + n % per_head) * kQ; };

  // full(s): the TMA thread's arrival with the boxes' bytes, and the statistics warp's 32 arrivals;
  // empty(s): the 256 consumer threads' arrivals.
  if (threadIdx.x == 0) {
    mbar_init(key_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 1 + 32);
      mbar_init(empty(s), 256);
    }
    fence_mbar_init();
  }
  __syncthreads();

  if (wg == 0) {
    // The producer. Step n goes to stage n % kStages once the consumers have released step
    // n − kStages (empty's completion n / kStages − 1).
    setmaxnreg_dec<kProducerRegs>();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (warp == 0 && lane == 0) {
      mbar_arrive_expect_tx(key_full, 3 * L::kKeyTile);
      tma_load_3d(sb + L::kK, &maps.k, key_full, 0, int(j0), int(bg));
      tma_load_3d(sb + L::kV, &maps.v, key_full, 0, int(j0), int(bg));
      tma_load_3d(sb + L::kKt, &maps.k_t, key_full, int(j0), 0, int(bg));
#pragma unroll 1
      for (int n = 0; n < count; ++n) {
        const int s = n % kStages;
        if (n >= kStages) mbar_wait(empty(s), unsigned(n / kStages - 1) & 1u);
        const unsigned st = sb + L::kStage0 + unsigned(s * L::kStage);
        const int64_t bh = bh_of(n), i0 = i0_of(n);
        const int group = int((bh * p.Tq_p + i0) / 16), hr = n / per_head, row = int(bg * kD);
        mbar_arrive_expect_tx(full(s), 4 * L::kQTile);
        tma_load_5d(st, &maps.q, full(s), 0, 0, 0, 0, group);
        tma_load_5d(st + L::kQTile, &maps.d_o, full(s), 0, 0, 0, 0, group);
        tma_load_3d(st + 2 * L::kQTile, &maps.q_t, full(s), int(i0), hr, row);
        tma_load_3d(st + 3 * L::kQTile, &maps.dvo_t, full(s), int(i0), hr, row);
      }
    } else if (warp == 1) {
#pragma unroll 1
      for (int n = 0; n < count; ++n) {
        const int s = n % kStages;
        if (n >= kStages) mbar_wait(empty(s), unsigned(n / kStages - 1) & 1u);
#pragma unroll 1
        for (int q = lane; q < kQ; q += 32) {
          ColStat cst;
          cst.load(p, bh_of(n), i0_of(n) + q, true);
          cst.store(stats[s], q, p.p_scale);
        }
        mbar_arrive(full(s));  // release: the statistics before the consumers' wait
      }
    }
    return;
  }

  // Consumer c = wg − 1: keys 64c.. of the block; named barrier 1 + c is its own (128 threads).
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1, tid = threadIdx.x % 128, bar = 1 + c;
  Lane ln;
  ln.wg = c;
  float dv[kD / 8][4], dk[kD / 8][4];  // this lane's keys 64c + 16w + g (+ 8) x head_dim
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) dv[dn][e] = dk[dn][e] = 0.0f;
  const float k_inv = k_inv_at(p, bg, j0);                     // the key block's K̂ 1/scale
  const int64_t kbase = j0 + kKeys * c + 16 * ln.w;            // this warp's first key
  const unsigned a_k = sb + L::kK + unsigned(kKeys * c * kD);  // the warpgroup's K̂ rows
  const unsigned a_v = sb + L::kV + unsigned(kKeys * c * kD);  // ... V̂ rows
  const unsigned dq_buf = sb + L::kDq + unsigned(c * L::kDqBytes);
  mbar_wait(key_full, 0);
  const auto stage_of = [&](int n) { return sb + L::kStage0 + unsigned((n % kStages) * L::kStage); };
  // kOverlap: a step issues its Sᵀ and dPᵀ together, forms P while dPᵀ runs, and issues dV's
  // product before the amax barrier, waited for with dK's and dQ's.
  float sd[kQ / 8][4];                 // Sᵀ's accumulator, then P, then dS
  float dp[kQ / 8][4];                 // dPᵀ's (kOverlap)
  const auto issue_sdp = [&](int n) {  // kOverlap
    mbar_wait(full(n % kStages), unsigned(n / kStages) & 1u);
    bwdw::tile_issue<kD, false>(a_k, stage_of(n), sd);
    bwdw::tile_issue<kD, kDoE5M2>(a_v, stage_of(n) + L::kQTile, dp);
  };
  // A step's τ dŜ_c K̂_c × its factor, staged in dq_buf (stage_dq, when the product is done), is
  // added to dq_acc by four TMA reduces (add_dq) once every thread's part is in place. With kOverlap
  // add_dq runs at the next step's start, after that step's Sᵀ and dPᵀ are issued, so that the
  // barrier runs under them. Every product is issued and waited for within one step: issuing step
  // n + 1's Sᵀ and dPᵀ at the end of step n (their accumulators in flight across the loop's back
  // edge), or staging step n's dQ under them, makes ptxas serialize the wgmmas (C7514 / C7517).
  const auto add_dq = [&](int64_t bh, int64_t i0) {
    fence_proxy_async_smem();
    named_barrier_sync(bar, 128);  // every thread's dQ values are in dq_buf
    if (tid == 0) {
#pragma unroll
      for (int box = 0; box < 4; ++box)
        tma_reduce_add_3d(&maps.dq, dq_buf + unsigned(box * kQ * kD), box * kD / 4, int(i0), int(bh));
      bulk_commit();
    }
  };
  int64_t pend_bh = 0, pend_i0 = 0;  // kOverlap: the staged step's

#pragma unroll 1
  for (int n = 0; n < count; ++n) {
    const int s = n % kStages;
    if constexpr (kOverlap) {
      issue_sdp(n);
      if (n > 0) add_dq(pend_bh, pend_i0);
    } else {
      mbar_wait(full(s), unsigned(n / kStages) & 1u);
    }
    const int64_t bh = bh_of(n), i0 = i0_of(n);
    const TileScales sc = tile_scales(p, bh, i0, bg, j0);
    const unsigned stage = stage_of(n);
    const ColStats& cs = stats[s];
    const bool full_tile = bwd::tile_full(p, i0, kQ, j0 + kKeys * c, kKeys);  // warpgroup-uniform

    // Sᵀ → P (and P̃'s fragments) → dV; dPᵀ → dS; the lane's |dS| amax bits.
    unsigned amax = 0;
    uint32_t pa[kQ / 32][4];
    float av[kD / 8][4];  // dV's product (kOverlap: waited for with dK's and dQ's)
    const auto prob = [&] {
      if (full_tile)
        bwdw::tile_prob<true>(cs, ln, kbase, 0, sc.s_scale, sd, pa);
      else
        bwdw::tile_prob<false>(cs, ln, kbase, 0, sc.s_scale, sd, pa);
    };
    if constexpr (kOverlap) {
      wgmma_wait<1>();
      fence_regs(sd);
      prob();
      wgmma_wait<0>();
      fence_regs(dp);
      bwdw::dp_to_ds<kRes>(p, cs, ln, kbase, 0, sc, bh, i0, full_tile, dp, sd, amax);
      // Issued here rather than before the wait for dPᵀ: 1-2 % faster (H100).
      bwdw::dv_issue<kDoE5M2, kD, kQ>(stage + 3 * L::kQTile, pa, av);
    } else {
      bwdw::tile_product<kD, false>(a_k, stage, sd);
      prob();
      bwdw::dv_product<kD, kDoE5M2, 64, kQ>(stage + 3 * L::kQTile, pa, dv);
      bwdw::tile_ds<kD, kDoE5M2, kRes>(p, cs, ln, kbase, 0, sc, bh, i0, full_tile, a_v, stage + L::kQTile, sd,
                                       amax);
    }

    // The tile's amax over the warpgroup's four warps (NaN largest). The slots' next write (the
    // next step) follows this step's second barrier, which every warp passes after reading them.
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    if (ln.g == 0 && ln.t == 0) slots[4 * c + ln.w] = amax;
    named_barrier_sync(bar, 128);
    unsigned m = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) m = max(m, slots[4 * c + w]);
    const float scale = scale_from_amax(m > 0x7F800000u ? NAN : __uint_as_float(m), p.ds_format, 0, true);
    uint32_t dsa[kQ / 32][4];
    bwd::to_a_frags<kQ>(sd, scale, p.ds_format, dsa);
    const float g_scale = p.tau * (1.0f / scale);  // τ · dŜ's 1/scale (a power of two: exact)
    // dK's and dQ's factors: g_scale, × Q̂'s / K̂'s block 1/scale with per-block scales.
    const float gk_scale = g_scale * grad_factor(p, q_inv_at(p, bh, i0));
    const float gq_scale = g_scale * grad_factor(p, k_inv);
    // dŜ into the warpgroup's columns of the [query][key] tile (K-major for dQ's A). Its last
    // readers, the previous step's dQ product and row sums, finished before the amax barrier.
#pragma unroll
    for (int kk = 0; kk < kQ / 32; ++kk) bwdw::store_ds_frag(smem + L::kDs, ln, kk, dsa[kk]);
    fence_proxy_async_smem();
    if (tid == 0 && n > 0) bulk_wait_read<0>();  // the last reduces issued have read dq_buf
    named_barrier_sync(bar, 128);                // dŜ columns in place; dq_buf free

    // dK += τ dŜᵀQ̂ (A = dŜᵀ fragments, B = Q̂ᵀ) and dQ_c = τ dŜ_c K̂_c (A = the dŜ columns, B = K̂ᵀ's
    // columns 64c..), each from a zero accumulator: one wgmma batch at head_dim 64, one after the
    // other at 128 (two m64n128 accumulators do not fit beside dK, dV).
    float ak[kD / 8][4], aq[kD / 8][4];
    const auto fold_dk = [&] {
      fence_regs(ak);
      fence_regs(dsa);
#pragma unroll
      for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[dn][e] += ak[dn][e] * gk_scale;
    };
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kQ / 32; ++kk)
      WgmmaFp8<kD, kDsE5M2, false>::rs(ak, dsa[kk], kmajor_desc<kQ>(stage + 2 * L::kQTile + 32 * kk), kk);
    if constexpr (kD == 128) {
      wgmma_commit();
      wgmma_wait<0>();
      fold_dk();
      mbar_arrive(empty(s));  // the stage and its statistics are spent
      wgmma_fence();
    }
#pragma unroll
    for (int kk = 0; kk < kKeys / 32; ++kk)
      WgmmaFp8<kD, kDsE5M2, false>::ss(aq, kmajor_desc<128>(sb + L::kDs + unsigned(kKeys * c + 32 * kk)),
                                       kmajor_desc<128>(sb + L::kKt + unsigned(kKeys * c + 32 * kk)), kk);
    wgmma_commit();
    if (p.ds_row_sum) add_ds_row_sums<kDsE5M2>(p, smem + L::kDs, c, tid, bh, i0, 1.0f / scale);
    wgmma_wait<0>();
    fence_regs(aq);
    if constexpr (kD == 64) {
      fold_dk();
      if constexpr (kOverlap) {
        fence_regs(pa);
        bwdw::dv_fold<kD, kD>(0, av, dv);
      }
      mbar_arrive(empty(s));
    }
    bwdw::stage_dq<kD, kQ>(dq_buf, ln, 16 * ln.w + ln.g, aq, gq_scale);
    if constexpr (kOverlap)
      pend_bh = bh, pend_i0 = i0;
    else
      add_dq(bh, i0);
  }
  if constexpr (kOverlap)
    if (count > 0) add_dq(pend_bh, pend_i0);
  if (tid == 0) bulk_wait<0>();  // the last reduces are done with shared memory before the CTA exits
  // dV = Σ P̃_code (dO/l)_code · (1/p_scale) · its 1/scale; dK in Q̂'s code units (× sq later), or
  // in values with per-block scales.
  const float dv_scale = (1.0f / p.p_scale) * *p.dvo_scale_inv;
  if constexpr (kDirect)
    bwdw::store_dkv_direct<kD>(p, ln, bg, kbase, dk, dv, dv_scale);
  else
    bwdw::store_dkv_acc<kD>(p, ln, bg, kbase, dk, dv, dv_scale);
#else
  __trap();  // wgmma needs sm_90a; run_backward_main dispatches by device
#endif
}

/// The call's TMA descriptors (Maps). Throws octet::Error when a coordinate would not fit TMA's 32
/// bits or a base is not 16-byte aligned (make_tensor_map).
Maps make_maps(const BackwardParams& p) {
  OCTET_CHECK(p.B * p.H * p.Tq_p / 16 < (int64_t(1) << 31) && p.B * p.G * p.D < (int64_t(1) << 31) &&
                  p.Tq_p < (int64_t(1) << 31),
              "flash attention backward (wgmma, 64 x 64): B·H·Tq/16, B·G·head_dim and Tq must stay below "
              "2^31 (TMA coordinates)");
  Maps m{};
  const TmaSwizzle d_swizzle = p.D == 128 ? TmaSwizzle::B128 : TmaSwizzle::B64;
  auto make = [](const void* base, const TmaTiles& t, TmaSwizzle swizzle) {
    return make_tensor_map(base, TmaElement::U8, t.rank, t.dims, t.strides, t.box, swizzle);
  };
  const TmaTiles q_rows = permuted_row_tiles(p.D, p.B * p.H * p.Tq_p, kQ);
  m.q = make(p.q, q_rows, d_swizzle);
  m.d_o = make(p.d_o, q_rows, d_swizzle);
  const TmaTiles k_rows = row_tiles(p.D, p.Tk_p, p.B * p.G, kBN);
  m.k = make(p.k, k_rows, d_swizzle);
  m.v = make(p.v, k_rows, d_swizzle);
  // The group transposes, boxes of kQ queries (64-byte rows: the 64-byte swizzle).
  const TmaTiles q_cols = group_transpose_tiles(p.Tq_p, p.H / p.G, p.B * p.G * p.D, p.D, kQ);
  m.q_t = make(p.q_t, q_cols, TmaSwizzle::B64);
  m.dvo_t = make(p.dv_o_t, q_cols, TmaSwizzle::B64);
  m.k_t = make(p.k_t, column_tiles(p.Tk_p, p.D, p.B * p.G, kBN), TmaSwizzle::B128);
  // dq_acc [B·H][Tq_p][D] FP32; a box is kQ rows of one head, D/4 columns (D bytes: the kD-byte
  // swizzle's span). Rows past Tq_p are outside: a box never reaches the next head's rows.
  const uint64_t dims[3] = {uint64_t(p.D), uint64_t(p.Tq_p), uint64_t(p.B * p.H)};
  const uint64_t strides[2] = {uint64_t(p.D) * 4, uint64_t(p.Tq_p * p.D) * 4};
  const uint32_t box[3] = {uint32_t(p.D / 4), kQ, 1};
  m.dq = make_tensor_map(p.dq_acc, TmaElement::F32, 3, dims, strides, box, d_swizzle);
  return m;
}

// ws_backward_kernel<kD, ...> on `blocks` CTAs.
template <int kD, bool kDoE5M2, bool kDsE5M2, bool kRes, bool kOverlap, bool kDirect>
void launch(int64_t blocks, const BackwardParams& p, cudaStream_t stream) {
  auto* const kernel = ws_backward_kernel<kD, kDoE5M2, kDsE5M2, kRes, kOverlap, kDirect>;
  constexpr int bytes = Layout<kD>::kBytes;
  opt_in_shared_memory(kernel, bytes, /*max_carveout=*/true);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention backward (wgmma, 64 x 64): too many blocks");
  // setmaxnreg's split needs the launch to allocate at least 168 registers per thread.
  check_register_split(kernel, kThreads, 128 * kProducerRegs + 256 * kConsumerRegs,
                       "flash attention backward (wgmma, 64 x 64)");
  const Maps maps = make_maps(p);
  kernel<<<unsigned(blocks), kThreads, bytes, stream>>>(p, maps);
  OCTET_CUDA_LAUNCH_CHECK();
}

}  // namespace

void bwd_ws_sm90_launch(const BackwardParams& p, cudaStream_t stream) {
  OCTET_CHECK(p.key_head_group >= 0 && (p.sdp_overlap == 0 || p.sdp_overlap == 1),
              "flash attention backward (wgmma, 64 x 64): key_head_group or sdp_overlap unresolved "
              "(run_backward_main)");
  OCTET_CHECK(
      (p.D == 64 || p.D == 128) && p.block_q == kQ && p.block_k == kKeys && !p.deterministic,
      "flash attention backward (wgmma, 64 x 64): supports head_dim 64 or 128, block_q = block_k = 64, "
      "not deterministic");
  OCTET_CHECK(!p.dk_out || (p.D == 64 && !p.res_sums),
              "flash attention backward (wgmma, 64 x 64): dk_out needs head_dim 64 and no residual sums");
  const int64_t blocks = p.B * p.G * ((p.Tk + kBN - 1) / kBN);
  const bool do_e5m2 = p.do_format == Format::E5M2, ds_e5m2 = p.ds_format == Format::E5M2;
  using T = std::true_type;
  using F = std::false_type;
  // The one place where head_dim, the formats, the residual flag, the products' order and the
  // epilogue become template parameters.
  auto res = [&](auto d, auto d5, auto s5) {
    constexpr int kD = decltype(d)::value;
    constexpr bool kDo = decltype(d5)::value, kDs = decltype(s5)::value;
    auto go = [&](auto with_res, auto overlap) {
      constexpr bool kR = decltype(with_res)::value, kO = decltype(overlap)::value;
      if constexpr (kD == 64 && !kR) {
        if (p.dk_out) {
          launch<kD, kDo, kDs, kR, kO, true>(blocks, p, stream);
          return;
        }
      }
      launch<kD, kDo, kDs, kR, kO, false>(blocks, p, stream);
    };
    auto variant = [&](auto with_res) {
      if constexpr (kD == 64) {
        if (p.sdp_overlap) {
          go(with_res, T{});
          return;
        }
      }
      go(with_res, F{});
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
