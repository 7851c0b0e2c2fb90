// octet/recurrent.h — the recurrent token mixer of the hybrid model: Gated DeltaNet (Yang, Kautz,
// Hatamizadeh, "Gated Delta Networks: Improving Mamba2 with Delta Rule", arXiv 2412.06464), its
// naive sequential recurrence (the FP64 reference) and its chunked form (the paper's §3.3, the WY
// representation with the UT transform, which parallel training uses), forward and backward, on
// the CPU. (docs/training.md §"The model", "Hybrid: Gated DeltaNet")
//
// One head, positions t = 1..T, state S_t ∈ R^{d_k×d_v} (row-major [d_k][d_v]), S_0 = 0:
//   S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ,      o_t = scale · S_tᵀ q_t,
// with α_t = exp(g_t) ∈ (0, 1] (g_t ≤ 0 is the log decay) and β_t ∈ [0, 1] the writing strength.
// The paper writes the transposed state, S_t = S_{t−1} α_t (I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ ∈
// R^{d_v×d_k} with o_t = S_t q_t; the two are the same recurrence (transpose both sides). The
// delta rule is stable when ‖k_t‖ = 1 (I − β k kᵀ is then a contraction): callers L2-normalize k
// (and q); the functions here take k as given.
//
// Chunked form (chunks of C positions, positions r = 1..C inside a chunk, γ_r = Σ_{i≤r} g_i, Γ_r =
// exp(γ_r), S_0 the state entering the chunk): unrolling the recurrence gives
//   S_r = Γ_r S_0 + Σ_{i≤r} e^{γ_r − γ_i} k_i δ_iᵀ  with  (I + A) Δ = diag(β) V − diag(βΓ) K S_0,
//   A_ri = β_r e^{γ_r − γ_i} k_rᵀ k_i (i < r; strictly lower), so Δ = T(βV) − T(βΓK) S_0 = U − W S_0
// with T = (I + A)^{-1} the UT transform of the paper (applied here by forward substitution,
// which is the same product without forming T). Then per chunk
//   O = scale · (diag(Γ) Q S_0 + (QKᵀ ⊙ M) Δ),   M_ri = e^{γ_r − γ_i} for i ≤ r, else 0,
//   S_C = Γ_C S_0 + Kᵀ diag(e^{γ_C − γ}) Δ.
// The backward walks the chunks in reverse with the gradient of the entering state and
// differentiates these matrix forms (dR = (I + A)^{-T} dΔ, dA = −dR Δᵀ on the strict lower part);
// it recomputes the chunk-entering states with a state-only forward pass. Every exponent is a
// difference γ_r − γ_i ≤ 0 of cumulative log decays, so nothing overflows for any g ≤ 0.
//
// Layouts (one contiguous block per (batch, head), as attention.h): q, k [B, H, T, d_k];
// v, o [B, H, T, d_v]; g, beta [B, H, T]. Gradients have the layouts of their inputs and are
// overwritten. Errors: octet::Error naming the argument (shape sizes < 1, chunk < 1, a null
// pointer). The functions do not check g ≤ 0 or β ∈ [0, 1]: the recurrence is defined for any
// values, only its stability needs them.
#pragma once

#include <cmath>
#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet {

/// Sizes of one Gated DeltaNet call (every head has its own state; no head sharing).
struct GatedDeltaShape {
  int64_t batch = 1, heads = 1, seq = 1, dk = 1, dv = 1;
  /// Throws octet::Error naming the first size < 1 (src/core/gated_delta_rules.cpp).
  void validate() const;
};

/// Read-only inputs, layouts above.
template <typename T>
struct GatedDeltaInputs {
  const T *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
  T scale = 1;  ///< o_t = scale · S_tᵀ q_t
};

/// Gradients of the inputs (overwritten), layouts of the inputs.
template <typename T>
struct GatedDeltaGrads {
  T *dq = nullptr, *dk = nullptr, *dv = nullptr, *dg = nullptr, *dbeta = nullptr;
};

/// The naive sequential recurrence in FP64: o [B, H, T, d_v] written. The reference.
void gated_delta_naive_forward(const GatedDeltaShape& shape, const GatedDeltaInputs<double>& in, double* o);
/// Its reverse-mode gradient given d_o [B, H, T, d_v] (stores every S_t: O(T d_k d_v) memory per
/// head; for tests).
void gated_delta_naive_backward(const GatedDeltaShape& shape, const GatedDeltaInputs<double>& in,
                                const double* d_o, const GatedDeltaGrads<double>& grads);

/// The chunked (WY/UT) form above, chunks of `chunk` positions (the last one may be shorter).
/// T = float (the CPU backend) or double (tests). Equals the naive recurrence up to rounding.
template <typename T>
void gated_delta_chunked_forward(const GatedDeltaShape& shape, const GatedDeltaInputs<T>& in, int64_t chunk,
                                 T* o);
template <typename T>
void gated_delta_chunked_backward(const GatedDeltaShape& shape, const GatedDeltaInputs<T>& in, int64_t chunk,
                                  const T* d_o, const GatedDeltaGrads<T>& grads);

/// The gates of the model's Gated DeltaNet layers from two raw projections a, b (one value per
/// token and head): β = σ(b) (the paper), and the log decay g = log σ(a) / kGateTemperature — the
/// sigmoid gate with temperature of Gated Linear Attention (Yang et al., arXiv 2312.06635), so that
/// α = σ(a)^{1/16} starts near 1 (0.958 at a = 0) and g ≤ 0 always.
inline constexpr double kGateTemperature = 16.0;
/// Header-only and usable in CUDA device code (OCTET_HD): the CPU and CUDA backends share it.
struct GateValues {
  double g, beta;          ///< log decay, writing strength
  double dg_da, dbeta_db;  ///< derivatives for the backward
};
OCTET_HD GateValues gated_delta_gates(double a, double b) {
  // log σ(a) = −softplus(−a), written to stay finite for any a; d/da log σ(a) = σ(−a).
  const double log_sig = a >= 0 ? -::log1p(::exp(-a)) : a - ::log1p(::exp(a));
  const double sig_neg_a = 1.0 / (1.0 + ::exp(a));
  const double beta = 1.0 / (1.0 + ::exp(-b));
  return {log_sig / kGateTemperature, beta, sig_neg_a / kGateTemperature, beta * (1.0 - beta)};
}

}  // namespace octet
