// Head layouts of the CPU backend: split_qkv / merge_qkv and tokens_to_heads / heads_to_tokens
// move each element to the index their definitions give, and each pair is mutually inverse.
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
  be->split_qkv(view(qkv, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}));
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
  be->split_qkv(view(qkv, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}));
  be->merge_qkv(view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}), view(back, {B, T, W}));
  EXPECT_EQ(back, qkv);
  // and the other way round
  auto q2 = randn(q.size(), 23), k2 = randn(k.size(), 24), v2 = randn(v.size(), 25);
  be->merge_qkv(view(q2, {B, H, T, D}), view(k2, {B, G, T, D}), view(v2, {B, G, T, D}),
                view(back, {B, T, W}));
  be->split_qkv(view(back, {B, T, W}), view(q, {B, H, T, D}), view(k, {B, G, T, D}), view(v, {B, G, T, D}));
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

}  // namespace
