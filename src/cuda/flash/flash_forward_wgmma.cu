// src/cuda/flash/flash_forward_wgmma.cu — the Hopper (sm_90a) flavor of the fused FP8 attention
// forward: the same semantics as the mma.sync kernel (flash_forward.h; CPU twin:
// src/cpu/attention_tiled.cpp) with both GEMMs on warpgroup MMA (wgmma, QGMMA in SASS;
// FlashAttention-3's structure, arXiv 2407.08608, without its warp specialization yet).
// docs/cuda.md §"wgmma forward".
//
// One CTA = 2 warpgroups = kBM = 128 query rows of one (b, h); warpgroup w owns rows 64w..64w+63
// and warp v of it rows 16v..16v+15 of those (the mma.sync kernel's rows per warp). Per key tile of
// kBN keys:
//   S (64 x kBN per warpgroup, FP32) = Q̂·K̂ᵀ: wgmma m64n{kBN}k32, A = Q̂ from registers (loaded
//     once), B = the K̂ tile in shared memory; head_dim in order k = 0, 32, ... from a fresh
//     accumulator. The K̂ rows are stored permuted (row r holds key s_key(r / 8, r % 8)), so the
//     accumulator converts in place into P̃V̂'s A fragment (flash_forward_tile.cuh);
//   the tile's softmax (flash_forward_tile.cuh softmax_tile, shared with the mma.sync kernel);
//   P̃V̂ (64 x kD) = wgmma m64n{kD}k32, A = P̃ from registers, B = the V̂ᵀ tile, in a fresh
//     accumulator added to O in FP32 (α·O + P̃V̂: a row is never summed inside the tensor core
//     beyond one tile, as in the mma.sync kernel); l̃'s tile sum is one more m64n8k32 with B = an
//     8 x kBN tile of E4M3 ones.
// Loads: all 256 threads copy K̂ and V̂ᵀ tiles by cp.async into a 3-stage ring, two tiles ahead of
// the one computing (cp.async.wait_group + fence.proxy.async + one barrier per tile before wgmma
// reads it; the stage a load overwrites was last read before that barrier); the two warpgroups
// overlap each other's softmax and GEMMs as the warp schedulers interleave them. Not yet: TMA, a
// producer warp, ping-pong scheduling of the warpgroups, intra-warpgroup overlap of the softmax
// with the next tile's S GEMM (its accumulator does not fit beside O, P̃V̂'s and S's at head_dim 128).
// Logits mode (logits_launch after a wgmma forward): the same S instructions, S written out.
// FP32 order vs the mma.sync kernel: the tensor core's sum over head_dim may round differently
// between wgmma and mma.sync, so S (and from it m, l, P̃, O) may differ at FP32 rounding level.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/check.h"
#include "cuda/flash/flash_forward.h"
#include "cuda/flash/flash_forward_tile.cuh"
#include "cuda/flash/flash_forward_wgmma.cuh"
#include "cuda/flash/flash_mma_sm89.cuh"
#include "cuda/flash/flash_softmax.cuh"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

constexpr int kThreads = 256;  // 2 warpgroups
constexpr int kBM = 128;       // query rows per CTA

// Shared memory (from a 1024-byte aligned base; every tile 1024-aligned, the swizzles' period):
// kStages stages of [K̂ tile kBN x kD | V̂ᵀ tile kD x kBN], then the 8 x kBN ones tile.
constexpr int kStages = 3;
template <int kD, int kBN>
struct WgLayout {
  static constexpr int kK = kBN * kD;  // bytes of one K̂ tile (a multiple of 1024)
  static constexpr int kV = kD * kBN;  // bytes of one V̂ᵀ tile
  static constexpr int kStage = kK + kV;
  static constexpr int kOnes = kStages * kStage;          // offset of the ones tile
  static constexpr int kBytes = kOnes + 1024 + 1024;      // ones (<= 1024) + alignment slack
};

