// Activation checkpointing (model.h ModelMemory): a model that keeps only each layer's input and
// re-runs the layer's forward in the backward trains bitwise like one that keeps everything —
// losses, gradients and weights over optimizer steps with gradient accumulation — for the pre-norm
// transformer (residual added in place), post-norm with μnit's τ-residuals, QK-norm, the hybrid
// (Gated DeltaNet layers), F32 and BF16 activations, the BF16 and FP8 arms and the delayed recipe
// (whose recompute records the same amaxes again). Layer diagnostics, which need every layer's
// activations, are refused under it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/optim.h"

using namespace octet;

namespace {

struct Variant {
  std::string name;
  ModelConfig cfg;
  PrecisionConfig prec;
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  const ModelConfig base = test::tiny_model();
  auto add = [&](const std::string& name, ModelConfig c, Arm arm, DType act,
                 Recipe recipe = Recipe::TensorCurrent) {
    PrecisionConfig p = test::arm_precision(arm);
    p.activations = act;
    p.quant.recipe = recipe;
    v.push_back({name, c, p});
  };
  add("pre bf16 arm", base, Arm::BF16, DType::F32);
  add("pre fp8-matched bf16-act", base, Arm::FP8Matched, DType::BF16);
  add("pre fp8-stale delayed", base, Arm::FP8Stale, DType::F32, Recipe::TensorDelayed);
  ModelConfig post = base;
  post.norm_placement = NormPlacement::Post;
  post.unit_scaling = true;
  post.qk_norm = true;
  add("post unit-scaling qk-norm fp8-linear", post, Arm::FP8Linear, DType::BF16);
  ModelConfig hybrid = base;
  hybrid.mixer = MixerKind::Hybrid;
  hybrid.n_layer = 4;
  hybrid.gdn_chunk = 4;
  add("hybrid fp8-matched", hybrid, Arm::FP8Matched, DType::F32);
  return v;
}

// Three optimizer steps of two micro-batches each; the summed losses and the final weights.
struct TrainResult {
  std::vector<double> losses;
  std::vector<float> grads, params;
};

TrainResult train(const Variant& v, bool checkpointing) {
  auto be = make_cpu_backend();
  ModelMemory mem;
  mem.activation_checkpointing = checkpointing;
  Model m(v.cfg, v.prec, *be, 2, mem);
  m.init(21);
  Optimizer opt(m, AdamWConfig{});
  TrainResult r;
  for (int step = 0; step < 3; ++step) {
    m.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      std::vector<int32_t> ids, targets;
      test::tiny_batch(v.cfg, 2, ids, targets, uint32_t(1 + 2 * step + micro));
      r.losses.push_back(m.step(ids.data(), targets.data(), true, 0.05f));
    }
    if (step == 2) r.grads = m.download_grads();
    m.update_quant_scales();
    opt.compute_grad_norm();
    opt.step(3e-3f);
  }
  r.params = m.download_params();
  return r;
}

TEST(ActivationCheckpointing, TrainsBitwiseLikeKeepingEverything) {
  for (const Variant& v : variants()) {
    const TrainResult keep = train(v, false), recompute = train(v, true);
    EXPECT_EQ(keep.losses, recompute.losses) << v.name;
    EXPECT_EQ(keep.grads, recompute.grads) << v.name;
    EXPECT_EQ(keep.params, recompute.params) << v.name;
    // the premise: the run moved (a frozen model would pass trivially)
    EXPECT_NE(keep.losses.front(), keep.losses.back()) << v.name;
  }
}

TEST(ActivationCheckpointing, LayerDiagnosticsAreRefused) {
  const ModelConfig cfg = test::tiny_model();
  auto be = make_cpu_backend();
  ModelMemory mem;
  mem.activation_checkpointing = true;
  Model m(cfg, test::arm_precision(Arm::FP8Matched), *be, 2, mem);
  EXPECT_TRUE(m.memory().activation_checkpointing);
  m.init(1);
  std::vector<int32_t> ids, targets;
  test::tiny_batch(cfg, 2, ids, targets);
  m.step(ids.data(), targets.data(), true, 1.0f);
  EXPECT_THROW(m.diagnostics(), Error);
  EXPECT_THROW(m.attention_sample(0), Error);
}

}  // namespace
