// src/cuda/attention/flash/flash_bwd_delta_sm90.cu — the Hopper (sm_90a) matched-delta pre-pass of the flash
// FP8 attention backward in row orientation: D_i = Σ_j P_ij dP_ij / Σ_j P_ij (Delta-Matching, arXiv
// 2609.37852; octet/delta_rule.h) with S = Q̂K̂ᵀ and dP = dÔV̂ᵀ formed with queries as the rows of the
// products, so a query's statistics sit in registers and its sums stay inside one lane until the end.
// Semantics: flash.h run_delta (CPU twin: src/cpu/attention_flash.cpp). docs/attention.md §"Backward".
//
// The main kernel (flash_bwd_sm90.cu) forms Sᵀ = K̂Q̂ᵀ and dPᵀ = V̂dÔᵀ (keys as rows). Each element of a
// wgmma product is one dot product of the same 32-code slices of the same two rows in either
// orientation, so S and dP here carry the main kernel's bits (wgmma_roles_gpu_test.cu checks that on
// the hardware; flash_backward_sm90_test.cpp holds the actual dS to a row residual ≤ 1e-6); P is formed by
// the same formula (tile_prob: one FFMA, ex2, one multiply by RN(1/(l·p_scale))) from the same statistics and
// scales.
//
// One CTA (two warpgroups) per (b, h, 128-query block): Q̂ and dÔ [kBM][kD] of the block stay in shared
// memory, K̂ and V̂ [kBN][kD] of the key blocks the block's rows see come through a 2-stage TMA ring
// (thread 0 issues the next block's two boxes while the CTA computes this one). Warpgroup wg owns
// queries 64wg.., its warp w the 16 queries 64wg + 16w.., lane (g, t) queries g and g + 8 of those
// and keys 8n + 2t, + 1 of every n-tile n. Per key block and 64-key half h: S (m64n64k32 SS, A = Q̂
// rows, B = K̂ rows 64h..) and dP (A = dÔ rows, B = V̂ rows) issued together, P formed while dP runs,
// then per query the lane's 16 keys summed in FP32 — P·dP of a key pair by one multiply and one FMA,
// the 8 pairs by a fixed tree (five roundings: within 5u·Σ|P dP| of the exact sum, u = 2^-24, the
// shortcut delta_rule.h licenses) — and that partial added to FP64 sums. At
// the end the quad's 4 lanes join in FP64 in a fixed order (every lane forms the same bits).
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/attention/row_factor.h"
#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/runtime/tensor_map.h"
#include "cuda/attention/flash/flash_tma.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_bwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_bwd_tile_sm90.cuh"
#include "octet/delta_rule.h"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

using bwdw::kBM;
using bwdw::kBN;
using bwdw::kThreads;

constexpr int kHalf = 64;  // keys per product (m64n64k32: the main kernel's instruction shape)
static_assert(kHalf == bwdw::kCols<64> && kHalf == bwdw::kCols<128>, "the main kernel's product shape");

/// The TMA descriptors: Q̂ and dÔ [B·H][Tq_p][D] in natural row order, boxes of kBM rows; K̂, V̂
/// [B·G][Tk_p][D], boxes of kBN rows. All kD-byte swizzled ([rows][kD] K-major tiles).
struct RowMaps {
  CUtensorMap q, d_o, k, v;
};

// Shared memory (offsets from a 1024-byte aligned base): Q̂, dÔ [kBM][kD]; 2 stages of K̂, V̂
// [kBN][kD]; the mbarriers (Q̂ and dÔ's, one per stage). head_dim 128: 97 KiB, two CTAs an SM.
template <int kD>
struct RowLayout {
  static constexpr int kRows = kBM * kD;
  static constexpr int kQ = 0, kDo = kRows, kStage0 = 2 * kRows, kStage = 2 * kRows;
  static constexpr int kBars = kStage0 + 2 * kStage;
  static constexpr int kBytes = kBars + 3 * 8 + 1024;  // + alignment slack
  static_assert(kBM == kBN, "one tile size for the query and key boxes");
  static_assert(2 * (kBytes + 1024) <= 228 * 1024, "two CTAs on an SM (1 KiB reserved per CTA)");
};

/// A sum of 8 FP32 values by a fixed pairwise tree (three roundings on any path).
__device__ __forceinline__ float tree8(const float (&v)[8]) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

