// Model::attention_sample hands out heads-major q, k, v [1, heads, T, Dh] whatever layout the
// model's attention runs in (model.h AttentionSample; the model is tokens-major). An identity that a
// wrong transpose breaks: without position information (NoPE) a layer-0 query, key or value depends
// only on its token's id, so with ids a, b, a, b, ... every head's row t equals its row t + 2 and
// differs from row t + 1. Read tokens-major as heads-major, a row would mix heads and tokens and
// the period would break (rows r and r + 2 of the memory are other heads or other tokens). Equal
// up to FP32 rounding, not bitwise: the projection's GEMM (OpenBLAS) may sum a row in another order
// depending on where it lies in the matrix (seen on AVX-512: 1 ulp); a wrong transpose moves rows
// by O(1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model_test_util.h"
#include "octet/backend.h"

using namespace octet;

namespace {

// Row t of head h of a heads-major [1, heads, T, Dh] sample.
std::vector<float> row(const std::vector<float>& x, int64_t h, int64_t t, int64_t T, int64_t Dh) {
  const auto at = x.begin() + (h * T + t) * Dh;
  return {at, at + Dh};
}

// The largest |a_i − b_i| over the largest |a_i|, |b_i| (0 for two zero rows).
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double gap = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    gap = std::max(gap, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max({scale, std::fabs(double(a[i])), std::fabs(double(b[i]))});
  }
  return scale > 0 ? gap / scale : 0.0;
}

constexpr double kSame = 1e-6;   // FP32 rounding of a short sum
constexpr double kOther = 1e-2;  // another token or head

void expect_period_two(const std::vector<float>& x, int64_t heads, int64_t T, int64_t Dh,
                       const std::string& what) {
  ASSERT_EQ(int64_t(x.size()), heads * T * Dh) << what;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t + 2 < T; ++t)
      EXPECT_LE(relative_gap(row(x, h, t, T, Dh), row(x, h, t + 2, T, Dh)), kSame)
          << what << " head " << h << " token " << t;
    EXPECT_GT(relative_gap(row(x, h, 0, T, Dh), row(x, h, 1, T, Dh)), kOther)
        << what << " head " << h << ": tokens a and b";
  }
  if (heads > 1)
    EXPECT_GT(relative_gap(row(x, 0, 0, T, Dh), row(x, 1, 0, T, Dh)), kOther) << what << ": heads 0 and 1";
}

TEST(AttentionSample, IsHeadsMajorWhateverTheModelsLayout) {
  for (const bool qk_norm : {false, true}) {
    SCOPED_TRACE(qk_norm ? "qk_norm" : "no qk_norm");
    ModelConfig c = test::tiny_model();
    c.positions = PositionKind::NoPE;
    c.n_head = 4;
    c.n_kv_head = 2;  // GQA: k and v have their own head count
    c.qk_norm = qk_norm;
    auto be = make_cpu_backend();
    Model m(c, test::arm_precision(Arm::FP32), *be, 2);
    m.init(5);
    std::vector<int32_t> ids(size_t(2 * c.seq_len)), targets(ids.size(), 1);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 2 ? 7 : 3;
    m.set_attention_capture(true);
    m.step(ids.data(), targets.data(), true, 1.0f);
    const AttentionSample s = m.attention_sample(0);
    EXPECT_EQ(s.shape.layout, AttnLayout::HeadsMajor);
    EXPECT_EQ(s.shape.batch, 1);
    const int64_t T = c.seq_len, Dh = c.head_dim();
    expect_period_two(s.q, c.n_head, T, Dh, "q");
    expect_period_two(s.k, c.n_kv_head, T, Dh, "k");
    expect_period_two(s.v, c.n_kv_head, T, Dh, "v");
    EXPECT_EQ(int64_t(s.d_o.size()), c.n_head * T * Dh);  // captured in that backward
  }
}

}  // namespace
