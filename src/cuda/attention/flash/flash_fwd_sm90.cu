// src/cuda/attention/flash/flash_fwd_sm90.cu — the Hopper (sm_90a) flavor of the flash FP8 attention
// forward: the semantics of flash.h (CPU twin: src/cpu/attention_flash.cpp) with both GEMMs
// on warpgroup MMA (wgmma) in FlashAttention-3's structure (arXiv 2407.08608: warp specialization,
// an mbarrier ring). docs/attention.md §"Forward".
//
// One CTA = 3 warpgroups, kBM = 128 query rows of one (b, h). Warpgroup 0, the producer, fills a
// 3-stage shared-memory ring (mbarriers full/empty per stage): V̂ᵀ tiles by cp.async, K̂ tiles by
// cp.async into a staging buffer one tile ahead, then converted to FP16 (exact) into the stage.
// Warpgroups 1 and 2, the consumers, own 64 rows each (consumer warp v: rows 16v..16v+15, the
// mma.sync kernel's rows per warp) and per key tile of kBN keys:
//   S (64 x kBN) = Q̂·K̂ᵀ: FP16 wgmma m64n{kBN}k16 (HGMMA), A = Q̂ as FP16 from registers (loaded
//     once), B = the FP16 K̂ tile; head_dim in order from a fresh accumulator. The codes' values are
//     exact in FP16 and their products in FP32, so S is an FP32 sum as the twin's — the FP8
//     instruction's 13-bit accumulator would move S by ~1e-4 of its partial sums, and with it m,
//     the LSE and the P the backward recomputes (at logits ~100, P by percents). The K̂ rows are
//     stored permuted (row r holds key s_key(r / 8, r % 8)), so the accumulator converts in place
//     into P̃V̂'s A fragment (flash_fwd_tile_sm89.cuh) — one reason the copies are not TMA's;
//   the tile's softmax (flash_fwd_tile_sm89.cuh softmax_tile, shared with the mma.sync kernel);
//   P̃V̂ (64 x kD) = FP8 wgmma m64n{kD}k32 (QGMMA), A = P̃ from registers, B = the V̂ᵀ tile, in a
//     fresh accumulator added to O in FP32 (α·O + P̃V̂: the tensor core sums at most one tile of
//     keys, DeepSeek-V3's promotion interval N_C = 128, docs/numerics.md);
//     l̃'s tile sum is one more m64n8k32 with B = an 8 x kBN tile of E4M3 ones.
// No CTA-wide barrier in the loop: each consumer warpgroup waits only for its data, so the two
// overlap each other's softmax and GEMMs as the warp schedulers interleave them. Not yet: TMA,
// ping-pong scheduling of the consumers, intra-warpgroup overlap of the softmax with the next
// tile's S GEMM (its accumulator does not fit beside O's, P̃V̂'s and S's at head_dim 128).
// Logits mode (run_logits after a wgmma forward): the same S instructions, S written out.
// Numerics vs the mma.sync kernel: S, m, l at FP32 rounding level (another tensor-core summation
// order); P̃V̂ and l̃ with the FP8 accumulator's 13 bits within a tile (O: ~1e-4 relative).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/runtime/check.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_fwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_wgmma_sm90.cuh"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_softmax.cuh"
#include "octet/error.h"

