// quantize_test.cpp — the GPU quantizer (src/cuda/quantize/quantize.cu, quantizer.cpp) against the CPU
// reference Quantizer (src/fp8): codes and scales must be bitwise equal, for every recipe, role and
// format policy, on awkward shapes (1, 7, 127, 129, 133, 255, 257: partial 16-padding, partial
// 1x32/1x128/128x128 blocks), for inputs with zeros, a NaN, an all-zero tensor, and non-saturating
// casts that overflow, from F32 and from BF16 sources. The column-wise copy is compared with the CPU's
// quantize_transposed(). Tensor-delayed follows quant.h's quantize-then-update: codes, scales, the
// recorded amax and the state after each update() are the CPU's, over micro-batches and a NaN step.
// The tensor-amax pre-pass is checked against the host max on aligned and misaligned sources, and
// the amax a producer kernel (norm, GELU) computes gives the codes of the pre-pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cuda/runtime/cuda_backend.h"
#include "cuda/ops/ops.h"
#include "cuda/quantize/quantize.h"
#include "cuda/quantize/quantizer.h"
#include "cuda/cuda_test_util.h"
#include "octet/fp8.h"
#include "octet/quant.h"

namespace octet {
namespace {

using test::Dev;

void expect_same(const QTensor& gpu, const QTensor& cpu, const std::string& what) {
  ASSERT_EQ(gpu.rows, cpu.rows) << what;
  ASSERT_EQ(gpu.cols, cpu.cols) << what;
  ASSERT_EQ(gpu.block.rows, cpu.block.rows) << what;
  ASSERT_EQ(gpu.block.cols, cpu.block.cols) << what;
  ASSERT_EQ(gpu.scale_inv.size(), cpu.scale_inv.size()) << what;
  int64_t bad_codes = 0, first = -1;
  for (size_t i = 0; i < cpu.codes.size(); ++i)
    if (gpu.codes[i] != cpu.codes[i]) {
      if (first < 0) first = int64_t(i);
      ++bad_codes;
    }
  EXPECT_EQ(bad_codes, 0) << what << ": first mismatch at " << first << " gpu "
                          << int(gpu.codes[size_t(std::max<int64_t>(first, 0))]) << " cpu "
                          << int(cpu.codes[size_t(std::max<int64_t>(first, 0))]);
  for (size_t i = 0; i < cpu.scale_inv.size(); ++i)
    ASSERT_TRUE(test::same_float(gpu.scale_inv[i], cpu.scale_inv[i]))
        << what << ": scale_inv[" << i << "] gpu " << gpu.scale_inv[i] << " cpu " << cpu.scale_inv[i];
}

// Quantizes x on both sides (row-wise + column-wise on the GPU in one pass; quantize() and
// quantize_transposed() on the CPU) and compares everything that must match.
// The CUDA backend (device 0, its own stream) and a quantizer on it.
struct Gpu {
  cuda::CudaBackend be{CudaOptions{}};
  cuda::CudaQuantizer make(const QuantConfig& cfg, Role role) {
    return cuda::CudaQuantizer(cfg, role, be, be.stream());
  }
};

// bf16 = true: the GPU source is the BF16 tensor of x and the CPU quantizes its FP32 values.
void check_once(cuda::CudaQuantizer& gq, Quantizer& cq, std::vector<float> x, int64_t rows, int64_t cols,
                const std::string& what, bool bf16 = false) {
  const cudaStream_t s = gq.stream();
  const test::DevSource dev(x, bf16);
  const Tensor src(const_cast<void*>(dev.ptr()), bf16 ? DType::BF16 : DType::F32, {rows, cols});
  cuda::DevQ row, col;
  gq.quantize(src, &row, &col);
  QTensor cr, cc;
  cq.quantize(x.data(), rows, cols, cr);
  cq.quantize_transposed(x.data(), rows, cols, cc);
  expect_same(cuda::to_host(row.view, s), cr, what + " row-wise");
  expect_same(cuda::to_host(col.view, s), cc, what + " column-wise");
  EXPECT_TRUE(test::same_float(gq.last_amax(), cr.amax))
      << what << ": amax " << gq.last_amax() << " vs " << cr.amax;
  int64_t under = 0, sat = 0;
  gq.last_counts(0, &under, &sat);
  EXPECT_EQ(under, cr.n_underflow) << what;
  EXPECT_EQ(sat, cr.n_saturated) << what;
  gq.last_counts(1, &under, &sat);
  EXPECT_EQ(under, cc.n_underflow) << what << " (column-wise)";
  EXPECT_EQ(sat, cc.n_saturated) << what << " (column-wise)";
}

// Awkward shapes (partial tiles, one element per load) and, from {129, 512} on, columns that are
// multiples of 4: the tile kernel's vector loads (BF16 for odd row counts: check_once's rule).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},     {7, 129},   {127, 133}, {129, 7},
                                                          {255, 257}, {257, 255}, {133, 1},   {1, 257},
                                                          {129, 512}, {256, 384}, {131, 4}};

TEST(CudaQuantize, StatelessRecipesMatchCpuBitwise) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  int64_t checked = 0;
  for (Recipe recipe : {Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX, Recipe::Unit})
    for (Role role : {Role::Activation, Role::Weight, Role::Gradient})
      for (FormatPolicy pol : {FormatPolicy::E4M3, FormatPolicy::Hybrid})
        for (auto [rows, cols] : kShapes)
          for (int input = 0; input < 3; ++input) {
            QuantConfig cfg;
            cfg.recipe = recipe;
            cfg.formats = pol;
            cfg.unit_scale = 3.0f;
            std::vector<float> x = test::awkward_values(size_t(rows * cols), uint32_t(rows * 31 + cols));
            if (input == 1) x[x.size() / 2] = NAN;     // a NaN is carried, never dropped
            if (input == 2) x.assign(x.size(), 0.0f);  // zero tensor: scale 1, codes 0
            const std::string what = to_string(recipe) + " role " + std::to_string(int(role)) + " " +
                                     to_string(pol) + " " + std::to_string(rows) + "x" +
                                     std::to_string(cols) + " input " + std::to_string(input);
            cuda::CudaQuantizer gq = gpu.make(cfg, role);
            Quantizer cq(cfg, role);
            check_once(gq, cq, x, rows, cols, what, /*bf16=*/input == 0 && rows % 2 == 1);
            ++checked;
            if (HasFatalFailure()) return;
          }
  EXPECT_GT(checked, 900);
}

