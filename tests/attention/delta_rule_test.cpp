// The one matched-delta rule (octet/delta_rule.h), used by the CPU reference and the CUDA kernels:
//  - a row that sees one key gets dS = 0 exactly, whatever the rounding of its P (the key's dP is
//    the pivot), and a key becomes the pivot only with P > 1/2;
//  - the reduction may group the keys in any way (the GPU reduces per thread, then per warp and
//    block): `merge` is commutative bit for bit, and every grouping finds the same pivot and the
//    same D = Σ_j P_ij dP_ij to FP32 rounding (checked against an FP64 sum);
//  - the two-phase form (the CUDA row kernel: the pivot key as the max of pivot_rank, then a plain
//    sum of terms) finds the same pivot as `merge` and the same D; pivot_rank orders candidates as
//    `beats` does;
//  - in attention, rows with a dominant key keep the matched row residual <= 1e-6 in both forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "attention_test_util.h"
#include "octet/delta_rule.h"

using namespace octet;

namespace {

using RD = RowDelta<float>;

bool same_bits(const RD& a, const RD& b) {
  return std::memcmp(&a.pivot, &b.pivot, 4) == 0 && std::memcmp(&a.offset, &b.offset, 4) == 0 &&
         std::memcmp(&a.p_pivot, &b.p_pivot, 4) == 0 && std::memcmp(&a.p_sum, &b.p_sum, 4) == 0 &&
         a.key == b.key;
}

TEST(DeltaRule, OneKeyRowGivesExactlyZeroDs) {
  for (float p : {1.0f, std::nextafter(1.0f, 0.0f), std::nextafter(1.0f, 2.0f), 0.75f})
    for (float dp : {-3.25f, 1e-7f, 1234.5f}) {
      RD d = RD::matched_start(0.8f * dp + 0.1f);  // dÔ·O: close to dP, not equal
      d.add(p, dp, 0);
      EXPECT_EQ(d.key, 0);
      EXPECT_EQ(d.ds(p, dp), 0.0f) << "P " << p << " dP " << dp;
    }
  // P <= 1/2 never becomes the pivot: the start pivot stays.
  RD d = RD::matched_start(2.0f);
  d.add(0.5f, 7.0f, 0);
  d.add(0.25f, -1.0f, 1);
  EXPECT_EQ(d.key, -1);
  EXPECT_EQ(d.pivot, 2.0f);
  EXPECT_FLOAT_EQ(d.offset, 0.5f * 5.0f + 0.25f * -3.0f);
}

TEST(DeltaRule, AnyGroupingGivesTheSamePivotAndDelta) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (bool dominant : {false, true}) {
    const int n = 1000, star = 613;
    std::vector<float> P(n), dP(n);
    double total = 0;
    for (int j = 0; j < n; ++j) total += P[j] = std::exp(u(rng));
    if (dominant) {
      P[star] = float(total * 9);  // P_star = 0.9 after normalization
      total += P[star];
    }
    for (int j = 0; j < n; ++j) {
      P[j] = float(P[j] / total);
      dP[j] = u(rng);
    }
    // The rule's D = pivot + Σ_j P_ij (dP_ij − pivot) in FP64 (= Σ_j P_ij dP_ij when Σ P = 1).
    const double pivot = dominant ? dP[star] : 0.3f;
    double D = pivot;
    for (int j = 0; j < n; ++j) D += double(P[j]) * (double(dP[j]) - pivot);
    const RD start = RD::matched_start(0.3f);
    RD seq = start;
    for (int j = 0; j < n; ++j) seq.add(P[j], dP[j], j);
    // 256 "threads" with strided keys, then a butterfly over 32 lanes, then 8 "warps".
    std::vector<RD> lanes(256, start);
    for (int j = 0; j < n; ++j) lanes[j % 256].add(P[j], dP[j], j);
    for (int off = 16; off > 0; off /= 2) {
      std::vector<RD> next(lanes);
      for (int t = 0; t < 256; ++t) next[t] = RD::merge(lanes[t], lanes[t ^ off]);
      lanes = next;
    }
    for (int t = 0; t < 256; ++t) ASSERT_TRUE(same_bits(lanes[t], lanes[t & ~31])) << t;
    RD tree = start;
    for (int w = 0; w < 8; ++w) tree = RD::merge(tree, lanes[w * 32]);
    // Two phases, keys visited in reverse: the pivot key by the max rank, then the offset.
    uint64_t rank = 0;
    for (int j = n - 1; j >= 0; --j) rank = std::max(rank, pivot_rank(P[j], j));
    const int64_t key = pivot_key(rank);
    RD two = RD::matched(0.3f, key, pivot_p(rank), key >= 0 ? dP[key] : 0.0f);
    for (int j = n - 1; j >= 0; --j) two.offset += RD::term(P[j], dP[j], two.pivot);
    if (dominant) {
      EXPECT_EQ(pivot_p(rank), P[star]);
      EXPECT_EQ(two.pivot, dP[star]);
    }
    // Without a pivot key no offset is ever moved: in key order the two forms agree bit for bit.
    if (!dominant) {
      float in_order = 0.0f;
      for (int j = 0; j < n; ++j) in_order += RD::term(P[j], dP[j], two.pivot);
      EXPECT_EQ(in_order, seq.offset);
    }
    for (const RD* d : {&seq, &tree, &two}) {
      EXPECT_EQ(d->key, dominant ? star : -1);
      EXPECT_NEAR(d->value(), D, 1e-6 * (std::fabs(D) + 1));
    }
    for (int t = 0; t + 1 < 256; ++t)
      EXPECT_TRUE(same_bits(RD::merge(lanes[t], seq), RD::merge(seq, lanes[t])));
  }
}

