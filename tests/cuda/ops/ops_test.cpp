// ops_test.cpp — every non-GEMM operation of the CUDA backend against its CPU twin (backend.h):
// memory, axpy/scale, copy_spans, embedding (forward, scatter-add with repeated ids), RMSNorm/LayerNorm
// forward and backward (RMSNorm with and without its weight; LayerNorm, whose weight is required, with and
// without its bias), RoPE (forward and its inverse), GELU, SwiGLU, the head layouts, cross-entropy
// (ignored targets, dlogits aliasing logits), sum_squares, moments, AdamW.
// Each test runs with F32 and with BF16 activation tensors (the same values on both backends; the
// CPU twin rounds its BF16 outputs as the GPU does). Both sides use double for reductions; the bound
// is |gpu − cpu| <= rtol·(|cpu| + scale) with the scale the largest |cpu| of that output (FP32
// rounding of differently ordered sums), plus one BF16 ulp of |cpu| for BF16 outputs (two FP32
// results that differ in their last bits may round to neighbouring BF16 values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/fp8.h"

namespace octet {
namespace {

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    cpu = make_cpu_backend();
    gpu = make_cuda_backend();
    act = GetParam();
  }
  // A tensor on both backends holding `h` (rounded to BF16 first for a BF16 dtype).
  struct Pair {
    Buffer c, g;
    const Tensor& tc() const { return c.tensor(); }
    const Tensor& tg() const { return g.tensor(); }
  };
  Pair make(const std::vector<float>& h, Shape s, DType dt) {
    Pair p{cpu->alloc(dt, s), gpu->alloc(dt, s)};
    if (dt == DType::BF16) {
      std::vector<uint16_t> b(h.size());
      for (size_t i = 0; i < h.size(); ++i) b[i] = bf16_from_float(h[i]);
      cpu->upload(p.tc(), b.data());
      gpu->upload(p.tg(), b.data());
    } else {
      cpu->upload(p.tc(), h.data());
      gpu->upload(p.tg(), h.data());
    }
    return p;
  }
  Pair make(const std::vector<float>& h, Shape s) { return make(h, s, act); }  // act
  Pair param(const std::vector<float>& h, Shape s) { return make(h, s, DType::F32); }
  Pair zeros(Shape s, DType dt) { return make(std::vector<float>(size_t(s.numel()), 0.0f), s, dt); }
  Pair zeros(Shape s) { return zeros(s, act); }
  Pair ids(const std::vector<int32_t>& h) {
    const Shape s{int64_t(h.size())};
    Pair p{cpu->alloc(DType::I32, s), gpu->alloc(DType::I32, s)};
    cpu->upload(p.tc(), h.data());
    gpu->upload(p.tg(), h.data());
    return p;
  }
  Pair acc() { return zeros(Shape{1}, DType::F64); }
  void expect_close(const Pair& p, const std::string& what, double rtol = 1e-5) {
    const std::vector<float> hc = cpu->download_f32(p.tc()), hg = gpu->download_f32(p.tg());
    const bool bf16 = p.tc().dtype == DType::BF16;
    double scale = 0.0;
    for (float v : hc) scale = std::max(scale, double(std::fabs(v)));
    ASSERT_GT(scale, 0.0) << what << ": reference output is all zero (vacuous)";
    for (size_t i = 0; i < hc.size(); ++i) {
      const double ulp = bf16 ? std::fabs(hc[i]) * 0x1p-7 : 0.0;  // >= one BF16 spacing at hc[i]
      ASSERT_NEAR(hg[i], hc[i], rtol * (std::fabs(hc[i]) + scale) + ulp)
          << what << " (" << to_string(p.tc().dtype) << ") at " << i;
    }
  }
  std::unique_ptr<Backend> cpu, gpu;
  DType act = DType::F32;
};

