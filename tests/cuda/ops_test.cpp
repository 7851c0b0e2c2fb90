// ops_test.cpp — every non-GEMM operation of the CUDA backend against its CPU twin (backend.h):
// memory, axpy/scale, embedding (forward, scatter-add with repeated ids), RMSNorm/LayerNorm forward
// and backward (with and without weights), RoPE (forward and its inverse), GELU, SwiGLU, the head
// layouts, cross-entropy (ignored targets, dlogits aliasing logits), sum_squares, moments, AdamW.
// Both sides use double for reductions; the bound is |gpu − cpu| <= 1e-5·(|cpu| + scale) with the
// scale the largest |cpu| of that output (FP32 rounding of differently ordered sums), unless stated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "octet/backend.h"

namespace octet {
namespace {

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test::have_gpu()) GTEST_SKIP() << "no CUDA device";
    cpu = make_cpu_backend();
    gpu = make_cuda_backend();
  }
  void TearDown() override {
    if (gpu)
      for (void* p : gpu_ptrs) gpu->release(p);
    if (cpu)
      for (void* p : cpu_ptrs) cpu->release(p);
  }
  // A buffer on both backends holding `h`.
  struct Pair {
    float* c;
    float* g;
  };
  Pair make(const std::vector<float>& h) {
    Pair p{cpu->alloc(h.size()), gpu->alloc(h.size())};
    cpu->upload(p.c, h.data(), h.size());
    gpu->upload(p.g, h.data(), h.size());
    cpu_ptrs.push_back(p.c);
    gpu_ptrs.push_back(p.g);
    return p;
  }
  Pair zeros(size_t n) { return make(std::vector<float>(n, 0.0f)); }
  struct IPair {
    int32_t* c;
    int32_t* g;
  };
  IPair make_i(const std::vector<int32_t>& h) {
    IPair p{cpu->alloc_i32(h.size()), gpu->alloc_i32(h.size())};
    cpu->upload_i32(p.c, h.data(), h.size());
    gpu->upload_i32(p.g, h.data(), h.size());
    cpu_ptrs.push_back(p.c);
    gpu_ptrs.push_back(p.g);
    return p;
  }
  void expect_close(const Pair& p, size_t n, const std::string& what, double rtol = 1e-5) {
    std::vector<float> hc(n), hg(n);
    cpu->download(hc.data(), p.c, n);
    gpu->download(hg.data(), p.g, n);
    double scale = 0.0;
    for (float v : hc) scale = std::max(scale, double(std::fabs(v)));
    ASSERT_GT(scale, 0.0) << what << ": reference output is all zero (vacuous)";
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(hg[i], hc[i], rtol * (std::fabs(hc[i]) + scale)) << what << " at " << i;
  }
  std::unique_ptr<Backend> cpu, gpu;
  std::vector<void*> cpu_ptrs, gpu_ptrs;
};

TEST_F(CudaOps, MemoryAxpyScaleFillCopy) {
  const size_t n = 1000;
  auto x = make(test::gaussian(n, 1)), y = make(test::gaussian(n, 2));
  std::vector<float> back(n);
  gpu->download(back.data(), x.g, n);
  EXPECT_EQ(back, test::gaussian(n, 1));
  cpu->axpy(0.5f, x.c, y.c, n);
  gpu->axpy(0.5f, x.g, y.g, n);
  cpu->scale(-3.0f, y.c, n);
  gpu->scale(-3.0f, y.g, n);
  expect_close(y, n, "axpy+scale", 1e-7);
  auto z = zeros(n);
  cpu->copy(z.c, y.c, n);
  gpu->copy(z.g, y.g, n);
  expect_close(z, n, "copy", 0.0);
  cpu->fill(z.c, 2.5f, n / 2);
  gpu->fill(z.g, 2.5f, n / 2);
  expect_close(z, n, "fill", 0.0);
  float* a = gpu->alloc(17);
  std::vector<float> h(17, 1.0f);
  gpu->download(h.data(), a, 17);
  EXPECT_EQ(h, std::vector<float>(17, 0.0f)) << "alloc must zero-initialize";
  gpu->release(a);
}

TEST_F(CudaOps, EmbeddingForwardAndScatterAdd) {
  const int64_t vocab = 50, dim = 33, n = 77;
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t((i * 7) % 13);  // repeats on purpose
  auto id = make_i(ids);
  auto table = make(test::gaussian(size_t(vocab * dim), 3));
  auto out = zeros(size_t(n * dim));
  cpu->embedding_forward(id.c, table.c, out.c, n, dim);
  gpu->embedding_forward(id.g, table.g, out.g, n, dim);
  expect_close(out, size_t(n * dim), "embedding_forward", 0.0);
  auto dout = make(test::gaussian(size_t(n * dim), 4));
  auto dtable = make(test::gaussian(size_t(vocab * dim), 5));
  cpu->embedding_backward(id.c, dout.c, dtable.c, n, dim);
  gpu->embedding_backward(id.g, dout.g, dtable.g, n, dim);
  expect_close(dtable, size_t(vocab * dim), "embedding_backward");
}

