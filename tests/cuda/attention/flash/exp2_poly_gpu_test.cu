// exp2_poly (cuda/attention/flash/flash_exp2.h) on the GPU gives the host build's bits: the device
// floors by one FADD rounding down onto a magic number where the host calls std::floor, and both
// round each FMA once. The host build's error bound is tests/attention/exp2_poly_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/attention/flash/flash_exp2.h"
#include "cuda/cuda_test_util.h"

namespace octet::cuda::flash {
namespace {

__global__ void exp2_poly_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = exp2_poly(x[i]);
}

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

TEST(Exp2PolyGpu, DeviceBitsEqualTheHostBuilds) {
  OCTET_REQUIRE_GPU();
  std::vector<float> x;
  for (int64_t i = -140 * 1024; i <= 140 * 1024; ++i) x.push_back(float(i) / 1024.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-130.0f, 10.0f);
  for (int i = 0; i < (1 << 18); ++i) x.push_back(u(rng));
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, -127.0f, -126.0f, -0.0f, 0.0f, 127.0f, 128.0f, 129.5f, 5e6f, inf, -1e-30f,
                  std::nextafter(-126.0f, -inf), std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  test::Dev<float> dx(x), dy(x.size());
  exp2_poly_kernel<<<unsigned((x.size() + 255) / 256), 256>>>(dx.p, dy.p, int(x.size()));
  OCTET_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> y = dy.get();
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float h = exp2_poly(x[i]);
    const bool same = std::isnan(h) ? std::isnan(y[i]) : bits(h) == bits(y[i]);
    if (!same && bad++ < 5) ADD_FAILURE() << "x = " << x[i] << ": device " << y[i] << ", host " << h;
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace octet::cuda::flash
