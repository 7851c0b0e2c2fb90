// gemm_test.cpp — cuBLASLt GEMMs (src/cuda/gemm/gemm.cpp) against the CPU emulation (gemm_fp8, gemm_bf16,
// gemm_f32 of octet/gemm.h) on identical operands (the GPU quantizer's codes, bitwise equal to the
// CPU's: quantize_test.cpp).
//
// Bound (stated, per element): |C_gpu − C_cpu| <= tol · Σ_k |â_ik|·|b̂_jk| with
//   FP8:  tol = 2^-10 — Hopper's FP8 tensor cores keep a ~14-bit accumulator between the FP32
//         promotions cuBLASLt performs (DeepSeek-V3 §3.3.2), so each partial sum of a chunk may
//         lose ~2^-13 relative; 2^-10 leaves room for the chunking and the FP32 rounding of both;
//   BF16 and FP32: tol = K·2^-23 (two FP32 accumulations in different orders; BF16 products are
//         exact in FP32).
// Shapes include dimensions that are not multiples of 16 (padding path) and every scale mode;
// modes cuBLASLt refuses must fall back (counted) and still meet the bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/runtime/cuda_backend.h"
#include "cuda/gemm/gemm.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/quantizer.h"
#include "cuda/cuda_test_util.h"
#include "octet/gemm.h"

