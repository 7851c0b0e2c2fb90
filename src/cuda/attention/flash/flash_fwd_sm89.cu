// src/cuda/attention/flash/flash_fwd_sm89.cu — the flash FP8 attention forward on mma.sync
// (sm_89 and later; flash.h, launched by flash_fwd_launch.cu through fwd_sm89_launch; CPU twin:
// src/cpu/attention_flash.cpp). docs/attention.md §"Forward".
//
// One CTA = 8 warps = kBM = 128 query rows (head_dim 64: 4 warps, 64 rows) of one (b, h); each
// warp owns 16 rows (FlashAttention-2's split: no cross-warp reduction). Q̂'s fragments live in
// registers for the whole CTA. K̂ and V̂ᵀ key tiles of kBN keys go through a 2-stage cp.async ring in
// shared memory: tile n+1 loads while tile n computes. Per tile and warp:
//   S (16 x kBN, FP32) = Q̂·K̂ᵀ by mma.sync m16n8k32 (flash_mma_sm89.cuh), × τ·sq·sk, masked to −inf;
//   online softmax per row (flash_softmax.cuh) → P̃ codes, converted in place into P̃V̂'s A fragment
//   (the S accumulator's key order is permuted so the layouts agree: flash_mma_sm89.cuh s_key);
//   O_acc = α·O_acc + P̃·V̂ (the tile's product from the tensor core, the sum over tiles in FP32;
//   with V̂ scaled per 128-key block α also carries the ratio of two blocks' 1/sv: O_acc is in the
//   codes of the newest tile's V̂, ForwardRows::o_alpha).
// End: O = bf16_round(O_acc · sv / l̃) (sv: the last tile's), LSE, m, l per row.
// The per-warp tile code (masking, softmax, P̃ fragments, epilogue) is flash_fwd_tile_sm89.cuh,
// shared with the sm90 kernel. In its logits mode the kernel writes S instead (run_logits).
// FP32 order vs the CPU twin (documented differences, all at FP32 rounding level; a P̃ code or a
// BF16 output may then differ by one rounding step where a value sits on a rounding boundary):
//   S: the tensor core sums the code products (exact) in its own order, then × (τ·sq·sk); the CPU
//      sums the dequantized products key by key and multiplies by τ.
//   exp: one FFMA and ex2 per score, exp(S − m)·p_scale = 2^(ŝ·RN(c·log2 e) + bias)
//      (flash_softmax.cuh); the CPU computes std::exp(S − m) and multiplies by p_scale.
//   l, l̃: lane partial sums then a quad sum (flash_softmax.cuh) instead of key order.
//   O: (O_acc in code units)·(sv / l̃ in code units), the p_scale factors cancelling exactly.
#include "cuda/attention/flash/flash_kernels.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/runtime/check.h"
#include "cuda/attention/flash/flash_fwd_tile_sm89.cuh"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_persistent.h"
#include "cuda/attention/flash/flash_softmax.cuh"
#include "octet/attention.h"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {
namespace {

// Warps (16 query rows each) per CTA. head_dim 128: 8 warps = 128 rows, so every K̂/V̂ tile brought
// into shared memory serves 128 rows (half the L2 -> shared traffic per FLOP of 64-row CTAs); at
// up to 255 registers per thread that is one CTA (8 warps) per SM, the occupancy two 4-warp CTAs
// had. head_dim 64: 4 warps (ptxas spills the key tile of 128 at 256 threads, not at 128 threads;
// two or more CTAs per SM).
template <int kD>
constexpr int kWarps = kD == 128 ? 8 : 4;
template <int kD>
constexpr int kThreads = 32 * kWarps<kD>;
template <int kD>
constexpr int kBM = 16 * kWarps<kD>;  // query rows per CTA

template <int kD, int kBN>
struct Smem {
  static constexpr int kK = kBN * kD;  // bytes of one K̂ tile [kBN][kD]
  static constexpr int kV = kD * kBN;  // bytes of one V̂ᵀ tile [kD][kBN]
  static constexpr int kBytes = 2 * (kK + kV);
};

// kLogits = false: the forward. kLogits = true: the same CTA walks all Tk_p keys and writes its
// S = Q̂K̂ᵀ·(τ·sq·sk) tile by tile to s_out instead of the softmax and P̃V̂ (run_logits): the very
// instructions and scale product of the forward, so every element has the forward's bits.
template <int kD, int kBN, bool kLogits>
__global__ void __launch_bounds__(kThreads<kD>) forward_kernel(const ForwardParams p, float* s_out) {
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const sk = smem;                          // [2][kBN][kD], chunks k_chunk-swizzled
  uint8_t* const sv = smem + 2 * Smem<kD, kBN>::kK;  // [2][kD][kBN], chunks v_chunk-swizzled
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  // Block -> (query block, head): in each head group (ForwardParams::head_group) the query blocks
  // with the most keys (causal) start first.
  const int64_t BH = p.B * p.H, n_qblocks = ((kLogits ? p.Tq_p : p.Tq) + kBM<kD> - 1) / kBM<kD>;
  const GridItem wi = grouped_item(blockIdx.x, BH, n_qblocks, p.head_group);
  const int64_t bh = wi.head;
  const int64_t q0 = (n_qblocks - 1 - wi.block) * kBM<kD>;
  const int64_t b = bh / p.H, h = bh % p.H;
  const int64_t bg = b * p.G + h / (p.H / p.G);  // GQA: the KV head of query head h
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};

