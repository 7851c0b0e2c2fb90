// CpuAttention (Backend::make_attention): the wrapper keeps the forward's saved tensors for the
// backward and returns exactly what the reference functions of octet/attention.h return (same
// bits, same residual stats), across repeated steps; in FP64 precision it agrees with the FP64
// oracle; a backward before any forward is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::randn;

namespace {

AttentionShape small_shape() {
  AttentionShape s;
  s.batch = 1;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.seq_q = 9;
  s.seq_k = 9;
  s.head_dim = 16;
  s.causal = true;
  return s;
}

size_t q_size(const AttentionShape& s) { return size_t(s.batch * s.n_heads * s.seq_q * s.head_dim); }
size_t k_size(const AttentionShape& s) {
  return size_t(s.batch * s.n_kv_heads * s.seq_k * s.head_dim);
}

TEST(CpuAttention, MatchesTheReferenceFunctionsOverSteps) {
  const AttentionShape shape = small_shape();
  AttentionConfig config;  // FP8, matched delta
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  for (int step = 0; step < 2; ++step) {
    auto q = randn(q_size(shape), 121 + step), k = randn(k_size(shape), 123 + step),
         v = randn(k_size(shape), 125 + step), d_o = randn(q_size(shape), 127 + step);
    const size_t nl = size_t(shape.batch * shape.n_heads * shape.seq_q);
    std::vector<float> o(q.size()), lse(nl), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> o2 = o, lse2 = lse, dq2 = dq, dk2 = dk, dv2 = dv;
    attn->forward(q.data(), k.data(), v.data(), o.data(), lse.data());
    AttentionStats st = attn->backward(d_o.data(), dq.data(), dk.data(), dv.data());

    AttentionSaved saved;
    attention_forward(shape, config, q.data(), k.data(), v.data(), o2.data(), lse2.data(), &saved);
    AttentionStats st2;
    attention_backward(saved, d_o.data(), dq2.data(), dk2.data(), dv2.data(), &st2);
    EXPECT_EQ(o, o2);
    EXPECT_EQ(lse, lse2);
    EXPECT_EQ(dq, dq2);
    EXPECT_EQ(dk, dk2);
    EXPECT_EQ(dv, dv2);
    EXPECT_EQ(st.row_residual_max, st2.row_residual_max);
    EXPECT_EQ(st.row_residual_mean, st2.row_residual_mean);
  }
}

TEST(CpuAttention, Fp64PrecisionAgreesWithTheOracle) {
  const AttentionShape shape = small_shape();
  AttentionConfig config;
  config.precision = AttnPrecision::FP64;
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  auto q = randn(q_size(shape), 131), k = randn(k_size(shape), 132), v = randn(k_size(shape), 133),
       d_o = randn(q_size(shape), 134);
  const size_t nl = size_t(shape.batch * shape.n_heads * shape.seq_q);
  std::vector<float> o(q.size()), lse(nl), dq(q.size()), dk(k.size()), dv(v.size());
  attn->forward(q.data(), k.data(), v.data(), o.data(), lse.data());
  attn->backward(d_o.data(), dq.data(), dk.data(), dv.data());

  auto f64 = [](const std::vector<float>& a) { return std::vector<double>(a.begin(), a.end()); };
  auto Q = f64(q), K = f64(k), V = f64(v), DO = f64(d_o);
  std::vector<double> O(q.size()), L(nl), DQ(q.size()), DK(k.size()), DV(v.size());
  attention_forward_fp64(shape, Q.data(), K.data(), V.data(), O.data(), L.data());
  attention_backward_fp64(shape, Q.data(), K.data(), V.data(), O.data(), L.data(), DO.data(),
                          DQ.data(), DK.data(), DV.data());
  auto expect_near = [](const std::vector<float>& a, const std::vector<double>& b, const char* w) {
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i]))) << w << " index " << i;
  };
  expect_near(o, O, "o");
  expect_near(lse, L, "lse");
  expect_near(dq, DQ, "dq");
  expect_near(dk, DK, "dk");
  expect_near(dv, DV, "dv");
}

TEST(CpuAttention, BackwardBeforeForwardIsAnError) {
  const AttentionShape shape = small_shape();
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, AttentionConfig{});
  std::vector<float> d_o(q_size(shape)), dq(q_size(shape)), dk(k_size(shape)), dv(k_size(shape));
  EXPECT_THROW(attn->backward(d_o.data(), dq.data(), dk.data(), dv.data()), Error);
}

TEST(CpuAttention, InvalidShapeIsRejectedAtConstruction) {
  AttentionShape shape = small_shape();
  shape.n_kv_heads = 3;  // does not divide 4
  auto be = make_cpu_backend();
  EXPECT_THROW(be->make_attention(shape, AttentionConfig{}), Error);
}

}  // namespace