TEST_P(CudaOps, MemoryAxpyScaleFillCopy) {
  const int64_t n = 1000;
  auto x = make(test::gaussian(size_t(n), 1), {n}), y = make(test::gaussian(size_t(n), 2), {n});
  EXPECT_EQ(gpu->download_f32(x.tg()), cpu->download_f32(x.tc())) << "upload/download round trip";
  cpu->axpy(0.5f, x.tc(), y.tc());
  gpu->axpy(0.5f, x.tg(), y.tg());
  cpu->scale(-3.0f, y.tc());
  gpu->scale(-3.0f, y.tg());
  expect_close(y, "axpy+scale", 1e-7);
  {  // n % 8 != 0 and an odd offset: the 8-wide path's tail, and the scalar path
    const int64_t m = 1003;
    auto x2 = make(test::gaussian(size_t(m), 3), {m}), y2 = make(test::gaussian(size_t(m), 4), {m});
    cpu->axpy(-1.5f, x2.tc(), y2.tc());
    gpu->axpy(-1.5f, x2.tg(), y2.tg());
    cpu->scale(0.25f, y2.tc().slice(1, m - 1));
    gpu->scale(0.25f, y2.tg().slice(1, m - 1));
    expect_close(y2, "axpy+scale, 1003 elements", 1e-7);
  }
  auto z = zeros({n});
  cpu->copy(z.tc(), y.tc());
  gpu->copy(z.tg(), y.tg());
  expect_close(z, "copy", 0.0);
  auto zf = zeros({n}, act == DType::F32 ? DType::BF16 : DType::F32);  // converting copy
  cpu->copy(zf.tc(), y.tc());
  gpu->copy(zf.tg(), y.tg());
  expect_close(zf, "converting copy", 0.0);
  cpu->fill(z.tc().slice(0, n / 2), 2.5);
  gpu->fill(z.tg().slice(0, n / 2), 2.5);
  expect_close(z, "fill", 0.0);
  const Buffer a = gpu->alloc(act, {17});
  EXPECT_EQ(gpu->download_f32(a), std::vector<float>(17, 0.0f)) << "alloc must zero-initialize";
}

TEST_P(CudaOps, CopySpansEqualsTheTwin) {
  // Row blocks of 24 elements gathered from a packed [40, 24] into a padded [3, 16, 24] and
  // scattered back: unaligned runs (3 elements from element 5), an empty span, and untouched
  // elements left as they were (non-zero before the copy).
  const int64_t w = 24, n = 40 * w, m = 3 * 16 * w;
  auto src = make(test::gaussian(size_t(n), 5), {n});
  auto dst = make(test::gaussian(size_t(m), 6), {m});
  const std::vector<CopySpan> gather = {
      {0, 0, 7 * w}, {7 * w, 16 * w, 16 * w}, {23 * w, 32 * w, 17 * w - 8}, {5, 15 * w, 3}, {0, 0, 0}};
  cpu->copy_spans(dst.tc(), src.tc(), gather);
  gpu->copy_spans(dst.tg(), src.tg(), gather);
  expect_close(dst, "gather", 0.0);
  std::vector<CopySpan> scatter;
  for (const CopySpan& c : gather) scatter.push_back({c.dst_at, c.src_at, c.count});
  scatter.pop_back();
  scatter.pop_back();  // the two overlapping destinations of the gather's first and fourth spans
  cpu->copy_spans(src.tc(), dst.tc(), scatter);
  gpu->copy_spans(src.tg(), dst.tg(), scatter);
  expect_close(src, "scatter", 0.0);
  EXPECT_THROW(gpu->copy_spans(dst.tg(), src.tg(), {{n - 3, 0, 4}}), Error) << "past src's end";
  auto other = zeros({m}, act == DType::F32 ? DType::BF16 : DType::F32);
  EXPECT_THROW(gpu->copy_spans(other.tg(), src.tg(), {{0, 0, 1}}), Error) << "dtype mismatch";
}

TEST_P(CudaOps, EmbeddingForwardAndScatterAdd) {
  const int64_t vocab = 50, dim = 33, n = 77;
  std::vector<int32_t> h(n);
  for (int64_t i = 0; i < n; ++i) h[size_t(i)] = int32_t((i * 7) % 13);  // repeats on purpose
  auto id = ids(h);
  auto table = param(test::gaussian(size_t(vocab * dim), 3), {vocab, dim});
  auto out = zeros({n, dim});
  cpu->embedding_forward(id.tc(), table.tc(), out.tc());
  gpu->embedding_forward(id.tg(), table.tg(), out.tg());
  expect_close(out, "embedding_forward", 0.0);
  auto dout = make(test::gaussian(size_t(n * dim), 4), {n, dim});
  auto dtable = param(test::gaussian(size_t(vocab * dim), 5), {vocab, dim});
  cpu->embedding_backward(id.tc(), dout.tc(), dtable.tc());
  gpu->embedding_backward(id.tg(), dout.tg(), dtable.tg());
  expect_close(dtable, "embedding_backward", 0.0);  // the same order of FP32 additions: the same bits
}

