// generate_test.cpp — the KV-cache decoder (generate.h) on the CUDA backend against its CPU twin:
// the same decoder code on both backends (bf16 precision: BF16 GEMM operands and BF16 attention,
// FP32 activations), same weights, same tokens. The backends round BF16 operands bitwise alike and
// differ only in the GEMMs' FP32 summation order, so the logits agree far inside BF16's 2^-8:
// tolerance 1e-2 · max(1, max |logit|). Also: a prefill equals feeding one token at a time on the
// GPU, greedy generation repeats itself, and fp32 sampling (FP64 attention) is refused on CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/error.h"
#include "octet/generate.h"

namespace octet {
namespace {

ModelConfig decode_model() {
  ModelConfig c;  // Llama-shaped: RMSNorm pre-norm, RoPE, SwiGLU
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 4;
  c.n_kv_head = 2;  // GQA; head_dim 16, a multiple of 16 as the CUDA attention needs
  c.d_ff = 96;
  c.vocab_size = 256;
  c.seq_len = 40;
  c.init_std = 0.1f;
  return c;
}

PrecisionConfig bf16_arm() {  // the weights' arm; the decoder's own precision is DecodePrecision
  PrecisionConfig p;
  p.arm = Arm::BF16;
  return p;
}

std::vector<int32_t> tokens(size_t n) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 37 + 11) % 256);
  return t;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tol = 1e-2f * std::max(1.0f, max_abs(want));
  float worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LE(worst, tol) << what;
}

TEST(CudaGenerate, DecodeMatchesCpuTwinAndPrefill) {
  OCTET_REQUIRE_GPU();
  const ModelConfig c = decode_model();
  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  Model mc(c, bf16_arm(), *cpu, 1), mg(c, bf16_arm(), *gpu, 1);
  mc.init(5);
  mg.init(5);
  Generator gc(mc, DecodePrecision::BF16), gg(mg, DecodePrecision::BF16);
  const std::vector<int32_t> seq = tokens(30);
  const std::vector<int32_t> prompt(seq.begin(), seq.begin() + 6);
  expect_close(gg.feed(prompt), gc.feed(prompt), "prefill of 6");
  for (size_t t = prompt.size(); t < seq.size(); ++t) {
    SCOPED_TRACE(t);
    const std::vector<float> lg = gg.feed({seq[t]});
    expect_close(lg, gc.feed({seq[t]}), "one cached step");
  }
  gg.reset();  // the whole sequence at once: the last row equals the last cached step's
  const std::vector<float> all = gg.feed(seq);
  gg.reset();
  std::vector<float> last;
  for (int32_t t : seq) last = gg.feed({t});
  expect_close(std::vector<float>(all.end() - c.vocab_size, all.end()), last, "prefill vs cached");
}

TEST(CudaGenerate, GreedyRepeatsAndFp32IsRefused) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  Model m(decode_model(), bf16_arm(), *gpu, 1);
  m.init(9);
  Generator g(m, DecodePrecision::BF16);
  SampleOptions opt;
  opt.temperature = 0.0f;
  opt.max_new_tokens = 16;
  const std::vector<int32_t> a = generate(g, tokens(4), opt), b = generate(g, tokens(4), opt);
  EXPECT_EQ(a.size(), 16u);
  EXPECT_EQ(a, b);
  EXPECT_THROW(Generator(m, DecodePrecision::FP32), Error);
}

}  // namespace
}  // namespace octet