namespace octet {
namespace {

using test::Dev;

// One CUDA backend for the operands' memory and the quantizers; every engine runs on its stream.
cuda::CudaBackend& gpu() {
  static auto* backend = new cuda::CudaBackend(CudaOptions{});  // never destroyed (process exit)
  return *backend;
}

// The BF16 bits of n FP32 values (RNE on the device: the backend's convert, as the BF16 GEMMs
// of the linear round their operands).
Dev<uint16_t> to_bf16(Dev<float>& x, int64_t n) {
  Dev<uint16_t> out(static_cast<size_t>(n));
  cuda::convert_launch(Tensor(out.ptr(), DType::BF16, {n}), Tensor(x.ptr(), DType::F32, {n}), gpu().stream());
  return out;
}

struct Operand {
  cuda::DevQ q;
  QTensor host;
  std::vector<float> deq;  // dequantized values (host)
};

Operand make_operand(const QuantConfig& cfg, Role role, int64_t rows, int64_t cols, uint32_t seed,
                     float sigma) {
  Operand o;
  Dev<float> x(test::gaussian(size_t(rows * cols), seed, sigma));
  cuda::CudaQuantizer qz(cfg, role, gpu(), gpu().stream());
  qz.quantize(Tensor(x.ptr(), DType::F32, {rows, cols}), &o.q, nullptr);
  o.host = cuda::to_host(o.q.view, gpu().stream());
  o.deq.resize(size_t(rows * cols));
  dequantize(o.host, o.deq.data());
  return o;
}

// max over elements of |got − want| / (Σ|a||b|); fails if any exceeds tol (returns the max ratio).
double check_bound(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& a,
                   const std::vector<float>& b, int64_t M, int64_t N, int64_t K, double tol,
                   const std::string& what, const std::vector<float>* c0 = nullptr) {
  double worst = 0.0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(double(a[i * K + k]) * b[j * K + k]);
      if (c0) s += std::fabs((*c0)[i * N + j]);
      const double err = std::fabs(double(got[i * N + j]) - want[i * N + j]);
      EXPECT_TRUE(std::isfinite(got[i * N + j])) << what << " at " << i << "," << j;
      const double ratio = s > 0 ? err / s : err;
      if (ratio > worst) worst = ratio;
      if (err > tol * s + 1e-30) {
        ADD_FAILURE() << what << ": C[" << i << "," << j << "] gpu " << got[i * N + j] << " cpu "
                      << want[i * N + j] << " err " << err << " > " << tol << "·" << s;
        return worst;
      }
    }
  return worst;
}

struct Fp8Case {
  Recipe ra;
  Role role_a;
  Recipe rb;
  Role role_b;
  FormatPolicy pol;
  int64_t M, N, K;
};

void run_fp8_case(cuda::GemmEngine& gemm, const Fp8Case& c, float beta) {
  QuantConfig ca, cb;
  ca.recipe = c.ra;
  ca.formats = c.pol;
  cb.recipe = c.rb;
  cb.formats = c.pol;
  const Operand A = make_operand(ca, c.role_a, c.M, c.K, uint32_t(c.M + 3 * c.K), 1.0f);
  const Operand B = make_operand(cb, c.role_b, c.N, c.K, uint32_t(c.N + 7 * c.K), 0.02f);
  std::vector<float> c0 = test::gaussian(size_t(c.M * c.N), 99u, 0.5f);
  Dev<float> C(c0);
  const int64_t fb0 = gemm.fallback_count();
  gemm.fp8(A.q.view, B.q.view, C.ptr(), beta);
  const auto got = C.get();
  std::vector<float> want = c0;
  gemm_fp8(A.host, B.host, want.data(), beta);
  const std::string what = to_string(c.ra) + "/" + to_string(c.rb) + " " + to_string(c.pol) + " " +
                           std::to_string(c.M) + "x" + std::to_string(c.N) + "x" + std::to_string(c.K) +
                           " beta " + std::to_string(beta);
  const double worst = check_bound(got, want, A.deq, B.deq, c.M, c.N, c.K, std::ldexp(1.0, -10), what,
                                   beta != 0.0f ? &c0 : nullptr);
  std::printf("[gemm fp8] %-48s max err/Σ|ab| = %.3g%s\n", what.c_str(), worst,
              gemm.fallback_count() > fb0 ? "  (cuBLASLt refused: dequantize fallback)" : "");
}

TEST(CudaGemm, Fp8MatchesCpuEmulationInEveryScaleMode) {
  OCTET_REQUIRE_GPU();
  cuda::GemmEngine gemm(gpu().stream());
  const Fp8Case cases[] = {
      {Recipe::TensorCurrent, Role::Activation, Recipe::TensorCurrent, Role::Weight, FormatPolicy::E4M3, 256,
       192, 320},
      {Recipe::TensorCurrent, Role::Gradient, Recipe::TensorCurrent, Role::Weight, FormatPolicy::Hybrid, 129,
       133, 257},
      {Recipe::TensorCurrent, Role::Activation, Recipe::TensorCurrent, Role::Gradient, FormatPolicy::Hybrid,
       64, 80, 7},
      {Recipe::Row, Role::Activation, Recipe::Row, Role::Weight, FormatPolicy::E4M3, 256, 128, 384},
      {Recipe::Row, Role::Gradient, Recipe::Row, Role::Weight, FormatPolicy::Hybrid, 127, 255, 129},
      {Recipe::Block, Role::Activation, Recipe::Block, Role::Weight, FormatPolicy::E4M3, 256, 384, 512},
      {Recipe::Block, Role::Gradient, Recipe::Block, Role::Weight, FormatPolicy::Hybrid, 128, 256, 384},
      {Recipe::Block, Role::Gradient, Recipe::Block, Role::Activation, FormatPolicy::Hybrid, 256, 128, 512},
      {Recipe::Block, Role::Activation, Recipe::Block, Role::Weight, FormatPolicy::E4M3, 133, 129, 257},
      {Recipe::Block, Role::Weight, Recipe::Block, Role::Weight, FormatPolicy::E4M3, 256, 256, 256},
      {Recipe::MX, Role::Activation, Recipe::MX, Role::Weight, FormatPolicy::E4M3, 96, 64, 160},
  };
  for (const auto& c : cases) {
    run_fp8_case(gemm, c, 0.0f);
    run_fp8_case(gemm, c, 1.0f);
    if (HasFailure()) return;
  }
}

TEST(CudaGemm, ForcedFallbackMeetsTheSameBound) {
  OCTET_REQUIRE_GPU();
  cuda::GemmEngine gemm(gpu().stream());
  gemm.set_force_fallback(true);
  run_fp8_case(
      gemm, {Recipe::Block, Role::Activation, Recipe::Block, Role::Weight, FormatPolicy::E4M3, 129, 130, 300},
      1.0f);
  run_fp8_case(gemm,
               {Recipe::TensorCurrent, Role::Gradient, Recipe::TensorCurrent, Role::Weight,
                FormatPolicy::Hybrid, 64, 48, 96},
               0.0f);
  EXPECT_EQ(gemm.fallback_count(), 2);
}

TEST(CudaGemm, E5M2TimesE5M2IsRefusedClearly) {
  OCTET_REQUIRE_GPU();
  cuda::GemmEngine gemm(gpu().stream());
  QuantConfig cfg;
  cfg.formats = FormatPolicy::Hybrid;
  const Operand A = make_operand(cfg, Role::Gradient, 32, 32, 1, 1.0f);
  const Operand B = make_operand(cfg, Role::Gradient, 32, 32, 2, 1.0f);
  Dev<float> C(size_t(32 * 32));
  EXPECT_THROW(gemm.fp8(A.q.view, B.q.view, C.ptr()), Error);
}

TEST(CudaGemm, Bf16AndF32MatchCpu) {
  OCTET_REQUIRE_GPU();
  cuda::GemmEngine gemm(gpu().stream());
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{64, 96, 128}, {33, 17, 70}, {1, 5, 3}}) {
    const auto a = test::gaussian(size_t(M * K), 11u);
    const auto b = test::gaussian(size_t(N * K), 12u);
    const auto c0 = test::gaussian(size_t(M * N), 13u);
    Dev<float> da(a), db(b), dc(c0);
    // FP32: C = C + A·Bᵀ
    gemm.f32(da.ptr(), false, db.ptr(), true, dc.ptr(), M, N, K, 1.0f);
    std::vector<float> want = c0;
    gemm_f32(a.data(), b.data(), want.data(), M, N, K, 1.0f);
    check_bound(dc.get(), want, a, b, M, N, K, double(K) * std::ldexp(1.0, -23), "f32", &c0);
    // BF16: operands rounded on the device (convert_launch) as gemm_bf16 rounds them.
    Dev<uint16_t> ab = to_bf16(da, M * K), bb = to_bf16(db, N * K);
    Dev<float> dc2(size_t(M * N));
    gemm.bf16(ab.ptr(), false, bb.ptr(), true, dc2.ptr(), M, N, K);
    std::vector<float> want2(size_t(M * N));
    gemm_bf16(a.data(), b.data(), want2.data(), M, N, K, 0.0f);
    std::vector<float> ar(a.size()), br(b.size());
    for (size_t i = 0; i < a.size(); ++i) ar[i] = bf16_round(a[i]);
    for (size_t i = 0; i < b.size(); ++i) br[i] = bf16_round(b[i]);
    check_bound(dc2.get(), want2, ar, br, M, N, K, double(K) * std::ldexp(1.0, -23), "bf16");
    // BF16 with a transposed operand (the wgrad form): A stored row-major [K, M], used as Aᵀ.
    std::vector<float> at(size_t(K * M));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) at[size_t(k * M + i)] = a[size_t(i * K + k)];
    Dev<float> dat(at);
    Dev<uint16_t> atb = to_bf16(dat, K * M);
    Dev<float> dc3(size_t(M * N));
    gemm.bf16(atb.ptr(), true, bb.ptr(), true, dc3.ptr(), M, N, K);
    check_bound(dc3.get(), want2, ar, br, M, N, K, double(K) * std::ldexp(1.0, -23), "bf16 transA");
  }
}

