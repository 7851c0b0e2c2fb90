// src/cpu/attention_impl.h — internals shared by the CPU attention files (not a public header).
//
// The CPU attention is split by concept: attention_fp64.cpp (the FP64 oracle), attention_quant.cpp
// (how Q, K, V, P, dO and dS become FP8 or BF16), attention_whole.cpp (S materialized per row),
// attention_flash.cpp (online softmax over key blocks, FlashAttention-2, arXiv 2307.08691),
// attention_backward_tile.cpp (the dS tile step both backward forms share), attention.cpp (the
// public entry points), attention_diagnostics.cpp and attention_inputs.cpp (checks).
// Math and notation: ../../docs/delta-matching.md and docs/design.md §"The two deltas".
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
#include "octet/delta_rule.h"

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
/// dO [B, H, Tq, D] -> dÔ for dP = dÔV̂ᵀ (FP8: config.do_format, one current scale per tensor;
/// BF16; copy).
void round_do(const Problem& p, const float* d_o, float* do_hat);
/// dO [B, H, Tq, D] -> the dV operand: dO_i · row_factor[i] (row_factor = 1/l_i,
/// "P without underflow", docs/delta-matching.md), then rounded as round_do does, with its own
/// current scale per tensor (FP8), BF16, or unrounded in T (FP64). Rows that see no key have
/// row_factor 0.
template <typename T>
void round_do_dv(const Problem& p, const float* d_o, const T* row_factor, T* out);

/// P̃ of one row-max-relative value exp(S − m) in [0, 1] (never the normalized exp(S − L), whose
/// long flat rows fall below E4M3's range: docs/delta-matching.md): E4M3 with the static
/// power-of-two scale config.p_scale (exact dequantization), BF16, or unchanged for FP64.
template <typename T>
inline T round_p(const AttentionConfig& c, T x) {
  switch (c.precision) {
    case AttnPrecision::FP64:
      return x;
    case AttnPrecision::BF16:
      return T(bf16_round(float(x)));
    case AttnPrecision::FP8:
      return T(fp8_round(float(x) * c.p_scale, Format::E4M3) / c.p_scale);
  }
  return x;
}

/// The output O as stored by the forward: BF16 for the BF16 and FP8 precisions, unrounded (T =
/// double) for FP64.
template <typename T>
inline T store_o(const AttentionConfig& c, T x) {
  return c.precision == AttnPrecision::FP64 ? x : T(bf16_round(float(x)));
}

/// dS tile [rows, cols] (leading dimension ld) -> dŜ in place: FP8 with one power-of-two scale
/// from the tile's amax (config.ds_format), BF16, or unchanged for FP64.
template <typename T>
void round_ds_tile(const AttentionConfig& c, T* ds, int64_t rows, int64_t cols, int64_t ld);

// ---- small kernels: contiguous rows ----
template <typename T, typename A, typename B>
inline T dot(const A* a, const B* b, int64_t n) {
  T s = 0;
  for (int64_t c = 0; c < n; ++c) s += T(a[c]) * T(b[c]);
  return s;
}
template <typename T, typename X>
inline void axpy(T a, const X* x, T* y, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += a * T(x[c]);
}
template <typename T>
inline T exp_t(T x) {
  return std::exp(x);
}

// ---- forms (attention_whole.cpp, attention_flash.cpp) ----
/// Forward over operands already rounded: o [B,H,Tq,D] (as stored: store_o), and per row [B,H,Tq]
/// the lse L_i = m_i + log l_i, row_max m_i = max_j S_ij and row_sum l_i = Σ_j exp(S_ij − m_i)
/// (the unrounded P's sum in T), all in T. A row that sees no key gets O = 0, LSE = m = −inf,
/// l = 0.
template <typename T>
void forward_whole(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat, T* o, T* lse,
                   T* row_max, T* row_sum);
template <typename T>
void forward_flash(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat, T* o, T* lse,
                   T* row_max, T* row_sum);

/// What a backward reads, and where it writes. dq/dk/dv are T accumulators, zeroed by the caller.
template <typename T>
struct BackwardArgs {
  const float *q_hat, *k_hat, *v_hat, *d_o, *do_hat;
  const T *o, *row_max, *row_sum;  // the forward's O (as stored), m_i and l_i
  const T* do_dv;                  // dV's operand: dO_i / l_i rounded (round_do_dv)
  T *dq, *dk, *dv;
  // per (b, h, i) row: Σ_j dS_ij (before rounding) and Σ_j P_ij (|dP_ij| + |D_i|), the magnitude
  // of the terms P_ij dP_ij and P_ij D_i that the row sum cancels (the residual's denominator)
  double *res_sum, *res_mag;
  // per (b, h, i) row: Σ_j dŜ_ij of the rounded dS that dQ uses (the dQ row-sum projection's r̂_i,
  // AttentionConfig::dq_projection); null: not accumulated
  double* ds_row_sum = nullptr;
  // per (b, h, i) row [B,H,Tq,D]: k̄_i += Σ_j P_ij K̂_j, the attention-weighted mean key (the dQ bias
  // diagnostic's direction, attention.h AttentionStats::mean_key); null: not accumulated
  double* mean_key = nullptr;
};
template <typename T>
void backward_whole(const Problem& p, const BackwardArgs<T>& a);
template <typename T>
void backward_flash(const Problem& p, const BackwardArgs<T>& a);

/// The stale delta of row i (octet/delta_rule.h): D_i = dO_i·O_i, the given dO and the forward's O.
template <typename T>
inline RowDelta<T> stale_delta(const Problem& p, const BackwardArgs<T>& a, int64_t off) {
  return RowDelta<T>::stale(dot<T>(a.d_o + off, a.o + off, p.D));
}

/// The shared backward steps on one tile of one (b, h): query rows [i0, i1) x keys [j0, j1).
/// Row r of a tile lives at offset r * ld of its buffer.
///
/// compute_p_dp: E_ij = exp(S_ij − m_i) and P_ij = E_ij / l_i with S = τ Q̂K̂ᵀ and the forward's
/// saved (m_i, l_i) (never exp(S − L): its P sums to 1 only to one ulp of L, docs/delta-matching.md),
/// dP = dÔV̂ᵀ, and (if E is not null) E, the row-max-relative value dV's P̃ is rounded from;
/// masked keys and rows that see no key give P = dP = E = 0.
template <typename T>
void compute_p_dp(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0, int64_t i1,
                  int64_t j0, int64_t j1, T* P, T* dP, T* E, int64_t ld);

/// ds_step: dS = P ∘ (dP − D) with delta[r] the D of row i0 + r (octet/delta_rule.h); adds
/// Σ_j dS_ij (before rounding) and Σ_j P_ij (|dP_ij| + |D_i|) to the residual sums (and, if
/// a.mean_key, Σ_j P_ij K̂_j to k̄_i); rounds dS on
/// the tile's scale (round_ds_tile); and accumulates dV += P̃ᵀ(dO/l) with P̃ = round_p(E),
/// dK += τ dŜᵀQ̂, dQ += τ dŜK̂. ds is scratch of (i1 − i0) * (j1 − j0).
template <typename T>
void ds_step(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0, int64_t i1,
             int64_t j0, int64_t j1, const T* P, const T* dP, const T* E, int64_t ld,
             const RowDelta<T>* delta, T* ds);

}  // namespace octet::attn
