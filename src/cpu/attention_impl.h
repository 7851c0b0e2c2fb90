// src/cpu/attention_impl.h — internals shared by the CPU attention files (not a public header).
//
// The CPU attention is split by concept: attention_fp64.cpp (the FP64 oracle), attention_quant.cpp
// (how Q, K, V, P, dO and dS become FP8 or BF16), attention_whole.cpp (S materialized per row),
// attention_tiled.cpp (online softmax over key blocks, FlashAttention-2, arXiv 2307.08691),
// attention_backward_tile.cpp (the dS tile step both backward forms share), attention.cpp (the
// public entry points), attention_diagnostics.cpp and attention_inputs.cpp (checks).
// Math and notation: ../../docs/delta-matching.md and DESIGN.md §3.
//
// Every form is a template over the arithmetic type T: float for the BF16 and FP8 precisions
// ("FP32 accumulation"), double for FP64. Operands are always float arrays (the quantized values
// are floats); T is the type every product, sum, exp and log is computed in.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "octet/attention.h"

namespace octet::attn {

/// One problem: the shape with τ resolved, and the precision's rounding rules.
struct Problem {
  int64_t B, H, G, Tq, Tk, D, group;  // group = H / G query heads per KV head
  bool causal;
  double tau;
  AttentionConfig cfg;

  Problem(const AttentionShape& s, const AttentionConfig& c);
  /// Keys query row i sees: [0, visible(i)). Causal is aligned to the bottom-right.
  int64_t visible(int64_t i) const {
    if (!causal) return Tk;
    const int64_t n = i + Tk - Tq + 1;
    return n < 0 ? 0 : (n > Tk ? Tk : n);
  }
  // Offsets of the (b, h) query head and of the KV head it reads.
  int64_t q_off(int64_t b, int64_t h) const { return (b * H + h) * Tq * D; }
  int64_t kv_off(int64_t b, int64_t h) const { return (b * G + h / group) * Tk * D; }
  int64_t row_off(int64_t b, int64_t h) const { return (b * H + h) * Tq; }
};

// ---- rounding of the operands a tensor core would see (attention_quant.cpp) ----

/// Q, K or V [B, heads, T, D] -> its quantize-dequantize (E4M3 per tensor or per (b, head,
/// 128-token block) for FP8, BF16 rounding for BF16, a copy for FP64).
void round_qkv(const Problem& p, const float* x, int64_t heads, int64_t seq, float* x_hat);
/// dO [B, H, Tq, D] -> dÔ (FP8: config.do_format, one current scale per tensor; BF16; copy).
void round_do(const Problem& p, const float* d_o, float* do_hat);

/// P̃ of one probability (or unnormalized exp(S − m)) in [0, 1]: E4M3 with the static
/// power-of-two scale config.p_scale (exact dequantization), BF16, or unchanged for FP64.
template <typename T>
inline T round_p(const AttentionConfig& c, T x) {
  switch (c.precision) {
    case AttnPrecision::FP64: return x;
    case AttnPrecision::BF16: return T(bf16_round(float(x)));
    case AttnPrecision::FP8:
      return T(fp8_round(float(x) * c.p_scale, Format::E4M3) / c.p_scale);
  }
  return x;
}

/// The output O as stored by the forward: BF16 for the BF16 and FP8 precisions, FP32 for FP64.
template <typename T>
inline float store_o(const AttentionConfig& c, T x) {
  return c.precision == AttnPrecision::FP64 ? float(x) : bf16_round(float(x));
}

/// dS tile [rows, cols] (leading dimension ld) -> dŜ in place: FP8 with one power-of-two scale
/// from the tile's amax (config.ds_format), BF16, or unchanged for FP64.
template <typename T>
void round_ds_tile(const AttentionConfig& c, T* ds, int64_t rows, int64_t cols, int64_t ld);

// ---- small kernels: contiguous rows ----
template <typename T>
inline T dot(const float* a, const float* b, int64_t n) {
  T s = 0;
  for (int64_t c = 0; c < n; ++c) s += T(a[c]) * T(b[c]);
  return s;
}
template <typename T>
inline void axpy(T a, const float* x, T* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a * T(x[c]);
}
template <typename T>
inline T exp_t(T x) {
  return std::exp(x);
}

// ---- forms (attention_whole.cpp, attention_tiled.cpp) ----
/// Forward over operands already rounded: o [B,H,Tq,D] (as stored), lse [B,H,Tq] in T.
template <typename T>
void forward_whole(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat,
                   float* o, T* lse);
template <typename T>
void forward_tiled(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat,
                   float* o, T* lse);

/// What a backward reads, and where it writes. dq/dk/dv are T accumulators, zeroed by the caller.
template <typename T>
struct BackwardArgs {
  const float *q_hat, *k_hat, *v_hat, *o, *d_o, *do_hat;
  const T* lse;
  T *dq, *dk, *dv;
  // per (b, h, i) row: Σ_j dS_ij (before rounding) and Σ_j P_ij (|dP_ij| + |D_i|), the magnitude
  // of the terms P_ij dP_ij and P_ij D_i that the row sum cancels (the residual's denominator)
  double *res_sum, *res_mag;
};
template <typename T>
void backward_whole(const Problem& p, const BackwardArgs<T>& a);
template <typename T>
void backward_tiled(const Problem& p, const BackwardArgs<T>& a);

/// Stale delta of one row: D_i = Σ_c dO_ic O_ic from the forward's stored O.
template <typename T>
inline T stale_delta(const float* d_o_row, const float* o_row, int64_t d) {
  return dot<T>(d_o_row, o_row, d);
}

/// The delta of one row, held as D = pivot + offset; ds_step forms dS_ij = P_ij((dP_ij − pivot) −
/// offset).
///   stale:   pivot = dO_i·O_i, offset = 0.
///   matched: offset = Σ_j P_ij (dP_ij − pivot), i.e. D = Σ_j P_ij dP_ij when Σ_j P_ij = 1, with
///            pivot = dP_ij* if one key j* has P_ij* > 1/2 (at most one can), else dÔ_i·O_i
///            (matched_start, then add_matched one key at a time).
/// Why a pivot: computing dP − D directly loses the zero row sum of dS to the FP32 rounding of D
/// wherever Σ_j |dS_ij| ≪ |D|. A pivot close to D moves the cancellation onto small differences:
/// dÔ_i·O_i differs from D only by the forward's rounding, and in a nearly one-hot row
/// (attention sinks, first causal rows, outlier logits) dP_ij* makes the dominant term exactly 0.
/// Then Σ_j dS_ij = offset · (1 − Σ_j P_ij) stays at rounding level of the small offset.
template <typename T>
struct RowDelta {
  T pivot = 0, offset = 0;
  T p_pivot = 0, p_sum = 0;  // matched accumulation state: P of the pivot key, Σ P so far

