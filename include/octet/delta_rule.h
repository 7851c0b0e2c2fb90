// octet/delta_rule.h — the one rule for the softmax delta D_i of the attention backward, for host
// and device: the CPU reference (src/cpu/attention_*.cpp) and the CUDA kernels
// (src/cuda/attention/unfused/unfused_rows.cu) both form dS with it (docs/delta-matching.md, "The delta
// rule").
//
// dS_ij = P_ij (dP_ij − D_i), with
//   stale   (FlashAttention-2/3, cuDNN): D_i = dO_i·O_i from the forward's stored O.
//   matched (Delta-Matching, Tang et al., arXiv 2609.37852): D_i from this backward's own P and dP,
//           D_i = (Σ_j P_ij dP_ij) / (Σ_j P_ij), both sums accumulated in FP64 (any order, any
//           grouping) and the quotient rounded to the working type once.
// Why FP64 sums: then D_i carries one rounding, |δD| <= ε|D|, whatever the row's length, the
// sign mix of its terms or their spread (FP32 sums lose ε·n·Σ|P dP|, and cancellation in rows
// whose P mass sits on keys with dP = 0 left FP32-accumulated D wrong by more than D itself).
// Why the division by Σ P: the P a backward uses is exp(S − m)/l in FP32, whose row sums to 1 only
// to ~1e-7; Σ_j dS_ij = Σ P dP − D·Σ P is then 0 to the rounding of D and of the products, for
// the P actually used — the zero row sum the matched delta exists for. In exact arithmetic
// (Σ P = 1) it is the paper's D. A row that sees one key has P = 1 and gets dS = 0 exactly.
// The row residual |Σ_j dS_ij| / Σ_j P_ij (|dP_ij| + |D_i|) of this rule stays at a few ulps
// (tests/attention/delta_rule_test.cpp). One licensed shortcut, for speed: the Hopper wgmma
// pre-pass (src/cuda/attention/flash/flash_bwd_delta_sm90.cu) first sums 16 keys of a row in FP32 (≤ 5u·Σ|P
// dP| of that group, u = 2^-24, whatever the row's length) and adds those partials in FP64: its residual
// stays below 1e-6 of the same normalizer in every row (tested on the GPU), where whole-row FP32
// sums would not.
#pragma once

#include "octet/fp8.h"  // OCTET_HD

namespace octet {

/// The delta of one row; dS is formed from it.
template <typename T>
struct RowDelta {
  T value = 0;  ///< D_i

  /// Stale delta: D = dO_i·O_i (the given dO and the forward's stored O).
  static OCTET_HD RowDelta stale(T do_dot_o) { return RowDelta{do_dot_o}; }

  /// dS_ij = P_ij (dP_ij − D_i); a masked key (P = 0) gives 0.
  OCTET_HD T ds(T p, T dp) const { return p * (dp - value); }
};

/// The matched delta's two FP64 sums over a row's keys: Σ_j P_ij dP_ij and Σ_j P_ij. Add keys in
/// any order; join partial rows with +=. (Products of two FP32 values are exact in FP64.)
struct MatchedSums {
  double p_dp = 0.0, p = 0.0;

  OCTET_HD void add(double pj, double dpj) {
    p_dp += pj * dpj;
    p += pj;
  }
  OCTET_HD MatchedSums& operator+=(const MatchedSums& o) {
    p_dp += o.p_dp;
    p += o.p;
    return *this;
  }
  /// The matched delta D_i = Σ P dP / Σ P rounded to T once (0 for a row without keys).
  template <typename T>
  OCTET_HD RowDelta<T> delta() const {
    return RowDelta<T>{p > 0.0 ? T(p_dp / p) : T(0)};
  }
};

}  // namespace octet
