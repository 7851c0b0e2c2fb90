// Bad arguments raise one octet::Error that names the problem; names round-trip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention_test_util.h"
#include "octet/error.h"

using namespace octet;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttentionErrors, KvHeadsMustDivideHeads) {
  auto s = test::make_shape(1, 6, 4, 8, 8, 16, false);
  EXPECT_NE(error_of([&] { s.validate(); }).find("kv-heads (4) must divide heads (6)"), std::string::npos);
}

TEST(AttentionErrors, SizesBeyondInt64AreRefusedNotWrapped) {
  // 2^20 · 2^20 · 2^10 · 2^10 = 2^60 elements: a product the sizes computed from it would wrap
  auto s = test::make_shape(int64_t(1) << 20, int64_t(1) << 20, 1, 1024, 8, 1024, false);
  EXPECT_NE(error_of([&] { s.validate(); }).find("batch·heads·seq·dim is beyond 2^56"), std::string::npos);
  s = test::make_shape(8, 2, 2, 8, int64_t(1) << 62, 64, false);  // the product overflows int64
  EXPECT_NE(error_of([&] { s.validate(); }).find("batch·kv-heads·kv-seq·dim is beyond 2^56"),
            std::string::npos);
  s = test::make_shape(1 << 10, 64, 8, 1 << 14, 1 << 14, 128, true);  // 2^37: fine
  EXPECT_EQ(error_of([&] { s.validate(); }), "");
}

TEST(AttentionErrors, ZeroSizesAreNamed) {
  auto s = test::make_shape(1, 2, 1, 8, 8, 16, false);
  s.seq_k = 0;
  EXPECT_NE(error_of([&] { s.validate(); }).find("kv-seq must be >= 1, got 0"), std::string::npos);
  s.seq_k = 8;
  s.head_dim = -3;
  EXPECT_NE(error_of([&] { make_attention_inputs(s, AttnInputDist::Normal, 1); }).find("dim must be >= 1"),
            std::string::npos);
}

// The softmax scale is FP32 in the shape, where 0 means 1/sqrt(head_dim): a double that FP32 would
// round to 0 (the default!), a subnormal or infinity is refused with its value, as are negatives and
// NaN; 0 and the normal range's ends pass unchanged.
TEST(AttentionErrors, SoftmaxScaleMustBeAnFp32Normal) {
  for (double bad : {1e-50, 1e-39, 1e39, -0.5, std::nan("")}) {
    const std::string e = error_of([&] { (void)softmax_scale_fp32(bad, "--scale"); });
    EXPECT_NE(e.find("--scale must be 0 (1/sqrt(head_dim)) or a positive FP32 normal number"),
              std::string::npos)
        << bad << ": " << e;
  }
  EXPECT_NE(error_of([&] { (void)softmax_scale_fp32(1e-50, "--scale"); }).find("(got 1e-50)"),
            std::string::npos);
  EXPECT_EQ(softmax_scale_fp32(0.0), 0.0f);
  EXPECT_EQ(softmax_scale_fp32(double(std::numeric_limits<float>::min())), std::numeric_limits<float>::min());
  EXPECT_EQ(softmax_scale_fp32(double(std::numeric_limits<float>::max())), std::numeric_limits<float>::max());
  auto s = test::make_shape(1, 2, 1, 8, 8, 16, false);
  s.softmax_scale = std::numeric_limits<float>::denorm_min();
  EXPECT_NE(error_of([&] { s.validate(); }).find("softmax scale must be 0"), std::string::npos);
}

TEST(AttentionErrors, ForwardRejectsBadConfig) {
  const auto s = test::make_shape(1, 1, 1, 4, 4, 8, false);
  const auto in = make_attention_inputs(s, AttnInputDist::Normal, 1);
  std::vector<float> o(in.q.size()), lse(4);
  auto cfg = test::make_config(AttnPrecision::FP8, AttnForm::Flash, DeltaMode::Matched);
  cfg.block_k = 0;
  EXPECT_NE(error_of([&] {
              attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr);
            }).find("block sizes must be >= 1"),
            std::string::npos);
  cfg.block_k = 128;
  cfg.p_scale = 100.0f;
  EXPECT_NE(error_of([&] {
              attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), nullptr);
            }).find("p_scale must be a power of two"),
            std::string::npos);
}