TEST(CudaQuantize, NonSaturatingOverflowAndMarginsMatchCpu) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  for (Recipe recipe : {Recipe::TensorCurrent, Recipe::Row, Recipe::Block})
    for (bool pow2 : {false, true})
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{129, 133}, {7, 257}}) {
        QuantConfig cfg;
        cfg.recipe = recipe;
        cfg.formats = FormatPolicy::Hybrid;
        cfg.margin = -2;  // s = 4·fp8_max/amax: the largest values overflow
        cfg.saturate = false;
        cfg.pow2_scales = pow2;
        const auto x = test::gaussian(size_t(rows * cols), 7u + uint32_t(rows));
        for (Role role : {Role::Activation, Role::Gradient}) {
          cuda::CudaQuantizer gq = gpu.make(cfg, role);
          Quantizer cq(cfg, role);
          check_once(gq, cq, x, rows, cols,
                     to_string(recipe) + (pow2 ? " pow2" : "") + " role " + std::to_string(int(role)));
          int64_t under = 0, sat = 0;
          gq.last_counts(0, &under, &sat);
          EXPECT_GT(sat, 0) << "the margin must make some values overflow (test premise)";
        }
      }
}

// Quantize-then-update (quant.h): every quantization uses the current scale (the tensor's own
// amax while the history is empty) and records its amax; update() folds the max of the recorded
// amaxes into the history. Steps have 1 or 2 micro-batches; step 3 holds a NaN (overflow: the scale
// is kept, the history does not advance, the count grows); step 5 has no quantization at all
// (update is a no-op). Codes, scales, the recorded amax and the state match the CPU bitwise.
TEST(CudaQuantize, DelayedScalingQuantizeThenUpdateFollowsCpu) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  for (AmaxAlgo algo : {AmaxAlgo::Max, AmaxAlgo::MostRecent}) {
    QuantConfig cfg;
    cfg.recipe = Recipe::TensorDelayed;
    cfg.amax_history_len = 3;
    cfg.amax_algo = algo;
    cfg.margin = 1;
    const int64_t rows = 129, cols = 133;
    cuda::CudaQuantizer gq = gpu.make(cfg, Role::Activation);
    Quantizer cq(cfg, Role::Activation);
    const float mags[] = {1.0f, 40.0f, 0.01f, 5.0f, 0.5f, 0.0f, 0.25f, 2.0f};
    for (int step = 0; step < 8; ++step) {
      const int micro = step == 5 ? 0 : 1 + step % 2;
      for (int mb = 0; mb < micro; ++mb) {
        auto x = test::gaussian(size_t(rows * cols), 100u + uint32_t(10 * step + mb),
                                mags[step] * float(1 + 3 * mb));
        if (step == 3 && mb == 0) x[17] = NAN;
        check_once(gq, cq, x, rows, cols,
                   "delayed step " + std::to_string(step) + " micro-batch " + std::to_string(mb),
                   /*bf16=*/mb == 1);
      }
      EXPECT_TRUE(test::same_float(gq.pending_amax(), cq.pending_amax()))
          << "step " << step << ": recorded amax gpu " << gq.pending_amax() << " cpu " << cq.pending_amax();
      gq.update();
      cq.update();
      EXPECT_EQ(gq.last_overflow(), cq.last_overflow()) << "step " << step;
      EXPECT_EQ(gq.overflow_count(), cq.overflow_count()) << "step " << step;
      EXPECT_TRUE(test::same_float(gq.delayed_scale(), cq.delayed_scale()))
          << "step " << step << ": next scale gpu " << gq.delayed_scale() << " cpu " << cq.delayed_scale();
      const DelayedState a = gq.delayed_state(), b = cq.delayed_state();
      EXPECT_EQ(a.history, b.history) << "step " << step;
      EXPECT_EQ(gq.pending_amax(), -1.0f) << "update() clears the recorded amax";
      if (HasFailure()) return;
    }
    EXPECT_EQ(cq.overflow_count(), 1);
    // A replaced recorded amax (the cross-rank reduction's hook) is what the update folds in.
    gq.set_pending_amax(123.0f);
    cq.set_pending_amax(123.0f);
    gq.update();
    cq.update();
    EXPECT_TRUE(test::same_float(gq.delayed_scale(), cq.delayed_scale()));
    EXPECT_EQ(gq.delayed_state().history, cq.delayed_state().history);
  }
}

