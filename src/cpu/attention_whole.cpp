// src/cpu/attention_whole.cpp — the whole-row form of FP8/BF16/FP64 attention: each query row's
// logits S are materialized with their max m and log-sum-exp L, and P̃ is rounded from the
// row-max-relative exp(S − m) <= 1 (never from exp(S − L), whose long flat rows fall below E4M3's
// range); O = Σ P̃ V̂ / Σ P̃ (docs/design.md §"The two deltas", forward steps 2–4; docs/delta-matching.md). The
// backward materializes P and dP for a block of block_q rows over all keys, takes the delta from those rows
// (stale: the forward's O; matched: the very P and dP, Delta-Matching, arXiv 2609.37852) and runs the shared
// tile step over key blocks. Both run their independent heads on the CPU backend's threads (parallel.h):
// bitwise as serial.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/attention_impl.h"
#include "cpu/parallel.h"

namespace octet::attn {

template <typename T>
void forward_whole(const Problem& p, const float* q_hat, const float* k_hat, const float* v_hat, T* o, T* lse,
                   T* row_max, T* row_sum) {
  const T tau = T(p.tau);
  cpu::parallel_for(p.B * p.H, [&](int64_t bh) {  // each (b, h) writes its own rows of o and the stats
    const int64_t b = bh / p.H, h = bh % p.H;
    std::vector<T> s(p.Tk), acc(p.D);
    const float* Q = q_hat + p.q_off(b, h);
    const float* K = k_hat + p.kv_off(b, h);
    const float* V = v_hat + p.kv_off(b, h);
    for (int64_t i = 0; i < p.Tq; ++i) {
      T* orow = o + p.q_off(b, h) + i * p.D;
      T& lse_i = lse[p.row_off(b, h) + i];
      T& m_i = row_max[p.row_off(b, h) + i];
      T& l_i = row_sum[p.row_off(b, h) + i];
      const int64_t n = p.visible(i);
      if (n == 0) {  // a row that sees no key: O = 0, LSE = m = −inf, l = 0
        std::fill(orow, orow + p.D, T(0));
        lse_i = m_i = -std::numeric_limits<T>::infinity();
        l_i = 0;
        continue;
      }
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        s[j] = tau * dot<T>(Q + i * p.D, K + j * p.D, p.D);
        m = std::max(m, s[j]);
      }
      T l = 0;  // Σ exp(S − m) of the unrounded P: saved, the backward's P = exp(S − m) / l
      for (int64_t j = 0; j < n; ++j) l += exp_t<T>(s[j] - m);
      const T L = m + std::log(l);
      std::fill(acc.begin(), acc.end(), T(0));
      T l_hat = 0;  // Σ P̃: O is normalized by the same rounded P that multiplies V
      for (int64_t j = 0; j < n; ++j) {
        const T pt = round_p(p.cfg, exp_t<T>(s[j] - m));  // row-max-relative: no underflow
        l_hat += pt;
        axpy<T>(pt, V + j * p.D, acc.data(), p.D);
      }
      const T inv = l_hat > 0 ? T(1) / l_hat : T(0);
      for (int64_t c = 0; c < p.D; ++c) orow[c] = store_o(p.cfg, acc[c] * inv);
      lse_i = L;
      m_i = m;
      l_i = l;
    }
  });
}

template <typename T>
void backward_whole(const Problem& p, const BackwardArgs<T>& a) {
  const int64_t bq = std::min(p.cfg.block_q, p.Tq), bc = p.cfg.block_k;
  // One item per (b, KV head): the query heads that share it add to its dK, dV in the serial order.
  cpu::parallel_for(p.B * p.G, [&](int64_t bg) {
    std::vector<T> P(bq * p.Tk), dP(bq * p.Tk), E(bq * p.Tk), ds(bq * bc);
    std::vector<RowDelta<T>> delta(bq);
    const int64_t b = bg / p.G;
    for (int64_t h = (bg % p.G) * p.group; h < (bg % p.G + 1) * p.group; ++h)
      for (int64_t i0 = 0; i0 < p.Tq; i0 += bq) {
        const int64_t i1 = std::min(p.Tq, i0 + bq);
        compute_p_dp(p, a, b, h, i0, i1, 0, p.Tk, P.data(), dP.data(), E.data(), p.Tk);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t r = i - i0;
          if (p.cfg.delta == DeltaMode::Stale) {
            delta[r] = stale_delta(p, a, p.q_off(b, h) + i * p.D);
          } else {  // D_i = Σ_j P_ij dP_ij / Σ_j P_ij over this backward's P and dP
            MatchedSums sums;
            for (int64_t j = 0; j < p.Tk; ++j) sums.add(P[r * p.Tk + j], dP[r * p.Tk + j]);
            delta[r] = sums.delta<T>();
          }
        }
        const int64_t n_max = p.visible(i1 - 1);  // the block's last row sees the most keys
        for (int64_t j0 = 0; j0 < n_max; j0 += bc) {
          const int64_t j1 = std::min(p.Tk, j0 + bc);
          ds_step(p, a, b, h, i0, i1, j0, j1, P.data() + j0, dP.data() + j0, E.data() + j0, p.Tk,
                  delta.data(), ds.data());
        }
      }
  });
}

template void forward_whole<float>(const Problem&, const float*, const float*, const float*, float*, float*,
                                   float*, float*);
template void forward_whole<double>(const Problem&, const float*, const float*, const float*, double*,
                                    double*, double*, double*);
template void backward_whole<float>(const Problem&, const BackwardArgs<float>&);
template void backward_whole<double>(const Problem&, const BackwardArgs<double>&);

}  // namespace octet::attn
