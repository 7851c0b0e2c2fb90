// The fused optimizer step on the CPU backend (octet/optim.h, backend.h adamw_prepare/apply): equal
// bit for bit to the per-tensor path it replaced (host-read norm, Backend::scale, one adamw per
// tensor) over a tiny model, whole and sharded as ZeRO-1 lays it out (pieces with padding), with
// clipping and a NaN-gradient step that both skip; the clip factor and norm the device decided
// equal the host's; a skipped step leaves t, so the next update's bias correction is the one the
// trainer always used; load() restores t; bad arguments throw.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/model_test_util.h"
#include "octet/adamw_rule.h"
#include "octet/error.h"
#include "train/optimizer_reference.h"

using namespace octet;

namespace {

TEST(FusedOptimizer, EqualsPerTensorPathBitwiseWithClipAndSkip) {
  auto be = make_cpu_backend();
  test::expect_fused_equals_reference(*be, test::tiny_model(), test::arm_precision(Arm::BF16), nullptr, 8, 3);
}

TEST(FusedOptimizer, EqualsPerTensorPathBitwiseOnBf16Activations) {
  auto be = make_cpu_backend();
  PrecisionConfig p = test::arm_precision(Arm::FP8Linear);
  p.activations = DType::BF16;
  test::expect_fused_equals_reference(*be, test::tiny_model(), p, nullptr, 5, 0);
}

TEST(FusedOptimizer, EqualsPerTensorPathBitwiseOnAShard) {
  auto be = make_cpu_backend();
  const ModelConfig cfg = test::tiny_model();
  Model probe(cfg, test::arm_precision(Arm::BF16), *be, 2);
  const int64_t n = int64_t(probe.num_params());
  // Two pieces cutting through parameter tensors, padding between them in the state vectors; the
  // part [n/3, n/2) belongs to another rank.
  ShardLayout shard;
  shard.pieces = {{0, n / 3, 0}, {n / 2, n, n / 3 + 5}};
  shard.state_size = n / 3 + 5 + (n - n / 2) + 3;
  test::expect_fused_equals_reference(*be, cfg, test::arm_precision(Arm::BF16), &shard, 6, 2);
}

// adamw_prepare alone: the decision of adamw_rule.h on a hand-set state.
std::vector<double> prepare(Backend& be, double norm_sq, double loss, std::vector<double> state, float clip,
                            int64_t t_rows = 4) {
  Buffer ns = be.alloc(DType::F64, {1}), ls = be.alloc(DType::F64, {1}),
         st = be.alloc(DType::F64, {kOptStateSlots});
  Buffer bc = be.alloc(DType::F64, {t_rows, 2});
  std::vector<double> table(size_t(2 * t_rows));
  for (int64_t t = 1; t <= t_rows; ++t) {
    table[size_t(2 * t - 2)] = adamw_bias_correction(0.9f, t);
    table[size_t(2 * t - 1)] = adamw_bias_correction(0.95f, t);
  }
  be.upload(bc, table.data());
  be.upload(ns, &norm_sq);
  be.upload(ls, &loss);
  be.upload(st, state.data());
  be.adamw_prepare(ns, ls, bc, st, clip);
  std::vector<double> out(kOptStateSlots);
  be.download(out.data(), st);
  return out;
}

TEST(FusedOptimizer, PrepareClipsSkipsAndCountsAsTheRuleSays) {
  auto be = make_cpu_backend();
  std::vector<double> s0(kOptStateSlots, 0.0);
  s0[kOptSteps] = 2;
  s0[kOptBadInARow] = 3;
  // norm 5 > clip 1: factor fp32(1/5); t 2 -> 3 with the table's row 3; the bad run ends.
  auto s = prepare(*be, 25.0, 1.0, s0, 1.0f);
  EXPECT_EQ(s[kOptSkip], 0.0);
  EXPECT_EQ(s[kOptNorm], 5.0);
  EXPECT_EQ(float(s[kOptClip]), float(1.0 / 5.0));
  EXPECT_EQ(s[kOptSteps], 3.0);
  EXPECT_EQ(s[kOptBc1], 1.0 - std::pow(double(0.9f), 3.0));
  EXPECT_EQ(s[kOptBc2], 1.0 - std::pow(double(0.95f), 3.0));
  EXPECT_EQ(s[kOptBadInARow], 0.0);
  // norm below the clip, or clipping off: factor 1.
  EXPECT_EQ(prepare(*be, 0.25, 1.0, s0, 1.0f)[kOptClip], 1.0);
  EXPECT_EQ(prepare(*be, 25.0, 1.0, s0, 0.0f)[kOptClip], 1.0);
  // A NaN norm or an infinite loss: skipped, t kept, the counters advance.
  for (auto [ns, loss] : {std::pair{double(NAN), 1.0}, {1.0, double(INFINITY)}, {double(INFINITY), 1.0}}) {
    s = prepare(*be, ns, loss, s0, 1.0f);
    EXPECT_EQ(s[kOptSkip], 1.0);
    EXPECT_EQ(s[kOptSteps], 2.0);
    EXPECT_EQ(s[kOptSkipped], 1.0);
    EXPECT_EQ(s[kOptBadInARow], 4.0);
  }
  // A t beyond the table poisons the corrections (NaN) instead of reading past it.
  s0[kOptSteps] = 4;
  s = prepare(*be, 1.0, 1.0, s0, 1.0f);
  EXPECT_TRUE(std::isnan(s[kOptBc1]) && std::isnan(s[kOptBc2]));
}

TEST(FusedOptimizer, ApplyLeavesEverythingOnASkip) {
  auto be = make_cpu_backend();
  std::vector<float> p{1, 2, 3}, g{1, 1, 1}, m{0.5f, 0.5f, 0.5f}, v{1, 1, 1};
  std::vector<double> seg{2, 1, 3, 0}, state(kOptStateSlots, 0.0);
  state[kOptSkip] = 1;
  auto view = [](auto& h, DType d, Shape s) { return Tensor(h.data(), d, s); };
  be->adamw_apply(view(p, DType::F32, {3}), view(g, DType::F32, {3}), view(m, DType::F32, {3}),
                  view(v, DType::F32, {3}), view(seg, DType::F64, {2, 2}),
                  view(state, DType::F64, {kOptStateSlots}), 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f);
  EXPECT_EQ(p, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(m, (std::vector<float>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(v, (std::vector<float>{1, 1, 1}));
}

TEST(FusedOptimizer, LoadRestoresTheStepCounter) {
  auto be = make_cpu_backend();
  Model model(test::tiny_model(), test::arm_precision(Arm::BF16), *be, 1);
  Optimizer opt(model, AdamWConfig{});
  const std::vector<float> zeros(model.num_params(), 0.0f);
  opt.load(zeros, zeros, 41);
  EXPECT_EQ(opt.steps(), 41);
  EXPECT_EQ(opt.counters().skipped, 0);
  EXPECT_THROW(opt.load(zeros, std::vector<float>(3), 1), Error);
}

TEST(FusedOptimizer, BadArgumentsThrowNamingThem) {
  auto be = make_cpu_backend();
  Buffer ns = be->alloc(DType::F64, {1}), st = be->alloc(DType::F64, {kOptStateSlots});
  Buffer bc = be->alloc(DType::F64, {4, 2}), f = be->alloc(DType::F32, {4}), g3 = be->alloc(DType::F32, {3});
  Buffer seg = be->alloc(DType::F64, {1, 2}), bad_state = be->alloc(DType::F64, {3});
  auto msg = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([&] { be->adamw_prepare(ns, {}, bc, bad_state, 1.0f); }).find("state"), std::string::npos);
  EXPECT_NE(msg([&] { be->adamw_prepare(ns, {}, f, st, 1.0f); }).find("bias_corr"), std::string::npos);
  EXPECT_NE(msg([&] { be->adamw_prepare(ns, {}, bc, st, -1.0f); }).find("grad_clip"), std::string::npos);
  EXPECT_NE(msg([&] { be->adamw_apply(f, g3, f, f, seg, st, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f); }).find("grad"),
            std::string::npos);
  EXPECT_NE(
      msg([&] { be->adamw_apply(f, f, f, f, f, st, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f); }).find("segments"),
      std::string::npos);
  EXPECT_NE(msg([&] { be->adamw_apply(f, f, f, f, seg, st, 1e-2f, 1.0f, 0.95f, 1e-8f, 0.1f); }).find("betas"),
            std::string::npos);
}

}  // namespace