// The two orientations quantized by separate calls between two updates share the delayed scale
// (quant.h: quantize_transposed uses the same scale as quantize).
TEST(CudaQuantize, SeparateOrientationsShareTheDelayedScale) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  QuantConfig cfg;
  cfg.recipe = Recipe::TensorDelayed;
  const int64_t rows = 33, cols = 70;
  cuda::CudaQuantizer gq = gpu.make(cfg, Role::Weight);
  Quantizer cq(cfg, Role::Weight);
  for (int step = 0; step < 3; ++step) {
    const auto x = test::gaussian(size_t(rows * cols), 5u + uint32_t(step), float(step + 1));
    Dev<float> dx(x);
    const Tensor src(dx.ptr(), DType::F32, {rows, cols});
    cuda::DevQ row, col;
    QTensor cr, cc;
    gq.quantize(src, &row, nullptr);
    cq.quantize(x.data(), rows, cols, cr);
    gq.quantize(src, nullptr, &col);
    cq.quantize_transposed(x.data(), rows, cols, cc);
    expect_same(cuda::to_host(row.view, gq.stream()), cr, "row step " + std::to_string(step));
    expect_same(cuda::to_host(col.view, gq.stream()), cc, "transposed step " + std::to_string(step));
    gq.update();
    cq.update();
  }
}

// The streaming tensor amax (tensor_amax_launch): the max of |x| over every element, for F32 and
// BF16 sources, 16-byte aligned (vector loads + tail) or not (a view one element in), with a NaN
// that must win over every finite value and over an existing larger amax; skip_if > 0 does nothing.
TEST(CudaQuantize, TensorAmaxIsTheMaxOfAbsoluteValues) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  const cudaStream_t s = gpu.be.stream();
  Dev<unsigned> amax(size_t(1));
  Dev<int> skip(std::vector<int>{1});
  for (const int64_t n : {1, 7, 8, 1000, 4099, 100003})
    for (const bool bf16 : {false, true})
      for (const int64_t offset : {0, 1})
        for (const bool with_nan : {false, true}) {
          const std::string what = "n " + std::to_string(n) + (bf16 ? " bf16" : " f32") + " offset " +
                                   std::to_string(offset) + (with_nan ? " NaN" : "");
          std::vector<float> x = test::awkward_values(size_t(n + offset), uint32_t(n) + 5u);
          if (with_nan) x[size_t(offset + n / 2)] = NAN;
          const test::DevSource dev(x, bf16, size_t(offset));
          const void* src = dev.ptr();
          float expect = 0.0f;
          for (int64_t i = offset; i < offset + n; ++i) expect = std::max(expect, std::fabs(x[size_t(i)]));
          amax.set(std::vector<unsigned>{0x3F800000u});  // an existing amax of 1.0 is kept if larger
          cuda::tensor_amax_launch(src, bf16, n, nullptr, amax.ptr(), s);
          unsigned bits = amax.get()[0];
          float got;
          std::memcpy(&got, &bits, sizeof(got));
          if (with_nan) {
            EXPECT_GT(bits, 0x7F800000u) << what << ": a NaN must make the amax NaN";
          } else {
            EXPECT_EQ(got, std::max(expect, 1.0f)) << what;
          }
          cuda::tensor_amax_launch(src, bf16, n, skip.ptr(), amax.ptr(), s);
          EXPECT_EQ(amax.get()[0], bits) << what << ": skip_if > 0 must leave the amax alone";
        }
}