TEST(DeltaRule, TwoPhaseFormOnOneKeyRowsGivesExactlyZeroDs) {
  for (float p : {1.0f, std::nextafter(1.0f, 0.0f), std::nextafter(1.0f, 2.0f), 0.75f})
    for (float dp : {-3.25f, 1e-7f, 1234.5f}) {
      const uint64_t rank = pivot_rank(p, 0);
      ASSERT_EQ(pivot_key(rank), 0);
      RD d = RD::matched(0.8f * dp + 0.1f, pivot_key(rank), pivot_p(rank), dp);
      d.offset = RD::term(p, dp, d.pivot);
      EXPECT_EQ(d.offset, 0.0f);
      EXPECT_EQ(d.ds(p, dp), 0.0f) << "P " << p << " dP " << dp;
    }
  // No candidate (P <= 1/2): the start pivot.
  const RD d = RD::matched(2.0f, pivot_key(pivot_rank(0.5f, 3)), 0.0f, 7.0f);
  EXPECT_EQ(d.key, -1);
  EXPECT_EQ(d.pivot, 2.0f);
}

// pivot_rank's integer order is `beats`' order on candidates (P > 1/2), and 0 below every one.
TEST(DeltaRule, PivotRankOrdersLikeMerge) {
  EXPECT_EQ(pivot_rank(0.5f, 0), 0u);
  EXPECT_EQ(pivot_rank(0.25f, 5), 0u);
  EXPECT_EQ(pivot_rank(std::nanf(""), 5), 0u);
  EXPECT_EQ(pivot_key(0), -1);
  const float above = std::nextafter(0.5f, 1.0f);
  std::vector<float> ps = {above, 0.6f, 0.75f, 1.0f, std::nextafter(1.0f, 2.0f)};
  std::vector<int64_t> keys = {0, 1, 2, 1000, 65535, 4294967295LL};
  for (float pa : ps)
    for (int64_t ka : keys) {
      const uint64_t ra = pivot_rank(pa, ka);
      ASSERT_GT(ra, 0u);
      EXPECT_EQ(pivot_key(ra), ka);
      EXPECT_EQ(pivot_p(ra), pa);
      for (float pb : ps)
        for (int64_t kb : keys) {
          if (pa == pb && ka == kb) continue;
          const uint64_t rb = pivot_rank(pb, kb);
          EXPECT_EQ(ra > rb, RD::beats(pa, ka, pb, kb)) << pa << " " << ka << " " << pb << " " << kb;
          // merge keeps the higher-ranked of two one-key partials
          const RD m = RD::merge(RD{1.0f, 0.0f, pa, pa, ka}, RD{2.0f, 0.0f, pb, pb, kb});
          EXPECT_EQ(m.key, ra > rb ? ka : kb);
        }
    }
}

// Key 0 lengthened along the sink direction: logit ~12.8 above the rest, P_0 > 1/2 in every row.
TEST(DeltaRule, DominantKeyRowsKeepTheMatchedResidual) {
  for (bool causal : {false, true}) {
    const auto s = test::make_shape(1, 4, 2, 64, 64, 32, causal);
    auto in = make_attention_inputs(s, AttnInputDist::Sink, 4);
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t c = 0; c < 32; ++c) in.k[size_t(g * 64 * 32 + c)] *= 1.6f;
    for (auto form : {AttnForm::Whole, AttnForm::Tiled}) {
      const auto r = test::run_attention(
          s, test::make_config(AttnPrecision::FP8, form, DeltaMode::Matched), in, true);
      EXPECT_LE(r.stats.row_residual_max, 1e-6) << to_string(form) << (causal ? " causal" : "");
      if (causal) {  // row 0 of each head sees one key: dS = 0 exactly, so the residual is 0
        for (int64_t h = 0; h < 4; ++h) EXPECT_EQ(r.stats.row_residual[size_t(h * 64)], 0.0);
      }
    }
  }
}

}  // namespace
