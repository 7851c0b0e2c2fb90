// exp2_poly (cuda/attention/flash/flash_exp2.h), the flash forward's 2^x on the FMA units, on the
// host: its stated error bound against an FP64 2^x over the arguments the softmax forms, exact
// powers of two at integers, and ex2.approx.ftz's edge values (0 at and below −127 and for −inf,
// +inf from 128 on, NaN kept). The device build gives the same bits
// (tests/cuda/attention/flash/exp2_poly_gpu_test.cu).
#include "cuda/attention/flash/flash_exp2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

namespace octet::cuda::flash {
namespace {

// The bound flash_exp2.h states: the fit's 2.96e-6 (tools/fit_exp2_poly.py) with room for the
// last FMA's rounding.
constexpr double kRelBound = 3.0e-6;

TEST(Exp2Poly, WithinItsBoundOverTheSoftmaxRange) {
  // Every 2^-12 from −126 to 9 (the forward's arguments are ≤ log2 p_scale ≤ 8 + a few ulp), and
  // the last 64 floats below each integer (where f approaches 1).
  double worst = 0;
  for (int64_t i = -126 * 4096; i <= 9 * 4096; ++i) {
    const float x = float(i) / 4096.0f;
    const double err = std::fabs(double(exp2_poly(x)) / std::exp2(double(x)) - 1.0);
    worst = std::max(worst, err);
    ASSERT_LE(err, kRelBound) << "x = " << x;
  }
  for (int k = -125; k <= 9; ++k) {
    float x = float(k);
    for (int n = 0; n < 64; ++n) {
      x = std::nextafter(x, -INFINITY);
      const double err = std::fabs(double(exp2_poly(x)) / std::exp2(double(x)) - 1.0);
      ASSERT_LE(err, kRelBound) << "x = " << x;
    }
  }
  std::printf("[exp2_poly] largest relative error %.3e\n", worst);
  EXPECT_GT(worst, 1e-7) << "a polynomial this short cannot be that close: is exp2_poly the SFU's?";
}

TEST(Exp2Poly, ExactAtIntegers) {
  for (int k = -126; k <= 127; ++k) EXPECT_EQ(exp2_poly(float(k)), std::ldexp(1.0f, k)) << k;
}

TEST(Exp2Poly, EdgeValuesAsTheFlushingSfu) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp2_poly(-127.0f), 0.0f);
  EXPECT_EQ(exp2_poly(-200.0f), 0.0f);
  EXPECT_EQ(exp2_poly(-inf), 0.0f);
  EXPECT_FALSE(std::signbit(exp2_poly(-inf)));
  EXPECT_TRUE(std::isnan(exp2_poly(std::numeric_limits<float>::quiet_NaN())));
  for (float x : {128.0f, 128.5f, 129.5f, 200.0f, 5e6f, inf}) EXPECT_EQ(exp2_poly(x), inf) << x;
  EXPECT_TRUE(std::isfinite(exp2_poly(127.99f)));
  // Between −127 and −126: below the smallest normal (the SFU flushes these to 0).
  for (float x : {-126.999f, -126.5f, -126.001f}) {
    const float y = exp2_poly(x);
    EXPECT_GE(y, 0.0f) << x;
    EXPECT_LT(y, std::ldexp(1.0f, -126)) << x;
  }
}

// The P̃ codes: an E4M3 code rounds 3 mantissa bits, 2^-4 relative apart; exp2_poly moves a value by
// at most kRelBound, so over a sweep of softmax arguments it changes the rounded code only where
// the value lies that close to a rounding boundary — a small fraction.
TEST(Exp2Poly, RarelyChangesAnE4M3Code) {
  int64_t changed = 0, total = 0;
  for (int64_t i = -20 * 65536; i <= 8 * 65536; ++i, ++total) {
    const float x = float(i) / 65536.0f;
    const float a = exp2_poly(x), b = float(std::exp2(double(x)));
    changed += fp8_encode(a, Format::E4M3, true) != fp8_encode(b, Format::E4M3, true);
  }
  std::printf("[exp2_poly] E4M3 codes changed: %lld of %lld\n", (long long)changed, (long long)total);
  EXPECT_LT(double(changed) / double(total), 1e-4) << changed << " of " << total;
}

}  // namespace
}  // namespace octet::cuda::flash
