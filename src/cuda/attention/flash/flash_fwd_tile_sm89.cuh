// src/cuda/attention/flash/flash_fwd_tile_sm89.cuh — the per-warp tile code of the flash FP8 attention
// forward that both kernel flavors share (flash_fwd_sm89.cu: mma.sync; flash_fwd_sm90.cu: wgmma): a warp's 16
// query rows of a key tile live in the same registers in both (float[kBN/8][4]: n-tile nt, lane (g, t) holds
// rows g (e = 0, 1) and g + 8 (e = 2, 3), columns 2t + e % 2), so the masking, the online softmax
// (flash_softmax.cuh), the P̃ fragments, the logits store and the epilogue are written once here. The
// semantics are flash.h's; its CPU twin is src/cpu/attention_flash.cpp. docs/attention.md §"Forward".
//
// Key order: column 8·nt + c of a tile's S holds key s_key(nt, c) of the tile (flash_mma_sm89.cuh),
// so that the S accumulator converts in place into P̃V̂'s A fragment (V̂ᵀ read in natural order).
// Host side, also shared: the launch of one kernel instance and the dispatch over (D, block_k).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "cuda/runtime/check.h"
#include "cuda/runtime/kernel_attrs.h"
#include "cuda/attention/flash/flash_kernels.h"
#include "cuda/attention/flash/flash_exp2.h"
#include "cuda/quantize/fp8_device.cuh"
#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_qkv_scales.cuh"
#include "cuda/attention/flash/flash_softmax.cuh"
#include "octet/error.h"
#include "octet/fp8.h"

namespace octet::cuda::flash {

/// Launches `kernel(p, s_out)` (either flavor, forward or logits mode) on `stream` over B·H·⌈rows /
/// bm⌉ CTAs of `threads`, rows = Tq (forward) or Tq_p (logits: the padded rows too; the forward's
/// last CTA may stop at Tq), with `bytes` of dynamic shared memory (above 48 KiB that needs the
/// opt-in, per function on the current device).
template <class Kernel>
void launch_forward_kernel(Kernel* kernel, int threads, int bm, int bytes, bool logits,
                           const ForwardParams& p, float* s_out, cudaStream_t stream) {
  opt_in_shared_memory(kernel, bytes);
  const int64_t rows = logits ? p.Tq_p : p.Tq;
  const int64_t blocks = p.B * p.H * ((rows + bm - 1) / bm);
  OCTET_CHECK(blocks <= 0x7FFFFFFF,
              "flash attention forward: too many query blocks (B·H·Tq/" + std::to_string(bm) + ")");
  kernel<<<unsigned(blocks), threads, bytes, stream>>>(p, s_out);
  OCTET_CUDA_LAUNCH_CHECK();
}

/// Calls launch(D, block_k) with both as std::integral_constant<int, 64 or 128> for p's values
/// (check_forward_supported has admitted only those): the kernels' template instances.
template <class Launch>
void dispatch_sizes(const ForwardParams& p, Launch&& launch) {
  using k64 = std::integral_constant<int, 64>;
  using k128 = std::integral_constant<int, 128>;
  if (p.D == 64)
    p.block_k == 64 ? launch(k64{}, k64{}) : launch(k64{}, k128{});
  else
    p.block_k == 64 ? launch(k128{}, k64{}) : launch(k128{}, k128{});
}

/// Keys query row i sees: all Tk, or causal bottom-right j <= i + Tk − Tq (clamped to [0, Tk]).
__device__ __forceinline__ int64_t visible(const ForwardParams& p, int64_t i) {
  if (!p.causal) return p.Tk;
  const int64_t n = i + p.Tk - p.Tq + 1;
  return n < 0 ? 0 : (n > p.Tk ? p.Tk : n);
}

/// Q̂'s A fragments (E4M3 codes, mma.sync m16n8k32) over all of head_dim for rows row[0] (g) and
/// row[1] (g + 8) of head bh (rows past Tq_p: zero codes): qa[kc] covers head_dim 32kc..32kc+31,
/// register r = the 4 codes at 32kc + 16(r / 2) + 4t of row r % 2.
template <int kD>
__device__ __forceinline__ void load_q_fragments(const ForwardParams& p, int64_t bh, const int64_t (&row)[2],
                                                 int t, uint32_t (&qa)[kD / 32][4]) {
  const uint8_t* q = p.q + bh * p.Tq_p * kD;
#pragma unroll
  for (int kc = 0; kc < kD / 32; ++kc)
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // a0: row g, a1: row g+8; a2, a3: + 16 columns
      const int64_t i = row[r % 2];
      qa[kc][r] =
          i < p.Tq_p ? *reinterpret_cast<const uint32_t*>(q + i * kD + 32 * kc + 16 * (r / 2) + 4 * t) : 0u;
    }
}