TEST_F(CudaOps, NormsForwardBackward) {
  for (int64_t dim : {1, 7, 129, 1024}) {
    const int64_t rows = 37;
    const size_t n = size_t(rows * dim);
    auto x = make(test::gaussian(n, 6, 2.0f)), dy = make(test::gaussian(n, 7));
    auto w = make(test::gaussian(size_t(dim), 8)), b = make(test::gaussian(size_t(dim), 9));
    for (bool with_w : {true, false}) {
      const std::string tag = " dim " + std::to_string(dim) + (with_w ? " weighted" : " unweighted");
      auto y = zeros(n), dx = zeros(n), rstd = zeros(size_t(rows)), mean = zeros(size_t(rows));
      auto dw = make(test::gaussian(size_t(dim), 10)), db = make(test::gaussian(size_t(dim), 11));
      cpu->rmsnorm_forward(x.c, with_w ? w.c : nullptr, y.c, rstd.c, rows, dim, 1e-5f);
      gpu->rmsnorm_forward(x.g, with_w ? w.g : nullptr, y.g, rstd.g, rows, dim, 1e-5f);
      expect_close(y, n, "rmsnorm y" + tag);
      expect_close(rstd, size_t(rows), "rmsnorm rstd" + tag);
      cpu->rmsnorm_backward(x.c, with_w ? w.c : nullptr, rstd.c, dy.c, dx.c, with_w ? dw.c : nullptr, rows, dim);
      gpu->rmsnorm_backward(x.g, with_w ? w.g : nullptr, rstd.g, dy.g, dx.g, with_w ? dw.g : nullptr, rows, dim);
      expect_close(dx, n, "rmsnorm dx" + tag, 1e-4);
      if (with_w) expect_close(dw, size_t(dim), "rmsnorm dw" + tag, 1e-4);
      cpu->layernorm_forward(x.c, with_w ? w.c : nullptr, with_w ? b.c : nullptr, y.c, mean.c, rstd.c, rows, dim, 1e-5f);
      gpu->layernorm_forward(x.g, with_w ? w.g : nullptr, with_w ? b.g : nullptr, y.g, mean.g, rstd.g, rows, dim, 1e-5f);
      if (dim > 1 || with_w) expect_close(y, n, "layernorm y" + tag);  // dim 1: x − μ = 0
      cpu->layernorm_backward(x.c, with_w ? w.c : nullptr, mean.c, rstd.c, dy.c, dx.c, dw.c, db.c, rows, dim);
      gpu->layernorm_backward(x.g, with_w ? w.g : nullptr, mean.g, rstd.g, dy.g, dx.g, dw.g, db.g, rows, dim);
      if (dim > 1) expect_close(dx, n, "layernorm dx" + tag, 1e-4);
      expect_close(dw, size_t(dim), "layernorm dw" + tag, 1e-4);
      expect_close(db, size_t(dim), "layernorm db" + tag, 1e-4);
    }
  }
}

TEST_F(CudaOps, RopeForwardAndInverse) {
  const int64_t B = 2, H = 3, T = 37, D = 64;
  const size_t n = size_t(B * H * T * D);
  auto x = make(test::gaussian(n, 12));
  cpu->rope(x.c, B, H, T, D, 10000.0f, false);
  gpu->rope(x.g, B, H, T, D, 10000.0f, false);
  expect_close(x, n, "rope");
  cpu->rope(x.c, B, H, T, D, 10000.0f, true);
  gpu->rope(x.g, B, H, T, D, 10000.0f, true);
  expect_close(x, n, "rope inverse");
  std::vector<float> back(n);
  gpu->download(back.data(), x.g, n);
  const auto orig = test::gaussian(n, 12);
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(back[i], orig[i], 1e-5f) << "inverse ∘ forward = id";
}

TEST_F(CudaOps, Activations) {
  const int64_t rows = 19, f = 131;
  const size_t n = size_t(rows * 2 * f);
  auto x = make(test::gaussian(n, 13, 3.0f)), dy = make(test::gaussian(n, 14));
  auto y = zeros(n), dx = zeros(n);
  cpu->gelu_forward(x.c, y.c, n);
  gpu->gelu_forward(x.g, y.g, n);
  expect_close(y, n, "gelu");
  cpu->gelu_backward(x.c, dy.c, dx.c, n);
  gpu->gelu_backward(x.g, dy.g, dx.g, n);
  expect_close(dx, n, "gelu backward");
  auto ys = zeros(size_t(rows * f)), dys = make(test::gaussian(size_t(rows * f), 15));
  cpu->swiglu_forward(x.c, ys.c, rows, f);
  gpu->swiglu_forward(x.g, ys.g, rows, f);
  expect_close(ys, size_t(rows * f), "swiglu");
  cpu->swiglu_backward(x.c, dys.c, dx.c, rows, f);
  gpu->swiglu_backward(x.g, dys.g, dx.g, rows, f);
  expect_close(dx, n, "swiglu backward");
}

