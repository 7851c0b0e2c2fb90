// src/cuda/attention/flash/flash_fwd_sm90.cu — the Hopper (sm_90a) flavor of the flash FP8 attention
// forward: the semantics of flash.h (CPU twin: src/cpu/attention_flash.cpp) with both GEMMs on FP8
// warpgroup MMA (wgmma) in FlashAttention-3's structure (arXiv 2407.08608 §3: warp specialization,
// a TMA/mbarrier ring, the softmax of one key tile overlapped with the next tile's S GEMM).
// docs/attention.md §"Forward".
//
// One CTA = 3 warpgroups, kBM = 128 query rows of one (b, h) — one work item; the grid starts the
// query blocks with the most keys first (causal). (The persistent grid: one CTA per SM walking
// its items, flash_persistent.h; below, "the CTA" is the CTA on one item.) Warpgroup 0 gives its
// registers back (setmaxnreg) and one thread of it, the producer, issues every load by TMA: the
// item's Q̂ tile once, then per key tile n the K̂ tile and the V̂ᵀ tile into a stage of a ring, each with its
// own full/empty mbarrier pair (the consumers release K̂ after S and V̂ᵀ after P̃V̂, so the next K̂ streams in
// early). K̂ is read through a 5-D tensor map whose dimensions permute the rows of each 16-key group: shared
// row 8j + 2t + e holds key 4t + 2j + e (s_key of flash_mma_sm89.cuh), so that column 8nt + c of the
// S accumulator is key s_key(nt, c) and the accumulator converts in place into P̃V̂'s A fragment.
// Warpgroups 1 and 2, the consumers, own 64 rows each (warp v: rows 16v..16v+15 of them) and per
// key tile of kBN keys:
//   S (64 x kBN) = Q̂·K̂ᵀ: FP8 wgmma m64n{kBN}k32, A = Q̂ and B = K̂ from shared memory, head_dim in
//     order from a fresh accumulator (the FP8 accumulator truncates to ~13 bits per k32
//     instruction: S within 2^-10 of Σ|q̂·k̂| of the exact sum at D <= 128, tested; docs/attention.md
//     §"Numerics of the wgmma forward");
//   issued right after tile n − 1's P̃V̂, so that the tensor core runs the two back to back and
//     O's FP32 update by tile n − 1 runs under tile n's S;
//   P̃V̂ (64 x kD) = FP8 wgmma m64n{kD}k32, A = P̃ from registers, B = the V̂ᵀ tile, in a fresh
//     accumulator added to O in FP32 (α·O + P̃V̂: the tensor core sums at most one tile of keys,
//     DeepSeek-V3's promotion interval N_C = 128, docs/numerics.md — accumulating O across tiles
//     on the tensor core itself, as FlashAttention-3 does, measured 0.33 relative error against the
//     FP64 oracle at 16k keys); l̃'s tile sum comes from the same instructions, N = kD + 8 with
//     B's last 8 rows E4M3 ones (V = 1 gives O = 1 exactly: O and l̃ are the same sums);
//   the tile's softmax (flash_fwd_tile_sm89.cuh softmax_tile, shared with the mma.sync kernel),
//     which overlaps the other consumer warpgroup's GEMMs as the warp schedulers interleave the two,
//     or with ForwardParams::pingpong in FlashAttention-3's enforced order: named barriers 1 and 2
//     hand the GEMM turn from one consumer to the other (consumer 0 first), each issuing its S and
//     P̃V̂ only in its turn, so that one's softmax runs under the other's GEMMs. The turns continue
//     across a persistent CTA's items (both consumers take the same number per item); the last
//     hand-over of the CTA is never taken. The same instructions either way, in another order: the
//     same bits.
// Logits mode (run_logits): the same S instructions, S written out; no V̂ᵀ is loaded.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/attention/flash/flash_fwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_persistent.h"
#include "cuda/attention/flash/flash_softmax.cuh"
#include "cuda/attention/flash/flash_wgmma_sm90.cuh"
#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/runtime/tensor_map.h"
#include "cuda/attention/flash/flash_tma.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