/// run_logits's store: S·s_scale (a rounded product: its row max is the forward's saved m) of
/// the tile at key j0 for rows i < Tq_p, keys j < Tk_p (pads: 0, as a GEMM gives).
template <int kBN>
__device__ __forceinline__ void store_logits(const ForwardParams& p, float* s_out, int64_t bh,
                                             const int64_t (&row)[2], int64_t j0, int t,
                                             const float (&s)[kBN / 8][4], float s_scale) {
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t j = j0 + s_key(nt, 2 * t);  // even; j + 1 < Tk_p too (Tk_p % 16 == 0)
      if (row[r] < p.Tq_p && j < p.Tk_p)
        *reinterpret_cast<float2*>(s_out + (bh * p.Tq_p + row[r]) * p.Tk_p + j) =
            make_float2(__fmul_rn(s[nt][2 * r], s_scale), __fmul_rn(s[nt][2 * r + 1], s_scale));
    }
}

/// One key tile's softmax for this lane's two rows: S = s_scale·ŝ (ŝ the code products in `s`,
/// masked in place to −inf past each row's visible keys `vis`, only when the CTA-uniform
/// `check_mask`: the tile reaches past the keys every real row of the CTA sees), the online-softmax
/// update of `sm` (α returned per row, by which the caller rescales O and l̃), and P̃'s E4M3 codes
/// as the A fragments of P̃V̂ over the keys 32kk.. (a0/a1 from n-tiles 4kk, 4kk+1: keys 4t..4t+3 of
/// rows g / g+8; a2/a3 from 4kk+2, 4kk+3: keys 16+4t..16+4t+3). flash_softmax.cuh says how the
/// scale, the max and the exponentials are formed (one FFMA and one ex2 per key); the maxima and
/// this tile's share of l are reduced in short independent chains (max: the same bits in any order). Element
/// e: row e / 2, key s_key(nt, 0) + 4t + e % 2 of the tile; the mask compares in 32-bit tile-relative units
/// (run_forward checks Tk < 2^31). s_scale is a product of positive scales (0 only if it underflows,
/// NaN from a NaN block scale); the max's bits need s_scale > 0, and a masked key gives P = 0 in
/// any case. kPoly: the n-tiles nt with nt % 8 >= 8 − kPoly take their exponentials from exp2_poly
/// (flash_exp2.h, on the FMA units) of the same FFMA's argument instead of the SFU's ex2, to share
/// the work between the two pipes (0: every exponential on the SFU).
template <int kBN, int kPoly = 0>
__device__ __forceinline__ void softmax_tile(float (&s)[kBN / 8][4], float s_scale, bool check_mask,
                                             const int (&vis)[2], int64_t j0, int t, float p_scale,
                                             RowSoftmax (&sm)[2], float (&alpha)[2],
                                             uint32_t (&pa)[kBN / 32][4]) {
  int lim[2];  // keys of this tile row r sees, relative to j0 + 4t
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int n = vis[r] - int(j0);
    lim[r] = (n < 0 ? 0 : (n > kBN ? kBN : n)) - 4 * t;
  }
  const auto masked = [&](int nt, int e) { return !(s_key(nt, 0) + e % 2 < lim[e / 2]); };
  if (check_mask) {
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (masked(nt, e)) s[nt][e] = -INFINITY;
  }
  float mx[2][4];  // four independent max chains per row (the same bits in any order)
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float x = fmaxf(s[nt][2 * r], s[nt][2 * r + 1]);
      mx[r][nt % 4] = nt < 4 ? x : fmaxf(mx[r][nt % 4], x);
    }