// The embedding gradient is the CPU twin's bit for bit and the same run after run, with thousands of
// repeats of a few ids (where atomics would add in a varying order) and ids up to the vocabulary's end.
TEST_P(CudaOps, EmbeddingBackwardIsDeterministic) {
  const int64_t vocab = 70000, dim = 96, n = 6000;
  std::vector<int32_t> h(n);
  for (int64_t i = 0; i < n; ++i)
    h[size_t(i)] = i % 3 == 0 ? int32_t(vocab - 1 - i % 5) : int32_t((i * 31) % 97);
  auto id = ids(h);
  auto dout = make(test::gaussian(size_t(n * dim), 6), {n, dim});
  auto first = param(test::gaussian(size_t(vocab * dim), 7), {vocab, dim});
  auto again = param(test::gaussian(size_t(vocab * dim), 7), {vocab, dim});
  cpu->embedding_backward(id.tc(), dout.tc(), first.tc());
  gpu->embedding_backward(id.tg(), dout.tg(), first.tg());
  expect_close(first, "embedding_backward, 6000 rows", 0.0);
  gpu->embedding_backward(id.tg(), dout.tg(), again.tg());
  EXPECT_EQ(gpu->download_f32(first.g), gpu->download_f32(again.g)) << "run to run";
}

TEST_P(CudaOps, NormsForwardBackward) {
  for (int64_t dim : {1, 7, 129, 1024}) {
    const int64_t rows = 37;
    const size_t n = size_t(rows * dim);
    auto x = make(test::gaussian(n, 6, 2.0f), {rows, dim}), dy = make(test::gaussian(n, 7), {rows, dim});
    auto w = param(test::gaussian(size_t(dim), 8), {dim}), b = param(test::gaussian(size_t(dim), 9), {dim});
    for (bool with_w : {true, false}) {
      const std::string tag = " dim " + std::to_string(dim) + (with_w ? " weighted" : " unweighted");
      auto y = zeros({rows, dim}), dx = zeros({rows, dim});
      auto rstd = zeros({rows}, DType::F32), mean = zeros({rows}, DType::F32);
      auto dw = param(test::gaussian(size_t(dim), 10), {dim}),
           db = param(test::gaussian(size_t(dim), 11), {dim});
      const Tensor none;
      cpu->rmsnorm_forward(x.tc(), with_w ? w.tc() : none, y.tc(), rstd.tc(), 1e-5f);
      gpu->rmsnorm_forward(x.tg(), with_w ? w.tg() : none, y.tg(), rstd.tg(), 1e-5f);
      expect_close(y, "rmsnorm y" + tag);
      expect_close(rstd, "rmsnorm rstd" + tag);
      cpu->rmsnorm_backward(x.tc(), with_w ? w.tc() : none, rstd.tc(), dy.tc(), dx.tc(),
                            with_w ? dw.tc() : none, false);
      gpu->rmsnorm_backward(x.tg(), with_w ? w.tg() : none, rstd.tg(), dy.tg(), dx.tg(),
                            with_w ? dw.tg() : none, false);
      if (dim > 1) {
        expect_close(dx, "rmsnorm dx" + tag, 1e-4);
      } else {
        // dim 1: dx = rs·g·w − c·x cancels (x̂² ≈ 1). The GPU works per element in float (norms.cu),
        // the twin in double: the difference is a few FP32 ulps of the cancelled terms rs·|g·w|.
        const auto hc = cpu->download_f32(dx.tc()), hg = gpu->download_f32(dx.tg());
        const auto hr = cpu->download_f32(rstd.tc()), hdy = cpu->download_f32(dy.tc());
        const auto hw = cpu->download_f32(w.tc());
        for (int64_t r = 0; r < rows; ++r) {
          const double terms = hr[size_t(r)] * std::fabs(hdy[size_t(r)] * (with_w ? hw[0] : 1.0f));
          const double ulp = act == DType::BF16 ? std::fabs(hc[size_t(r)]) * 0x1p-7 : 0.0;
          ASSERT_NEAR(hg[size_t(r)], hc[size_t(r)], 0x1p-20 * terms + ulp)
              << "rmsnorm dx" << tag << " row " << r;
        }
      }
      {  // accumulate: the GPU's dx += g is bitwise its own write of g and axpy (CPU twin: norms_test)
        auto acc = make(test::gaussian(n, 13), {rows, dim}), two = make(test::gaussian(n, 13), {rows, dim});
        auto g = zeros({rows, dim});
        gpu->rmsnorm_backward(x.tg(), with_w ? w.tg() : none, rstd.tg(), dy.tg(), acc.tg(), none, true);
        gpu->rmsnorm_backward(x.tg(), with_w ? w.tg() : none, rstd.tg(), dy.tg(), g.tg(), none, false);
        gpu->axpy(1.0f, g.tg(), two.tg());
        EXPECT_EQ(gpu->download_f32(acc.tg()), gpu->download_f32(two.tg())) << "rmsnorm accumulate" << tag;
        gpu->layernorm_backward(x.tg(), w.tg(), mean.tg(), rstd.tg(), dy.tg(), acc.tg(), none, none, true);
        gpu->layernorm_backward(x.tg(), w.tg(), mean.tg(), rstd.tg(), dy.tg(), g.tg(), none, none, false);
        gpu->axpy(1.0f, g.tg(), two.tg());
        EXPECT_EQ(gpu->download_f32(acc.tg()), gpu->download_f32(two.tg())) << "layernorm accumulate" << tag;
        auto acc2 = make(test::gaussian(n, 14), {rows, dim});
        cpu->rmsnorm_backward(x.tc(), with_w ? w.tc() : none, rstd.tc(), dy.tc(), acc2.tc(), none, true);
        gpu->rmsnorm_backward(x.tg(), with_w ? w.tg() : none, rstd.tg(), dy.tg(), acc2.tg(), none, true);
        expect_close(acc2, "rmsnorm accumulate vs twin" + tag, 1e-4);
      }
      if (with_w) expect_close(dw, "rmsnorm dw" + tag, 1e-4);
      // LayerNorm always has its weight (backend.h); "unweighted" here means without the bias.
      cpu->layernorm_forward(x.tc(), w.tc(), with_w ? b.tc() : none, y.tc(), mean.tc(), rstd.tc(), 1e-5f);
      gpu->layernorm_forward(x.tg(), w.tg(), with_w ? b.tg() : none, y.tg(), mean.tg(), rstd.tg(), 1e-5f);
      if (dim > 1 || with_w) expect_close(y, "layernorm y" + tag);  // dim 1, no bias: y = 0
      cpu->layernorm_backward(x.tc(), w.tc(), mean.tc(), rstd.tc(), dy.tc(), dx.tc(), dw.tc(), db.tc(),
                              false);
      gpu->layernorm_backward(x.tg(), w.tg(), mean.tg(), rstd.tg(), dy.tg(), dx.tg(), dw.tg(), db.tg(),
                              false);
      if (dim > 1) expect_close(dx, "layernorm dx" + tag, 1e-4);
      expect_close(dw, "layernorm dw" + tag, 1e-4);
      expect_close(db, "layernorm db" + tag, 1e-4);
      // A LayerNorm without its weight is refused by both backends alike.
      EXPECT_THROW(cpu->layernorm_forward(x.tc(), none, b.tc(), y.tc(), mean.tc(), rstd.tc(), 1e-5f), Error);
      EXPECT_THROW(gpu->layernorm_forward(x.tg(), none, b.tg(), y.tg(), mean.tg(), rstd.tg(), 1e-5f), Error);
      EXPECT_THROW(gpu->layernorm_backward(x.tg(), none, mean.tg(), rstd.tg(), dy.tg(), dx.tg(), dw.tg(),
                                           db.tg(), false),
                   Error);
    }
  }
}

