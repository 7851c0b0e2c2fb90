// The precision arms on one model: same seed ⇒ same initial weights and (nearly) the same initial
// loss in every arm, each arm's documented precision map (docs/design.md §"Precision arms"), and
// that a 2-layer model overfits one fixed sequence to near-zero loss in every arm (FP8 GEMMs and
// FP8 attention can learn), also as a 4-layer 3:1 Gated DeltaNet/attention hybrid, with F32 and
// with BF16 activations; BF16 activations start within 1e-2 (relative) of the F32 loss; the loss
// accumulates on the backend across forward_backward calls until take_loss(); the producers'
// amaxes reach the right FP8 casts in every MLP and norm placement.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "model_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/optim.h"

using namespace octet;

namespace {

const Arm kArms[] = {Arm::BF16, Arm::FP8Linear, Arm::FP8Stale, Arm::FP8Matched};

TEST(Arms, PrecisionMapFollowsDesign) {
  EXPECT_EQ(linear_precision(Arm::BF16), LinearPrecision::BF16);
  EXPECT_EQ(linear_precision(Arm::FP8Linear), LinearPrecision::FP8);
  EXPECT_EQ(linear_precision(Arm::FP8Stale), LinearPrecision::FP8);
  EXPECT_EQ(linear_precision(Arm::FP8Matched), LinearPrecision::FP8);
  for (Arm a : kArms) EXPECT_EQ(head_precision(a), LinearPrecision::BF16);
  PrecisionConfig p;
  p.arm = Arm::FP8Linear;
  EXPECT_EQ(attention_config(p).precision, AttnPrecision::BF16);
  p.arm = Arm::FP8Stale;
  EXPECT_EQ(attention_config(p).precision, AttnPrecision::FP8);
  EXPECT_EQ(attention_config(p).delta, DeltaMode::Stale);
  p.arm = Arm::FP8Matched;
  EXPECT_EQ(attention_config(p).delta, DeltaMode::Matched);
  p.quant.formats = FormatPolicy::Hybrid;
  EXPECT_EQ(attention_config(p).do_format, Format::E5M2);
  p.quant.formats = FormatPolicy::E4M3;
  EXPECT_EQ(attention_config(p).ds_format, Format::E4M3);
  EXPECT_EQ(parse_arm("fp8-matched"), Arm::FP8Matched);
  EXPECT_THROW(parse_arm("fp4"), Error);
}

TEST(Arms, SameSeedSameInitialLoss) {
  const ModelConfig cfg = test::tiny_model();
  auto be = make_cpu_backend();
  std::vector<int32_t> ids, targets;
  test::tiny_batch(cfg, 2, ids, targets);
  Model ref(cfg, test::arm_precision(Arm::FP32), *be, 2);
  ref.init(11);
  const double loss_ref = ref.step(ids.data(), targets.data(), false, 1.0f) / double(ids.size());
  const std::vector<float> w_ref = ref.download_params();
  for (Arm a : kArms) {
    Model m(cfg, test::arm_precision(a), *be, 2);
    m.init(11);
    EXPECT_EQ(m.download_params(), w_ref) << to_string(a);
    const double loss = m.step(ids.data(), targets.data(), false, 1.0f) / double(ids.size());
    // Low-precision operands move an O(1) loss by well under 1% at init.
    EXPECT_NEAR(loss, loss_ref, 0.01 * loss_ref) << to_string(a);
  }
  Model other(cfg, test::arm_precision(Arm::BF16), *be, 2);
  other.init(12);
  EXPECT_NE(other.download_params(), w_ref) << "a different seed must give different weights";
}

TEST(Arms, DeterministicForwardBackward) {
  const ModelConfig cfg = test::tiny_model();
  auto be = make_cpu_backend();
  std::vector<int32_t> ids, targets;
  test::tiny_batch(cfg, 2, ids, targets);
  for (Arm a : {Arm::BF16, Arm::FP8Matched}) {
    std::vector<float> g[2];
    double l[2];
    for (int r = 0; r < 2; ++r) {
      Model m(cfg, test::arm_precision(a), *be, 2);
      m.init(3);
      m.zero_grad();
      l[r] = m.step(ids.data(), targets.data(), true, 0.1f);
      g[r] = m.download_grads();
    }
    EXPECT_EQ(l[0], l[1]);
    EXPECT_EQ(g[0], g[1]);
  }
}

TEST(Model, LossAccumulatesUntilTakeLoss) {
  const ModelConfig cfg = test::tiny_model();
  auto be = make_cpu_backend();
  std::vector<int32_t> ids, targets, ids2, targets2;
  test::tiny_batch(cfg, 2, ids, targets, 1);
  test::tiny_batch(cfg, 2, ids2, targets2, 2);
  Model m(cfg, test::arm_precision(Arm::BF16), *be, 2);
  m.init(3);
  const double l1 = m.step(ids.data(), targets.data(), false, 1.0f);
  const double l2 = m.step(ids2.data(), targets2.data(), false, 1.0f);
  EXPECT_NE(l1, l2);
  m.forward_backward(ids.data(), targets.data(), false, 1.0f);
  m.forward_backward(ids2.data(), targets2.data(), false, 1.0f);
  EXPECT_EQ(m.take_loss(), l1 + l2);
  EXPECT_EQ(m.take_loss(), 0.0);  // reset
}

ModelConfig overfit_model() {
  ModelConfig cfg = test::tiny_model();
  cfg.d_model = 32;
  cfg.n_head = 2;
  cfg.n_kv_head = 2;
  cfg.d_ff = 64;
  cfg.seq_len = 16;
  cfg.init_std = 0.05f;
  return cfg;
}

// One fixed 16-token sequence ("octet trains fp8") and its next-token targets.
void fixed_string(std::vector<int32_t>& ids, std::vector<int32_t>& targets) {
  const std::string text = "octet trains fp8";
  ids.resize(16), targets.resize(16);
  for (int i = 0; i < 16; ++i) {
    ids[size_t(i)] = int32_t(text[size_t(i)]) % 32;
    targets[size_t(i)] = int32_t(text[size_t((i + 1) % 16)]) % 32;
  }
}

// Overfit one fixed sequence with AdamW (octet/optim.h) through the backend: the loss must drop
// from ~ln(32) to < 0.1 nats in every arm, with F32 and with BF16 activations, for the transformer
// and for the hybrid (4 layers: 3 Gated DeltaNet, 1 attention; chunks of 8 over 16 tokens).
class Overfit : public ::testing::TestWithParam<std::tuple<Arm, DType, MixerKind>> {};

TEST_P(Overfit, FixedStringToNearZeroLoss) {
  const auto [arm, act, mixer] = GetParam();
  ModelConfig cfg = overfit_model();
  if (mixer == MixerKind::Hybrid) cfg.mixer = mixer, cfg.n_layer = 4, cfg.gdn_chunk = 8;
  auto be = make_cpu_backend();
  PrecisionConfig prec = test::arm_precision(arm);
  prec.activations = act;
  Model m(cfg, prec, *be, 1);
  m.init(5);
  std::vector<int32_t> ids, targets;
  fixed_string(ids, targets);
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
    opt.compute_grad_norm();
    opt.step(1e-2f);
  }
  EXPECT_GT(first, 2.5);
  EXPECT_LT(last, 0.1) << "arm " << to_string(arm) << " (" << to_string(act) << " activations, "
                       << to_string(mixer) << ") failed to overfit (first loss " << first << ")";
}