namespace octet::cuda::flash {
namespace {

constexpr int kThreads = 384;  // warpgroup 0: the producer; 1 and 2: the consumers
constexpr int kBM = 128;       // query rows per CTA (64 per consumer warpgroup)
constexpr int kStages = 3;     // the K̂/V̂ᵀ ring
// setmaxnreg: the producer gives registers back, the consumers (the accumulators) take them:
// 128·40 + 256·232 = 64512 = 384·168, the launch's allocation (ptxas pins the kernel to 168).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;

// Shared memory (from a 1024-byte aligned base; every tile 1024-aligned, the swizzles' period):
// kStages stages of [K̂ as FP16 | V̂ᵀ codes], 2 staging buffers of K̂ codes, the 8 x kBN ones tile,
// the ring's mbarriers full[kStages] and empty[kStages].
//   K̂ FP16 tile: kD/64 column blocks of [kBN rows][64 halves = 128 bytes], 128-byte swizzle (the
//     K-major layout of a 16-bit wgmma B operand whose rows exceed 128 bytes): head_dim column k of
//     row r at block k / 64, byte 2·(k % 64) of the row.
//   V̂ᵀ tile [kD][kBN] codes, kBN-byte swizzle. Staging: [kBN][kD] codes as loaded (K̂ rows permuted).
template <int kD, int kBN>
struct WgLayout {
  static constexpr int kKBlock = kBN * 128;  // one 64-column block of the FP16 K̂ tile
  static constexpr int kK = 2 * kBN * kD;    // bytes of the FP16 K̂ tile
  static constexpr int kV = kD * kBN;        // bytes of one V̂ᵀ tile (a multiple of 1024)
  static constexpr int kStage = kK + kV;
  static constexpr int kStaging = kStages * kStage;           // 2 x kBN·kD code buffers
  static constexpr int kOnes = kStaging + 2 * kBN * kD;       // offset of the ones tile (<= 1024)
  static constexpr int kBars = kOnes + 1024;                  // offset of the mbarriers (8 bytes each)
  static constexpr int kBytes = kBars + 16 * kStages + 1024;  // + alignment slack
};

/// bar.sync on named barrier 1 for the producer warpgroup's 128 threads only.
__device__ __forceinline__ void producer_sync() { asm volatile("bar.sync 1, 128;\n" ::: "memory"); }

template <int kD, int kBN, bool kLogits>
__global__ void __launch_bounds__(kThreads, 1) wgmma_forward_kernel(const ForwardParams p, float* s_out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = WgLayout<kD, kBN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* const smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned sbase = smem_u32(smem);
  const unsigned full = sbase + L::kBars, empty = full + 8 * kStages;  // + 8·stage
  const int wg = threadIdx.x / 128;

  // Block -> (query block, head): the query blocks with the most keys (causal) start first.
  const int64_t BH = p.B * p.H, n_qblocks = ((kLogits ? p.Tq_p : p.Tq) + kBM - 1) / kBM;
  const int64_t bh = int64_t(blockIdx.x) % BH;
  const int64_t q0 = (n_qblocks - 1 - int64_t(blockIdx.x) / BH) * kBM;
  const int64_t bg = bh / p.H * p.G + bh % p.H / (p.H / p.G);  // GQA: the KV head of head bh
  // Keys this CTA visits: those its last real row sees (visible() grows with i).
  const int64_t last = (q0 + kBM < p.Tq ? q0 + kBM : p.Tq) - 1;
  const int64_t n_keys = kLogits ? p.Tk_p : visible(p, last);
  const int n_tiles = int((n_keys + kBN - 1) / kBN);

  // The ring's barriers: full[s] completes when the 128 producer threads have published stage s
  // (K̂ converted, V̂ᵀ landed); empty[s] when the 256 consumer threads are done with it.
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, 128);
      mbar_init(empty + 8 * s, 256);
    }
    fence_mbar_init();
  }
  if constexpr (!kLogits) {                  // the ones tile (every byte the same: no swizzle to apply)
    constexpr uint32_t kOnes = 0x38383838u;  // four E4M3 codes of 1.0
    for (int c = threadIdx.x; c < 8 * kBN / 16; c += kThreads)
      *reinterpret_cast<uint4*>(smem + L::kOnes + 16 * c) = make_uint4(kOnes, kOnes, kOnes, kOnes);
    fence_proxy_async_smem();  // visible to wgmma's async proxy after the barrier
  }
  __syncthreads();

  if (wg == 0) {
    // Producer (tid 0..127). Per tile n, stage n % kStages, once the consumers have released the
    // stage's previous tile n − kStages (empty's completion number n / kStages − 1):
    //   V̂ᵀ codes by cp.async (row d <- keys j0..j0+kBN-1 of head_dim column d);
    //   the next tile's K̂ codes by cp.async into the other staging buffer (row r <- key
    //   j0 + s_key(r / 8, r % 8)); past Tk_p: zero codes (masked keys meet P̃ = 0);
    //   this tile's staged K̂ codes -> FP16 (exact) into the stage's swizzled K̂ tile;
    //   fence.proxy.async (its shared-memory writes, and its landed copies, to wgmma's proxy),
    //   then one arrival on full. Named barrier 1 orders the 128 threads around the staging.
    setmaxnreg_dec<kProducerRegs>();
    const uint8_t* const gk = p.k + bg * p.Tk_p * kD;
    const uint8_t* const gv = kLogits ? nullptr : p.v_t + bg * kD * p.Tk_p;  // logits: no V̂ᵀ
    const int tid = threadIdx.x;
    static_assert(kBN * kD / 16 % 128 == 0, "whole chunks per producer thread");
    constexpr int kChunks = kBN * kD / 16 / 128;  // 16-byte chunks per thread of a code tile
    auto load_codes = [&](int buf, int64_t j0) {
      uint8_t* dst = smem + L::kStaging + buf * kBN * kD;
#pragma unroll 1  // the producer has few registers: addresses computed per copy, not hoisted
      for (int u = 0; u < kChunks; ++u) {
        const int c = tid + 128 * u, r = c / (kD / 16), cc = c % (kD / 16);
        const int64_t j = j0 + s_key(r / 8, r % 8);
        const bool in = j < p.Tk_p;
        cp_async16(dst + 16 * c, in ? gk + j * kD + 16 * cc : gk, in);
      }
    };
    if (n_tiles > 0) load_codes(0, 0);
    cp_async_commit();
    for (int n = 0; n < n_tiles; ++n) {
      const int stage = n % kStages;
      const int64_t j0 = int64_t(n) * kBN;
      if (n >= kStages) mbar_wait(empty + 8 * stage, ((n / kStages) & 1) ^ 1);
      uint8_t* const sk = smem + stage * L::kStage;
      if constexpr (!kLogits) {
        uint8_t* dv = sk + L::kK;
#pragma unroll 1
        for (int u = 0; u < kChunks; ++u) {
          const int c = tid + 128 * u, r = c / (kBN / 16), cc = c % (kBN / 16);
          const bool in = j0 + 16 * cc < p.Tk_p;  // Tk_p is a multiple of 16: whole chunks
          cp_async16(dv + swizzle<kBN>(r * kBN + 16 * cc), in ? gv + r * p.Tk_p + j0 + 16 * cc : gv, in);
        }
      }
      cp_async_commit();  // group: V̂ᵀ of tile n
      producer_sync();    // every thread has converted tile n − 1 out of the buffer reused next
      if (n + 1 < n_tiles) load_codes((n + 1) % 2, j0 + kBN);
      cp_async_commit();   // group: K̂ codes of tile n + 1
      cp_async_wait<1>();  // this thread's K̂ codes of tile n and V̂ᵀ of tile n have landed
      producer_sync();     // ... every thread's
      const uint8_t* src = smem + L::kStaging + (n % 2) * kBN * kD;
#pragma unroll 1
      for (int u = 0; u < kChunks; ++u) {  // chunk c: row r, head_dim columns 16cc..16cc+15
        const int c = tid + 128 * u, r = c / (kD / 16), cc = c % (kD / 16);
        const uint4 x = *reinterpret_cast<const uint4*>(src + 16 * c);
        const uint32_t w[4] = {x.x, x.y, x.z, x.w};
        uint32_t hf[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          hf[2 * i] = fp8x2_to_f16x2<false>(uint16_t(w[i] & 0xFFFFu));
          hf[2 * i + 1] = fp8x2_to_f16x2<false>(uint16_t(w[i] >> 16));
        }
        // Columns 16cc.. = block cc / 4, bytes 32·(cc % 4) and +16 of the row's 128.
        uint8_t* blk = sk + (cc / 4) * L::kKBlock;
        const int off = r * 128 + 32 * (cc % 4);
        *reinterpret_cast<uint4*>(blk + swizzle<128>(off)) = make_uint4(hf[0], hf[1], hf[2], hf[3]);
        *reinterpret_cast<uint4*>(blk + swizzle<128>(off + 16)) = make_uint4(hf[4], hf[5], hf[6], hf[7]);
      }
      fence_proxy_async_smem();
      mbar_arrive(full + 8 * stage);
    }
    cp_async_wait<0>();  // no copy outlives its thread
    return;
  }

  // Consumers: warpgroup wg − 1 owns rows 64(wg − 1)..+63, warp w (0..7) rows 16w..16w+15.
  setmaxnreg_inc<kConsumerRegs>();
  const int warp = threadIdx.x / 32 - 4, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  uint32_t qa[kD / 16][4];  // Q̂ as FP16 A fragments of the S GEMM (k16 steps)
  load_q_fragments<kD, true>(p, bh, row, t, qa);
  const int vis[2] = {row[0] < p.Tq ? int(visible(p, row[0])) : 0,
                      row[1] < p.Tq ? int(visible(p, row[1])) : 0};
  const int64_t unmasked_end = visible(p, q0);      // tiles ending here need no mask in any real row
  const float tau_q = p.tau * q_inv_at(p, bh, q0);  // S's scale τ·sq·sk, sk per tile (in this order)
  const float p_scale = p.p_scale;
  ForwardRows<kD> acc(kLogits ? 1.0f : v_inv_at(p, bg, 0));  // O, l̃ (code units), online softmax

  for (int n = 0; n < n_tiles; ++n) {
    const int stage = n % kStages;
    const int64_t j0 = int64_t(n) * kBN;
    mbar_wait(full + 8 * stage, (n / kStages) & 1);  // full's completion number n / kStages
    const unsigned tk = sbase + stage * L::kStage, tv = tk + L::kK;

    // S = Q̂K̂ᵀ in FP32 (FP16 wgmma on the exact FP16 values of the codes), head_dim in order.
    float s[kBN / 8][4];
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks)
      WgmmaF16RS<kBN>::run(s, qa[ks], kmajor_desc<128>(tk + (ks / 4) * L::kKBlock + 32 * (ks % 4)), ks);
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(s);
    const float s_scale = tau_q * k_inv_at(p, bg, j0);
    if constexpr (kLogits) {
      mbar_arrive(empty + 8 * stage);
      store_logits<kBN>(p, s_out, bh, row, j0, t, s, s_scale);
      continue;
    }
    float alpha[2];
    uint32_t pa[kBN / 32][4];
    softmax_tile<kBN>(s, s_scale, j0 + kBN > unmasked_end, vis, j0, t, p_scale, acc.sm, alpha, pa);

    // P̃V̂ (FP8 wgmma, one tile: the tensor core's accumulator, promoted to FP32 per tile) and l̃.
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
    mbar_arrive(empty + 8 * stage);  // this thread's reads of the stage are done
    float alpha_o[2];
    acc.o_alpha(alpha, v_inv_at(p, bg, j0), alpha_o);
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) acc.add_pv(dn, alpha_o, pv[dn]);
    acc.add_l(alpha, ls[0]);
  }
  if constexpr (!kLogits) acc.store(p, bh, q0 + warp * 16 + g, t);
#else
  __trap();  // wgmma needs sm_90a (the CUDA preset builds it); run_forward dispatches by device
#endif
}

}  // namespace

void fwd_sm90_launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  dispatch_sizes(p, [&](auto d, auto bn) {
    constexpr int kD = decltype(d)::value, kBN = decltype(bn)::value;
    constexpr int bytes = WgLayout<kD, kBN>::kBytes;
    if (s_out)
      launch_forward_kernel(wgmma_forward_kernel<kD, kBN, true>, kThreads, kBM, bytes, true, p, s_out,
                            stream);
    else
      launch_forward_kernel(wgmma_forward_kernel<kD, kBN, false>, kThreads, kBM, bytes, false, p, nullptr,
                            stream);
  });
}

}  // namespace octet::cuda::flash