constexpr int kThreads = 384;  // warpgroup 0: the producer; 1 and 2: the consumers
constexpr int kBM = 128;       // query rows per CTA (64 per consumer warpgroup)
constexpr int kStages = 2;     // the K̂ / V̂ᵀ ring
// setmaxnreg: the producer warpgroup gives registers back, the consumers take them:
// 128·24 + 256·240 = 64512 = 384·168, the launch's allocation (ptxas pins the kernel to 168).
constexpr int kProducerRegs = 24, kConsumerRegs = 240;

/// The TMA descriptors of one call (make_maps): Q̂ [B·H][Tq_p][D], K̂ with its rows permuted per
/// 16-key group, V̂ᵀ [B·G][D][Tk_p].
struct ForwardMaps {
  CUtensorMap q, k, v;
};

// Shared memory from a 1024-byte aligned base (every tile 1024-aligned: the swizzles' period):
// the Q̂ tile [kBM][kD] (kD-byte swizzle), kStages stages of [K̂ tile [kBN][kD] (kD-byte swizzle) |
// V̂ᵀ tile [kD][kBN] (kBN-byte swizzle) | 8 rows of kBN E4M3 ones, padded to 1024 bytes], then the
// mbarriers: q_full, full_k[kStages], full_v[kStages], empty_k[kStages], empty_v[kStages], q_empty. The
// ones rows continue V̂ᵀ by one 8-row atom, so that P̃V̂'s wgmma of N = kD + 8 gives l̃'s tile sum
// as its last 8 columns (every byte the same: the swizzle does not change what is read).
template <int kD, int kBN>
struct TmaLayout {
  static constexpr int kTile = kBN * kD;  // bytes of one K̂ or V̂ᵀ tile
  static constexpr int kStage = 2 * kTile + 1024;
  static constexpr int kK = kBM * kD;  // the first stage, after Q̂
  static constexpr int kBars = kK + kStages * kStage;
  static constexpr int kBytes = kBars + 8 * (2 + 4 * kStages) + 1024;  // + alignment slack
};