  static RowDelta matched_start(T do_dot_o) { return {do_dot_o, T(0), T(0.5), T(0)}; }

  /// Adds key j (P_ij = pr, dP_ij = dpr) to a matched delta; a switch of the pivot keeps
  /// offset = Σ P (dP − pivot) by adding (old − new pivot) · Σ P so far.
  void add_matched(T pr, T dpr) {
    if (pr > p_pivot) {
      offset += (pivot - dpr) * p_sum;
      pivot = dpr;
      p_pivot = pr;
    }
    offset += pr * (dpr - pivot);
    p_sum += pr;
  }
};

/// The shared backward steps on one tile of one (b, h): query rows [i0, i1) x keys [j0, j1).
/// Row r of a tile lives at offset r * ld of its buffer.
///
/// compute_p_dp: P_ij = exp(S_ij − L_i) with S = τ Q̂K̂ᵀ (recomputed from the saved LSE) and
/// dP = dÔV̂ᵀ; masked keys and rows that see no key give P = dP = 0.
template <typename T>
void compute_p_dp(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0,
                  int64_t i1, int64_t j0, int64_t j1, T* P, T* dP, int64_t ld);

/// ds_step: dS = P ∘ (dP − D) with delta[r] the D of row i0 + r (see RowDelta, D = pivot + offset);
/// adds Σ_j dS_ij (before rounding) and Σ_j P_ij (|dP_ij| + |D_i|) to the residual sums; rounds dS
/// on the tile's scale (round_ds_tile); and
/// accumulates dV += P̃ᵀdÔ, dK += τ dŜᵀQ̂, dQ += τ dŜK̂. ds is scratch of (i1 − i0) * (j1 − j0).
template <typename T>
void ds_step(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0,
             int64_t i1, int64_t j0, int64_t j1, const T* P, const T* dP, int64_t ld,
             const RowDelta<T>* delta, T* ds);

}  // namespace octet::attn
