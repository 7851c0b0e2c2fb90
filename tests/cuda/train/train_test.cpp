// train_test.cpp — end-to-end training on the CUDA backend against the CPU reference backend, in
// every precision arm (docs/design.md §"Precision arms"): one whole step (loss and every gradient, same init,
// same batch), then the first 20 optimizer steps of a tiny config through the real trainer (train.h's
// train(): warmup LR, clip, AdamW), on a fixed byte corpus (docs_bytes below).
//
// Why the two backends may differ at all: both quantize bitwise alike for equal inputs
// (quantize_test.cpp), but (1) the GPU's GEMMs sum in another order (FP32: ~K·2⁻²⁴ relative) and
// Hopper's FP8 tensor cores accumulate in limited precision (gemm_test.cpp bounds it at
// 2⁻¹⁰·Σ|ab|, ~1e-4 of the output measured); (2) a downstream rounding then flips the odd element
// by one unit: a BF16 ulp is 2⁻⁸ relative, but an FP8 code is 2⁻³ (E4M3) or 2⁻² (E5M2), and the
// per-tensor amax — hence every scale — can move with it. So the FP8 arms drift an order of
// magnitude more than bf16. Then training amplifies any difference (Adam's first steps move
// every weight by ~lr·sign(g), whatever its size). Tolerances:
//   one step   loss: |Δ| ≤ 1e-4·loss (bf16), 1e-3·loss (FP8 arms)
//              gradients: ‖g_gpu − g_cpu‖ ≤ 2e-3·‖g_cpu‖ (bf16), 5e-2·‖g_cpu‖ (FP8 arms)
//   20 steps   per-step train loss: |Δ| ≤ 2e-2 nats (bf16), 5e-2 nats (FP8 arms), while the loss
//              itself falls by more than 0.5 nats (measured ~1.8) over those steps, so agreement is
//              not trivial.
// Measured on an H200 (bench/results/2026-11-30-h200-test_cuda-training.log, two versions of docs/):
// one step, loss rel. ≤ 3e-11 (bf16) / 9e-6 (FP8), gradients 7.9e-5 (bf16) / 1.4e-2..1.6e-2 (FP8);
// 20 steps, max |Δloss| 6e-5..1.5e-3 nats (bf16), 9e-4..1.8e-2 nats (FP8 arms). The FP8 and 20-step
// bounds are ~3x the largest seen (how far the two runs drift apart depends on the data). The corpus
// was then docs/ itself, so every docs edit changed the runs: after one, bf16 reached 1.4e-2 nats at
// a single step (bench/results/2026-11-30-h200-test-logs.tar.xz). The corpus is now fixed
// (docs_bytes) and the bf16 bound 2e-2.
// Adam's first steps move every weight by ~lr·sign(g), so a weight whose gradient is ~0 can move
// the other way on the other backend; such weights barely change the loss, which is why the
// 20-step check is on losses (what the issue asks for) and the gradient check is on one step.
// Both backends always run with the same explicit activation dtype (precision.activations): f32
// for every arm, and bf16 for the fp8-matched arm ("fp8-matched/bf16"), where both round every
// activation to BF16 alike; that case takes the FP8 tolerances.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "octet/backend.h"
#include "octet/model.h"
#include "octet/train.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_model(const std::string& param) {
  ModelConfig c;  // RMSNorm pre-norm, RoPE, SwiGLU (the model.h defaults)
  c.n_layer = 2;
  c.d_model = 64;
  c.n_head = 2;
  c.n_kv_head = 2;  // head_dim 32: a multiple of 16, as the unfused CUDA attention needs
  if (param.find("/flash") != std::string::npos) c.n_head = c.n_kv_head = 1;  // head_dim 64: fused
  c.d_ff = 128;
  c.vocab_size = 256;
  c.seq_len = 64;
  return c;
}

// "arm" (f32 activations), "arm/bf16" (bf16 activations) or "arm/flash" (the flash attention form:
// the fused FP8 kernels on the GPU against the CPU flash form, head_dim 64; f32 activations).
std::string arm_of(const std::string& param) { return param.substr(0, param.find('/')); }
DType act_of(const std::string& param) {
  return param.find("/bf16") == std::string::npos ? DType::F32 : DType::BF16;
}

