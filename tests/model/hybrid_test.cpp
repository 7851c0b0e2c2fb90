// The hybrid model (model.mixer = hybrid: layers l % 4 == 3 attention, the others Gated DeltaNet,
// arXiv 2412.06464): its parameter table, that its recurrent layers' linears stay out of FP8 in the
// FP8 arms (no quantizer state, no FP8 diagnostics, no softmax row residual), that the attention
// mixer's table is untouched. A hybrid's whole-model gradients are checked against finite
// differences in grad_check_test.cpp, its training (overfitting a fixed sequence in every arm) in
// arms_test.cpp, its cached decode in generate_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "model_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"

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

}  // namespace
