// The hybrid model (model.mixer = hybrid: layers l % 4 == 3 attention, the others Gated DeltaNet,
// arXiv 2412.06464): its parameter table, that its recurrent layers' linears stay out of FP8 in the
// FP8 arms (no quantizer state, no FP8 diagnostics, no softmax row residual), that the attention
// mixer's table is untouched, and that a hybrid overfits one fixed sequence in the bf16 and
// fp8-matched arms with F32 and BF16 activations. Its whole-model gradients are checked against
// finite differences in grad_check_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "model_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/optim.h"

using namespace octet;

namespace {

bool has_param(const Model& m, const std::string& name) {
  for (const ParamInfo& p : m.params())
    if (p.name == name) return true;
  return false;
}

ModelConfig hybrid(int64_t layers) {
  ModelConfig c = test::tiny_model();
  c.mixer = MixerKind::Hybrid;
  c.n_layer = layers;
  return c;
}

TEST(Hybrid, EveryFourthLayerIsAttention) {
  auto be = make_cpu_backend();
  const ModelConfig c = hybrid(8);
  Model m(c, test::arm_precision(Arm::BF16), *be, 1);
  for (int64_t l = 0; l < 8; ++l) {
    const std::string h = "h." + std::to_string(l);
    const bool attn = l == 3 || l == 7;
    EXPECT_EQ(c.attention_layer(l), attn);
    EXPECT_EQ(has_param(m, h + ".attn.qkv.weight"), attn) << h;
    EXPECT_EQ(has_param(m, h + ".gdn.qkv.weight"), !attn) << h;
    EXPECT_EQ(has_param(m, h + ".gdn.gates.weight"), !attn) << h;
    EXPECT_TRUE(has_param(m, h + ".mlp.fc1.weight"));
  }
  const int64_t H = c.n_head, Dh = c.head_dim(), d = c.d_model;
  EXPECT_EQ(m.param("h.0.gdn.qkv.weight").shape, (std::vector<int64_t>{3 * H * Dh, d}));
  EXPECT_EQ(m.param("h.0.gdn.gates.weight").shape, (std::vector<int64_t>{2 * H, d}));
  EXPECT_EQ(m.param("h.0.gdn.proj.weight").shape, (std::vector<int64_t>{d, H * Dh}));
  // The attention mixer (the default) has no recurrent parameters.
  Model plain(test::tiny_model(), test::arm_precision(Arm::BF16), *be, 1);
  for (const ParamInfo& p : plain.params()) EXPECT_EQ(p.name.find(".gdn."), std::string::npos) << p.name;
  EXPECT_EQ(parse_mixer_kind("hybrid"), MixerKind::Hybrid);
  EXPECT_EQ(to_string(MixerKind::Attention), "attention");
  EXPECT_THROW(parse_mixer_kind("mamba"), Error);
}

TEST(Hybrid, RecurrentLayersStayOutOfFp8) {
  auto be = make_cpu_backend();
  const ModelConfig c = hybrid(4);
  PrecisionConfig p = test::arm_precision(Arm::FP8Matched);
  p.quant.recipe = Recipe::TensorDelayed;  // a recipe with state: every FP8 linear has some
  Model m(c, p, *be, 2);
  m.init(1);
  std::vector<int32_t> ids, targets;
  test::tiny_batch(c, 2, ids, targets);
  m.zero_grad();
  m.step(ids.data(), targets.data(), true, 0.1f);
  m.update_quant_scales();
  for (const auto& [key, state] : m.quant_states())
    EXPECT_EQ(key.find(".gdn."), std::string::npos) << key << " must not be an FP8 linear";
  EXPECT_EQ(m.quant_states().count("h.3.attn.qkv"), 1u);
  const std::vector<LayerDiag> diag = m.diagnostics();
  ASSERT_EQ(diag.size(), 4u);
  for (int l = 0; l < 3; ++l) {
    ASSERT_EQ(diag[size_t(l)].linears.size(), 2u) << "layer " << l << ": only fc1 and fc2 are FP8";
    EXPECT_EQ(diag[size_t(l)].linears[0].name, "fc1");
    EXPECT_EQ(diag[size_t(l)].row_residual_max, 0.0);
  }
  EXPECT_EQ(diag[3].linears.size(), 4u);
  EXPECT_EQ(recurrent_precision(Arm::FP8Matched), LinearPrecision::BF16);
  EXPECT_EQ(recurrent_precision(Arm::FP32), LinearPrecision::FP32);
}

// One fixed 16-token sequence and its next-token targets (as arms_test.cpp's overfit).
class HybridOverfit : public ::testing::TestWithParam<std::tuple<Arm, DType>> {};

TEST_P(HybridOverfit, FixedStringToLowLoss) {
  const auto [arm, act] = GetParam();
  ModelConfig cfg = hybrid(4);
  cfg.d_model = 32;
  cfg.n_kv_head = 2;
  cfg.d_ff = 64;
  cfg.seq_len = 16;
  cfg.init_std = 0.05f;
  cfg.gdn_chunk = 8;
  auto be = make_cpu_backend();
  PrecisionConfig prec = test::arm_precision(arm);
  prec.activations = act;
  Model m(cfg, prec, *be, 1);
  m.init(5);
  const std::string text = "octet trains fp8";
  std::vector<int32_t> ids(16), targets(16);
  for (int i = 0; i < 16; ++i) {
    ids[size_t(i)] = int32_t(text[size_t(i)]) % 32;
    targets[size_t(i)] = int32_t(text[size_t((i + 1) % 16)]) % 32;
  }
  AdamWConfig ac;
  ac.beta2 = 0.99f;
  ac.weight_decay = 0.0f;
  ac.grad_clip = 0.0f;
  Optimizer opt(m, ac);
  double first = 0, last = 0;
  for (int step = 1; step <= 120; ++step) {
    m.zero_grad();
    last = m.step(ids.data(), targets.data(), true, 1.0f / 16) / 16;
    m.update_quant_scales();
    if (step == 1) first = last;
    opt.step(1e-2f, 0.0);
  }
  EXPECT_GT(first, 2.5);
  EXPECT_LT(last, 0.1) << to_string(arm) << " " << to_string(act) << ": first loss " << first;
}

INSTANTIATE_TEST_SUITE_P(Arms, HybridOverfit,
                         ::testing::Combine(::testing::Values(Arm::BF16, Arm::FP8Matched),
                                            ::testing::Values(DType::F32, DType::BF16)),
                         [](const auto& info) {
                           std::string s = to_string(std::get<0>(info.param)) + "_" +
                                           to_string(std::get<1>(info.param));
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