// A BF16 C (gemm.h: cuBLASLt's epilogue rounds the FP32 result once; the FP32 scratch + rounding
// pass where no BF16-output algorithm exists, forced here through the dequantize fallback) holds
// the FP32 C rounded to BF16: within half a BF16 ulp of it, plus the accumulation-order difference
// two cuBLASLt algorithms may have (1e-3 of the largest |C|). Padded FP8 shapes, block scales, BF16.
TEST(CudaGemm, Bf16OutputIsTheFp32ResultRoundedOnce) {
  OCTET_REQUIRE_GPU();
  auto compare = [](const Dev<uint16_t>& c16, const Dev<float>& c32, const std::string& what) {
    const std::vector<uint16_t> got = c16.get();
    const std::vector<float> want = c32.get();
    double peak = 0.0;
    for (float v : want) peak = std::max(peak, double(std::fabs(v)));
    ASSERT_GT(peak, 0.0) << what;
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(bf16_to_float(got[i]), want[i], std::fabs(want[i]) * 0x1p-8 + 1e-3 * peak)
          << what << " at " << i;
  };
  for (bool force : {false, true}) {
    cuda::GemmEngine gemm(gpu().stream());
    gemm.set_force_fallback(force);
    struct C {
      Recipe ra;
      Role role_a;
      Recipe rb;
      Role role_b;
      int64_t M, N, K;
    };
    for (const C& c :
         {C{Recipe::TensorCurrent, Role::Activation, Recipe::TensorCurrent, Role::Weight, 129, 133, 257},
          C{Recipe::Block, Role::Activation, Recipe::Block, Role::Weight, 130, 72, 200}}) {
      QuantConfig ca, cb;
      ca.recipe = c.ra;
      cb.recipe = c.rb;
      ca.formats = cb.formats = FormatPolicy::Hybrid;
      const Operand A = make_operand(ca, c.role_a, c.M, c.K, 5u, 1.0f);
      const Operand B = make_operand(cb, c.role_b, c.N, c.K, 6u, 0.02f);
      Dev<float> c32(size_t(c.M * c.N));
      Dev<uint16_t> c16(size_t(c.M * c.N));
      gemm.fp8(A.q.view, B.q.view, c32.ptr());
      gemm.fp8(A.q.view, B.q.view, Tensor(c16.ptr(), DType::BF16, {c.M, c.N}));
      compare(c16, c32, "fp8 " + to_string(c.ra) + (force ? " (fallback)" : ""));
    }
  }
  cuda::GemmEngine gemm(gpu().stream());
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{64, 96, 128}, {33, 17, 70}}) {
    Dev<float> da(test::gaussian(size_t(M * K), 31u)), db(test::gaussian(size_t(N * K), 32u));
    Dev<uint16_t> ab = to_bf16(da, M * K), bb = to_bf16(db, N * K);
    Dev<float> c32(size_t(M * N));
    Dev<uint16_t> c16(size_t(M * N));
    gemm.bf16(ab.ptr(), false, bb.ptr(), true, c32.ptr(), M, N, K);
    gemm.bf16(ab.ptr(), false, bb.ptr(), true, Tensor(c16.ptr(), DType::BF16, {M, N}), M, N, K);
    compare(c16, c32, "bf16 " + std::to_string(M) + "x" + std::to_string(N));
  }
  Dev<uint16_t> c16(4);
  Dev<float> a(std::vector<float>(4, 1.0f));
  Dev<uint16_t> ab = to_bf16(a, 4);
  EXPECT_THROW(
      gemm.bf16(ab.ptr(), false, ab.ptr(), true, Tensor(c16.ptr(), DType::BF16, {2, 2}), 2, 2, 2, 1.0f),
      Error)
      << "a BF16 C must refuse beta != 0";
}

