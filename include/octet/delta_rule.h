// octet/delta_rule.h — the one rule for the softmax delta D_i of the attention backward, for host
// and device: the CPU reference (src/cpu/attention_*.cpp) and the CUDA kernels
// (src/cuda/attention_kernels.cu) both form dS with it (docs/delta-matching.md, "The delta rule").
//
// dS_ij = P_ij (dP_ij − D_i), with D_i held as pivot + offset and dS formed as
// P_ij ((dP_ij − pivot) − offset):
//   stale   (FlashAttention-2/3, cuDNN): pivot = dO_i·O_i from the forward's O, offset = 0.
//   matched (Delta-Matching, Tang et al., arXiv 2609.37852): D_i = Σ_j P_ij dP_ij from this
//           backward's own P and dP, with offset = Σ_j P_ij (dP_ij − pivot) and
//           pivot = dP_ij* if one key j* holds P_ij* > 1/2 (at most one can), else dÔ_i·O_i.
// Why a pivot: computing dP − D directly loses the zero row sum of dS to the FP32 rounding of D
// wherever Σ_j |dS_ij| ≪ |D|. A pivot close to D moves the cancellation onto small differences:
// dÔ_i·O_i differs from D only by the forward's rounding, and in a nearly one-hot row (attention
// sinks, the first causal row that sees one key, outlier logits) dP_ij* makes the dominant term
// exactly 0 — a row with one key gets dS = 0 exactly, whatever the rounding of its P. Then
// Σ_j dS_ij = offset · (1 − Σ_j P_ij) stays at the rounding level of the small offset.
//
// The matched delta of a row is a reduction over its keys in any order or grouping: `add` takes
// one key, `merge` joins two partial rows (CPU: keys in order; GPU: per-thread partials, then a
// warp butterfly and a block reduction). `merge` is commutative bit for bit (a butterfly's two
// lanes get identical results) and gives the same pivot whatever the grouping: the key with the
// largest P above 1/2, the lowest key index on ties.
#pragma once

#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD

namespace octet {

template <typename T>
struct RowDelta {
  T pivot = 0, offset = 0;   ///< D = pivot + offset
  T p_pivot = 0, p_sum = 0;  ///< matched partials: P of the pivot key (1/2 at the start), Σ P
  int64_t key = -1;          ///< the pivot key, −1 while the pivot is dÔ·O

  /// Stale delta: D = dO_i·O_i (the given dO and the forward's stored O).
  static OCTET_HD RowDelta stale(T do_dot_o) { return {do_dot_o, T(0), T(0), T(0), -1}; }
  /// Start of a matched delta: pivot dÔ_i·O_i (the backward's quantized dO), no key yet. A key
  /// becomes the pivot only with P > 1/2 (strictly: the start wins ties, having index −1).
  static OCTET_HD RowDelta matched_start(T dohat_dot_o) {
    return {dohat_dot_o, T(0), T(0.5), T(0), -1};
  }

  /// Joins two partial matched deltas of one row (same start pivot, disjoint key sets). The
  /// winner's pivot is kept; the loser's offset Σ P (dP − loser pivot) is moved onto it by
  /// (loser pivot − winner pivot) · Σ P of the loser (skipped when that Σ P is 0, so an infinite
  /// start pivot of a row without keys never makes a NaN).
  static OCTET_HD RowDelta merge(const RowDelta& a, const RowDelta& b) {
    const bool a_wins = a.p_pivot > b.p_pivot || (a.p_pivot == b.p_pivot && a.key <= b.key);
    const RowDelta& w = a_wins ? a : b;
    const RowDelta& l = a_wins ? b : a;
    RowDelta r = w;
    r.offset = w.offset + l.offset;
    if (l.p_sum != T(0)) r.offset += (l.pivot - w.pivot) * l.p_sum;
    r.p_sum = w.p_sum + l.p_sum;
    return r;
  }

  /// Adds key j with P_ij = p and dP_ij = dp to a matched delta: merge with a one-key partial.
  OCTET_HD void add(T p, T dp, int64_t j) { *this = merge(*this, RowDelta{dp, T(0), p, p, j}); }

  /// D_i = pivot + offset (for diagnostics: the |D_i| of the row residual's denominator).
  OCTET_HD T value() const { return pivot + offset; }

  /// dS_ij = P_ij ((dP_ij − pivot) − offset); a masked key (P = 0) gives 0.
  OCTET_HD T ds(T p, T dp) const { return p * ((dp - pivot) - offset); }
};

}  // namespace octet