// The row kernels read the weight and bias 8 at a time: 16-byte loads when both are 16-byte aligned,
// else scalar loads. The two give the same bits (forward y, mean, rstd; backward dx, dw, db), at a
// width that is a multiple of the 256-element lane step and one that is not.
// Rows whose squares overflow FP32 (|x| ~ 1e19: a lane's FP32 sum of v² is inf): the GPU redoes
// that row's sums in double (norms.cu), so rstd, mean and y equal the twin's instead of rstd = 0, y = 0.
TEST_P(CudaOps, NormsOfRowsBeyondFp32SquaresMatchTheTwin) {
  const int64_t rows = 9, dim = 1024;
  auto xh = test::gaussian(size_t(rows * dim), 21, 1e19f);
  for (int64_t i = 0; i < dim; ++i) xh[size_t(i)] = 1.0f + 0.001f * float(i % 7);  // one ordinary row
  auto x = make(xh, {rows, dim});
  auto w = param(test::gaussian(size_t(dim), 22), {dim}), b = param(test::gaussian(size_t(dim), 23), {dim});
  auto y = zeros({rows, dim});
  auto rstd = zeros({rows}, DType::F32), mean = zeros({rows}, DType::F32);
  cpu->rmsnorm_forward(x.tc(), w.tc(), y.tc(), rstd.tc(), 1e-5f);
  gpu->rmsnorm_forward(x.tg(), w.tg(), y.tg(), rstd.tg(), 1e-5f);
  expect_close(rstd, "rmsnorm rstd of huge rows");
  expect_close(y, "rmsnorm y of huge rows");
  cpu->layernorm_forward(x.tc(), w.tc(), b.tc(), y.tc(), mean.tc(), rstd.tc(), 1e-5f);
  gpu->layernorm_forward(x.tg(), w.tg(), b.tg(), y.tg(), mean.tg(), rstd.tg(), 1e-5f);
  expect_close(rstd, "layernorm rstd of huge rows");
  expect_close(mean, "layernorm mean of huge rows");
  expect_close(y, "layernorm y of huge rows");
  for (float v : gpu->download_f32(rstd.tg())) EXPECT_GT(v, 0.0f);
}