PrecisionConfig precision_of(const std::string& param) {
  PrecisionConfig p;
  p.arm = parse_arm(arm_of(param));
  p.activations = act_of(param);
  p.quant.recipe = Recipe::TensorCurrent;
  p.quant.formats = FormatPolicy::Hybrid;  // E4M3 forward, E5M2 gradients (configs/demo.toml)
  p.attn_form = param.find("/flash") == std::string::npos ? AttnForm::Whole : AttnForm::Flash;
  return p;
}

bool is_fp8(const std::string& param) { return arm_of(param) != "bf16"; }

// The repository's docs/ (from the source dir this was built in, or the working directory: the GPU
// machine runs carried binaries from a copy of the repository root).
// A fixed byte corpus (~400 kB) for the CPU-vs-GPU training runs: sentences of words drawn with a
// Zipf-like law from a fixed list by a seeded generator. Fixed on purpose: the runs' loss curves
// (and their CPU-GPU difference) must not move when the repository's docs are edited.
std::vector<int32_t> docs_bytes() {
  static const char* words[] = {
      "the",  "of",     "attention", "gradient", "scale",   "a",     "to",     "is",     "matrix", "kernel",
      "row",  "key",    "query",     "value",    "softmax", "delta", "and",    "in",     "tensor", "block",
      "warp", "memory", "loss",      "step",     "layer",   "norm",  "weight", "format", "e4m3",   "amax"};
  const int n = int(sizeof(words) / sizeof(words[0]));
  std::vector<double> w(n);
  for (int i = 0; i < n; ++i) w[i] = 1.0 / (i + 1);
  std::mt19937 rng(2026);
  std::discrete_distribution<int> pick(w.begin(), w.end());
  std::uniform_int_distribution<int> len(4, 14);
  std::string text;
  while (text.size() < 400000) {
    const int k = len(rng);
    for (int i = 0; i < k; ++i) {
      std::string word = words[pick(rng)];
      if (i == 0) word[0] = char(std::toupper(static_cast<unsigned char>(word[0])));
      text += word;
      text += i + 1 < k ? " " : ".\n";
    }
  }
  std::vector<int32_t> t(text.size());
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(static_cast<unsigned char>(text[i]));
  return t;
}

class CudaTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTraining, OneStepLossAndGradientsMatchCpu) {
  OCTET_REQUIRE_GPU();
  const std::string arm = GetParam();
  const ModelConfig mc = tiny_model(arm);
  const int64_t batch = 4, N = batch * mc.seq_len;
  const std::vector<int32_t> tokens = docs_bytes();
  ASSERT_GT(int64_t(tokens.size()), N + 1);
  std::vector<int32_t> ids(tokens.begin(), tokens.begin() + N),
      targets(tokens.begin() + 1, tokens.begin() + N + 1);

