// Whole-model gradient check: the analytic gradients of Model::step (backward through every layer)
// against central finite differences of the loss, for every architecture option. It runs the fp32
// reference arm (FP32 GEMMs, FP64 attention) so the only error sources are FP32 rounding and the FD
// truncation. Loss = mean cross-entropy over 16 tokens; step h = 1e-2 (relative to |θ| ~ 0.2).
// Stated tolerance: |g_fd − g| <= 3e-4 + 3e-2·|g| per entry — with the loss near 3.5, FP32 loss
// rounding gives an FD noise ~ 3.5·2^-24·√(#ops)/(2h) ~ 1e-5 and the O(h²) truncation ~ 1e-4.
// A sign flip or a missing term (dropped residual path, wrong transpose) violates it by orders.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "model_test_util.h"
#include "octet/backend.h"

using namespace octet;

namespace {

struct Variant {
  std::string name;
  void (*apply)(ModelConfig&);
};
void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

void check_gradients(const ModelConfig& cfg) {
  auto be = make_cpu_backend();
  const int64_t B = 2;
  Model model(cfg, test::arm_precision(Arm::FP32), *be, B);
  model.init(7);
  std::vector<int32_t> ids, targets;
  test::tiny_batch(cfg, B, ids, targets);
  const float scale = 1.0f / float(B * cfg.seq_len);
  model.zero_grad();
  const double loss0 = model.step(ids.data(), targets.data(), true, scale) * scale;
  ASSERT_TRUE(std::isfinite(loss0));
  const std::vector<float> grads = model.download_grads();
  std::vector<float> params = model.download_params();
  auto loss_at = [&](size_t i, float v) {
    const float old = params[i];
    params[i] = v;
    model.upload_params(params);
    const double l = model.step(ids.data(), targets.data(), false, 1.0f) * scale;
    params[i] = old;
    return l;
  };
  int checked = 0, nonzero = 0;
  for (const ParamInfo& p : model.params()) {
    // A handful of entries per tensor, spread over it (first, last, and strided ones).
    const size_t stride = std::max<size_t>(1, p.numel / 5);
    for (size_t j = 0; j < p.numel; j += stride) {
      const size_t i = p.offset + (j == 0 ? 0 : j - 1);
      const float h = 1e-2f;
      const double fd = (loss_at(i, params[i] + h) - loss_at(i, params[i] - h)) / (2.0 * double(h));
      const double g = grads[i];
      EXPECT_NEAR(g, fd, 3e-4 + 3e-2 * std::fabs(g)) << p.name << "[" << (i - p.offset) << "]";
      ++checked;
      nonzero += std::fabs(g) > 1e-5;
    }
  }
  model.upload_params(params);
  EXPECT_GT(checked, 40);
  EXPECT_GT(nonzero, checked / 2) << "most sampled gradients should be non-zero";
}

const Variant kVariants[] = {
    {"PreRmsRopeSwigluTied", [](ModelConfig&) {}},
    {"PostLayerNormLearnedGeluUntied",
     [](ModelConfig& c) {
       c.norm_placement = NormPlacement::Post;
       c.norm = NormKind::LayerNorm;
       c.positions = PositionKind::Learned;
       c.mlp = MlpKind::GELU;
       c.tied_embeddings = false;
     }},
    {"FogOutputNormFixedQkNorm",
     [](ModelConfig& c) {
       c.norm_placement = NormPlacement::Output;
       c.qk_norm = true;
       c.qk_norm_trainable = false;
     }},
    {"TrainableQkNormNopeMha",
     [](ModelConfig& c) {
       c.qk_norm = true;
       c.positions = PositionKind::NoPE;
       c.n_kv_head = 2;
     }},
    {"UnitScaling",
     [](ModelConfig& c) {
       c.unit_scaling = true;
       c.residual_tau = 0.3f;
       c.norm_placement = NormPlacement::Output;
     }},
    // 3 Gated DeltaNet layers and 1 attention layer; chunks of 3 over T = 8 (a short last chunk).
    {"HybridGatedDeltaNet",
     [](ModelConfig& c) {
       c.mixer = MixerKind::Hybrid;
       c.n_layer = 4;
       c.gdn_chunk = 3;
     }},
    {"HybridPostLayerNormGeluUnitScaling",
     [](ModelConfig& c) {
       c.mixer = MixerKind::Hybrid;
       c.n_layer = 4;
       c.norm_placement = NormPlacement::Post;
       c.norm = NormKind::LayerNorm;
       c.mlp = MlpKind::GELU;
       c.unit_scaling = true;
     }},
};

class GradCheck : public ::testing::TestWithParam<Variant> {};

TEST_P(GradCheck, MatchesFiniteDifferences) {
  ModelConfig c = test::tiny_model();
  GetParam().apply(c);
  check_gradients(c);
}

INSTANTIATE_TEST_SUITE_P(Architectures, GradCheck, ::testing::ValuesIn(kVariants),
                         [](const auto& info) { return info.param.name; });

}  // namespace
