// Activation checkpointing (model.h ModelMemory) on the CUDA backend: a model that keeps only each
// layer's input and re-runs the layer's forward in the backward gives the loss of the one that keeps
// everything bitwise (the forward kernels are deterministic) and its gradients to within the
// run-to-run spread of two runs without it (the fused FP8 backward adds dQ by FP32 atomics and the
// embedding backward by atomics, so two plain runs may differ in the last bits; where they do not,
// the checkpointed run must not either, up to a 1e-7 relative floor). Arms: bf16 on cuDNN's SDPA,
// fp8-matched and fp8-stale on octet's flash kernels (head_dim 64 and 128: both wgmma backwards),
// the hybrid with BF16 activations. The CPU twin of this test is tests/model/checkpointing_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/model.h"

namespace octet {
namespace {

struct Case {
  std::string name;
  Arm arm;
  int64_t head_dim;
  MixerKind mixer;
  DType act;
};

struct Result {
  double loss = 0;
  std::vector<float> grads;
};

Result one_step(const Case& c, bool checkpointing) {
  ModelConfig m;
  m.mixer = c.mixer;
  m.n_layer = 4;
  m.d_model = 2 * c.head_dim;
  m.n_head = m.n_kv_head = 2;
  m.d_ff = 4 * m.d_model;
  m.vocab_size = 256;
  m.seq_len = 256;
  PrecisionConfig p;
  p.arm = c.arm;
  p.activations = c.act;
  p.attn_form = AttnForm::Flash;  // cuDNN for bf16, the fused FP8 kernels for the FP8-attention arms
  const int64_t batch = 2, n = batch * m.seq_len;
  std::vector<int32_t> ids, targets;
  test::next_token_batch(n, 256, 5, ids, targets);
  auto gpu = make_cuda_backend();
  ModelMemory mem;
  mem.activation_checkpointing = checkpointing;
  Model model(m, p, *gpu, batch, mem);
  model.init(3);
  model.zero_grad();
  Result r;
  r.loss = model.step(ids.data(), targets.data(), true, 1.0f / float(n));
  r.grads = model.download_grads();
  return r;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    s += double(b[i]) * b[i];
  }
  return std::sqrt(d / s);
}

TEST(CudaActivationCheckpointing, EqualsKeepingEverything) {
  OCTET_REQUIRE_GPU();
  const std::vector<Case> cases = {
      {"bf16 (cuDNN) D64", Arm::BF16, 64, MixerKind::Attention, DType::BF16},
      {"fp8-matched D64", Arm::FP8Matched, 64, MixerKind::Attention, DType::BF16},
      {"fp8-stale D128", Arm::FP8Stale, 128, MixerKind::Attention, DType::BF16},
      {"fp8-matched D128", Arm::FP8Matched, 128, MixerKind::Attention, DType::F32},
      {"hybrid fp8-matched D64", Arm::FP8Matched, 64, MixerKind::Hybrid, DType::BF16}};
  for (const Case& c : cases) {
    const Result a = one_step(c, false), b = one_step(c, false), k = one_step(c, true);
    ASSERT_EQ(a.grads.size(), k.grads.size());
    const double spread = rel_l2(b.grads, a.grads), diff = rel_l2(k.grads, a.grads);
    std::printf(
        "[checkpointing] %-24s loss %.9f / %.9f | grads rel. L2: two plain runs %.2e, checkpointed %.2e\n",
        c.name.c_str(), a.loss, k.loss, spread, diff);
    EXPECT_EQ(a.loss, k.loss) << c.name << ": the forward is deterministic";
    EXPECT_LE(diff, 4 * spread + 1e-7) << c.name;
    double norm = 0;  // the premise: gradients flow
    for (float g : a.grads) norm += double(g) * g;
    EXPECT_GT(norm, 0.0) << c.name;
  }
}

}  // namespace
}  // namespace octet