// kPoly: n-tiles of every 8 whose exponentials exp2_poly computes on the FMA units (softmax_tile).
// kPersistent: the grid is one CTA per SM (run_forward's persistent choice), each CTA walks its work
// items (query block, head) in turn (persistent_item); otherwise one work item per CTA.
template <int kD, int kBN, bool kLogits, int kPoly, bool kPersistent>
__global__ void __launch_bounds__(kThreads, 1)
    tma_forward_kernel(const ForwardParams p, const __grid_constant__ ForwardMaps maps, float* s_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(!(kLogits && kPersistent), "the logits mode is one work item per CTA");
  using L = TmaLayout<kD, kBN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned sbase = smem_u32(smem);
  const unsigned q_full = sbase + L::kBars;
  const auto full_k = [&](int s) { return q_full + 8 * (1 + s); };
  const auto full_v = [&](int s) { return q_full + 8 * (1 + kStages + s); };
  const auto empty_k = [&](int s) { return q_full + 8 * (1 + 2 * kStages + s); };
  const auto empty_v = [&](int s) { return q_full + 8 * (1 + 3 * kStages + s); };
  const unsigned q_empty = q_full + 8 * (1 + 4 * kStages);
  const auto k_tile = [&](int s) { return sbase + L::kK + s * L::kStage; };
  const int wg = threadIdx.x / 128;

  // Work item w -> (query block, head): in each head group (ForwardParams::head_group) the query
  // blocks with the most keys (causal) first.
  const int64_t BH = p.B * p.H, n_qblocks = ((kLogits ? p.Tq_p : p.Tq) + kBM - 1) / kBM;
  const int64_t n_items = BH * n_qblocks;
  // A persistent CTA's it-th work item, −1 past its last (the other grid: item blockIdx.x, item0).
  const auto item_of = [&](int it) { return persistent_item(it, blockIdx.x, gridDim.x, n_items); };
  struct Item {
    int64_t bh, q0, bg;
    int n_tiles;  // key tiles the item visits: those its last real row sees (visible() grows with i)
  };
  const auto item = [&](int64_t w) {
    Item r;
    const GridItem wi = grouped_item(w, BH, n_qblocks, p.head_group);
    r.bh = wi.head;
    r.q0 = (n_qblocks - 1 - wi.block) * kBM;
    r.bg = r.bh / p.H * p.G + r.bh % p.H / (p.H / p.G);  // GQA: the KV head of head bh
    const int64_t last = (r.q0 + kBM < p.Tq ? r.q0 + kBM : p.Tq) - 1;
    const int64_t n_keys = kLogits ? p.Tk_p : visible(p, last);
    r.n_tiles = int((n_keys + kBN - 1) / kBN);
    return r;
  };

  const Item item0 = item(kPersistent ? 0 : blockIdx.x);  // the CTA's only item when not persistent

  // full_* complete on the producer's arrival plus the TMA bytes; empty_* when the 256 consumer
  // threads have each arrived (their reads of the stage are done); q_empty when they are done with
  // an item's Q̂ tile (every S of the item has landed).
  if (threadIdx.x == 0) {
    mbar_init(q_full, 1);
    mbar_init(q_empty, 256);
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k(s), 1);
      mbar_init(full_v(s), 1);
      mbar_init(empty_k(s), 256);
      mbar_init(empty_v(s), 256);
    }
    fence_mbar_init();
  }
  if constexpr (!kLogits) {                  // the ones rows of every stage (TMA never writes them)
    constexpr uint32_t kOnes = 0x38383838u;  // four E4M3 codes of 1.0
    for (int c = threadIdx.x; c < kStages * 8 * kBN / 16; c += kThreads) {
      const int s = c / (8 * kBN / 16), o = c % (8 * kBN / 16);
      *reinterpret_cast<uint4*>(smem + L::kK + s * L::kStage + 2 * L::kTile + 16 * o) =
          make_uint4(kOnes, kOnes, kOnes, kOnes);
    }
    fence_proxy_async_smem();  // visible to wgmma's async proxy after the barrier
  }
  __syncthreads();

  if (wg == 0) {
    // The producer: one thread. The ring's u-th use (u counts key tiles over the CTA's items) goes
    // to stage u % kStages once the consumers have released use u − kStages (empty's completion
    // u / kStages − 1); item it's Q̂ once they are done with item it − 1's.
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x != 0) return;
    // One work item: its it and u, the ring's uses before it (advanced past the item's tiles).
    const auto produce = [&](const Item& r, int it, int& u) {
      if (it > 0) mbar_wait(q_empty, unsigned(it - 1) & 1u);
      mbar_arrive_expect_tx(q_full, kBM * kD);
      tma_load_3d(sbase, &maps.q, q_full, 0, int(r.q0), int(r.bh));
      const int64_t group0 = r.bg * p.Tk_p / 16;  // K̂'s 16-key groups of this KV head start here
#pragma unroll 1
      for (int n = 0; n < r.n_tiles; ++n, ++u) {
        const int s = u % kStages;
        const unsigned parity = ((u / kStages) & 1) ^ 1;
        if (u >= kStages) mbar_wait(empty_k(s), parity);
        mbar_arrive_expect_tx(full_k(s), L::kTile);
        tma_load_5d(k_tile(s), &maps.k, full_k(s), 0, 0, 0, 0, int(group0 + n * (kBN / 16)));
        if constexpr (!kLogits) {
          if (u >= kStages) mbar_wait(empty_v(s), parity);
          mbar_arrive_expect_tx(full_v(s), L::kTile);
          tma_load_3d(k_tile(s) + L::kTile, &maps.v, full_v(s), n * kBN, 0, int(r.bg));
        }
      }
    };
    int u = 0;
    if constexpr (kPersistent) {
#pragma unroll 1
      for (int it = 0;; ++it) {
        const int64_t w = item_of(it);
        if (w < 0) break;
        produce(item(w), it, u);
      }
    } else {
      produce(item0, 0, u);
    }
    return;
  }

  // Consumers: warpgroup c = wg − 1 owns rows 64c..64c+63 of the CTA, warp v of it 16v..16v+15.
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const unsigned tq = sbase + c * 64 * kD;  // this warpgroup's 64 Q̂ rows (8 swizzle atoms)
  // S = Q̂K̂ᵀ of the tile in stage s into `s`, issued as one wgmma group (not waited for).
  const auto issue_s = [&](float(&sacc)[kBN / 8][4], int s) {
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 32; ++ks)
      WgmmaFp8<kBN, false, false>::ss(sacc, kmajor_desc<kD>(tq + 32 * ks),
                                      kmajor_desc<kD>(k_tile(s) + 32 * ks), ks);
    wgmma_commit();
  };
  // The ping-pong's turns (named barrier 1 + c is consumer c's): take waits for the other
  // consumer's hand-over, pass hands over. Consumer 1 hands consumer 0 the first turn.
  const bool pingpong = !kLogits && p.pingpong == 1;
  const auto take_turn = [&] {
    if (pingpong) named_barrier_sync(1 + c, 256);
  };
  const auto pass_turn = [&] {
    if (pingpong) named_barrier_arrive(2 - c, 256);
  };
  if (pingpong && c == 1) named_barrier_arrive(1, 256);
  // One work item: its it (q_full's phase) and u0, the ring's uses before it.
  const auto consume = [&](const Item& r, int it, int u0) {
    const int64_t bh = r.bh, q0 = r.q0, bg = r.bg;
    const int n_tiles = r.n_tiles;
    const int64_t i0 = q0 + 64 * c + 16 * warp + g;
    const int64_t row[2] = {i0, i0 + 8};
    const float tau_q = p.tau * q_inv_at(p, bh, q0);  // S's scale τ·sq·sk, sk per tile (in this order)
    const auto stage = [&](int n) { return (u0 + n) % kStages; };
    const auto phase = [&](int n) { return unsigned((u0 + n) / kStages) & 1u; };
    mbar_wait(q_full, unsigned(it) & 1u);

    if constexpr (kLogits) {
#pragma unroll 1
      for (int n = 0; n < n_tiles; ++n) {
        const int s = stage(n);
        mbar_wait(full_k(s), phase(n));
        float sacc[kBN / 8][4];
        issue_s(sacc, s);
        wgmma_wait<0>();
        fence_regs(sacc);
        mbar_arrive(empty_k(s));
        const int64_t j0 = int64_t(n) * kBN;
        store_logits<kBN>(p, s_out, bh, row, j0, t, sacc, tau_q * k_inv_at(p, bg, j0));
      }
    } else {
      const int vis[2] = {row[0] < p.Tq ? int(visible(p, row[0])) : 0,
                          row[1] < p.Tq ? int(visible(p, row[1])) : 0};
      const int64_t unmasked_end = visible(p, q0);  // tiles ending here need no mask in any real row
      const float p_scale = p.p_scale;
      ForwardRows<kD> acc(v_inv_at(p, bg, 0));  // O, l̃ (code units, FP32), online softmax
      float alpha[2];
      uint32_t pa[kBN / 32][4];  // P̃ of the tile whose P̃V̂ is issued next
      // Steps, straight-line so that ptxas keeps every wgmma asynchronous (no accumulator is read
      // between a wgmma and its wait on any path): S(n) issues tile n's S; PV(n) tile n's P̃V̂ and
      // P̃·1; softmax(n) waits for S and makes the next P̃; promote(n) adds P̃V̂ into O in FP32.
      float pv[kD / 8 + 1][4], sacc[kBN / 8][4];  // pv[kD / 8]: l̃'s column (the ones rows)
      const auto issue_pv = [&](int n) {
        mbar_wait(full_v(stage(n)), phase(n));
        const unsigned tv = k_tile(stage(n)) + L::kTile;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBN / 32; ++kk)
          WgmmaRS<kD + 8>::run(pv, pa[kk], kmajor_desc<kBN>(tv + 32 * kk), kk);
        wgmma_commit();
      };
      const auto promote = [&](int n) {  // after P̃V̂ of tile n has landed (fenced by the caller)
        fence_regs(pv);
        fence_regs(pa);
        mbar_arrive(empty_v(stage(n)));
        float ao[2];
        acc.o_alpha(alpha, v_inv_at(p, bg, int64_t(n) * kBN), ao);
#pragma unroll
        for (int dn = 0; dn < kD / 8; ++dn) acc.add_pv(dn, ao, pv[dn]);
        acc.add_l(alpha, pv[kD / 8]);
      };
      const auto issue_s_of = [&](int n) {
        mbar_wait(full_k(stage(n)), phase(n));
        issue_s(sacc, stage(n));
      };
      const auto softmax = [&](int n) {  // after S of tile n has landed
        fence_regs(sacc);
        mbar_arrive(empty_k(stage(n)));
        const int64_t j0 = int64_t(n) * kBN;
        softmax_tile<kBN, kPoly>(sacc, tau_q * k_inv_at(p, bg, j0), j0 + kBN > unmasked_end, vis, j0, t,
                                 p_scale, acc.sm, alpha, pa);
      };
      if (n_tiles > 0) {  // no tile: a CTA whose rows see no key (causal, Tq > Tk) stores O = 0
        take_turn();
        issue_s_of(0);
        pass_turn();
        wgmma_wait<0>();
        softmax(0);
      }
      // Tile n − 1's P̃V̂ and tile n's S in flight together: O takes the P̃V̂ while S runs, then tile
      // n's softmax (which overlaps the other consumer warpgroup's GEMMs).
#pragma unroll 1
      for (int n = 1; n < n_tiles; ++n) {
        take_turn();
        issue_pv(n - 1);
        issue_s_of(n);
        pass_turn();
        wgmma_wait<1>();
        promote(n - 1);
        wgmma_wait<0>();
        softmax(n);
      }
      if constexpr (kPersistent)
        mbar_arrive(q_empty);  // every S of the item has landed: the producer may load the next Q̂
      if (n_tiles > 0) {
        take_turn();
        issue_pv(n_tiles - 1);
        pass_turn();
        wgmma_wait<0>();
        promote(n_tiles - 1);
      }
      acc.store(p, bh, i0, t);
    }
  };
  if constexpr (kPersistent) {
    int u0 = 0;
#pragma unroll 1
    for (int it = 0;; ++it) {
      const int64_t w = item_of(it);
      if (w < 0) break;
      const Item r = item(w);
      consume(r, it, u0);
      u0 += r.n_tiles;
    }
  } else {
    consume(item0, 0, 0);
  }