#pragma unroll
  for (int r = 0; r < 2; ++r) mx[r][0] = fmaxf(fmaxf(mx[r][0], mx[r][1]), fmaxf(mx[r][2], mx[r][3]));
  const float c2 = __fmul_rn(s_scale, 1.4426950408889634f);
  const float log2_p = float(int(__float_as_uint(p_scale) >> 23) - 127);  // p_scale = 2^k, k in [0, 8]
  float bias[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    alpha[r] = sm[r].begin_tile(__fmul_rn(mx[r][0], s_scale));
    bias[r] = sm[r].bias(log2_p);
  }
#pragma unroll
  for (int nt = 0; nt < kBN / 8; ++nt)  // exp(S − m)·p_scale, in place
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[nt][e] = nt % 8 >= 8 - kPoly ? exp2_poly(__fmaf_rn(s[nt][e], c2, bias[e / 2]))
                                     : exp2_scaled(s[nt][e], c2, bias[e / 2]);
  if (check_mask) {  // a masked key is 0 whatever c2 is (−inf·c2 is NaN where c2 is 0 or NaN: an
                     // underflowed or NaN block scale must not reach rows that never see the block)
#pragma unroll
    for (int nt = 0; nt < kBN / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (masked(nt, e)) s[nt][e] = 0.0f;
  }
  float part[2] = {0.0f, 0.0f};  // this tile's Σ exp(S − m)·p_scale per row
#pragma unroll
  for (int kk = 0; kk < kBN / 32; ++kk)
#pragma unroll
    for (int ro = 0; ro < 2; ++ro) {
      float pair[4];  // n-tile 4kk + j: this row's two keys summed
#pragma unroll
      for (int j = 0; j < 4; ++j) pair[j] = s[4 * kk + j][2 * ro] + s[4 * kk + j][2 * ro + 1];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        pa[kk][2 * h + ro] =
            fp8x2(s[4 * kk + 2 * h][2 * ro], s[4 * kk + 2 * h][2 * ro + 1], false) |
            (fp8x2(s[4 * kk + 2 * h + 1][2 * ro], s[4 * kk + 2 * h + 1][2 * ro + 1], false) << 16);
      part[ro] += (pair[0] + pair[1]) + (pair[2] + pair[3]);
    }
#pragma unroll
  for (int ro = 0; ro < 2; ++ro) sm[ro].l += part[ro];
}

/// What a lane accumulates for its two rows over the key tiles: O and l̃ in code units (FP32, one
/// tile's tensor-core sums added per tile: α·acc + tile) and the rows' online softmax. O's codes
/// are those of the newest tile's V̂ (value = oacc · v_inv): with one V̂ scale per tensor always the
/// same; with one per 128-key block (flash_qkv_scales.cuh) a tile of another block rescales O by
/// the ratio of the two 1/scales together with α (o_alpha), no per-element multiply. Limits of
/// that choice (the CPU twin has neither): O's codes overflow FP32 only if two V̂ blocks' amaxes
/// differ by more than ~2^100 (O_acc ≤ l̃·448·amax_old/amax_new, l̃ ≤ p_scale·keys); a NaN or inf in
/// a V̂ block (scale NaN) makes O NaN in every row of a CTA that visits the block, where the twin
/// keeps the rows that do not see it finite (per tensor, every row is NaN in both).
template <int kD>
struct ForwardRows {
  float oacc[kD / 8][4];  ///< O's columns 8dn + 2t (+1) of rows g (e = 0, 1) and g + 8 (e = 2, 3)
  float lacc[1][4];       ///< l̃: every column of the P̃·1 product is the row sum (c0 g, c2 g + 8)
  float v_inv;            ///< 1/scale of the V̂ codes oacc is in
  RowSoftmax sm[2];