TEST_P(CudaOps, NormsVectorAndScalarParameterLoadsAgreeBitwise) {
  for (int64_t dim : {2048, 1032}) {
    const int64_t rows = 45;
    const size_t n = size_t(rows * dim);
    auto x = make(test::gaussian(n, 21, 2.0f), {rows, dim}), dy = make(test::gaussian(n, 22), {rows, dim});
    std::vector<float> wh = test::gaussian(size_t(dim + 1), 23), bh = test::gaussian(size_t(dim + 1), 24);
    auto wp = param(wh, {dim + 1}), bp = param(bh, {dim + 1});
    auto w0 = param(std::vector<float>(wh.begin() + 1, wh.end()), {dim});
    auto b0 = param(std::vector<float>(bh.begin() + 1, bh.end()), {dim});
    const Tensor w1 = wp.tg().slice(1, dim), b1 = bp.tg().slice(1, dim);  // 4 bytes past alignment
    ASSERT_NE(reinterpret_cast<uintptr_t>(w1.data) % 16, 0u) << "premise: a misaligned weight";
    struct Out {
      std::vector<float> y, mean, rstd, dx, dw, db, ry, rrstd, rdx, rdw;
    };
    auto run = [&](const Tensor& w, const Tensor& b) {
      auto y = zeros({rows, dim}), dx = zeros({rows, dim});
      auto mean = zeros({rows}, DType::F32), rstd = zeros({rows}, DType::F32);
      auto dw = zeros({dim}, DType::F32), db = zeros({dim}, DType::F32);
      Out o;
      gpu->layernorm_forward(x.tg(), w, b, y.tg(), mean.tg(), rstd.tg(), 1e-5f);
      gpu->layernorm_backward(x.tg(), w, mean.tg(), rstd.tg(), dy.tg(), dx.tg(), dw.tg(), db.tg(), false);
      o.y = gpu->download_f32(y.tg()), o.mean = gpu->download_f32(mean.tg()),
      o.rstd = gpu->download_f32(rstd.tg());
      o.dx = gpu->download_f32(dx.tg()), o.dw = gpu->download_f32(dw.tg()), o.db = gpu->download_f32(db.tg());
      auto dw2 = zeros({dim}, DType::F32);
      gpu->rmsnorm_forward(x.tg(), w, y.tg(), rstd.tg(), 1e-5f);
      gpu->rmsnorm_backward(x.tg(), w, rstd.tg(), dy.tg(), dx.tg(), dw2.tg(), false);
      o.ry = gpu->download_f32(y.tg()), o.rrstd = gpu->download_f32(rstd.tg());
      o.rdx = gpu->download_f32(dx.tg()), o.rdw = gpu->download_f32(dw2.tg());
      return o;
    };
    const Out a = run(w0.tg(), b0.tg()), c = run(w1, b1);
    const std::string tag = " dim " + std::to_string(dim);
    auto same = [&](const std::vector<float>& u, const std::vector<float>& v, const char* what) {
      ASSERT_EQ(u.size(), v.size());
      size_t bad = 0;
      for (size_t i = 0; i < u.size(); ++i) bad += test::bits(u[i]) != test::bits(v[i]);
      EXPECT_EQ(bad, 0u) << what << tag;
    };
    same(a.y, c.y, "layernorm y"), same(a.mean, c.mean, "layernorm mean"),
        same(a.rstd, c.rstd, "layernorm rstd");
    same(a.dx, c.dx, "layernorm dx"), same(a.dw, c.dw, "layernorm dw"), same(a.db, c.db, "layernorm db");
    same(a.ry, c.ry, "rmsnorm y"), same(a.rrstd, c.rrstd, "rmsnorm rstd"), same(a.rdx, c.rdx, "rmsnorm dx");
    same(a.rdw, c.rdw, "rmsnorm dw");
    double scale = 0.0;
    for (float v : a.dw) scale = std::max(scale, double(std::fabs(v)));
    EXPECT_GT(scale, 0.0) << "premise: non-zero weight gradients" << tag;
  }
}