template <int kD, int kBN, bool kLogits>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_forward_kernel(const ForwardParams p, float* s_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WgLayout<kD, kBN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned sbase = smem_u32(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // Block -> (query block, head): the query blocks with the most keys (causal) start first.
  const int64_t BH = p.B * p.H, n_qblocks = ((kLogits ? p.Tq_p : p.Tq) + kBM - 1) / kBM;
  const int64_t bh = int64_t(blockIdx.x) % BH;
  const int64_t q0 = (n_qblocks - 1 - int64_t(blockIdx.x) / BH) * kBM;
  const int64_t b = bh / p.H, h = bh % p.H;
  const int64_t bg = b * p.G + h / (p.H / p.G);  // GQA: the KV head of query head h
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  uint32_t qa[kD / 32][4];
  load_q_fragments<kD>(p, bh, row, t, qa);

  // Keys this CTA visits: those its last real row sees (visible() grows with i).
  const int64_t last = (q0 + kBM < p.Tq ? q0 + kBM : p.Tq) - 1;
  const int64_t n_keys = kLogits ? p.Tk_p : visible(p, last);
  const int n_tiles = int((n_keys + kBN - 1) / kBN);
  const int vis[2] = {row[0] < p.Tq ? int(visible(p, row[0])) : 0,
                      row[1] < p.Tq ? int(visible(p, row[1])) : 0};
  const int64_t unmasked_end = visible(p, q0);  // tiles ending here need no mask in any real row

  const uint8_t* const gk = p.k + bg * p.Tk_p * kD;
  const uint8_t* const gv = kLogits ? nullptr : p.v_t + bg * kD * p.Tk_p;  // logits: no V̂ᵀ
  // Tile at key j0 into `stage`: K̂ row r <- key j0 + s_key(r / 8, r % 8), V̂ᵀ row d <- keys
  // j0..j0+kBN-1 of head_dim column d; past Tk_p: zero codes (masked keys meet P̃ = 0).
  // Chunk c = threadIdx.x + kThreads·n of a tile (every tile is a multiple of kThreads chunks).
  static_assert(kBN * kD / 16 % kThreads == 0, "whole chunks per thread");
  auto load_tile = [&](int stage, int64_t j0) {
    uint8_t* dk = smem + stage * L::kStage;
#pragma unroll
    for (int n = 0; n < kBN * kD / 16 / kThreads; ++n) {
      const int c = threadIdx.x + kThreads * n, r = c / (kD / 16), cc = c % (kD / 16);
      const int64_t j = j0 + s_key(r / 8, r % 8);
      const bool in = j < p.Tk_p;
      cp_async16(dk + swizzle<kD>(r * kD + 16 * cc), in ? gk + j * kD + 16 * cc : gk, in);
    }
    if constexpr (kLogits) return;
    uint8_t* dv = dk + L::kK;
#pragma unroll
    for (int n = 0; n < kD * kBN / 16 / kThreads; ++n) {
      const int c = threadIdx.x + kThreads * n, r = c / (kBN / 16), cc = c % (kBN / 16);
      const bool in = j0 + 16 * cc < p.Tk_p;  // Tk_p is a multiple of 16: whole chunks
      cp_async16(dv + swizzle<kBN>(r * kBN + 16 * cc), in ? gv + r * p.Tk_p + j0 + 16 * cc : gv,
                 in);
    }
  };
  if constexpr (!kLogits) {  // the ones tile (every byte the same: no swizzle to apply)
    constexpr uint32_t kOnes = 0x38383838u;  // four E4M3 codes of 1.0
    for (int c = threadIdx.x; c < 8 * kBN / 16; c += kThreads)
      *reinterpret_cast<uint4*>(smem + L::kOnes + 16 * c) = make_uint4(kOnes, kOnes, kOnes, kOnes);
  }

  const float s_scale = p.tau * *p.q_scale_inv * *p.k_scale_inv;
  const float p_scale = p.p_scale;
  float oacc[kD / 8][4], lacc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // O and l̃ (code units)
#pragma unroll
  for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
    for (int e = 0; e < 4; ++e) oacc[dn][e] = 0.0f;
  RowSoftmax sm[2];

  // One cp.async group per tile, committed even when empty, so that group n is tile n.
  if (n_tiles > 0) load_tile(0, 0);
  cp_async_commit();
  if (n_tiles > 1) load_tile(1, kBN);
  cp_async_commit();
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = int64_t(it) * kBN;
    cp_async_wait<1>();        // groups 0..it are complete (it + 1 may still be in flight)
    fence_proxy_async_smem();  // ... and visible to wgmma's async proxy, after the barrier
    __syncthreads();           // every thread's part of tile it; every warp done with tile it − 1
    if (it + 2 < n_tiles) load_tile((it + 2) % kStages, j0 + 2 * kBN);  // the stage of tile it − 1
    cp_async_commit();
    const unsigned tk = sbase + (it % kStages) * L::kStage, tv = tk + L::kK;

    float s[kBN / 8][4];
    wgmma_fence();
#pragma unroll
    for (int kc = 0; kc < kD / 32; ++kc)
      WgmmaRS<kBN>::run(s, qa[kc], kmajor_desc<kD>(tk + 32 * kc), kc);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    if constexpr (kLogits) {
      store_logits<kBN>(p, s_out, bh, row, j0, t, s, s_scale);
      continue;
    }
    float alpha[2];
    uint32_t pa[kBN / 32][4];
    softmax_tile<kBN>(s, s_scale, j0 + kBN > unmasked_end, vis, j0, t, p_scale, sm, alpha, pa);

    float pv[kD / 8][4], ls[1][4];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 32; ++kk) {
      WgmmaRS<kD>::run(pv, pa[kk], kmajor_desc<kBN>(tv + 32 * kk), kk);
      WgmmaRS<8>::run(ls, pa[kk], kmajor_desc<kBN>(sbase + L::kOnes + 32 * kk), kk);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(pa);
    fence_regs(pv);
    fence_regs(ls);
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[dn][e] = oacc[dn][e] * alpha[e / 2] + pv[dn][e];
#pragma unroll
    for (int e = 0; e < 4; ++e) lacc[e] = lacc[e] * alpha[e / 2] + ls[0][e];
  }
  cp_async_wait<0>();
  if constexpr (!kLogits) store_rows<kD>(p, bh, q0 + warp * 16 + g, t, oacc, lacc, sm);
#else
  __trap();  // wgmma needs sm_90a (the CUDA preset builds it); forward_launch dispatches by device
#endif
}