// Amax in the producer (ops.h amax outputs; quantizer.h quantize(..., amax)): LayerNorm, RMSNorm
// and GELU forwards reduce |y| as stored; tensor-current quantization with that amax (no pre-pass)
// gives bitwise the codes, scales and amax of the quantization with its own pre-pass. F32 and BF16
// outputs, a row width on the 8-wide path (1024) and one off it (129).
TEST(CudaQuantize, ProducerAmaxGivesThePrePassCodes) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  const cudaStream_t s = gpu.be.stream();
  const int64_t rows = 37;
  for (const int64_t dim : {1024, 129})
    for (const DType out : {DType::F32, DType::BF16})
      for (const std::string producer : {"layernorm", "rmsnorm", "gelu"}) {
        const std::string what = producer + " dim " + std::to_string(dim) + " " + to_string(out);
        Dev<float> x(test::gaussian(size_t(rows * dim), uint32_t(dim) + 3u, 2.0f));
        Dev<float> w(test::gaussian(size_t(dim), 4u)), b(test::gaussian(size_t(dim), 5u));
        Dev<float> mean{size_t(rows)}, rstd{size_t(rows)};
        Dev<float> yf{size_t(rows * dim)};
        Dev<uint16_t> yb{size_t(rows * dim)};
        const Tensor xt(x.ptr(), DType::F32, {rows, dim});
        const Tensor yt = out == DType::F32 ? Tensor(yf.ptr(), DType::F32, {rows, dim})
                                            : Tensor(yb.ptr(), DType::BF16, {rows, dim});
        Dev<unsigned> amax(std::vector<unsigned>{0u});
        if (producer == "layernorm")
          cuda::layernorm_forward_launch(xt, w.ptr(), b.ptr(), yt, mean.ptr(), rstd.ptr(), rows, dim, 1e-5f,
                                         s, amax.ptr());
        else if (producer == "rmsnorm")
          cuda::rmsnorm_forward_launch(xt, w.ptr(), yt, rstd.ptr(), rows, dim, 1e-5f, s, amax.ptr());
        else
          cuda::gelu_forward_launch(xt, yt, s, amax.ptr());
        QuantConfig cfg;
        cfg.recipe = Recipe::TensorCurrent;
        cuda::CudaQuantizer fused = gpu.make(cfg, Role::Activation), plain = gpu.make(cfg, Role::Activation);
        cuda::DevQ r1, c1, r2, c2;
        fused.quantize(yt, &r1, &c1, amax.ptr());
        plain.quantize(yt, &r2, &c2);
        expect_same(cuda::to_host(r1.view, s), cuda::to_host(r2.view, s), what + " row-wise");
        expect_same(cuda::to_host(c1.view, s), cuda::to_host(c2.view, s), what + " column-wise");
        EXPECT_TRUE(test::same_float(fused.last_amax(), plain.last_amax())) << what;
        EXPECT_GT(plain.last_amax(), 0.0f) << what << " (test premise)";
        if (HasFatalFailure()) return;
      }
}

TEST(CudaQuantize, DequantizeMatchesCpu) {
  OCTET_REQUIRE_GPU();
  Gpu gpu;
  for (Recipe recipe : {Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX}) {
    QuantConfig cfg;
    cfg.recipe = recipe;
    const int64_t rows = 131, cols = 257;
    const auto x = test::gaussian(size_t(rows * cols), 3u);
    Dev<float> dx(x);
    cuda::CudaQuantizer gq = gpu.make(cfg, Role::Weight);
    cuda::DevQ row;
    gq.quantize(Tensor(dx.ptr(), DType::F32, {rows, cols}), &row, nullptr);
    Dev<float> out(size_t(rows * cols));
    cuda::dequantize_launch(row.view, out.ptr(), gq.stream());
    const auto g = out.get();
    const QTensor h = cuda::to_host(row.view, gq.stream());
    std::vector<float> c(size_t(rows * cols));
    dequantize(h, c.data());
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_TRUE(test::same_float(g[i], c[i])) << to_string(recipe) << " at " << i;
  }
}

}  // namespace
}  // namespace octet