// The producers' amax outputs (backend.h): amax = max(amax, |y| max as stored) in float bits, for
// the norms' and GELU's forwards and GELU's backward — the bits of the host reduction of the
// downloaded output, on both backends (each of its own output); it accumulates (a larger start
// stays), a NaN input makes it NaN, and a wrong amax tensor is refused. Widths on the 8-wide and
// the scalar paths; row counts that leave a block's warps without a row.
TEST_P(CudaOps, ProducerAmaxIsTheAmaxOfTheStoredOutput) {
  auto host_amax = [](const std::vector<float>& v) {
    uint32_t m = 0;
    for (float f : v) m = std::max(m, test::bits(f) & 0x7FFFFFFFu);
    return m;
  };
  for (int64_t dim : {1024, 129}) {
    const int64_t rows = 37;
    const size_t n = size_t(rows * dim);
    auto x = make(test::gaussian(n, 31, 2.0f), {rows, dim}), dy = make(test::gaussian(n, 32), {rows, dim});
    auto w = param(test::gaussian(size_t(dim), 33), {dim}), b = param(test::gaussian(size_t(dim), 34), {dim});
    auto y = zeros({rows, dim});
    auto mean = zeros({rows}, DType::F32), rstd = zeros({rows}, DType::F32);
    auto amax = zeros({1}, DType::I32);
    const std::string tag = " dim " + std::to_string(dim);
    // Runs op on both backends from amax = start; checks each against its own stored output.
    auto check = [&](const char* what, uint32_t start, const std::function<void(Backend&, bool)>& op) {
      for (const bool on_gpu : {false, true}) {
        Backend& be = on_gpu ? *gpu : *cpu;
        const Tensor& a = on_gpu ? amax.tg() : amax.tc();
        const int32_t s = int32_t(start);
        be.upload(a, &s);
        op(be, on_gpu);
        int32_t got = 0;
        be.download(&got, a);
        const uint32_t want = std::max(start, host_amax(be.download_f32(on_gpu ? y.tg() : y.tc())));
        EXPECT_EQ(uint32_t(got), want) << what << tag << (on_gpu ? " gpu" : " cpu");
        EXPECT_GT(want, 0u) << what << ": premise, a non-zero output";
      }
    };
    for (const uint32_t start : {0u, test::bits(1e30f)}) {
      check("layernorm", start, [&](Backend& be, bool g) {
        be.layernorm_forward(g ? x.tg() : x.tc(), g ? w.tg() : w.tc(), g ? b.tg() : b.tc(),
                             g ? y.tg() : y.tc(), g ? mean.tg() : mean.tc(), g ? rstd.tg() : rstd.tc(), 1e-5f,
                             g ? amax.tg() : amax.tc());
      });
      check("rmsnorm", start, [&](Backend& be, bool g) {
        be.rmsnorm_forward(g ? x.tg() : x.tc(), g ? w.tg() : w.tc(), g ? y.tg() : y.tc(),
                           g ? rstd.tg() : rstd.tc(), 1e-5f, g ? amax.tg() : amax.tc());
      });
      check("gelu", start, [&](Backend& be, bool g) {
        be.gelu_forward(g ? x.tg() : x.tc(), g ? y.tg() : y.tc(), g ? amax.tg() : amax.tc());
      });
      check("gelu backward", start, [&](Backend& be, bool g) {
        be.gelu_backward(g ? x.tg() : x.tc(), g ? dy.tg() : dy.tc(), g ? y.tg() : y.tc(),
                         g ? amax.tg() : amax.tc());
      });
    }
    // a NaN anywhere makes the amax NaN (bits above +inf)
    std::vector<float> xn = test::gaussian(n, 35);
    xn[n / 2] = NAN;
    auto xnan = make(xn, {rows, dim});
    for (const bool g : {false, true}) {
      Backend& be = g ? *gpu : *cpu;
      const Tensor& a = g ? amax.tg() : amax.tc();
      be.fill(a, 0.0);
      be.gelu_forward(g ? xnan.tg() : xnan.tc(), g ? y.tg() : y.tc(), a);
      int32_t got = 0;
      be.download(&got, a);
      EXPECT_GT(uint32_t(got), 0x7F800000u) << "gelu of a NaN" << tag << (g ? " gpu" : " cpu");
    }
  }
  auto x = make(test::gaussian(64, 36), {8, 8});
  auto y = zeros({8, 8});
  auto f32 = zeros({1}, DType::F32), two = zeros({2}, DType::I32);
  EXPECT_THROW(gpu->gelu_forward(x.tg(), y.tg(), f32.tg()), Error);
  EXPECT_THROW(cpu->gelu_forward(x.tc(), y.tc(), f32.tc()), Error);
  EXPECT_THROW(gpu->gelu_forward(x.tg(), y.tg(), two.tg()), Error);
  EXPECT_THROW(cpu->gelu_forward(x.tc(), y.tc(), two.tc()), Error);
}

