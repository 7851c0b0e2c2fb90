// src/cpu/attention_fp64.cpp — the FP64 oracle of multi-head attention: a plain whole-row
// implementation in double with no rounding of any operand, the definition every other form and
// precision is measured against. Forward: S = τQKᵀ + mask, L = logsumexp S, P = exp(S − L),
// O = PV. Backward (the exact softmax Jacobian): dV = PᵀdO, dP = dO Vᵀ, D_i = dO_i·O_i (exact in
// FP64, where it equals Σ_j P_ij dP_ij), dS = P ∘ (dP − D), dQ = τ dS K, dK = τ dSᵀQ.
// GQA sums dK and dV over the query heads of a KV head. Verified in tests against central finite
// differences and against PyTorch's scaled_dot_product_attention in float64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/attention_impl.h"

namespace octet {

void attention_forward_fp64(const AttentionShape& shape, const double* q, const double* k, const double* v,
                            double* o, double* lse) {
  shape.validate();
  check_heads_major(shape, "attention_forward_fp64");
  const attn::Problem p(shape, AttentionConfig{});
  std::vector<double> s(p.Tk);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const double* K = k + p.kv_off(b, h);
      const double* V = v + p.kv_off(b, h);
      for (int64_t i = 0; i < p.Tq; ++i) {
        const double* qi = q + p.q_off(b, h) + i * p.D;
        double* oi = o + p.q_off(b, h) + i * p.D;
        const int64_t n = p.visible(i);
        std::fill(oi, oi + p.D, 0.0);
        if (n == 0) {
          lse[p.row_off(b, h) + i] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t c = 0; c < p.D; ++c) d += qi[c] * K[j * p.D + c];
          s[j] = p.tau * d;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        const double L = m + std::log(l);
        for (int64_t j = 0; j < n; ++j) {
          const double pj = std::exp(s[j] - L);
          for (int64_t c = 0; c < p.D; ++c) oi[c] += pj * V[j * p.D + c];
        }
        lse[p.row_off(b, h) + i] = L;
      }
    }
}

void attention_backward_fp64(const AttentionShape& shape, const double* q, const double* k, const double* v,
                             const double* o, const double* lse, const double* d_o, double* dq, double* dk,
                             double* dv) {
  shape.validate();
  check_heads_major(shape, "attention_backward_fp64");
  const attn::Problem p(shape, AttentionConfig{});
  std::fill(dq, dq + p.B * p.H * p.Tq * p.D, 0.0);
  std::fill(dk, dk + p.B * p.G * p.Tk * p.D, 0.0);
  std::fill(dv, dv + p.B * p.G * p.Tk * p.D, 0.0);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const double* K = k + p.kv_off(b, h);
      const double* V = v + p.kv_off(b, h);
      double* dK = dk + p.kv_off(b, h);
      double* dV = dv + p.kv_off(b, h);
      for (int64_t i = 0; i < p.Tq; ++i) {
        const int64_t off = p.q_off(b, h) + i * p.D;
        const double *qi = q + off, *oi = o + off, *doi = d_o + off;
        double* dqi = dq + off;
        const double L = lse[p.row_off(b, h) + i];
        double D = 0;
        for (int64_t c = 0; c < p.D; ++c) D += doi[c] * oi[c];
        for (int64_t j = 0; j < p.visible(i); ++j) {
          double sd = 0, dp = 0;
          for (int64_t c = 0; c < p.D; ++c) {
            sd += qi[c] * K[j * p.D + c];
            dp += doi[c] * V[j * p.D + c];
          }
          const double pij = std::exp(p.tau * sd - L);
          const double ds = pij * (dp - D);
          for (int64_t c = 0; c < p.D; ++c) {
            dqi[c] += p.tau * ds * K[j * p.D + c];
            dK[j * p.D + c] += p.tau * ds * qi[c];
            dV[j * p.D + c] += pij * doi[c];
          }
        }
      }
    }
}

}  // namespace octet
