// src/cpu/attention_flash.cpp — the flash-flash form: what a flash FP8 attention kernel computes,
// and what the GPU kernels are checked against (FlashAttention-2, Dao, arXiv 2307.08691; the FP8
// P of FlashAttention-3, Shah et al., arXiv 2407.08608).
//
// Forward: online softmax over key blocks of block_k. Per block, m_new = max(m, rowmax S),
// everything so far is rescaled by exp(m − m_new), and P̃ = round(exp(S − m_new)) (unnormalized,
// in [0, 1], E4M3 with the static scale) multiplies V̂. Two row sums are carried: ℓ̃ = Σ P̃ (the
// same rounded P that multiplies V) normalizes O, so V = 1 gives O = 1 exactly; ℓ = Σ exp(S − m)
// in FP32 (the online running sum) is saved with the final m, and the backward's
// P = exp(S − m) / ℓ sums to 1 to FP32 rounding at any logit size (the matched delta's rule
// divides by that sum all the same: delta_rule.h; LSE = m + log ℓ is an output only).
// The backward's P̃ for dV is rounded from exp(S − m), its row factor 1/ℓ moved into dO
// (docs/delta-matching.md).
// Backward: key blocks outer, query blocks inner (FlashAttention-2, Algorithm 2). The delta is
// stale (D_i = dO_i·O_i, a per-row pre-pass as in FlashAttention) or matched (Delta-Matching: a
// pre-pass over all key blocks recomputes S, P and dP and sums Σ_j P_ij dP_ij / Σ_j P_ij, the extra
// cost of matching). Each tile then runs the shared step (attention_backward_tile.cpp).
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/attention_impl.h"

namespace octet::attn {

template <typename T>
void forward_flash(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat, T* o, T* lse,
                   T* row_max, T* row_sum) {
  const int64_t bc = p.cfg.block_k;
  std::vector<T> s(bc), acc(p.D);
  const T tau = T(p.tau);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const float* Q = q_hat + p.q_off(b, h);
      const float* K = k_hat + p.kv_off(b, h);
      const float* V = v_hat + p.kv_off(b, h);
      for (int64_t i = 0; i < p.Tq; ++i) {
        T* orow = o + p.q_off(b, h) + i * p.D;
        T& lse_i = lse[p.row_off(b, h) + i];
        T& m_i = row_max[p.row_off(b, h) + i];
        T& l_i = row_sum[p.row_off(b, h) + i];
        const int64_t n = p.visible(i);
        if (n == 0) {
          std::fill(orow, orow + p.D, T(0));
          lse_i = m_i = neg_inf;
          l_i = 0;
          continue;
        }
        T m = neg_inf, l = 0, l_hat = 0;
        std::fill(acc.begin(), acc.end(), T(0));
        for (int64_t j0 = 0; j0 < n; j0 += bc) {
          const int64_t j1 = std::min(n, j0 + bc);  // keys >= n are masked: exp(−inf) = 0
          T m_new = m;
          for (int64_t j = j0; j < j1; ++j) {
            s[j - j0] = tau * dot<T>(Q + i * p.D, K + j * p.D, p.D);
            m_new = std::max(m_new, s[j - j0]);
          }
          const T alpha = m == neg_inf ? T(0) : exp_t<T>(m - m_new);
          l *= alpha;
          l_hat *= alpha;
          for (auto& x : acc) x *= alpha;
          for (int64_t j = j0; j < j1; ++j) {
            const T e = exp_t<T>(s[j - j0] - m_new);
            l += e;
            const T pt = round_p(p.cfg, e);
            l_hat += pt;
            axpy<T>(pt, V + j * p.D, acc.data(), p.D);
          }
          m = m_new;
        }
        const T inv = l_hat > 0 ? T(1) / l_hat : T(0);
        for (int64_t c = 0; c < p.D; ++c) orow[c] = store_o(p.cfg, acc[c] * inv);
        lse_i = m + std::log(l);
        m_i = m;
        l_i = l;
      }
    }
}

template <typename T>
void backward_flash(const Problem& p, const BackwardArgs<T>& a) {
  const int64_t bq = p.cfg.block_q, bc = p.cfg.block_k;
  std::vector<T> P(bq * bc), dP(bq * bc), E(bq * bc), ds(bq * bc);
  std::vector<RowDelta<T>> delta(p.Tq);
  std::vector<MatchedSums> sums(p.Tq);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      // Pre-pass: the delta of every row of this head. Stale: D_i = dO_i·O_i. Matched: one more
      // sweep over all key blocks recomputes P and dP and accumulates Σ_j P_ij dP_ij and Σ_j P_ij
      // in FP64 (octet/delta_rule.h) — the extra cost of Delta-Matching.
      if (p.cfg.delta == DeltaMode::Stale) {
        for (int64_t i = 0; i < p.Tq; ++i) delta[i] = stale_delta(p, a, p.q_off(b, h) + i * p.D);
      } else {
        std::fill(sums.begin(), sums.end(), MatchedSums{});
        for (int64_t i0 = 0; i0 < p.Tq; i0 += bq) {
          const int64_t i1 = std::min(p.Tq, i0 + bq);
          for (int64_t j0 = 0; j0 < p.visible(i1 - 1); j0 += bc) {
            const int64_t j1 = std::min(p.Tk, j0 + bc);
            compute_p_dp(p, a, b, h, i0, i1, j0, j1, P.data(), dP.data(), (T*)nullptr, bc);
            for (int64_t i = i0; i < i1; ++i)
              for (int64_t j = 0; j < j1 - j0; ++j) sums[i].add(P[(i - i0) * bc + j], dP[(i - i0) * bc + j]);
          }
        }
        for (int64_t i = 0; i < p.Tq; ++i) delta[i] = sums[i].delta<T>();
      }
      // Main pass: key blocks outer (a GPU thread block owns dK_j, dV_j), query blocks inner.
      for (int64_t j0 = 0; j0 < p.Tk; j0 += bc) {
        const int64_t j1 = std::min(p.Tk, j0 + bc);
        for (int64_t i0 = 0; i0 < p.Tq; i0 += bq) {
          const int64_t i1 = std::min(p.Tq, i0 + bq);
          if (p.visible(i1 - 1) <= j0) continue;  // tile fully masked
          compute_p_dp(p, a, b, h, i0, i1, j0, j1, P.data(), dP.data(), E.data(), bc);
          ds_step(p, a, b, h, i0, i1, j0, j1, P.data(), dP.data(), E.data(), bc, delta.data() + i0,
                  ds.data());
        }
      }
    }
}

template void forward_flash<float>(const Problem&, const float*, const float*, const float*, float*, float*,
                                   float*, float*);
template void forward_flash<double>(const Problem&, const float*, const float*, const float*, double*,
                                    double*, double*, double*);
template void backward_flash<float>(const Problem&, const BackwardArgs<float>&);
template void backward_flash<double>(const Problem&, const BackwardArgs<double>&);

}  // namespace octet::attn