#else
  __trap();  // wgmma needs sm_90a (the CUDA preset builds it); run_forward dispatches by device
#endif
}

/// The call's TMA descriptors (ForwardMaps); logits mode reads no V̂ᵀ (p.v_t is not looked at):
/// its V̂ᵀ map repeats K̂'s.
template <int kD, int kBN, bool kLogits>
ForwardMaps make_maps(const ForwardParams& p) {
  ForwardMaps m;
  const TmaSwizzle d_swizzle = kD == 128 ? TmaSwizzle::B128 : TmaSwizzle::B64;
  auto make = [](const void* base, const TmaTiles& t, TmaSwizzle swizzle) {
    return make_tensor_map(base, TmaElement::U8, t.rank, t.dims, t.strides, t.box, swizzle);
  };
  m.q = make(p.q, row_tiles(kD, p.Tq_p, p.B * p.H, kBM), d_swizzle);
  m.k = make(p.k, permuted_row_tiles(kD, p.B * p.G * p.Tk_p, kBN), d_swizzle);
  if (!kLogits)
    m.v = make(p.v_t, column_tiles(p.Tk_p, kD, p.B * p.G, kBN),
               kBN == 128 ? TmaSwizzle::B128 : TmaSwizzle::B64);
  else
    m.v = m.k;
  return m;
}