  // Q̂ A fragments, all of D (rows past Tq_p: zero codes).
  uint32_t qa[kD / 32][4];
  load_q_fragments<kD>(p, bh, row, t, qa);

  // Keys this CTA visits: those its last real row sees (visible() grows with i).
  const int64_t last = (q0 + kBM<kD> < p.Tq ? q0 + kBM<kD> : p.Tq) - 1;
  const int64_t n_keys = kLogits ? p.Tk_p : visible(p, last);
  const int n_tiles = int((n_keys + kBN - 1) / kBN);
  // Keys each of this lane's rows sees (launch checks Tk < 2^31: 32-bit).
  const int vis[2] = {row[0] < p.Tq ? int(visible(p, row[0])) : 0,
                      row[1] < p.Tq ? int(visible(p, row[1])) : 0};
  // Tiles that end at or below this see no mask in any real row of the CTA (its first row sees
  // the fewest keys); pad rows (>= Tq) then see zero logits, harmless, and are never written.
  const int64_t unmasked_end = visible(p, q0);

  const uint8_t* const gk = p.k + bg * p.Tk_p * kD;
  const uint8_t* const gv = kLogits ? nullptr : p.v_t + bg * kD * p.Tk_p;  // logits: no V̂ᵀ
  auto load_tile = [&](int stage, int64_t j0) {
    uint8_t* dk = sk + stage * Smem<kD, kBN>::kK;
    for (int c = threadIdx.x; c < kBN * kD / 16; c += kThreads<kD>) {
      const int r = c / (kD / 16), cc = c % (kD / 16);
      const bool in = j0 + r < p.Tk_p;
      cp_async16(dk + r * kD + 16 * k_chunk<kD>(r, cc), in ? gk + (j0 + r) * kD + 16 * cc : gk, in);
    }
    if constexpr (kLogits) return;
    uint8_t* dv = sv + stage * Smem<kD, kBN>::kV;
    for (int c = threadIdx.x; c < kD * kBN / 16; c += kThreads<kD>) {
      const int r = c / (kBN / 16), cc = c % (kBN / 16);
      const bool in = j0 + 16 * cc < p.Tk_p;  // Tk_p is a multiple of 16: whole chunks
      cp_async16(dv + r * kBN + 16 * v_chunk<kBN>(r, cc), in ? gv + r * p.Tk_p + j0 + 16 * cc : gv, in);
    }
  };

  // Fragment loads by ldmatrix (flash_mma_sm89.cuh ldsm): lane 8i + r gives the address of row r
  // of matrix i. K̂: matrix i of n-tile nt is key row s_key(nt, r) = s_key(nt, 0) + s_key(0, r),
  // chunk 4h + i (h: which half of head_dim at D = 128) — the b0, b1 of kc = 2h, 2h + 1. V̂ᵀ:
  // row 8·dn + r, chunk 4h + i — b0, b1 of kk = 2h, 2h + 1. The swizzles read only row bits that r
  // sets, so a lane's XOR (kx, vx) is the same for every n-tile / dn.
  // Per lane: the row offset and the swizzled chunk of matrix i for each h ((4h + i) ^ x =
  // (i ^ x) ^ 4h); the rest of an address is a compile-time constant.
  const int mi = lane / 8, mr = lane % 8;
  const unsigned k_lane = smem_u32(sk) + s_key(0, mr) * kD;
  const unsigned v_lane = smem_u32(sv) + mr * kBN;
  const int kx = k_chunk<kD>(s_key(0, mr), 0) ^ mi, vx = v_chunk<kBN>(mr, 0) ^ mi;
  const float tau_q = p.tau * q_inv_at(p, bh, q0);  // S's scale τ·sq·sk, sk per tile (in this order)
  const float p_scale = p.p_scale;
  constexpr uint32_t kOnes = 0x38383838u;  // four E4M3 codes of 1.0: P̃·1 = the row sums l̃
  ForwardRows<kD> acc(kLogits ? 1.0f : v_inv_at(p, bg, 0));  // O, l̃ (code units), online softmax

