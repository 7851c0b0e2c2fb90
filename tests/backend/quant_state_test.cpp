// quant_state_test.cpp — Linear::quant_state / load_quant_state on the CPU backend (backend.h) and
// the DelayedState layout of quant.h: the saved state is what tensor-delayed scaling defines (the
// amaxes of the last H quantizations, most recent last; the next scale = scale_from_amax of their
// max), a linear restored from it continues bitwise like the one that saved it (a fresh one does
// not), stateless linears have an empty state, and every malformed state is rejected with the
// linear left unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/fp8.h"
#include "octet/quant.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t M = 19, IN = 40, OUT = 24;
constexpr int H = 3;

LinearSpec delayed_spec() {
  LinearSpec spec{IN, OUT, LinearPrecision::FP8, {}};
  spec.quant.recipe = Recipe::TensorDelayed;
  spec.quant.formats = FormatPolicy::Hybrid;
  spec.quant.amax_history_len = H;
  return spec;
}

float amax_of(const std::vector<float>& v) {
  float a = 0.0f;
  for (float x : v) a = std::max(a, std::fabs(x));
  return a;
}

struct Step {
  std::vector<float> x, w, dy;
};
Step step_inputs(uint32_t k) {  // magnitudes change from step to step, so the scales do
  return {randn(M * IN, 10 + k, 0.5f + 0.7f * float(k % 3)), randn(OUT * IN, 20 + k, 0.05f),
          randn(M * OUT, 30 + k, 1e-3f * float(1 + k % 4))};
}

struct Out {
  std::vector<float> y, dx, dw;
};
Out run_step(Linear& lin, const Step& s) {
  Out o{std::vector<float>(M * OUT), std::vector<float>(M * IN), std::vector<float>(OUT * IN, 0.0f)};
  const SavedLinear saved = lin.forward(view(s.x, {M, IN}), view(s.w, {OUT, IN}), view(o.y, {M, OUT}));
  lin.backward(saved, view(s.dy, {M, OUT}), view(o.dx, {M, IN}), view(o.dw, {OUT, IN}));
  lin.update_scales();  // one training step: forward, backward, the update
  return o;
}

TEST(QuantState, LayoutIsTheDelayedScalingDefinition) {
  auto be = make_cpu_backend();
  auto lin = be->make_linear(delayed_spec());
  // Fresh: three empty histories, scale 1, no overflow.
  EXPECT_EQ(lin->quant_state(), std::vector<float>({0, 1, 0, 0, 1, 0, 0, 1, 0}));
  std::vector<Step> steps;
  for (uint32_t k = 0; k < 5; ++k) {
    steps.push_back(step_inputs(k));
    run_step(*lin, steps.back());
  }
  const std::vector<float> q = lin->quant_state();
  ASSERT_EQ(q.size(), size_t(3 * (H + 3)));
  // Slot order X, W, dY; each: n = H, the amaxes of the last H steps (most recent last), the scale
  // from their max in the slot's format (hybrid: E4M3 forward, E5M2 for dY), overflow count 0.
  const Format formats[3] = {Format::E4M3, Format::E4M3, Format::E5M2};
  for (int slot = 0; slot < 3; ++slot) {
    const float* s = q.data() + slot * (H + 3);
    EXPECT_EQ(s[0], float(H)) << slot;
    float mx = 0.0f;
    for (int i = 0; i < H; ++i) {
      const Step& st = steps[size_t(5 - H + i)];
      const float a = amax_of(slot == 0 ? st.x : slot == 1 ? st.w : st.dy);
      EXPECT_EQ(s[1 + i], a) << "slot " << slot << " entry " << i;
      mx = std::max(mx, a);
    }
    EXPECT_EQ(s[1 + H], scale_from_amax(mx, formats[slot])) << slot;
    EXPECT_EQ(s[2 + H], 0.0f) << slot;
  }
}

TEST(QuantState, RestoredLinearContinuesBitwise) {
  auto be = make_cpu_backend();
  auto a = be->make_linear(delayed_spec());
  for (uint32_t k = 0; k < 4; ++k) run_step(*a, step_inputs(k));
  // An overflowing step: the X slot keeps its scale and counts the overflow.
  Step bad = step_inputs(4);
  bad.x[3] = NAN;
  run_step(*a, bad);
  const std::vector<float> saved = a->quant_state();
  EXPECT_EQ(saved[H + 2], 1.0f) << "X slot overflow count";

  auto b = be->make_linear(delayed_spec());
  b->load_quant_state(saved);
  EXPECT_EQ(b->quant_state(), saved);
  auto fresh = be->make_linear(delayed_spec());
  for (uint32_t k = 5; k < 8; ++k) {
    const Step s = step_inputs(k);
    const Out oa = run_step(*a, s), ob = run_step(*b, s), of = run_step(*fresh, s);
    EXPECT_EQ(oa.y, ob.y) << "step " << k;
    EXPECT_EQ(oa.dx, ob.dx) << "step " << k;
    EXPECT_EQ(oa.dw, ob.dw) << "step " << k;
    if (k == 5) {
      EXPECT_NE(oa.y, of.y) << "a fresh history scales differently";
    }
  }
  EXPECT_EQ(a->quant_state(), b->quant_state());
}