template <int kD, int kBN, bool kLogits, int kPoly, bool kPersistent>
void launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  auto* kernel = tma_forward_kernel<kD, kBN, kLogits, kPoly, kPersistent>;
  constexpr int bytes = TmaLayout<kD, kBN>::kBytes;
  opt_in_shared_memory(kernel, bytes);
  const int64_t rows = kLogits ? p.Tq_p : p.Tq;
  const int64_t blocks = p.B * p.H * ((rows + kBM - 1) / kBM);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention forward: too many query blocks (B·H·Tq/128)");
  OCTET_CHECK(p.B * p.G * p.Tk_p / 16 < (int64_t(1) << 31) && p.Tq_p < (int64_t(1) << 31),
              "flash attention forward (wgmma): B·G·Tk/16 and Tq must stay below 2^31 (TMA coordinates)");
  // setmaxnreg's split (kProducerRegs, kConsumerRegs) needs the launch to allocate at least 168
  // registers per thread (ptxas gives exactly that).
  check_register_split(kernel, kThreads, 128 * kProducerRegs + 256 * kConsumerRegs,
                       "flash attention forward (wgmma)");
  const ForwardMaps maps = make_maps<kD, kBN, kLogits>(p);
  int64_t grid = blocks;
  if constexpr (kPersistent) {  // one CTA per SM (one fits: 384 threads at 168 registers fill the file)
    int dev = 0, sms = 0;
    OCTET_CUDA_CHECK(cudaGetDevice(&dev));
    OCTET_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int64_t ctas = p.persistent_ctas > 0 ? p.persistent_ctas : sms;
    grid = blocks < ctas ? blocks : ctas;
  }
  kernel<<<unsigned(grid), kThreads, bytes, stream>>>(p, maps, s_out);
  OCTET_CUDA_LAUNCH_CHECK();
}