template <int kD, bool kDoE5M2>
__global__ void __launch_bounds__(kThreads, 2)
    delta_rows_kernel(const BackwardParams p, const __grid_constant__ RowMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = RowLayout<kD>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned sb = smem_u32(smem);
  const int tid = threadIdx.x, wg = tid / 128, w = tid / 32 % 4, g = tid % 32 / 4, t = tid % 4;
  int64_t bh, i0, bg;
  bwd::q_block_of(p, kBM, &bh, &i0, &bg);
  const int64_t last = (i0 + kBM < p.Tq ? i0 + kBM : p.Tq) - 1;
  const int n_blocks = int((bwd::visible_keys(p, last) + kBN - 1) / kBN);
  const unsigned q_bar = sb + L::kBars;
  auto kv_bar = [&](int it) { return sb + L::kBars + 8u * unsigned(1 + it % 2); };
  auto load_kv = [&](int it) {  // thread 0: key block it's K̂, V̂ boxes into stage it % 2
    const unsigned s = sb + L::kStage0 + unsigned(it % 2) * L::kStage, bar = kv_bar(it);
    mbar_arrive_expect_tx(bar, 2 * L::kRows);
    tma_load_3d(s, &maps.k, bar, 0, it * kBN, int(bg));
    tma_load_3d(s + L::kRows, &maps.v, bar, 0, it * kBN, int(bg));
  };
  if (tid == 0) {
    for (int i = 0; i < 3; ++i) mbar_init(q_bar + 8u * unsigned(i), 1);
    fence_mbar_init();
  }
  __syncthreads();  // the mbarriers are initialized
  if (tid == 0) {
    mbar_arrive_expect_tx(q_bar, 2 * L::kRows);
    tma_load_3d(sb + L::kQ, &maps.q, q_bar, 0, int(i0), int(bh));
    tma_load_3d(sb + L::kDo, &maps.d_o, q_bar, 0, int(i0), int(bh));
    if (n_blocks > 0) load_kv(0);
  }
  // This lane's two queries (r = 0, 1: rows g, g + 8 of its warp's 16) and their statistics, read
  // while the boxes land.
  const int row0 = 64 * wg + 16 * w + g;
  bwdw::ColStat st[2];
  float bias[2], rcp[2];
  int64_t vis[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    st[r].load(p, bh, i0 + row0 + 8 * r, false);
    bias[r] = st[r].bias(p.p_scale), rcp[r] = st[r].rcp_lp(p.p_scale), vis[r] = st[r].vis;
  }
  mbar_wait(q_bar, 0);  // (also when no key block is visible: no box is left in flight at exit)
  double acc_pdp[2] = {0.0, 0.0}, acc_p[2] = {0.0, 0.0};  // this lane's FP64 sums per query
  const unsigned a_q = sb + L::kQ + unsigned(64 * wg * kD), a_do = sb + L::kDo + unsigned(64 * wg * kD);

  for (int it = 0; it < n_blocks; ++it) {
    const int64_t j0 = int64_t(it) * kBN;
    __syncthreads();  // the other stage is free (block it − 1's products have read it)
    if (tid == 0 && it + 1 < n_blocks) load_kv(it + 1);
    mbar_wait(kv_bar(it), unsigned(it / 2) & 1u);  // this block's K̂, V̂ have landed
    const unsigned stage = sb + L::kStage0 + unsigned(it % 2) * L::kStage;
    const bool full = bwd::tile_full(p, i0, kBM, j0, kBN);  // CTA-uniform
    const TileScales sc = tile_scales(p, bh, i0, bg, j0);
    const float c2 = __fmul_rn(sc.s_scale, 1.4426950408889634f);  // tile_prob's
    auto block = [&](auto full_c) {  // full_c: every query of the tile sees every key (no test)
      constexpr bool kFull = decltype(full_c)::value;
#pragma unroll
      for (int h = 0; h < kBN / kHalf; ++h) {
        float s[kHalf / 8][4], dp[kHalf / 8][4];
        const unsigned b_k = stage + unsigned(kHalf * h * kD), b_v = b_k + L::kRows;
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < kD / 32; ++kc)
          WgmmaFp8<kHalf, false, false>::ss(s, kmajor_desc<kD>(a_q + 32 * kc), kmajor_desc<kD>(b_k + 32 * kc),
                                            kc);
        wgmma_commit();
#pragma unroll
        for (int kc = 0; kc < kD / 32; ++kc)
          WgmmaFp8<kHalf, kDoE5M2, false>::ss(dp, kmajor_desc<kD>(a_do + 32 * kc),
                                              kmajor_desc<kD>(b_v + 32 * kc), kc);
        wgmma_commit();
        // Key 8n + 2t + c of this half is visible to query r iff 8n + c < lim[r].
        int lim[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int64_t n = vis[r] - (j0 + kHalf * h + 2 * t);
          lim[r] = int(n < -1 ? -1 : (n > kHalf ? kHalf : n));
        }
        wgmma_wait<1>();
        fence_regs(s);
        // P in place (tile_prob's formula; 0 where the key is not visible), while dP runs.
#pragma unroll
        for (int nt = 0; nt < kHalf / 8; ++nt)
#pragma unroll
          for (int el = 0; el < 4; ++el) {
            const int r = el / 2;
            const float x = __fmul_rn(exp2_scaled(s[nt][el], c2, bias[r]), rcp[r]);
            s[nt][el] = kFull || 8 * nt + el % 2 < lim[r] ? x : 0.0f;
          }
        wgmma_wait<0>();
        fence_regs(dp);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float v_pdp[8], v_p[8];
#pragma unroll
          for (int nt = 0; nt < kHalf / 8; ++nt) {
            const float p0 = s[nt][2 * r], p1 = s[nt][2 * r + 1];
            // a key the query does not see adds nothing (P = 0 there, and its dP is skipped, as the
            // main kernel skips it: no 0·inf from a code it never reads)
            float d0 = __fmul_rn(dp[nt][2 * r], sc.dp_scale), d1 = __fmul_rn(dp[nt][2 * r + 1], sc.dp_scale);
            if (!kFull) {
              d0 = 8 * nt < lim[r] ? d0 : 0.0f;
              d1 = 8 * nt + 1 < lim[r] ? d1 : 0.0f;
            }
            v_pdp[nt] = __fmaf_rn(p0, d0, __fmul_rn(p1, d1));
            v_p[nt] = __fadd_rn(p0, p1);
          }
          acc_pdp[r] += double(tree8(v_pdp));
          acc_p[r] += double(tree8(v_p));
        }
      }
    };
    if (full)
      block(std::true_type{});
    else
      block(std::false_type{});
  }
  // The quad's 4 lanes (t) joined: (t0 + t1) + (t2 + t3) on every lane (same bits everywhere).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int m = 1; m <= 2; m *= 2) {
      acc_pdp[r] += __shfl_xor_sync(0xFFFFFFFFu, acc_pdp[r], m);
      acc_p[r] += __shfl_xor_sync(0xFFFFFFFFu, acc_p[r], m);
    }
    const int64_t i = i0 + row0 + 8 * r;
    if (t != 0 || i >= p.Tq) continue;
    p.delta[bh * p.Tq + i] = MatchedSums{acc_pdp[r], acc_p[r]}.delta<float>().value;
    p.row_factor[bh * p.Tq + i] = vis[r] > 0 ? row_factor_of(st[r].l) : 0.0f;  // st's l is 1 without keys
  }