TEST_F(CudaOps, HeadLayouts) {
  const int64_t B = 2, T = 5, H = 4, G = 2, D = 8;
  const size_t nqkv = size_t(B * T * (H + 2 * G) * D), nq = size_t(B * H * T * D), nk = size_t(B * G * T * D);
  auto qkv = make(test::gaussian(nqkv, 16));
  auto q = zeros(nq), k = zeros(nk), v = zeros(nk), back = zeros(nqkv), tok = zeros(nq), hq = zeros(nq);
  cpu->split_qkv(qkv.c, q.c, k.c, v.c, B, T, H, G, D);
  gpu->split_qkv(qkv.g, q.g, k.g, v.g, B, T, H, G, D);
  expect_close(q, nq, "split q", 0.0);
  expect_close(k, nk, "split k", 0.0);
  expect_close(v, nk, "split v", 0.0);
  cpu->merge_qkv(q.c, k.c, v.c, back.c, B, T, H, G, D);
  gpu->merge_qkv(q.g, k.g, v.g, back.g, B, T, H, G, D);
  expect_close(back, nqkv, "merge", 0.0);
  cpu->heads_to_tokens(q.c, tok.c, B, H, T, D);
  gpu->heads_to_tokens(q.g, tok.g, B, H, T, D);
  expect_close(tok, nq, "heads_to_tokens", 0.0);
  cpu->tokens_to_heads(tok.c, hq.c, B, H, T, D);
  gpu->tokens_to_heads(tok.g, hq.g, B, H, T, D);
  expect_close(hq, nq, "tokens_to_heads", 0.0);
}

TEST_F(CudaOps, CrossEntropyWithIgnoredTargetsAndAliasing) {
  const int64_t n = 23, vocab = 1001;
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % 5 == 0 ? -1 : int32_t((i * 37) % vocab);
  auto tg = make_i(t);
  auto logits = make(test::gaussian(size_t(n * vocab), 17, 4.0f));
  auto d = zeros(size_t(n * vocab));
  const double lc = cpu->cross_entropy(logits.c, tg.c, d.c, n, vocab, 0.25f);
  const double lg = gpu->cross_entropy(logits.g, tg.g, d.g, n, vocab, 0.25f);
  EXPECT_NEAR(lg, lc, 1e-9 * std::fabs(lc));
  expect_close(d, size_t(n * vocab), "dlogits");
  const double la = gpu->cross_entropy(logits.g, tg.g, logits.g, n, vocab, 0.25f);  // in place
  EXPECT_NEAR(la, lc, 1e-9 * std::fabs(lc));
  cpu->cross_entropy(logits.c, tg.c, logits.c, n, vocab, 0.25f);
  expect_close(logits, size_t(n * vocab), "dlogits in place");
  std::vector<int32_t> badt(n, int32_t(vocab));
  auto bt = make_i(badt);
  EXPECT_THROW(gpu->cross_entropy(logits.g, bt.g, d.g, n, vocab, 1.0f), Error);
}

TEST_F(CudaOps, ReductionsAndAdamW) {
  const size_t n = 100003;
  auto x = make(test::gaussian(n, 18, 3.0f));
  EXPECT_NEAR(gpu->sum_squares(x.g, n), cpu->sum_squares(x.c, n), 1e-9 * cpu->sum_squares(x.c, n));
  const auto mc = cpu->moments(x.c, n), mg = gpu->moments(x.g, n);
  EXPECT_NEAR(mg.mean, mc.mean, 1e-9);
  EXPECT_NEAR(mg.variance, mc.variance, 1e-9 * mc.variance);
  EXPECT_NEAR(mg.kurtosis, mc.kurtosis, 1e-9 * mc.kurtosis);
  auto p = make(test::gaussian(n, 19)), g = make(test::gaussian(n, 20));
  auto m = make(test::gaussian(n, 21, 0.1f)), v = make(std::vector<float>(n, 0.01f));
  for (int64_t step = 1; step <= 3; ++step) {
    cpu->adamw(p.c, g.c, m.c, v.c, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
    gpu->adamw(p.g, g.g, m.g, v.g, n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step);
  }
  expect_close(p, n, "adamw param", 1e-6);
  expect_close(m, n, "adamw m", 1e-6);
  expect_close(v, n, "adamw v", 1e-6);
}

}  // namespace
}  // namespace octet
