// Delayed scaling across ranks: the exchange form of a recorded amax (integer order = float order,
// NaN above inf, −1 none), and the right value — rank amaxes 1 and 8 give both ranks the
// E4M3 scale 448/8 = 56 after the max-reduction (under `mpirun -np 2`), where rank 0 alone would
// have taken 448/1; and a whole model's quantizer states agree on both ranks after
// reduce_pending_amaxes although each rank saw other tokens (and differ without it).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "fp8/linear_state.h"
#include "job.h"
#include "model/model_test_util.h"
#include "octet/model.h"
#include "octet/quant.h"

using namespace octet;
using test::comm;
using test::cpu;

namespace {

TEST(AmaxExchange, IntegerOrderIsFloatOrderWithNaNOnTop) {
  const float inf = std::numeric_limits<float>::infinity();
  const float ordered[] = {0.0f, 1e-30f, 1.0f, 8.0f, 448.0f, 3e38f, inf, NAN};
  int32_t prev = detail::amax_to_exchange(-1.0f);
  EXPECT_EQ(prev, -1);
  for (float a : ordered) {
    const int32_t e = detail::amax_to_exchange(a);
    EXPECT_GT(e, prev) << a;
    prev = e;
    const float back = detail::amax_from_exchange(e);
    if (std::isnan(a)) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      EXPECT_EQ(back, a);
    }
  }
  EXPECT_EQ(detail::amax_to_exchange(-NAN), detail::amax_to_exchange(NAN));  // sign cleared
  EXPECT_EQ(detail::amax_from_exchange(-1), -1.0f);
}

// One FP8 tensor-delayed linear whose X has amax `x_amax` (W's is 0.5 on every rank).
std::unique_ptr<Linear> linear_after_forward(float x_amax) {
  LinearSpec spec;
  spec.in_features = 4;
  spec.out_features = 2;
  spec.precision = LinearPrecision::FP8;
  spec.quant.recipe = Recipe::TensorDelayed;
  spec.quant.amax_history_len = 4;
  auto lin = cpu().make_linear(spec);
  std::vector<float> x = {0.25f, -x_amax, 0.5f, 0.0f, 0.125f, 0.75f, -0.5f, 0.25f}, w(8, 0.5f), y(4);
  lin->forward(Tensor(x.data(), DType::F32, {2, 4}), Tensor(w.data(), DType::F32, {2, 4}),
               Tensor(y.data(), DType::F32, {2, 2}));
  return lin;
}

TEST(AmaxReduction, RankAmaxesOneAndEightGiveScale56OnBothRanks) {
  if (comm().size() != 2) GTEST_SKIP() << "needs 2 ranks (ctest runs it under mpirun -np 2)";
  auto lin = linear_after_forward(comm().rank() == 0 ? 1.0f : 8.0f);
  int32_t amax[3];
  const Tensor t(amax, DType::I32, {3});
  lin->pending_amaxes(t);
  EXPECT_EQ(amax[2], -1);  // no backward: nothing recorded for dY
  comm().all_reduce(t, ReduceOp::Max);
  lin->set_pending_amaxes(t);
  lin->update_scales();
  const std::vector<DelayedState> s = unpack_delayed_states(lin->quant_state(), 3, 4);
  EXPECT_EQ(s[0].scale, 56.0f);   // 448 / max(1, 8)
  EXPECT_EQ(s[1].scale, 896.0f);  // 448 / 0.5
  EXPECT_EQ(s[2].history.size(), 0u);
  ASSERT_EQ(s[0].history.size(), 1u);
  EXPECT_EQ(s[0].history[0], 8.0f);
}

TEST(AmaxReduction, WithoutTheReductionRankZeroWouldScaleBy448) {  // the control of the test above
  auto lin = linear_after_forward(1.0f);
  lin->update_scales();
  EXPECT_EQ(unpack_delayed_states(lin->quant_state(), 3, 4)[0].scale, 448.0f);
}

TEST(AmaxReduction, NaNOnOneRankCountsAnOverflowOnEvery) {
  if (comm().size() != 2) GTEST_SKIP() << "needs 2 ranks";
  auto lin = linear_after_forward(comm().rank() == 1 ? NAN : 2.0f);
  int32_t amax[3];
  const Tensor t(amax, DType::I32, {3});
  lin->pending_amaxes(t);
  comm().all_reduce(t, ReduceOp::Max);
  lin->set_pending_amaxes(t);
  lin->update_scales();
  const std::vector<DelayedState> s = unpack_delayed_states(lin->quant_state(), 3, 4);
  EXPECT_EQ(s[0].overflow_count, 1);
  EXPECT_TRUE(s[0].history.empty());  // a non-finite amax keeps the scale and the history
}

// The quantizer states of a tiny FP8 tensor-delayed model after one forward/backward on this
// rank's own tokens and the scale update, with or without the cross-rank amax reduction; flattened.
std::vector<float> model_states_after_a_step(bool reduce) {
  const ModelConfig mc = test::tiny_model();
  PrecisionConfig pc;
  pc.arm = Arm::FP8Matched;
  pc.quant.recipe = Recipe::TensorDelayed;
  pc.quant.amax_history_len = 4;
  Model m(mc, pc, cpu(), 1);
  m.init(7);
  std::vector<int32_t> ids, targets;
  test::tiny_batch(mc, 1, ids, targets, uint32_t(1 + comm().rank()));  // other tokens on each rank
  m.zero_grad();
  m.forward_backward(ids.data(), targets.data(), true, 1.0f);
  EXPECT_EQ(m.amax_slots(), 3 * 9);  // X, W, dY of qkv, proj, fc1, fc2 per layer and the head
  if (reduce) reduce_pending_amaxes(m, comm());
  m.update_quant_scales();
  std::vector<float> flat;
  for (const auto& [key, st] : m.quant_states()) flat.insert(flat.end(), st.begin(), st.end());
  return flat;
}

TEST(AmaxReduction, AModelsScalesAgreeOnBothRanksOnlyAfterTheReduction) {
  if (comm().size() != 2) GTEST_SKIP() << "needs 2 ranks";
  for (bool reduce : {true, false}) {
    const std::vector<float> mine = model_states_after_a_step(reduce);
    std::vector<float> root = mine;
    comm().broadcast(Tensor(root.data(), DType::F32, {int64_t(root.size())}), 0);
    if (reduce) {
      EXPECT_EQ(mine, root);
    } else if (comm().rank() == 1) {
      EXPECT_NE(mine, root) << "the ranks' tokens must differ for the test above to mean something";
    }
  }
}

}  // namespace