// The forward with exp2_poly n-tiles of every 8 on the FMA units (0..3).
template <int kD, int kBN, bool kPersistent>
void launch_poly(const ForwardParams& p, int exp2_poly, cudaStream_t stream) {
  switch (exp2_poly) {
    case 0:
      return launch<kD, kBN, false, 0, kPersistent>(p, nullptr, stream);
    case 1:
      return launch<kD, kBN, false, 1, kPersistent>(p, nullptr, stream);
    case 2:
      return launch<kD, kBN, false, 2, kPersistent>(p, nullptr, stream);
    case 3:
      return launch<kD, kBN, false, 3, kPersistent>(p, nullptr, stream);
    default:
      OCTET_FAIL("flash attention forward: exp2_poly must be 0..3 (n-tiles of every 8), got " +
                 std::to_string(exp2_poly));
  }
}

}  // namespace

void fwd_sm90_launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  dispatch_sizes(p, [&](auto d, auto bn) {
    constexpr int kD = decltype(d)::value, kBN = decltype(bn)::value;
    if (s_out) {
      launch<kD, kBN, true, 0, false>(p, s_out, stream);
      return;
    }
    const int poly = p.exp2_poly < 0 ? forward_exp2_poly() : p.exp2_poly;
    ForwardParams q = p;  // the kernel reads the ping-pong choice resolved
    q.pingpong = (p.pingpong < 0 ? forward_pingpong() : p.pingpong != 0) ? 1 : 0;
    if (p.persistent < 0 ? forward_persistent() : p.persistent != 0)
      launch_poly<kD, kBN, true>(q, poly, stream);
    else
      launch_poly<kD, kBN, false>(q, poly, stream);
  });
}

}  // namespace octet::cuda::flash
