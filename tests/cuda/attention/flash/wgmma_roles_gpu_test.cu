// FP8 wgmma gives the same bits with its operands' roles swapped: for 64 x 128 code matrices X and Y,
// the m64n64k32 products X·Yᵀ (A = X, B = Y) and Y·Xᵀ (A = Y, B = X), each over four k-steps from a
// zero accumulator, are each other's transposes bit for bit. The Hopper backward's matched-delta
// pre-pass with queries as rows (flash_bwd_delta_sm90.cu: S = Q̂K̂ᵀ, dP = dÔV̂ᵀ) rests on it to form
// the main kernel's Sᵀ = K̂Q̂ᵀ and dPᵀ = V̂dÔᵀ bits (PTX ISA §9.7.15 does not state it). Every pair
// of formats the two kernels use: E4M3 x E4M3 (S) and E5M2 / E4M3 against E4M3 (dP), on codes
// drawn over the whole finite range of each format (so sums cancel and round at every magnitude),
// plus rows of the largest codes. Skipped off sm_90.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda/attention/flash/flash_mma_sm89.cuh"
#include "cuda/attention/flash/flash_wgmma_sm90.cuh"
#include "cuda/cuda_test_util.h"

namespace octet::cuda::flash {
namespace {

constexpr int kRows = 64, kK = 128;  // one warpgroup's m64, four k32 steps (head_dim 128)

// x, y [64][128] codes; c_xy = X·Yᵀ, c_yx = Y·Xᵀ, each [64][64] FP32 row-major.
template <bool kXE5M2, bool kYE5M2>
__global__ void roles_kernel(const uint8_t* x, const uint8_t* y, float* c_xy, float* c_yx) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) uint8_t sx[kRows * kK];
  __shared__ __align__(1024) uint8_t sy[kRows * kK];
  for (int i = threadIdx.x; i < kRows * kK; i += blockDim.x) {  // the 128-byte swizzled K-major tiles
    sx[swizzle<128>(i)] = x[i];
    sy[swizzle<128>(i)] = y[i];
  }
  fence_proxy_async_smem();
  __syncthreads();
  const unsigned ax = smem_u32(sx), ay = smem_u32(sy);
  float a[8][4], b[8][4];
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < kK / 32; ++kc)
    WgmmaFp8<64, kXE5M2, kYE5M2>::ss(a, kmajor_desc<128>(ax + 32 * kc), kmajor_desc<128>(ay + 32 * kc), kc);
  wgmma_commit();
#pragma unroll
  for (int kc = 0; kc < kK / 32; ++kc)
    WgmmaFp8<64, kYE5M2, kXE5M2>::ss(b, kmajor_desc<128>(ay + 32 * kc), kmajor_desc<128>(ax + 32 * kc), kc);
  wgmma_commit();
  wgmma_wait<0>();
  fence_regs(a);
  fence_regs(b);
  const int w = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * w + g + 8 * (e / 2), col = 8 * i + 2 * t + e % 2;
      c_xy[row * kRows + col] = a[i][e];
      c_yx[row * kRows + col] = b[i][e];
    }
#else
  __trap();
#endif
}

// Codes of a finite value of the format, uniformly over the codes (every exponent equally often).
std::vector<uint8_t> codes(bool e5m2, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> c(kRows * kK);
  for (uint8_t& v : c) {
    do v = uint8_t(rng());
    while (e5m2 ? (v & 0x7C) == 0x7C : (v & 0x7F) == 0x7F);  // no Inf or NaN
  }
  for (int k = 0; k < kK; ++k) c[3 * kK + k] = uint8_t((k % 2 ? 0x80 : 0) | (e5m2 ? 0x7B : 0x7E));  // ±max
  return c;
}

template <bool kXE5M2, bool kYE5M2>
void check(uint32_t seed) {
  const std::string what = std::string(kXE5M2 ? "E5M2" : "E4M3") + " x " + (kYE5M2 ? "E5M2" : "E4M3");
  test::Dev<uint8_t> x(codes(kXE5M2, seed)), y(codes(kYE5M2, seed + 1));
  test::Dev<float> c_xy(size_t(kRows * kRows)), c_yx(size_t(kRows * kRows));
  roles_kernel<kXE5M2, kYE5M2><<<1, 128>>>(x.p, y.p, c_xy.p, c_yx.p);
  OCTET_CUDA_CHECK(cudaGetLastError());
  const std::vector<float> a = c_xy.get(), b = c_yx.get();
  int bad = 0, nonzero = 0;
  for (int m = 0; m < kRows; ++m)
    for (int n = 0; n < kRows; ++n) {
      uint32_t u, v;
      std::memcpy(&u, &a[m * kRows + n], 4);
      std::memcpy(&v, &b[n * kRows + m], 4);
      nonzero += a[m * kRows + n] != 0.0f;
      if (u != v && bad++ < 5)
        ADD_FAILURE() << what << " (" << m << ", " << n << "): " << a[m * kRows + n] << " vs "
                      << b[n * kRows + m];
    }
  EXPECT_EQ(bad, 0) << what;
  EXPECT_GT(nonzero, kRows * kRows / 2) << what << ": the products must not be trivially zero";
}

TEST(WgmmaFp8Gpu, SwappedOperandRolesGiveTransposedBits) {
  OCTET_REQUIRE_SM90();
  for (uint32_t seed : {1u, 7u, 42u}) {
    check<false, false>(seed);  // Sᵀ = K̂Q̂ᵀ vs S = Q̂K̂ᵀ
    check<true, false>(seed);   // dP = dÔV̂ᵀ with dO in E5M2 vs the main kernel's V̂dÔᵀ
    check<false, true>(seed);
    if (HasFailure()) return;
  }
}

}  // namespace
}  // namespace octet::cuda::flash
