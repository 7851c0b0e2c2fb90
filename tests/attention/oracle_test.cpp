// The FP64 oracle (attention_forward_fp64 / attention_backward_fp64) is the definition every
// other attention is measured against, so its gradients are checked against central finite
// differences of its own forward: d/dx Σ O·W for every element of Q, K and V (W plays dO).
// Shapes cover GQA, Tq ≠ Tk with bottom-right causal masking, rows that see no key, and a
// non-default softmax scale. (PyTorch's scaled_dot_product_attention is the second, independent
// oracle: tests/python/test_attention_torch.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "attention_test_util.h"

using namespace octet;

namespace {

struct FdCase {
  AttentionShape shape;
  const char* name;
};

double loss(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& w) {
  std::vector<double> o(q.size()), lse(size_t(s.batch * s.n_heads * s.seq_q));
  attention_forward_fp64(s, q.data(), k.data(), v.data(), o.data(), lse.data());
  double l = 0;
  for (size_t i = 0; i < o.size(); ++i) l += o[i] * w[i];
  return l;
}

class OracleFd : public ::testing::TestWithParam<FdCase> {};

TEST_P(OracleFd, GradientsMatchCentralDifferences) {
  const AttentionShape s = GetParam().shape;
  std::mt19937_64 rng(7);
  std::normal_distribution<double> n01;
  auto randv = [&](size_t n) {
    std::vector<double> x(n);
    for (auto& e : x) e = n01(rng);
    return x;
  };
  const size_t nq = size_t(s.batch * s.n_heads * s.seq_q * s.head_dim);
  const size_t nk = size_t(s.batch * s.n_kv_heads * s.seq_k * s.head_dim);
  auto q = randv(nq), k = randv(nk), v = randv(nk), w = randv(nq);
  std::vector<double> o(nq), lse(size_t(s.batch * s.n_heads * s.seq_q)), dq(nq), dk(nk), dv(nk);
  attention_forward_fp64(s, q.data(), k.data(), v.data(), o.data(), lse.data());
  attention_backward_fp64(s, q.data(), k.data(), v.data(), o.data(), lse.data(), w.data(), dq.data(),
                          dk.data(), dv.data());
  const double h = 1e-5;
  auto check = [&](std::vector<double>& x, const std::vector<double>& g, const char* what) {
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss(s, q, k, v, w);
      x[i] = x0 - h;
      const double lm = loss(s, q, k, v, w);
      x[i] = x0;
      const double fd = (lp - lm) / (2 * h);
      // Truncation error O(h²) ~ 1e-10 and rounding ~1e-16/h ~ 1e-11 for O(1) losses.
      EXPECT_NEAR(g[i], fd, 1e-7 * (1 + std::fabs(fd))) << what << "[" << i << "]";
      worst = std::max(worst, std::fabs(g[i]));
    }
    EXPECT_GT(worst, 1e-3) << what << ": a gradient that is all zero proves nothing";
  };
  check(q, dq, "dQ");
  check(k, dk, "dK");
  check(v, dv, "dV");
}

AttentionShape with_scale(AttentionShape s, float tau) {
  s.softmax_scale = tau;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, OracleFd,
    ::testing::Values(FdCase{test::make_shape(1, 2, 1, 5, 7, 8, true), "gqa_causal_tq_lt_tk"},
                      FdCase{test::make_shape(1, 2, 2, 6, 4, 8, false), "noncausal_tq_gt_tk"},
                      FdCase{test::make_shape(2, 4, 2, 3, 3, 6, true), "batch2_gqa_causal"},
                      FdCase{test::make_shape(1, 1, 1, 5, 3, 4, true), "rows_without_keys"},
                      FdCase{with_scale(test::make_shape(1, 2, 1, 4, 6, 5, false), 0.9f), "custom_scale"}),
    [](const auto& info) { return std::string(info.param.name); });

// GQA is the same as repeating each KV head over its query heads: dK, dV of a KV head are the
// sums over those query heads (checked against an MHA run on repeated K, V).
TEST(Oracle, GqaEqualsRepeatedKvHeadsWithSummedGradients) {
  const auto gqa = test::make_shape(1, 4, 2, 6, 6, 8, true);
  const auto mha = test::make_shape(1, 4, 4, 6, 6, 8, true);
  const auto in = make_attention_inputs(gqa, AttnInputDist::Normal, 3);
  AttentionInputs rep = in;
  const int64_t blk = 6 * 8;  // one head: [T, D]
  rep.k.resize(4 * blk);
  rep.v.resize(4 * blk);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t e = 0; e < blk; ++e) {
      rep.k[h * blk + e] = in.k[(h / 2) * blk + e];
      rep.v[h * blk + e] = in.v[(h / 2) * blk + e];
    }
  const auto a = run_attention_oracle(gqa, in), b = run_attention_oracle(mha, rep);
  for (size_t i = 0; i < a.o.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.o[i], b.o[i]);
    EXPECT_NEAR(a.dq[i], b.dq[i], 1e-12);
  }
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t e = 0; e < blk; ++e) {
      EXPECT_NEAR(a.dk[g * blk + e], b.dk[(2 * g) * blk + e] + b.dk[(2 * g + 1) * blk + e], 1e-12);
      EXPECT_NEAR(a.dv[g * blk + e], b.dv[(2 * g) * blk + e] + b.dv[(2 * g + 1) * blk + e], 1e-12);
    }
}

}  // namespace