#else
  __trap();  // wgmma needs sm_90a; run_delta dispatches by device
#endif
}

/// The call's descriptors. Throws octet::Error when a coordinate would not fit TMA's 32 bits or a
/// base is not 16-byte aligned (make_tensor_map).
RowMaps make_row_maps(const BackwardParams& p) {
  OCTET_CHECK(p.B * p.H < (int64_t(1) << 31) && p.Tq_p < (int64_t(1) << 31) && p.Tk_p < (int64_t(1) << 31),
              "flash attention delta (wgmma): B·H, Tq and Tk must stay below 2^31 (TMA coordinates)");
  const TmaSwizzle swizzle = p.D == 128 ? TmaSwizzle::B128 : TmaSwizzle::B64;
  auto make = [&](const void* base, const TmaTiles& t) {
    return make_tensor_map(base, TmaElement::U8, t.rank, t.dims, t.strides, t.box, swizzle);
  };
  RowMaps m{};
  const TmaTiles q_rows = row_tiles(p.D, p.Tq_p, p.B * p.H, kBM);
  const TmaTiles k_rows = row_tiles(p.D, p.Tk_p, p.B * p.G, kBN);
  m.q = make(p.q, q_rows);
  m.d_o = make(p.d_o, q_rows);
  m.k = make(p.k, k_rows);
  m.v = make(p.v, k_rows);
  return m;
}

}  // namespace

void bwd_delta_sm90_launch(const BackwardParams& p, cudaStream_t stream) {
  OCTET_CHECK(bwd_sm90_supported(p) && p.matched,
              "flash attention delta (wgmma): supports the matched delta at head_dim 64 or 128, "
              "block_q = block_k = 128 or 64, not deterministic");
  const int64_t blocks = p.B * p.H * ((p.Tq + kBM - 1) / kBM);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "flash attention delta (wgmma): too many blocks");
  const RowMaps maps = make_row_maps(p);
  auto go = [&](auto kernel, int bytes) {
    opt_in_shared_memory(kernel, bytes, /*max_carveout=*/true);  // two CTAs an SM at head_dim 128
    kernel<<<unsigned(blocks), kThreads, bytes, stream>>>(p, maps);
    OCTET_CUDA_LAUNCH_CHECK();
  };
  const bool do_e5m2 = p.do_format == Format::E5M2;
  if (p.D == 64)
    do_e5m2 ? go(delta_rows_kernel<64, true>, RowLayout<64>::kBytes)
            : go(delta_rows_kernel<64, false>, RowLayout<64>::kBytes);
  else
    do_e5m2 ? go(delta_rows_kernel<128, true>, RowLayout<128>::kBytes)
            : go(delta_rows_kernel<128, false>, RowLayout<128>::kBytes);
}

}  // namespace octet::cuda::flash
