// Oracle 1 of 2: fp8.h against CUDA's own host-side conversions in cuda_fp8.h
// (__nv_cvt_float_to_fp8 with __NV_SATFINITE / __NV_NOSAT, __nv_cvt_fp8_to_halfraw), for every
// code and for a sweep of float inputs. Compiled against the CUDA toolkit's headers only; no GPU
// needed. Without the header (OCTET_HAVE_CUDA_FP8 undefined) the tests report as skipped.
// (Oracle 2, ml_dtypes, is tests/python/test_fp8_cast.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "octet/fp8.h"

#ifdef OCTET_HAVE_CUDA_FP8
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

using namespace octet;

namespace {

#ifdef OCTET_HAVE_CUDA_FP8
__nv_fp8_interpretation_t nv(Format f) { return f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2; }

float cuda_decode(uint8_t c, Format f) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(c, nv(f));
  return __half2float(__half(h));
}

uint8_t cuda_encode(float x, Format f, bool saturate) {
  return __nv_cvt_float_to_fp8(x, saturate ? __NV_SATFINITE : __NV_NOSAT, nv(f));
}

// Codes agree, where "agree" for NaN means both are NaN codes (CUDA returns the canonical 0x7F,
// octet keeps the sign of the NaN input).
void expect_same_code(uint8_t ours, uint8_t theirs, Format f, float x, bool sat) {
  const float a = fp8_decode(ours, f), b = fp8_decode(theirs, f);
  if (std::isnan(a) || std::isnan(b)) {
    EXPECT_TRUE(std::isnan(a) && std::isnan(b))
        << "x=" << x << " sat=" << sat << " ours=0x" << std::hex << int(ours) << " cuda=0x" << int(theirs);
  } else {
    EXPECT_EQ(ours, theirs) << "x=" << x << " (bits 0x" << std::hex << [&] {
      uint32_t u;
      std::memcpy(&u, &x, 4);
      return u;
    }() << ") sat=" << sat;
  }
}

// Inputs: every FP8 value, its midpoints with the next code and their float neighbours, the
// specials, and a strided sweep over all 2^32 float bit patterns (every binade, both signs).
std::vector<float> sweep(Format f) {
  std::vector<float> xs = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e-45f, 1e-40f, 3e38f};
  for (int c = 0; c < 255; ++c) {
    const float lo = fp8_decode(uint8_t(c), f), hi = fp8_decode(uint8_t(c + 1), f);
    xs.push_back(lo);
    if (std::isfinite(lo) && std::isfinite(hi) && (c & 0x7F) != 0x7F) {
      const float mid = 0.5f * (lo + hi);
      xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                           std::nextafter(mid, -INFINITY)});
    }
  }
  for (float m : {448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65536.0f})
    for (float s : {1.0f, -1.0f})
      xs.insert(xs.end(), {s * m, s * std::nextafter(m, 0.0f), s * std::nextafter(m, INFINITY)});
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const uint32_t b = uint32_t(u);
    float x;
    std::memcpy(&x, &b, 4);
    xs.push_back(x);
  }
  return xs;
}
#endif

class CudaOracle : public ::testing::TestWithParam<Format> {
 protected:
  void SetUp() override {
#ifndef OCTET_HAVE_CUDA_FP8
    GTEST_SKIP() << "cuda_fp8.h not found at configure time";
#endif
  }
};

TEST_P(CudaOracle, DecodeEveryCode) {
#ifdef OCTET_HAVE_CUDA_FP8
  const Format f = GetParam();
  for (int c = 0; c < 256; ++c) {
    const float ours = fp8_decode(uint8_t(c), f), theirs = cuda_decode(uint8_t(c), f);
    if (std::isnan(theirs)) {
      EXPECT_TRUE(std::isnan(ours)) << c;
    } else {
      EXPECT_EQ(ours, theirs) << c;
    }
  }
#endif
}

TEST_P(CudaOracle, EncodeEveryCodeAndASweep) {
#ifdef OCTET_HAVE_CUDA_FP8
  const Format f = GetParam();
  const std::vector<float> xs = sweep(f);
  int64_t checked = 0;
  for (float x : xs)
    for (bool sat : {true, false}) {
      expect_same_code(fp8_encode(x, f, sat), cuda_encode(x, f, sat), f, x, sat);
      ++checked;
      if (HasFailure()) return;  // one readable failure, not a million
    }
  EXPECT_GT(checked, 2000000);
#endif
}

INSTANTIATE_TEST_SUITE_P(Fp8, CudaOracle, ::testing::Values(Format::E4M3, Format::E5M2),
                         [](const auto& p) { return p.param == Format::E4M3 ? "e4m3" : "e5m2"; });

}  // namespace