TEST(AttentionErrors, BackwardNeedsSavedTensors) {
  AttentionSaved empty;
  std::vector<float> x(64);
  EXPECT_NE(error_of([&] {
              attention_backward(empty, x.data(), x.data(), x.data(), x.data(), nullptr);
            }).find("saved tensors do not match"),
            std::string::npos);
}

TEST(AttentionNames, RoundTripAndUnknown) {
  for (auto p : {AttnPrecision::FP64, AttnPrecision::BF16, AttnPrecision::FP8})
    EXPECT_EQ(parse_attn_precision(to_string(p)), p);
  for (auto d : {DeltaMode::Stale, DeltaMode::Matched}) EXPECT_EQ(parse_delta_mode(to_string(d)), d);
  for (auto f : {AttnForm::Whole, AttnForm::Flash}) EXPECT_EQ(parse_attn_form(to_string(f)), f);
  EXPECT_EQ(to_string(AttnForm::Flash), "flash");
  EXPECT_EQ(parse_attn_form("tiled"), AttnForm::Flash);  // the former name still parses
  for (auto d : {AttnInputDist::Normal, AttnInputDist::Heavy, AttnInputDist::Sink})
    EXPECT_EQ(parse_attn_input_dist(to_string(d)), d);
  EXPECT_NE(error_of([] {
              parse_delta_mode("fresh");
            }).find("unknown delta mode 'fresh' (expected one of: stale, matched)"),
            std::string::npos);
}

TEST(AttentionInputs, DeterministicAndShaped) {
  const auto s = test::make_shape(2, 4, 2, 5, 7, 8, true);
  const auto a = make_attention_inputs(s, AttnInputDist::Sink, 3);
  const auto b = make_attention_inputs(s, AttnInputDist::Sink, 3);
  const auto c = make_attention_inputs(s, AttnInputDist::Sink, 4);
  EXPECT_EQ(a.q, b.q);
  EXPECT_EQ(a.k, b.k);
  EXPECT_NE(a.q, c.q);
  EXPECT_EQ(a.q.size(), size_t(2 * 4 * 5 * 8));
  EXPECT_EQ(a.k.size(), size_t(2 * 2 * 7 * 8));
  EXPECT_EQ(a.d_o.size(), a.q.size());
}

// The sink distribution really makes key 0 take most of the attention (mean over rows), and the keys of every
// distribution have a non-zero mean.
TEST(AttentionInputs, SinkAndKeyMeanShow) {
  const auto s = test::make_shape(1, 2, 1, 64, 64, 32, false);
  const auto in = make_attention_inputs(s, AttnInputDist::Sink, 3);
  std::vector<double> q(in.q.begin(), in.q.end()), k(in.k.begin(), in.k.end());
  const double tau = s.tau();
  double p_sink = 0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 64; ++i) {
      std::vector<double> logit(64);
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j < 64; ++j) {
        double d = 0;
        for (int64_t c = 0; c < 32; ++c) d += q[(h * 64 + i) * 32 + c] * k[j * 32 + c];
        logit[size_t(j)] = tau * d;
        mx = std::max(mx, logit[size_t(j)]);
      }
      for (double l : logit) z += std::exp(l - mx);
      p_sink += std::exp(logit[0] - mx) / z / 128.0;
    }
  EXPECT_GT(p_sink, 0.5);  // mean attention on key 0 over all rows of both heads
  const auto nrm = make_attention_inputs(s, AttnInputDist::Normal, 3);
  double mean_norm2 = 0;
  for (int64_t c = 0; c < 32; ++c) {
    double m = 0;
    for (int64_t j = 0; j < 64; ++j) m += nrm.k[j * 32 + c] / 64.0;
    mean_norm2 += m * m;
  }
  EXPECT_GT(mean_norm2, 5.0);  // |mean key|² ≈ D = 32 by construction; 0 ± 0.5 without it
}

}  // namespace