  if (n_tiles > 0) load_tile(0, 0);
  cp_async_commit();
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = int64_t(it) * kBN;
    if (it + 1 < n_tiles) load_tile((it + 1) % 2, j0 + kBN);
    cp_async_commit();
    cp_async_wait<1>();  // this tile's group is complete (the newest may still be in flight)
    __syncthreads();
    const unsigned tk = k_lane + (it % 2) * Smem<kD, kBN>::kK;  // this lane's rows of the stage
    const unsigned tv = v_lane + (it % 2) * Smem<kD, kBN>::kV;

    // S = Q̂K̂ᵀ (codes), n-tile nt column n = key s_key(nt, n) of the tile; the MMAs over head_dim
    // in order kc = 0, 1, ... from a zero accumulator (the backward's ntile_mma does the same).
    float s[kBN / 8][4];
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = 0.0f;
#pragma unroll
      for (int h = 0; h < kD / 64; ++h) {
        uint32_t b[4];
        ldsm<4>(b, tk + s_key(nt, 0) * kD + 16 * (kx ^ (4 * h)));
        mma_e4m3_16832(s[nt], qa[2 * h], b[0], b[1]);
        mma_e4m3_16832(s[nt], qa[2 * h + 1], b[2], b[3]);
      }
    }
    const float s_scale = tau_q * k_inv_at(p, bg, j0);
    if constexpr (kLogits) {  // S rows i < Tq_p, keys j < Tk_p (pads: 0, as a GEMM gives)
      store_logits<kBN>(p, s_out, bh, row, j0, t, s, s_scale);
      __syncthreads();
      continue;
    }
    // Scale, mask (only tiles past unmasked_end: a CTA-uniform branch), online softmax, P̃ as the
    // A fragments of P̃V̂ over the 32 keys 32kk.. (flash_fwd_tile_sm89.cuh).
    float alpha[2], alpha_o[2];
    uint32_t pa[kBN / 32][4];
    softmax_tile<kBN>(s, s_scale, j0 + kBN > unmasked_end, vis, j0, t, p_scale, acc.sm, alpha, pa);
    acc.o_alpha(alpha, v_inv_at(p, bg, j0), alpha_o);
    // O = α·O + P̃·V̂: B = V̂ᵀ rows 8dn + g (head_dim columns), keys 32kk + 4t.. (b0), +16 (b1).
    // The tile's P̃·V̂ (kBN <= 128 keys) is summed by the tensor core in a fresh accumulator and
    // added to O in FP32 on the CUDA cores: Hopper's FP8 MMA accumulates with limited precision,
    // so a long row is never summed inside it (DeepSeek-V3's promotion every N_C = 128, docs/numerics.md).
    // l̃ likewise: the tile's Σ P̃ is P̃·1 (a B fragment of E4M3 ones), α·l̃ + it in FP32.
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn) {
      float pv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int h = 0; h < kBN / 64; ++h) {
        uint32_t b[4];
        ldsm<4>(b, tv + 8 * dn * kBN + 16 * (vx ^ (4 * h)));
        mma_e4m3_16832(pv, pa[2 * h], b[0], b[1]);
        mma_e4m3_16832(pv, pa[2 * h + 1], b[2], b[3]);
      }
      acc.add_pv(dn, alpha_o, pv);
    }
    {
      float ls[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int kk = 0; kk < kBN / 32; ++kk) mma_e4m3_16832(ls, pa[kk], kOnes, kOnes);
      acc.add_l(alpha, ls);
    }
    __syncthreads();  // every warp is done with this stage before it is loaded again
  }
  cp_async_wait<0>();
  if constexpr (kLogits) return;
  // row[0], recomputed (not live in the loop)
  acc.store(p, bh, q0 + warp * 16 + g, t);
}

}  // namespace

void fwd_sm89_launch(const ForwardParams& p, float* s_out, cudaStream_t stream) {
  dispatch_sizes(p, [&](auto d, auto bn) {
    constexpr int kD = decltype(d)::value, kBN = decltype(bn)::value;
    if (s_out)
      launch_forward_kernel(forward_kernel<kD, kBN, true>, kThreads<kD>, kBM<kD>, Smem<kD, kBN>::kBytes, true,
                            p, s_out, stream);
    else
      launch_forward_kernel(forward_kernel<kD, kBN, false>, kThreads<kD>, kBM<kD>, Smem<kD, kBN>::kBytes,
                            false, p, nullptr, stream);
  });
}

}  // namespace octet::cuda::flash
