// gated_delta_naive.cpp — Gated DeltaNet's naive sequential recurrence in FP64, forward and
// reverse-mode backward (octet/recurrent.h; Yang, Kautz & Hatamizadeh, arXiv 2412.06464): the
// reference the chunked form is tested against.
//
// Backward of one step S_t = α A S_{t−1} + β k vᵀ, A = I − β k kᵀ, o_t = scale·S_tᵀ q_t, with
// P = S_{t−1}, w = v − α Pᵀk (so S_t = αP + β k wᵀ) and G = dL/dS_t (accumulated from the end):
//   G += scale·q doᵀ;  dq = scale·S_t do;  dv = β Gᵀk;  dβ = kᵀ G w;
//   dk = β G w − αβ P Gᵀk;  dα = ⟨G, A P⟩ (dg = α dα);  dL/dS_{t−1} = α A G.
#include <cmath>
#include <string>
#include <vector>

#include "cpu/gated_delta_impl.h"
#include "octet/error.h"
#include "octet/recurrent.h"

namespace octet {

void gated_delta_naive_forward(const GatedDeltaShape& s, const GatedDeltaInputs<double>& in, double* o) {
  cpu::check_gated_delta(s, in, "o", o);
  const int64_t T = s.seq, K = s.dk, V = s.dv;
  std::vector<double> S(static_cast<size_t>(K * V)), kS(static_cast<size_t>(V));
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    std::fill(S.begin(), S.end(), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const double* q = in.q + (bh * T + t) * K;
      const double* k = in.k + (bh * T + t) * K;
      const double* v = in.v + (bh * T + t) * V;
      const double al = std::exp(in.g[bh * T + t]), be = in.beta[bh * T + t];
      // S ← α S − αβ k (kᵀS) + β k vᵀ
      std::fill(kS.begin(), kS.end(), 0.0);
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) kS[size_t(j)] += k[i] * S[size_t(i * V + j)];
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          double& x = S[size_t(i * V + j)];
          x = al * x + be * k[i] * (v[j] - al * kS[size_t(j)]);
        }
      double* ot = o + (bh * T + t) * V;
      for (int64_t j = 0; j < V; ++j) {
        double acc = 0;
        for (int64_t i = 0; i < K; ++i) acc += S[size_t(i * V + j)] * q[i];
        ot[j] = in.scale * acc;
      }
    }
  }
}

void gated_delta_naive_backward(const GatedDeltaShape& s, const GatedDeltaInputs<double>& in,
                                const double* d_o, const GatedDeltaGrads<double>& gr) {
  cpu::check_gated_delta(s, in, "d_o", d_o);
  cpu::check_gated_delta_grads(gr);
  const int64_t T = s.seq, K = s.dk, V = s.dv, KV = K * V;
  std::vector<double> hist(static_cast<size_t>((T + 1) * KV)), G(static_cast<size_t>(KV)),
      w(static_cast<size_t>(V)), Gk(static_cast<size_t>(V)), Pk(static_cast<size_t>(V));
  for (int64_t bh = 0; bh < s.batch * s.heads; ++bh) {
    // Forward, keeping S_0..S_T.
    std::fill(hist.begin(), hist.begin() + KV, 0.0);
    for (int64_t t = 0; t < T; ++t) {
      const double* k = in.k + (bh * T + t) * K;
      const double* v = in.v + (bh * T + t) * V;
      const double al = std::exp(in.g[bh * T + t]), be = in.beta[bh * T + t];
      const double* P = hist.data() + t * KV;
      double* Sn = hist.data() + (t + 1) * KV;
      for (int64_t j = 0; j < V; ++j) {
        double kp = 0;
        for (int64_t i = 0; i < K; ++i) kp += k[i] * P[i * V + j];
        w[size_t(j)] = v[j] - al * kp;
      }
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) Sn[i * V + j] = al * P[i * V + j] + be * k[i] * w[size_t(j)];
    }
    // Backward.
    std::fill(G.begin(), G.end(), 0.0);
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t row = bh * T + t;
      const double* q = in.q + row * K;
      const double* k = in.k + row * K;
      const double* v = in.v + row * V;
      const double* dot = d_o + row * V;
      const double al = std::exp(in.g[row]), be = in.beta[row];
      const double* P = hist.data() + t * KV;
      const double* St = hist.data() + (t + 1) * KV;
      for (int64_t i = 0; i < K; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < V; ++j) {
          G[size_t(i * V + j)] += in.scale * q[i] * dot[j];
          acc += St[i * V + j] * dot[j];
        }
        gr.dq[row * K + i] = in.scale * acc;
      }
      for (int64_t j = 0; j < V; ++j) {
        double kp = 0, kg = 0;
        for (int64_t i = 0; i < K; ++i) {
          kp += k[i] * P[i * V + j];
          kg += k[i] * G[size_t(i * V + j)];
        }
        Pk[size_t(j)] = kp;
        w[size_t(j)] = v[j] - al * kp;
        Gk[size_t(j)] = kg;  // (Gᵀk)_j
        gr.dv[row * V + j] = be * kg;
      }
      double dbeta = 0, dalpha = 0;
      for (int64_t i = 0; i < K; ++i) {
        double gw = 0, pgk = 0;
        for (int64_t j = 0; j < V; ++j) {
          gw += G[size_t(i * V + j)] * w[size_t(j)];
          pgk += P[i * V + j] * Gk[size_t(j)];
        }
        dbeta += k[i] * gw;
        gr.dk[row * K + i] = be * gw - al * be * pgk;
      }
      // ⟨G, A P⟩ = ⟨G, P⟩ − β (Gᵀk)·(Pᵀk)
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) dalpha += G[size_t(i * V + j)] * P[i * V + j];
      for (int64_t j = 0; j < V; ++j) dalpha -= be * Gk[size_t(j)] * Pk[size_t(j)];
      gr.dbeta[row] = dbeta;
      gr.dg[row] = al * dalpha;
      // G ← α (I − β k kᵀ) G
      for (int64_t i = 0; i < K; ++i)
        for (int64_t j = 0; j < V; ++j) {
          double& x = G[size_t(i * V + j)];
          x = al * (x - be * k[i] * Gk[size_t(j)]);
        }
    }
  }
}

}  // namespace octet