TEST(QuantState, StatelessLinearsHaveNone) {
  auto be = make_cpu_backend();
  LinearSpec spec = delayed_spec();
  for (LinearPrecision p : {LinearPrecision::BF16, LinearPrecision::FP32}) {
    spec.precision = p;
    auto lin = be->make_linear(spec);  // a delayed recipe in the spec is ignored without FP8
    run_step(*lin, step_inputs(0));
    EXPECT_TRUE(lin->quant_state().empty());
    EXPECT_NO_THROW(lin->load_quant_state({}));
    EXPECT_THROW(lin->load_quant_state({0, 1, 0}), Error);
  }
  spec.precision = LinearPrecision::FP8;
  for (Recipe r : {Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX, Recipe::Unit}) {
    spec.quant.recipe = r;
    auto lin = be->make_linear(spec);
    run_step(*lin, step_inputs(0));
    EXPECT_TRUE(lin->quant_state().empty()) << to_string(r);
    EXPECT_THROW(lin->load_quant_state({0, 1, 0, 0, 1, 0, 0, 1, 0}), Error) << to_string(r);
  }
}

// Expects load_quant_state(bad) to throw an Error whose message contains `needle`, and the linear
// to keep its state.
void expect_rejected(Linear& lin, const std::vector<float>& bad, const std::string& needle) {
  const std::vector<float> before = lin.quant_state();
  try {
    lin.load_quant_state(bad);
    ADD_FAILURE() << "accepted a bad state (expected: " << needle << ")";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  EXPECT_EQ(lin.quant_state(), before) << needle;
}

TEST(QuantState, MalformedStatesAreRejected) {
  auto be = make_cpu_backend();
  auto lin = be->make_linear(delayed_spec());
  for (uint32_t k = 0; k < 2; ++k) run_step(*lin, step_inputs(k));
  const std::vector<float> good = lin->quant_state();  // histories of 2
  ASSERT_EQ(good.size(), size_t(3 * 5));
  auto with = [&](size_t i, float v) {
    std::vector<float> s = good;
    s[i] = v;
    return s;
  };
  expect_rejected(*lin, {}, "slot 1 of 3: missing");
  expect_rejected(*lin, std::vector<float>(good.begin(), good.end() - 1), "slot 3 of 3: needs 5");
  std::vector<float> extra = good;
  extra.push_back(0.0f);
  expect_rejected(*lin, extra, "1 values left over");
  expect_rejected(*lin, with(10, 4.0f), "history length 4");      // dY slot: n > H
  expect_rejected(*lin, with(0, 1.5f), "not an integer");         // X slot: n = 1.5
  expect_rejected(*lin, with(6, -1.0f), "amax history entry 0");  // W slot: a negative amax
  expect_rejected(*lin, with(2, INFINITY), "amax history entry 1");
  expect_rejected(*lin, with(3, 0.0f), "delayed scale");  // X slot: scale 0
  expect_rejected(*lin, with(13, NAN), "delayed scale");  // dY slot: NaN scale
  expect_rejected(*lin, with(4, -1.0f), "overflow count");
  expect_rejected(*lin, with(14, 0.5f), "overflow count");
}

TEST(QuantState, PackUnpackRoundTrip) {
  const std::vector<DelayedState> slots = {{{}, 1.0f, 0}, {{0.5f, 2.0f, 0.0f}, 112.0f, 7}};
  const std::vector<float> packed = pack_delayed_states(slots);
  EXPECT_EQ(packed, std::vector<float>({0, 1, 0, 3, 0.5f, 2.0f, 0.0f, 112, 7}));
  const std::vector<DelayedState> back = unpack_delayed_states(packed, 2, 3);
  ASSERT_EQ(back.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back[i].history, slots[i].history);
    EXPECT_EQ(back[i].scale, slots[i].scale);
    EXPECT_EQ(back[i].overflow_count, slots[i].overflow_count);
  }
  EXPECT_THROW(unpack_delayed_states(packed, 2, 2), Error);  // a history of 3 > H = 2
  EXPECT_THROW(unpack_delayed_states(packed, 1, 3), Error);  // values left over
}

}  // namespace
