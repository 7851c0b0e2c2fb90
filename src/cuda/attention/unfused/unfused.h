// src/cuda/attention/unfused/unfused.h — the non-GEMM kernels of the unfused CUDA attention
// (unfused.cpp): the forward softmax, the output normalization, the backward's per-row delta and
// dS, and the dS tile quantization. The operand packing, amax and un-padding copies shared with the
// flash form are glue/glue.h.
//
// Layouts (padded: Tq_p, Tk_p are the sequence lengths rounded up to 16, pads hold zeros):
//   row copies         [B, heads, T_p, D]
//   "group" transposes [B, G, D, rep·T_p]  (rep query heads of one KV head side by side along K:
//                                           the operand layout of the batched GQA GEMMs)
//   S, dP, dS          [B, H, Tq_p, Tk_p] FP32;   P̃ / dŜ rows the same, 1 or 2 bytes per element
//   P̃ᵀ, dŜᵀ            [B, G, Tk_p, rep·Tq_p]
// Element kinds: FP8 codes (1 byte), or BF16 bit patterns (2 bytes) of a value or of a decoded
// FP8 code without its scale (the scale is then applied after the GEMM).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "octet/attention.h"
#include "cuda/attention/glue/glue.h"
#include "octet/fp8.h"

namespace octet::cuda {

/// Forward softmax per query row: S (τ-scaled logits) -> lse, P̃ (FP8 codes of exp(S−m)·p_scale
/// with m the row max — never exp(S−L), which underflows in long rows — or BF16),
/// rinv = 1 / Σ_j P̃_ij (0 for a row that sees no key), so O = (P̃V̂)·rinv, and the softmax
/// statistics the backward normalizes with ([B,H,Tq] each): row_max m_i = max_j S_ij (−inf in a
/// row that sees no key) and row_sum l_i = Σ_j exp(S_ij − m_i) in FP32 (0 there); L = m + log l.
void softmax_forward_launch(const AttnDims& d, const float* S, bool fp8, float p_scale, void* P, float* lse,
                            float* rinv, float* row_max, float* row_sum, cudaStream_t s);
/// o = bf16_round(o_acc · rinv) for the valid rows, in d's layout (act_layout.h); also into o_saved
/// (may be null).
void output_finalize_launch(const AttnDims& d, const float* o_acc, const float* rinv, float* o,
                            float* o_saved, cudaStream_t s);

struct BackwardRowArgs {
  const float* S;  ///< recomputed τ-scaled logits
  float* dP;       ///< in: dP = dÔV̂ᵀ; out: dS = P ∘ (dP − D)
  /// the forward's softmax statistics [B,H,Tq] (softmax_forward_launch): P = exp(S − m) / l,
  /// which sums to 1 to FP32 rounding at any logit size (exp(S − L) only to one ulp of L)
  const float* row_max;
  const float* row_sum;
  const float* o;    ///< the forward's stored O [B,H,Tq,D] (stale delta)
  const float* d_o;  ///< dO as given [B,H,Tq,D] (stale delta)
  bool fp8;
  bool matched;
  float p_scale;
  void* P;            ///< out: P̃ rows (FP8 codes or BF16 of exp(S − m)), for dV
  double* residual;   ///< out: per row |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) (attention.h)
  float* row_factor;  ///< out [B,H,Tq]: 1/l_i (0 if the row sees no key):
                      ///< dV = P̃ᵀ (dO/l) needs dO_i · row_factor_i packed as its operand
};
/// dS = P ∘ (dP − D) per row, D by octet/delta_rule.h (stale or matched, the CPU's rule), the row
/// residual, dV's P̃ and the row factor.
void backward_rows_launch(const AttnDims& d, const BackwardRowArgs& a, cudaStream_t s);

/// dS -> dŜ rows and dŜᵀ (BF16, exact: FP8 values times a power-of-two scale per
/// (block_q x block_k) tile of one head, fp8.h scale_from_amax(pow2)); BF16 precision:
/// bf16_round. Also transposes the P̃ rows into P̃ᵀ (p_elem_bytes 1 or 2). block_q and block_k
/// must be multiples of 32. tile_amax: scratch of B·H·ceil(Tq/block_q)·ceil(Tk/block_k).
void ds_quantize_launch(const AttnDims& d, const float* dS, bool fp8, Format ds_format, int64_t block_q,
                        int64_t block_k, unsigned* tile_amax, uint16_t* ds_rows, uint16_t* ds_trans,
                        const void* P, void* P_trans, int p_elem_bytes, cudaStream_t s);

}  // namespace octet::cuda
