// Head layouts of the CPU backend: split_qkv / merge_qkv (both AttnLayouts) and tokens_to_heads /
// heads_to_tokens move each element to the index their definitions give, and each pair is mutually
// inverse; RoPE rotates a tokens-major tensor as it rotates the heads-major one.
#include <gtest/gtest.h>

#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t B = 2, T = 5, H = 4, G = 2, D = 3;  // GQA: 4 query heads, 2 KV heads

TEST(Layout, SplitQkvPlacesEveryHead) {
  auto be = make_cpu_backend();
  const int64_t W = (H + 2 * G) * D;
  auto qkv = randn(B * T * W, 21);
  std::vector<float> q(B * H * T * D), k(B * G * T * D), v(B * G * T * D);
  be->split_qkv(view(qkv, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}),
                AttnLayout::HeadsMajor);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        const float* row = &qkv[(b * T + t) * W];
        for (int64_t h = 0; h < H; ++h) EXPECT_EQ(q[((b * H + h) * T + t) * D + d], row[h * D + d]);
        for (int64_t g = 0; g < G; ++g) {
          EXPECT_EQ(k[((b * G + g) * T + t) * D + d], row[(H + g) * D + d]);
          EXPECT_EQ(v[((b * G + g) * T + t) * D + d], row[(H + G + g) * D + d]);
        }
      }
}

TEST(Layout, SplitAndMergeQkvAreInverse) {
  auto be = make_cpu_backend();
  const int64_t W = (H + 2 * G) * D;
  auto qkv = randn(B * T * W, 22);
  std::vector<float> q(B * H * T * D), k(B * G * T * D), v(B * G * T * D), back(qkv.size(), -1.0f);
  be->split_qkv(view(qkv, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}),
                AttnLayout::HeadsMajor);
  be->merge_qkv(view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}), view(back, {B, T, W}),
                AttnLayout::HeadsMajor);
  EXPECT_EQ(back, qkv);
  // and the other way round
  auto q2 = randn(q.size(), 23), k2 = randn(k.size(), 24), v2 = randn(v.size(), 25);
  be->merge_qkv(view(q2, {B, H, T, D}), view(k2, {B, G, T, D}), view(v2, {B, G, T, D}), view(back, {B, T, W}),
                AttnLayout::HeadsMajor);
  be->split_qkv(view(back, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}),
                AttnLayout::HeadsMajor);
  EXPECT_EQ(q, q2);
  EXPECT_EQ(k, k2);
  EXPECT_EQ(v, v2);
}

TEST(Layout, HeadsToTokensPlacesEveryElementAndInvertsTokensToHeads) {
  auto be = make_cpu_backend();
  auto x = randn(B * H * T * D, 26);  // [B, H, T, D]
  std::vector<float> y(x.size()), back(x.size(), -1.0f);
  be->heads_to_tokens(view(x, {B, H, T, D}), view(y, {B, T, H * D}));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          EXPECT_EQ(y[((b * T + t) * H + h) * D + d], x[((b * H + h) * T + t) * D + d]);
  be->tokens_to_heads(view(y, {B, T, H * D}), view(back, {B, H, T, D}));
  EXPECT_EQ(back, x);
}

// Tokens-major q [B, T, H, D], k, v [B, T, G, D]: the heads-major split moved by transpose_heads_tokens
// (octet/attention.h), and merge inverts it.
TEST(Layout, TokensMajorSplitIsTheHeadsMajorSplitTransposedAndMergeInvertsIt) {
  auto be = make_cpu_backend();
  const int64_t W = (H + 2 * G) * D;
  auto qkv = randn(B * T * W, 27);
  std::vector<float> q(B * H * T * D), k(B * G * T * D), v(B * G * T * D);
  std::vector<float> qt(q.size()), kt(k.size()), vt(v.size()), want(q.size()), back(qkv.size(), -1.0f);
  be->split_qkv(view(qkv, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}),
                AttnLayout::HeadsMajor);
  be->split_qkv(view(qkv, {B, T, W}), view(qt, {B, T, H, D}), view(kt, {B, T, G, D}), view(vt, {B, T, G, D}),
                AttnLayout::TokensMajor);
  transpose_heads_tokens(q.data(), want.data(), B, H, T, D, true);
  EXPECT_EQ(qt, want);
  want.resize(k.size());
  transpose_heads_tokens(k.data(), want.data(), B, G, T, D, true);
  EXPECT_EQ(kt, want);
  transpose_heads_tokens(v.data(), want.data(), B, G, T, D, true);
  EXPECT_EQ(vt, want);
  be->merge_qkv(view(qt, {B, T, H, D}), view(kt, {B, T, G, D}), view(vt, {B, T, G, D}), view(back, {B, T, W}),
                AttnLayout::TokensMajor);
  EXPECT_EQ(back, qkv);
}

// RoPE's angle follows the token index, wherever the layout puts it; a rotation and its inverse
// return the input to within rounding.
TEST(Layout, RopeTokensMajorIsRopeHeadsMajorTransposed) {
  auto be = make_cpu_backend();
  const int64_t Dr = 8;
  auto x = randn(B * H * T * Dr, 28);  // heads-major
  std::vector<float> xt(x.size()), want(x.size());
  transpose_heads_tokens(x.data(), xt.data(), B, H, T, Dr, true);
  const std::vector<float> xt0 = xt;
  be->rope(view(x, {B, H, T, Dr}), 10000.0f, false, AttnLayout::HeadsMajor);
  be->rope(view(xt, {B, T, H, Dr}), 10000.0f, false, AttnLayout::TokensMajor);
  transpose_heads_tokens(x.data(), want.data(), B, H, T, Dr, true);
  EXPECT_EQ(xt, want);
  EXPECT_NE(xt, xt0);  // rows at t > 0 rotated
  be->rope(view(xt, {B, T, H, Dr}), 10000.0f, true, AttnLayout::TokensMajor);
  for (size_t i = 0; i < xt.size(); ++i) EXPECT_NEAR(xt[i], xt0[i], 1e-5f) << i;
}

}  // namespace