  /// v_inv0: the first key tile's V̂ 1/scale.
  __device__ __forceinline__ explicit ForwardRows(float v_inv0) : v_inv(v_inv0) {
#pragma unroll
    for (int dn = 0; dn < kD / 8; ++dn)
#pragma unroll
      for (int e = 0; e < 4; ++e) oacc[dn][e] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) lacc[0][e] = 0.0f;
  }
  /// O's factor for a tile whose V̂ has 1/scale v_tile: α·(v_inv / v_tile) (α itself when equal:
  /// x / x = 1 exactly), and O's codes become the tile's.
  __device__ __forceinline__ void o_alpha(const float (&alpha)[2], float v_tile, float (&ao)[2]) {
    const float ratio = __fdiv_rn(v_inv, v_tile);
    v_inv = v_tile;
#pragma unroll
    for (int r = 0; r < 2; ++r) ao[r] = __fmul_rn(alpha[r], ratio);
  }
  /// O's n-tile dn = α·O + the tile's P̃V̂ n-tile.
  __device__ __forceinline__ void add_pv(int dn, const float (&alpha)[2], const float (&pv)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) oacc[dn][e] = oacc[dn][e] * alpha[e / 2] + pv[e];
  }
  /// l̃ = α·l̃ + the tile's P̃·1.
  __device__ __forceinline__ void add_l(const float (&alpha)[2], const float (&ls)[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) lacc[0][e] = lacc[0][e] * alpha[e / 2] + ls[e];
  }

  /// The epilogue of rows i0 = (first row of the lane's warp) + g and i0 + 8: O =
  /// bf16_round(O_acc · v_inv / l̃) (0 in a row that sees no key), and from the lane with t = 0 the
  /// LSE = m + log l (−inf without keys), row_max = m, row_sum = l. l is the quad sum of the
  /// lanes' partial sums, taken by the whole warp before any row-dependent branch.
  __device__ __forceinline__ void store(const ForwardParams& p, int64_t bh, int64_t i0, int t) const {
    const float sv_inv = v_inv;
    float l[2];
    const float l_hat[2] = {lacc[0][0], lacc[0][2]};
#pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = quad_sum(sm[r].lane_sum(p.p_scale));
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = i0 + 8 * r;
      if (i >= p.Tq) continue;
      const float inv = l_hat[r] > 0.0f ? sv_inv / l_hat[r] : 0.0f;  // 0: a row that sees no key
      const int64_t at = act_row_offset(p.tokens_major, bh, i, p.H, p.Tq, kD) + 2 * t;
#pragma unroll
      for (int dn = 0; dn < kD / 8; ++dn) {
        const float x0 = bf16_round(oacc[dn][2 * r] * inv), x1 = bf16_round(oacc[dn][2 * r + 1] * inv);
        if (p.o_bf16)  // values already BF16: the same bits (a NaN stays a quiet NaN: fp8.h's rule)
          *reinterpret_cast<uint32_t*>(p.o_bf16 + at + 8 * dn) =
              uint32_t(bf16_from_float(x0)) | uint32_t(bf16_from_float(x1)) << 16;
        else
          *reinterpret_cast<float2*>(p.o + at + 8 * dn) = make_float2(x0, x1);
      }
      if (t == 0) {
        const float m = sm[r].m;
        p.lse[bh * p.Tq + i] = m == -INFINITY ? -INFINITY : m + logf(l[r]);
        p.row_max[bh * p.Tq + i] = m;
        p.row_sum[bh * p.Tq + i] = l[r];
      }
    }
  }
};

}  // namespace octet::cuda::flash