  auto cpu = make_cpu_backend();
  auto gpu = make_cuda_backend();
  Model mc_cpu(mc, precision_of(arm), *cpu, batch), mc_gpu(mc, precision_of(arm), *gpu, batch);
  mc_cpu.init(7);
  mc_gpu.init(7);
  mc_cpu.zero_grad();
  mc_gpu.zero_grad();
  int64_t n_cpu = 0, n_gpu = 0;
  const double loss_cpu = mc_cpu.step(ids.data(), targets.data(), true, 1.0f / float(N), &n_cpu) / double(N);
  const double loss_gpu = mc_gpu.step(ids.data(), targets.data(), true, 1.0f / float(N), &n_gpu) / double(N);
  ASSERT_EQ(n_cpu, N);
  ASSERT_EQ(n_gpu, N);
  const std::vector<float> g_cpu = mc_cpu.download_grads(), g_gpu = mc_gpu.download_grads();
  ASSERT_EQ(g_cpu.size(), g_gpu.size());
  double diff2 = 0, ref2 = 0;
  for (size_t i = 0; i < g_cpu.size(); ++i) {
    ASSERT_TRUE(std::isfinite(g_gpu[i])) << arm << ": non-finite GPU gradient at " << i;
    diff2 += (double(g_gpu[i]) - g_cpu[i]) * (double(g_gpu[i]) - g_cpu[i]);
    ref2 += double(g_cpu[i]) * g_cpu[i];
  }
  const double grad_rel = std::sqrt(diff2 / ref2), loss_rel = std::fabs(loss_gpu - loss_cpu) / loss_cpu;
  std::printf("[%s] one step: loss cpu %.6f gpu %.6f (rel %.2e); gradient rel. L2 diff %.2e\n", arm.c_str(),
              loss_cpu, loss_gpu, loss_rel, grad_rel);
  EXPECT_LE(loss_rel, is_fp8(arm) ? 1e-3 : 1e-4) << arm;
  EXPECT_LE(grad_rel, is_fp8(arm) ? 5e-2 : 2e-3) << arm;
  // Every parameter tensor got a gradient on the GPU (a missing backward would give zeros there).
  for (const ParamInfo& p : mc_gpu.params()) {
    double s = 0;
    for (size_t i = 0; i < p.numel; ++i) s += std::fabs(g_gpu[p.offset + i]);
    EXPECT_GT(s, 0.0) << arm << ": zero gradient for " << p.name;
  }
}

TEST_P(CudaTraining, First20StepsLossesMatchCpu) {
  OCTET_REQUIRE_GPU();
  const std::string arm = GetParam();
  std::string tag = arm;
  std::replace(tag.begin(), tag.end(), '/', '-');
  RunConfig cfg;
  cfg.model = tiny_model(arm);
  cfg.precision = precision_of(arm);
  // explicit on both backends (no "auto": it would pick bf16 activations and the fused form on cuda)
  cfg.activations = to_string(cfg.precision.activations);
  cfg.attn_form = to_string(cfg.precision.attn_form);
  cfg.train.steps = 20;
  cfg.train.batch_size = 8;
  cfg.train.warmup_steps = 5;
  cfg.train.eval_every = 20;
  cfg.train.eval_batches = 1;
  cfg.train.checkpoint_every = 0;
  cfg.train.log_every = 20;
  cfg.data.tokenizer = "byte";
  const fs::path base = fs::temp_directory_path() / ("octet-train-test-" + tag);
  fs::remove_all(base);
  std::vector<std::vector<double>> losses;
  for (const char* device : {"cpu", "cuda"}) {
    cfg.device = device;
    Dataset ds(docs_bytes(), 256, cfg.model.seq_len, 0.1, cfg.train.seed);
    const TrainResult r = train(cfg, (base / device).string(), false, ds, nullptr);
    ASSERT_EQ(r.train_loss.size(), 20u) << device;
    losses.push_back(r.train_loss);
  }
  fs::remove_all(base);
  const double tol = is_fp8(arm) ? 5e-2 : 2e-2;
  double max_diff = 0;
  for (size_t s = 0; s < 20; ++s) {
    ASSERT_TRUE(std::isfinite(losses[1][s])) << arm << " step " << s + 1;
    const double d = std::fabs(losses[1][s] - losses[0][s]);
    max_diff = std::max(max_diff, d);
    EXPECT_LE(d, tol) << arm << " step " << s + 1 << ": cpu " << losses[0][s] << " gpu " << losses[1][s];
  }
  std::printf(
      "[%s] 20 steps: loss cpu %.4f -> %.4f, gpu %.4f -> %.4f; max |diff| %.2e nats (tolerance %.0e)\n",
      arm.c_str(), losses[0][0], losses[0][19], losses[1][0], losses[1][19], max_diff, tol);
  EXPECT_LT(losses[0][19], losses[0][0] - 0.5) << arm << ": the reference run did not learn";
}

INSTANTIATE_TEST_SUITE_P(Arms, CudaTraining,
                         ::testing::Values("bf16", "fp8-linear", "fp8-stale", "fp8-matched",
                                           "fp8-matched/bf16", "fp8-stale/flash", "fp8-matched/flash"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-' || ch == '/') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace octet