TEST_P(CudaOps, RopeForwardAndInverse) {
  const int64_t B = 2, H = 3, T = 37, D = 64;
  const size_t n = size_t(B * H * T * D);
  auto x = make(test::gaussian(n, 12), {B, H, T, D});
  const std::vector<float> orig = gpu->download_f32(x.tg());
  cpu->rope(x.tc(), 10000.0f, false, AttnLayout::HeadsMajor);
  gpu->rope(x.tg(), 10000.0f, false, AttnLayout::HeadsMajor);
  expect_close(x, "rope");
  cpu->rope(x.tc(), 10000.0f, true, AttnLayout::HeadsMajor);
  gpu->rope(x.tg(), 10000.0f, true, AttnLayout::HeadsMajor);
  expect_close(x, "rope inverse");
  const std::vector<float> back = gpu->download_f32(x.tg());
  const double tol = act == DType::BF16 ? 0x1p-6 : 1e-5;  // two BF16 roundings of |x| <= ~4
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(back[i], orig[i], tol * (1.0 + std::fabs(orig[i]))) << "inverse ∘ forward = id";
}

TEST_P(CudaOps, Activations) {
  const int64_t rows = 19, f = 131;
  auto x = make(test::gaussian(size_t(rows * 2 * f), 13, 3.0f), {rows, 2 * f});
  auto dy = make(test::gaussian(size_t(rows * 2 * f), 14), {rows, 2 * f});
  auto y = zeros({rows, 2 * f}), dx = zeros({rows, 2 * f});
  cpu->gelu_forward(x.tc(), y.tc());
  gpu->gelu_forward(x.tg(), y.tg());
  expect_close(y, "gelu");
  cpu->gelu_backward(x.tc(), dy.tc(), dx.tc());
  gpu->gelu_backward(x.tg(), dy.tg(), dx.tg());
  expect_close(dx, "gelu backward");
  auto ys = zeros({rows, f}), dys = make(test::gaussian(size_t(rows * f), 15), {rows, f});
  cpu->swiglu_forward(x.tc(), ys.tc());
  gpu->swiglu_forward(x.tg(), ys.tg());
  expect_close(ys, "swiglu");
  cpu->swiglu_backward(x.tc(), dys.tc(), dx.tc());
  gpu->swiglu_backward(x.tg(), dys.tg(), dx.tg());
  expect_close(dx, "swiglu backward");
}

// D = 8: the 8-wide path of the layout kernels (16-byte accesses); D = 6: one element per thread.
TEST_P(CudaOps, HeadLayouts) {
  for (const int64_t D : {8, 6}) {
    SCOPED_TRACE("head_dim " + std::to_string(D));
    const int64_t B = 2, T = 5, H = 4, G = 2;
    auto qkv = make(test::gaussian(size_t(B * T * (H + 2 * G) * D), 16), {B, T, (H + 2 * G) * D});
    auto q = zeros({B, H, T, D}), k = zeros({B, G, T, D}), v = zeros({B, G, T, D});
    auto back = zeros({B, T, (H + 2 * G) * D}), tok = zeros({B, T, H * D}), hq = zeros({B, H, T, D});
    cpu->split_qkv(qkv.tc(), q.tc(), k.tc(), v.tc(), AttnLayout::HeadsMajor);
    gpu->split_qkv(qkv.tg(), q.tg(), k.tg(), v.tg(), AttnLayout::HeadsMajor);
    expect_close(q, "split q", 0.0);
    expect_close(k, "split k", 0.0);
    expect_close(v, "split v", 0.0);
    cpu->merge_qkv(q.tc(), k.tc(), v.tc(), back.tc(), AttnLayout::HeadsMajor);
    gpu->merge_qkv(q.tg(), k.tg(), v.tg(), back.tg(), AttnLayout::HeadsMajor);
    expect_close(back, "merge", 0.0);
    // tokens-major q [B, T, H, D], k, v [B, T, G, D] (the trainer's layout), and RoPE on it
    auto qt = zeros({B, T, H, D}), kt = zeros({B, T, G, D}), vt = zeros({B, T, G, D});
    auto back_t = zeros({B, T, (H + 2 * G) * D});
    cpu->split_qkv(qkv.tc(), qt.tc(), kt.tc(), vt.tc(), AttnLayout::TokensMajor);
    gpu->split_qkv(qkv.tg(), qt.tg(), kt.tg(), vt.tg(), AttnLayout::TokensMajor);
    expect_close(qt, "tokens-major split q", 0.0);
    expect_close(kt, "tokens-major split k", 0.0);
    expect_close(vt, "tokens-major split v", 0.0);
    cpu->merge_qkv(qt.tc(), kt.tc(), vt.tc(), back_t.tc(), AttnLayout::TokensMajor);
    gpu->merge_qkv(qt.tg(), kt.tg(), vt.tg(), back_t.tg(), AttnLayout::TokensMajor);
    expect_close(back_t, "tokens-major merge", 0.0);
    cpu->rope(qt.tc(), 10000.0f, false, AttnLayout::TokensMajor);
    gpu->rope(qt.tg(), 10000.0f, false, AttnLayout::TokensMajor);
    expect_close(qt, "tokens-major rope");
    cpu->heads_to_tokens(q.tc(), tok.tc());
    gpu->heads_to_tokens(q.tg(), tok.tg());
    expect_close(tok, "heads_to_tokens", 0.0);
    cpu->tokens_to_heads(tok.tc(), hq.tc());
    gpu->tokens_to_heads(tok.tg(), hq.tg());
    expect_close(hq, "tokens_to_heads", 0.0);
  }
}

