// src/cpu/attention_backward_tile.cpp — the backward step on one (query block x key block) tile
// that both execution forms share: recompute P = exp(S − m) / l from the saved softmax statistics
// and dP = dÔV̂ᵀ, form
// dS = P ∘ (dP − D), record the softmax-gradient residual sums (Σ_j dS_ij and the magnitude
// Σ_j P_ij(|dP_ij| + |D_i|) of the terms it cancels; on request the mean key Σ_j P_ij K̂_j),
// round dS on its tile scale, and accumulate dV, dK, dQ. Structure after FlashAttention-2's backward (Dao,
// arXiv 2307.08691, Algorithm 2); the delta D is the caller's (stale or matched, docs/design.md §"The two
// deltas").
#include <algorithm>
#include <cmath>

#include "cpu/attention_impl.h"

namespace octet::attn {

template <typename T>
void compute_p_dp(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0, int64_t i1,
                  int64_t j0, int64_t j1, T* P, T* dP, T* E, int64_t ld) {
  const float* Q = a.q_hat + p.q_off(b, h);
  const float* dOh = a.do_hat + p.q_off(b, h);
  const float* K = a.k_hat + p.kv_off(b, h);
  const float* V = a.v_hat + p.kv_off(b, h);
  const T tau = T(p.tau);
  for (int64_t i = i0; i < i1; ++i) {
    T* Pr = P + (i - i0) * ld;
    T* dPr = dP + (i - i0) * ld;
    T* Er = E ? E + (i - i0) * ld : nullptr;
    const int64_t n = p.visible(i);
    const T m = a.row_max[p.row_off(b, h) + i], l = a.row_sum[p.row_off(b, h) + i];
    for (int64_t j = j0; j < j1; ++j) {
      if (j >= n) {  // masked (or the row sees no key: n == 0, m = −inf, l = 0)
        Pr[j - j0] = dPr[j - j0] = 0;
        if (Er) Er[j - j0] = 0;
        continue;
      }
      const T s = tau * dot<T>(Q + i * p.D, K + j * p.D, p.D);
      const T e = exp_t<T>(s - m);  // <= 1; l >= 1 (its max term is exp(0) = 1)
      Pr[j - j0] = e / l;
      if (Er) Er[j - j0] = e;
      dPr[j - j0] = dot<T>(dOh + i * p.D, V + j * p.D, p.D);
    }
  }
}

template <typename T>
void ds_step(const Problem& p, const BackwardArgs<T>& a, int64_t b, int64_t h, int64_t i0, int64_t i1,
             int64_t j0, int64_t j1, const T* P, const T* dP, const T* E, int64_t ld,
             const RowDelta<T>* delta, T* ds) {
  const int64_t nc = j1 - j0;
  const int64_t row0 = p.row_off(b, h);
  for (int64_t i = i0; i < i1; ++i) {
    const T* Pr = P + (i - i0) * ld;
    const T* dPr = dP + (i - i0) * ld;
    T* dsr = ds + (i - i0) * nc;
    const RowDelta<T> d = delta[i - i0];
    const double d_abs = std::fabs(double(d.value));  // |D_i|
    double sum = 0, mag = 0;
    for (int64_t j = 0; j < nc; ++j) {
      dsr[j] = d.ds(Pr[j], dPr[j]);  // masked keys: P = 0 gives dS = 0
      sum += double(dsr[j]);
      mag += double(Pr[j]) * (std::fabs(double(dPr[j])) + d_abs);  // the terms the sum cancels
    }
    a.res_sum[row0 + i] += sum;
    a.res_mag[row0 + i] += mag;
    if (a.mean_key) {  // k̄_i += Σ_j P_ij K̂_j (masked keys have P = 0)
      const float* K = a.k_hat + p.kv_off(b, h);
      double* mk = a.mean_key + (row0 + i) * p.D;
      for (int64_t j = j0; j < std::min(j1, p.visible(i)); ++j)
        axpy<double>(double(Pr[j - j0]), K + j * p.D, mk, p.D);
    }
  }
  round_ds_tile(p.cfg, ds, i1 - i0, nc, nc);
  if (a.ds_row_sum)  // r̂_i for the dQ row-sum projection: the rounded dS of the visible keys
    for (int64_t i = i0; i < i1; ++i) {
      const T* dsr = ds + (i - i0) * nc;
      double r = 0;
      for (int64_t j = j0; j < std::min(j1, p.visible(i)); ++j) r += double(dsr[j - j0]);
      a.ds_row_sum[row0 + i] += r;
    }

  const float* Q = a.q_hat + p.q_off(b, h);
  const T* dOv = a.do_dv + p.q_off(b, h);
  const float* K = a.k_hat + p.kv_off(b, h);
  T* dq = a.dq + p.q_off(b, h);
  T* dk = a.dk + p.kv_off(b, h);
  T* dv = a.dv + p.kv_off(b, h);
  const T tau = T(p.tau);
  for (int64_t i = i0; i < i1; ++i) {
    const T* Er = E + (i - i0) * ld;
    const T* dsr = ds + (i - i0) * nc;
    const int64_t jn = std::min(j1, p.visible(i));
    for (int64_t j = j0; j < jn; ++j) {
      const T g = tau * dsr[j - j0];
      axpy<T>(g, K + j * p.D, dq + i * p.D, p.D);  // dQ += τ dŜ K̂
      axpy<T>(g, Q + i * p.D, dk + j * p.D, p.D);  // dK += τ dŜᵀ Q̂
      // dV += P̃ᵀ (dO/l): P̃ from exp(S − m) <= 1, the row factor 1/l_i inside dO (no underflow)
      axpy<T>(round_p(p.cfg, Er[j - j0]), dOv + i * p.D, dv + j * p.D, p.D);
    }
  }
}

#define OCTET_INSTANTIATE(T)                                                                                \
  template void compute_p_dp<T>(const Problem&, const BackwardArgs<T>&, int64_t, int64_t, int64_t, int64_t, \
                                int64_t, int64_t, T*, T*, T*, int64_t);                                     \
  template void ds_step<T>(const Problem&, const BackwardArgs<T>&, int64_t, int64_t, int64_t, int64_t,      \
                           int64_t, int64_t, const T*, const T*, const T*, int64_t, const RowDelta<T>*, T*);
OCTET_INSTANTIATE(float)
OCTET_INSTANTIATE(double)
#undef OCTET_INSTANTIATE

}  // namespace octet::attn
