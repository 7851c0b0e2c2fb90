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
// The pivot key: of the keys with P > 1/2, the one with the largest P, the lowest key index on
// ties (`beats`). Two equivalent ways to compute a matched delta, the same pivot and the same D up
// to the FP32 order of the offset's sum:
//   - one pass (CPU, in key order, and the tiled form's online pre-pass): `add` takes one key,
//     `merge` joins two partial rows; the pivot can change midway, and the loser's offset is moved
//     onto the winner's pivot. `merge` is commutative bit for bit and finds the same pivot in any
//     grouping.
//   - two phases (the CUDA row kernel): first the pivot key, as the max of `pivot_rank` over the
//     row (a plain integer max, no merge); then `matched(...)` and the offset as a plain sum of
//     `term(P_ij, dP_ij, pivot)` over the row in any order (the pivot key's own term is exactly 0).
#pragma once

#include <cstdint>

#include "octet/fp8.h"  // OCTET_HD, detail::f32_bits

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
  /// Two-phase form: the matched delta around a pivot found beforehand — key j* (P = p_key,
  /// dP = dp_key) or, with key = −1, the start pivot dÔ_i·O_i. The caller sets `offset` to
  /// Σ_j term(P_ij, dP_ij, pivot); p_sum is not tracked (the row's reduction is already done).
  static OCTET_HD RowDelta matched(T dohat_dot_o, int64_t key, T p_key, T dp_key) {
    return key >= 0 ? RowDelta{dp_key, T(0), p_key, T(0), key} : matched_start(dohat_dot_o);
  }

  /// Whether pivot candidate (P = pa, key ka) beats (pb, kb): the larger P, the lower key on ties.
  static OCTET_HD bool beats(T pa, int64_t ka, T pb, int64_t kb) {
    return pa > pb || (pa == pb && ka <= kb);
  }
  /// One key's term of the offset, P·(dP − pivot); also the shift of a partial row's offset onto
  /// another pivot (P = the partial's Σ P, dP = its pivot).
  static OCTET_HD T term(T p, T dp, T pivot) { return p * (dp - pivot); }

  /// Joins two partial matched deltas of one row (same start pivot, disjoint key sets). The
  /// winner's pivot is kept; the loser's offset Σ P (dP − loser pivot) is moved onto it by
  /// (loser pivot − winner pivot) · Σ P of the loser (skipped when that Σ P is 0, so an infinite
  /// start pivot of a row without keys never makes a NaN). Selects by value, not by reference
  /// (a selected reference puts both operands in GPU local memory).
  static OCTET_HD RowDelta merge(const RowDelta& a, const RowDelta& b) {
    const bool a_wins = beats(a.p_pivot, a.key, b.p_pivot, b.key);
    RowDelta r = a_wins ? a : b;
    const RowDelta l = a_wins ? b : a;
    r.offset = r.offset + l.offset;
    if (l.p_sum != T(0)) r.offset += term(l.p_sum, l.pivot, r.pivot);
    r.p_sum = r.p_sum + l.p_sum;
    return r;
  }

  /// Adds key j with P_ij = p and dP_ij = dp to a matched delta: merge with a one-key partial.
  OCTET_HD void add(T p, T dp, int64_t j) { *this = merge(*this, RowDelta{dp, T(0), p, p, j}); }

  /// D_i = pivot + offset (for diagnostics: the |D_i| of the row residual's denominator).
  OCTET_HD T value() const { return pivot + offset; }

  /// dS_ij = P_ij ((dP_ij − pivot) − offset); a masked key (P = 0) gives 0.
  OCTET_HD T ds(T p, T dp) const { return p * ((dp - pivot) - offset); }
};

/// Two-phase form, phase one: the rank of key j (0 <= j < 2^32, P_ij = p in FP32) as the pivot.
/// 0 if p <= 1/2 (or NaN): not a candidate. Otherwise a number whose order is `beats`' order
/// (P's bits, positive floats ordering like integers, then the complement of j, so the lower key
/// ranks higher on ties): the max over a row, in any grouping, is the pivot key's rank.
OCTET_HD uint64_t pivot_rank(float p, int64_t j) {
  return p > 0.5f ? (uint64_t(detail::f32_bits(p)) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(j))
                  : uint64_t(0);
}
/// The key of a row's max pivot_rank, −1 if the row has none (the pivot is then dÔ_i·O_i).
OCTET_HD int64_t pivot_key(uint64_t rank) {
  return rank ? int64_t(0xFFFFFFFFu - uint32_t(rank & 0xFFFFFFFFu)) : int64_t(-1);
}
/// The P of a row's max pivot_rank (meaningful only if pivot_key(rank) >= 0).
OCTET_HD float pivot_p(uint64_t rank) { return detail::f32_from_bits(uint32_t(rank >> 32)); }

}  // namespace octet