// vocab 1001: one logit per load; 1024: the 8-wide path. The GPU takes exp in FP32 (loss.cu): each
// row's loss is within ~1e-6 nats of the twin's double evaluation.
TEST_P(CudaOps, CrossEntropyWithIgnoredTargetsAndAliasing) {
  for (const int64_t vocab : {1001, 1024}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    const int64_t n = 23;
    const double loss_tol = 2e-6 * double(n);  // nats, summed over the rows
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % 5 == 0 ? -1 : int32_t((i * 37) % vocab);
    auto tg = ids(t);
    auto logits = make(test::gaussian(size_t(n * vocab), 17, 4.0f), {n, vocab});
    auto d = zeros({n, vocab});
    auto lc = acc(), lg = acc();
    cpu->cross_entropy(logits.tc(), tg.tc(), d.tc(), 0.25f, lc.tc());
    gpu->cross_entropy(logits.tg(), tg.tg(), d.tg(), 0.25f, lg.tg());
    const double loss = cpu->read_f64(lc.tc());
    EXPECT_GT(loss, 0.0);
    EXPECT_NEAR(gpu->read_f64(lg.tg()), loss, loss_tol);
    expect_close(d, "dlogits");
    gpu->cross_entropy(logits.tg(), tg.tg(), logits.tg(), 0.25f, lg.tg());  // in place, accumulates
    EXPECT_NEAR(gpu->read_f64(lg.tg()), 2.0 * loss, 2.0 * loss_tol) << "loss_sum accumulates";
    cpu->cross_entropy(logits.tc(), tg.tc(), logits.tc(), 0.25f, lc.tc());
    expect_close(logits, "dlogits in place");
    // A target >= vocab: the CPU twin throws; the GPU (no host check) poisons the loss with NaN.
    auto bt = ids(std::vector<int32_t>(size_t(n), int32_t(vocab)));
    auto lb = acc();
    EXPECT_THROW(cpu->cross_entropy(logits.tc(), bt.tc(), d.tc(), 1.0f, lb.tc()), Error);
    gpu->cross_entropy(logits.tg(), bt.tg(), d.tg(), 1.0f, lb.tg());
    EXPECT_TRUE(std::isnan(gpu->read_f64(lb.tg())));
  }
}

TEST_P(CudaOps, ReductionsAndAdamW) {
  const int64_t n = 100003;
  auto x = make(test::gaussian(size_t(n), 18, 3.0f), {n});
  auto sc = acc(), sg = acc();
  cpu->sum_squares(x.tc(), sc.tc());
  gpu->sum_squares(x.tg(), sg.tg());
  gpu->sum_squares(x.tg(), sg.tg());  // accumulates
  const double ss = cpu->read_f64(sc.tc());
  EXPECT_NEAR(gpu->read_f64(sg.tg()), 2.0 * ss, 2e-9 * ss);
  const auto mc = cpu->moments(x.tc()), mg = gpu->moments(x.tg());
  EXPECT_NEAR(mg.mean, mc.mean, 1e-9);
  EXPECT_NEAR(mg.variance, mc.variance, 1e-9 * mc.variance);
  EXPECT_NEAR(mg.kurtosis, mc.kurtosis, 1e-9 * mc.kurtosis);
  auto p = param(test::gaussian(size_t(n), 19), {n}), g = param(test::gaussian(size_t(n), 20), {n});
  auto m = param(test::gaussian(size_t(n), 21, 0.1f), {n}),
       v = param(std::vector<float>(size_t(n), 0.01f), {n});
  for (int64_t step = 1; step <= 3; ++step) {
    cpu->adamw(p.tc(), g.tc(), m.tc(), v.tc(), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    gpu->adamw(p.tg(), g.tg(), m.tg(), v.tg(), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  expect_close(p, "adamw param", 1e-6);
  expect_close(m, "adamw m", 1e-6);
  expect_close(v, "adamw v", 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Act, CudaOps, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace octet