INSTANTIATE_TEST_SUITE_P(AllArms, Overfit,
                         ::testing::Combine(::testing::ValuesIn(kArms),
                                            ::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values(MixerKind::Attention, MixerKind::Hybrid)),
                         [](const auto& info) {
                           std::string s =
                               to_string(std::get<0>(info.param)) + "_" + to_string(std::get<1>(info.param));
                           if (std::get<2>(info.param) == MixerKind::Hybrid) s += "_hybrid";
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(Model, Bf16ActivationsFirstLossNearF32) {
  // Rounding every activation to BF16 (8 significant bits) perturbs the loss by far less than 1%.
  const ModelConfig cfg = overfit_model();
  auto be = make_cpu_backend();
  std::vector<int32_t> ids, targets;
  fixed_string(ids, targets);
  for (Arm arm : kArms) {
    double loss[2];
    std::vector<float> grads[2];
    for (int i = 0; i < 2; ++i) {
      PrecisionConfig prec = test::arm_precision(arm);
      prec.activations = i ? DType::BF16 : DType::F32;
      Model m(cfg, prec, *be, 1);
      m.init(5);
      loss[i] = m.step(ids.data(), targets.data(), true, 1.0f);
      grads[i] = m.download_grads();
    }
    EXPECT_NEAR(loss[1], loss[0], 1e-2 * loss[0]) << to_string(arm);
    EXPECT_NE(grads[1], grads[0]) << to_string(arm) << ": BF16 activations must actually round";
  }
  PrecisionConfig bad;
  bad.activations = DType::E4M3;
  EXPECT_THROW(bad.validate(), Error);
}

TEST(ModelConfig, RejectsInvalidShapes) {
  ModelConfig c = test::tiny_model();
  c.n_head = 3;  // 16 % 3 != 0
  EXPECT_THROW(c.validate(), Error);
  c = test::tiny_model();
  c.n_kv_head = 3;  // 2 % 3 != 0
  EXPECT_THROW(c.validate(), Error);
  c = test::tiny_model();
  c.seq_len = 0;
  EXPECT_THROW(c.validate(), Error);
  c = test::tiny_model();
  c.n_head = 16;  // head_dim 1: odd, RoPE impossible
  EXPECT_THROW(c.validate(), Error);
  try {
    c = test::tiny_model();
    c.n_head = 5;
    c.validate();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head"), std::string::npos) << e.what();
  }
}

}  // namespace

// The producers' amaxes (model/impl.h) reach the right casts: under tensor-current FP8 the CPU
// linear refuses a given amax that is not its tensor's (src/cpu/backend/linear.cpp), so a step that
// runs is one where each linear got its own input's (and fc1 its dY's) amax — GELU and SwiGLU MLPs,
// pre- and post-norm, with and without activation checkpointing (a layer's forward run again) and
// over micro-batches; with checkpointing the loss and gradients equal the run without, bitwise.
TEST(Arms, ProducerAmaxWiringHoldsInEveryLayout) {
  auto be = make_cpu_backend();
  for (const MlpKind mlp : {MlpKind::GELU, MlpKind::SwiGLU})
    for (const NormPlacement place : {NormPlacement::Pre, NormPlacement::Post}) {
      ModelConfig cfg = test::tiny_model();
      cfg.mlp = mlp;
      cfg.norm_placement = place;
      std::vector<int32_t> ids, targets;
      test::tiny_batch(cfg, 2, ids, targets);
      double loss[2];
      std::vector<float> grads[2];
      for (const bool ckpt : {false, true}) {
        ModelMemory mem;
        mem.activation_checkpointing = ckpt;
        Model m(cfg, test::arm_precision(Arm::FP8Linear), *be, 2, mem);
        m.init(5);
        m.zero_grad();
        ASSERT_NO_THROW(loss[ckpt] = m.step(ids.data(), targets.data(), true, 0.1f));
        ASSERT_NO_THROW(loss[ckpt] +=
                        m.step(ids.data(), targets.data(), true, 0.1f));  // a second micro-batch
        grads[ckpt] = m.download_grads();
      }
      EXPECT_TRUE(std::isfinite(loss[0]));
      EXPECT_EQ(loss[0], loss[1]) << "checkpointing changes nothing";
      EXPECT_EQ(grads[0], grads[1]);
    }
}
