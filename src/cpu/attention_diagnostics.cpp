// src/cpu/attention_diagnostics.cpp — how an attention implementation is judged: the FP64 oracle
// run on the same FP32 inputs, relative L2 errors and the cosine of dQ, and the part of the dQ
// error along the attention-weighted mean key, which is where a stale delta puts its bias
// (dQ_i gains −τ ε_i Σ_j P_ij K̂_j, docs/design.md §"The two deltas"; Delta-Matching, arXiv 2609.37852). The
// softmax-gradient residual itself comes out of every backward (attention.cpp).
#include <cmath>
#include <limits>

#include "cpu/attention_impl.h"

namespace octet {
namespace {

// ||x − ref||₂ / ||ref||₂ (||x||₂ when ref is all zeros).
template <typename X>
double rel_l2(const X* x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(x[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

}  // namespace

AttentionOracle run_attention_oracle(const AttentionShape& shape, const AttentionInputs& in) {
  shape.validate();
  const attn::Problem p(shape, AttentionConfig{});
  const auto q = to_double(in.q), k = to_double(in.k), v = to_double(in.v), d_o = to_double(in.d_o);
  AttentionOracle r;
  r.o.resize(q.size());
  r.lse.resize(size_t(p.B * p.H * p.Tq));
  r.dq.resize(q.size());
  r.dk.resize(k.size());
  r.dv.resize(k.size());
  attention_forward_fp64(shape, q.data(), k.data(), v.data(), r.o.data(), r.lse.data());
  attention_backward_fp64(shape, q.data(), k.data(), v.data(), r.o.data(), r.lse.data(), d_o.data(),
                          r.dq.data(), r.dk.data(), r.dv.data());
  return r;
}

namespace {

template <typename X>
AttentionErrors errors_impl(const AttentionShape& shape, const AttentionInputs& in,
                            const AttentionOracle& ref, const X* o, const X* lse, const X* dq, const X* dk,
                            const X* dv) {
  const attn::Problem p(shape, AttentionConfig{});
  AttentionErrors e;
  e.o_rel_err = rel_l2(o, ref.o);
  e.dq_rel_err = rel_l2(dq, ref.dq);
  e.dk_rel_err = rel_l2(dk, ref.dk);
  e.dv_rel_err = rel_l2(dv, ref.dv);
  for (size_t r = 0; r < ref.lse.size(); ++r) {
    if (std::isinf(ref.lse[r]) && ref.lse[r] < 0 && double(lse[r]) == ref.lse[r]) continue;
    const double d = std::fabs(double(lse[r]) - ref.lse[r]);
    if (d != d || d > e.lse_max_abs_err) e.lse_max_abs_err = d;  // NaN/inf mismatch shows
  }
  double xy = 0, xx = 0, yy = 0, proj2 = 0;
  for (size_t i = 0; i < ref.dq.size(); ++i) {
    xy += double(dq[i]) * ref.dq[i];
    xx += double(dq[i]) * dq[i];
    yy += ref.dq[i] * ref.dq[i];
  }
  e.dq_cos = (xx > 0 && yy > 0) ? xy / std::sqrt(xx * yy) : (xx == 0 && yy == 0 ? 1.0 : 0.0);
  // Projection of each row's dQ error on its attention-weighted mean key (oracle P, input K).
  std::vector<double> kbar(p.D);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.H; ++h) {
      const float* K = in.k.data() + p.kv_off(b, h);
      for (int64_t i = 0; i < p.Tq; ++i) {
        const int64_t off = p.q_off(b, h) + i * p.D;
        const double L = ref.lse[p.row_off(b, h) + i];
        const int64_t n = p.visible(i);
        if (n == 0) continue;
        std::fill(kbar.begin(), kbar.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t c = 0; c < p.D; ++c) s += double(in.q[off + c]) * K[j * p.D + c];
          const double pij = std::exp(p.tau * s - L);
          for (int64_t c = 0; c < p.D; ++c) kbar[c] += pij * K[j * p.D + c];
        }
        double norm = 0, dot = 0;
        for (int64_t c = 0; c < p.D; ++c) norm += kbar[c] * kbar[c];
        if (!(norm > 0)) continue;
        for (int64_t c = 0; c < p.D; ++c) dot += (double(dq[off + c]) - ref.dq[off + c]) * kbar[c];
        proj2 += dot * dot / norm;
      }
    }
  e.dq_bias_mean_key = yy > 0 ? std::sqrt(proj2 / yy) : std::sqrt(proj2);
  return e;
}

}  // namespace

AttentionErrors attention_errors(const AttentionShape& shape, const AttentionInputs& in,
                                 const AttentionOracle& ref, const float* o, const float* lse,
                                 const float* dq, const float* dk, const float* dv) {
  return errors_impl(shape, in, ref, o, lse, dq, dk, dv);
}
AttentionErrors attention_errors(const AttentionShape& shape, const AttentionInputs& in,
                                 const AttentionOracle& ref, const double* o, const double* lse,
                                 const double* dq, const double* dk, const double* dv) {
  return errors_impl(shape, in, ref, o, lse, dq, dk, dv);
}

}  // namespace octet