template <int kD, int kBN, bool kLogits>
void launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  constexpr int bytes = WgLayout<kD, kBN>::kBytes;
  OCTET_CUDA_CHECK(cudaFuncSetAttribute(wgmma_forward_kernel<kD, kBN, kLogits>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  // The logits CTAs cover the padded rows too (the forward's last CTA may stop at Tq).
  const int64_t rows = kLogits ? p.Tq_p : p.Tq;
  const int64_t blocks = p.B * p.H * ((rows + kBM - 1) / kBM);
  OCTET_CHECK(blocks <= 0x7FFFFFFF, "fused attention forward: too many query blocks (B·H·Tq/128)");
  wgmma_forward_kernel<kD, kBN, kLogits><<<unsigned(blocks), kThreads, bytes, stream>>>(p, s_out);
  OCTET_CUDA_LAUNCH_CHECK();
}

template <bool kLogits>
void dispatch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  if (p.D == 64)
    p.block_k == 64 ? launch<64, 64, kLogits>(p, s_out, stream)
                    : launch<64, 128, kLogits>(p, s_out, stream);
  else
    p.block_k == 64 ? launch<128, 64, kLogits>(p, s_out, stream)
                    : launch<128, 128, kLogits>(p, s_out, stream);
}

}  // namespace

void wgmma_forward_launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  s_out ? dispatch<true>(p, s_out, stream) : dispatch<false>(p, nullptr, stream);
}

}  // namespace octet::cuda::flash