TEST(CudaGemm, BatchedFp8EqualsOneGemmPerBatch) {
  OCTET_REQUIRE_GPU();
  cuda::GemmEngine gemm(gpu().stream());
  const int64_t batch = 3, M = 48, N = 32, K = 64;
  QuantConfig cfg;
  const Operand A = make_operand(cfg, Role::Activation, batch * M, K, 21, 1.0f);
  const Operand B = make_operand(cfg, Role::Weight, batch * N, K, 22, 1.0f);
  cuda::DevQTensor a = A.q.view, b = B.q.view;
  a.set_shape(M, K);
  b.set_shape(N, K);
  Dev<float> C(size_t(batch * M * N));
  gemm.fp8(a, b, C.ptr(), 0.0f, 0.5f, {int(batch), M * K, N * K, M * N});
  const auto got = C.get();
  for (int64_t i = 0; i < batch; ++i) {
    cuda::DevQTensor ai = a, bi = b;
    ai.codes += i * M * K;
    bi.codes += i * N * K;
    Dev<float> Ci(size_t(M * N));
    gemm.fp8(ai, bi, Ci.ptr(), 0.0f, 0.5f);
    const auto one = Ci.get();
    double peak = 0.0;
    for (float v : one) peak = std::max(peak, double(std::fabs(v)));
    ASSERT_GT(peak, 0.0);
    for (int64_t j = 0; j < M * N; ++j)  // algorithms may differ: agreement to FP8-GEMM accuracy
      ASSERT_NEAR(got[size_t(i * M * N + j)], one[size_t(j)], 1e-3 * peak)
          << "batch " << i << " element " << j;
  }
}

}  // namespace
}  // namespace octet
