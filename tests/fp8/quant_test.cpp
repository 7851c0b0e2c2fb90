// The quantizer of quant.h, parameterized over recipe × format × shape (TE style, readable names
// like blockXe4m3XweightX255X257): every block's scale follows its recipe's rule (recomputed here
// from an amax the test takes itself), every code is the cast of x·s, dequantize is decode·scale_inv,
// the error stays within the format's rounding bound, and partial edge blocks never read or write
// outside the tensor (run under ASan). Then one test per degenerate-input rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "fp8/fp8_test_util.h"
#include "octet/error.h"
#include "octet/quant.h"

using namespace octet;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// A format case: the policy and the tensor's role (which together pick E4M3 or E5M2).
struct FormatCase {
  FormatPolicy policy;
  Role role;
  const char* name;
};
const FormatCase kFormatCases[] = {
    {FormatPolicy::E4M3, Role::Activation, "e4m3Xactivation"},
    {FormatPolicy::E4M3, Role::Weight, "e4m3Xweight"},
    {FormatPolicy::Hybrid, Role::Gradient, "hybridXgradient"},  // E5M2
};
const Recipe kRecipes[] = {
    Recipe::TensorDelayed, Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX, Recipe::Unit};
const std::pair<int64_t, int64_t> kShapes[] = {{1, 1},     {1, 257}, {257, 1},   {7, 133},  {127, 129},
                                               {129, 127}, {133, 7}, {255, 257}, {257, 255}};

std::string recipe_id(Recipe r) {
  std::string s = to_string(r);
  for (auto& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

// The scale a recipe must give a block of amax `amax` (first quantize of a fresh quantizer).
// MX is recomputed with frexp, independently of fp8.h's bit tricks.
std::pair<float, float> expected_scale(const QuantConfig& cfg, Format f, float amax) {
  if (cfg.recipe == Recipe::Unit) return {cfg.unit_scale, 1.0f / cfg.unit_scale};
  if (cfg.recipe == Recipe::MX) {
    if (amax == 0.0f) return {1.0f, 1.0f};
    int e;
    std::frexp(amax, &e);
    const int x = std::max(e - 1 - (f == Format::E4M3 ? 8 : 15), -126);
    return {std::ldexp(1.0f, -x), std::ldexp(1.0f, x)};
  }
  const float s = scale_from_amax(amax, f, cfg.margin, cfg.pow2_scales);
  return {s, 1.0f / s};
}

using Param = std::tuple<Recipe, int, std::pair<int64_t, int64_t>>;

class QuantizeTest : public ::testing::TestWithParam<Param> {};

TEST_P(QuantizeTest, EveryBlockFollowsItsRecipe) {
  const auto [recipe, fi, shape] = GetParam();
  const FormatCase fc = kFormatCases[fi];
  const auto [rows, cols] = shape;
  QuantConfig cfg;
  cfg.recipe = recipe;
  cfg.formats = fc.policy;
  Quantizer qz(cfg, fc.role);
  const Format f = qz.format();
  const std::vector<float> x = test::mixed_range(rows * cols, uint64_t(rows * 1000 + cols + fi));
  QTensor q;
  qz.quantize(x.data(), rows, cols, q);

  const BlockShape bs = block_shape(recipe, fc.role, rows, cols);
  ASSERT_EQ(q.rows, rows);
  ASSERT_EQ(q.cols, cols);
  ASSERT_EQ(q.format, f);
  ASSERT_EQ(q.block.rows, bs.rows);
  ASSERT_EQ(q.block.cols, bs.cols);
  ASSERT_EQ(int64_t(q.codes.size()), rows * cols);
  const int64_t gr = (rows + bs.rows - 1) / bs.rows, gc = (cols + bs.cols - 1) / bs.cols;
  ASSERT_EQ(int64_t(q.scale_inv.size()), gr * gc);

  // Per block: the test's own amax, the expected scale, and every code.
  float tensor_amax = 0.0f;
  int64_t under = 0, sat = 0;
  const bool saturate = true;
  for (int64_t bi = 0; bi < gr; ++bi)
    for (int64_t bj = 0; bj < gc; ++bj) {
      const int64_t r0 = bi * bs.rows, r1 = std::min(rows, r0 + bs.rows);
      const int64_t c0 = bj * bs.cols, c1 = std::min(cols, c0 + bs.cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[size_t(r * cols + c)]));
      tensor_amax = std::max(tensor_amax, amax);
      const auto [s, s_inv] = expected_scale(cfg, f, amax);
      ASSERT_EQ(q.scale_inv[size_t(bi * gc + bj)], s_inv) << "block " << bi << "," << bj;
      ASSERT_TRUE(std::isfinite(s_inv) && s_inv > 0.0f);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          const float v = x[size_t(r * cols + c)];
          const uint8_t want = fp8_encode(v * s, f, saturate);
          ASSERT_EQ(q.codes[size_t(r * cols + c)], want) << "element " << r << "," << c;
          under += v != 0.0f && (want & 0x7F) == 0;
          sat += fp8_overflows(v * s, f);
        }
    }
  EXPECT_EQ(q.amax, tensor_amax);
  EXPECT_EQ(q.n_underflow, under);
  EXPECT_EQ(q.n_saturated, sat);
  if (recipe != Recipe::Unit && recipe != Recipe::MX) {
    EXPECT_EQ(sat, 0);
  }  // amax maps to <= max

  // Dequantize: decode·scale_inv of the element's block, within the rounding bound.
  std::vector<float> y(size_t(rows * cols), kNaN);
  dequantize(q, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const float s_inv = q.scale_inv_at(r, c);
      ASSERT_EQ(y[i], fp8_decode(q.codes[i], f) * s_inv) << r << "," << c;
      ASSERT_LE(std::fabs(double(y[i]) - x[i]), test::elem_bound(x[i], s_inv, f))
          << "x=" << x[i] << " at " << r << "," << c;
    }
}

TEST_P(QuantizeTest, TransposedEqualsQuantizingTheTranspose) {
  const auto [recipe, fi, shape] = GetParam();
  const FormatCase fc = kFormatCases[fi];
  const auto [rows, cols] = shape;
  QuantConfig cfg;
  cfg.recipe = recipe;
  cfg.formats = fc.policy;
  const std::vector<float> x = test::mixed_range(rows * cols, uint64_t(7 * rows + cols));
  std::vector<float> xt(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) xt[size_t(c * rows + r)] = x[size_t(r * cols + c)];
  QTensor a, b;
  Quantizer(cfg, fc.role).quantize_transposed(x.data(), rows, cols, a);
  Quantizer(cfg, fc.role).quantize(xt.data(), cols, rows, b);
  EXPECT_EQ(a.rows, cols);
  EXPECT_EQ(a.cols, rows);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scale_inv, b.scale_inv);
  EXPECT_EQ(a.block.rows, b.block.rows);
  EXPECT_EQ(a.block.cols, b.block.cols);
}

std::string param_name(const ::testing::TestParamInfo<Param>& p) {
  const auto& [recipe, fi, shape] = p.param;
  return recipe_id(recipe) + "X" + kFormatCases[fi].name + "X" + std::to_string(shape.first) + "X" +
         std::to_string(shape.second);
}

INSTANTIATE_TEST_SUITE_P(Recipes, QuantizeTest,
                         ::testing::Combine(::testing::ValuesIn(kRecipes), ::testing::Range(0, 3),
                                            ::testing::ValuesIn(kShapes)),
                         param_name);

// ---- degenerate inputs: one rule each ----

class DegenerateTest : public ::testing::TestWithParam<Recipe> {};

TEST_P(DegenerateTest, AllZeroTensorGivesZeroCodesAndFinitePositiveScales) {
  for (Role role : {Role::Activation, Role::Weight})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 200}, {130, 129}}) {
      QuantConfig cfg;
      cfg.recipe = GetParam();
      Quantizer qz(cfg, role);
      std::vector<float> x(size_t(rows * cols), 0.0f), y(x.size(), kNaN);
      QTensor q;
      qz.quantize(x.data(), rows, cols, q);
      for (uint8_t c : q.codes) ASSERT_EQ(c, 0);
      for (float s : q.scale_inv) ASSERT_TRUE(std::isfinite(s) && s > 0.0f) << s;
      dequantize(q, y.data());
      for (float v : y) ASSERT_EQ(v, 0.0f);
      EXPECT_EQ(q.amax, 0.0f);
      EXPECT_EQ(q.n_underflow, 0);
    }
}

TEST_P(DegenerateTest, TinyAmaxGivesAFiniteClampedScale) {
  QuantConfig cfg;
  cfg.recipe = GetParam();
  if (cfg.recipe == Recipe::Unit) GTEST_SKIP() << "unit scales are static";
  Quantizer qz(cfg, Role::Activation);
  std::vector<float> x(300, 0.0f);
  x[5] = 1e-40f;
  x[299] = -1e-40f;
  QTensor q;
  qz.quantize(x.data(), 1, 300, q);
  for (float s : q.scale_inv) {
    ASSERT_TRUE(std::isfinite(s) && s > 0.0f);
    ASSERT_TRUE(s == 1.0f || s == std::ldexp(1.0f, -126)) << s;  // zero blocks 1, others clamped
  }
  EXPECT_EQ(q.scale_inv_at(0, 5), std::ldexp(1.0f, -126));
  std::vector<float> y(300);
  dequantize(q, y.data());
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

TEST_P(DegenerateTest, NaNInsideABlockIsNeverDropped) {
  QuantConfig cfg;
  cfg.recipe = GetParam();
  if (cfg.recipe == Recipe::TensorDelayed)
    GTEST_SKIP() << "see DelayedScaling.NaNOrInfAmaxKeepsTheScaleAndMarksOverflow";
  Quantizer qz(cfg, Role::Activation);
  std::vector<float> x = test::normal_values(4 * 300, 3);
  x[1 * 300 + 140] = kNaN;  // row 1, second 1x128 tile, fifth 1x32 MX block
  QTensor q;
  qz.quantize(x.data(), 4, 300, q);
  EXPECT_TRUE(std::isnan(q.amax));
  std::vector<float> y(x.size());
  dequantize(q, y.data());
  EXPECT_TRUE(std::isnan(y[1 * 300 + 140]));
  if (cfg.recipe != Recipe::Unit) {
    EXPECT_TRUE(std::isnan(q.scale_inv_at(1, 140)));
  }
  if (cfg.recipe == Recipe::Row || cfg.recipe == Recipe::Block || cfg.recipe == Recipe::MX) {
    // the block's scale carries the NaN; other blocks are clean
    EXPECT_TRUE(std::isnan(q.scale_inv_at(1, 140)));
    EXPECT_FALSE(std::isnan(q.scale_inv_at(0, 140)));
    EXPECT_FALSE(std::isnan(y[0]));
  }
}

TEST_P(DegenerateTest, InfInsideABlockIsNeverDropped) {
  QuantConfig cfg;
  cfg.recipe = GetParam();
  if (cfg.recipe == Recipe::TensorDelayed || cfg.recipe == Recipe::Unit)
    GTEST_SKIP() << "a static or delayed scale casts inf like any value (saturates)";
  Quantizer qz(cfg, Role::Activation);
  std::vector<float> x = test::normal_values(2 * 64, 4);
  x[70] = -kInf;
  QTensor q;
  qz.quantize(x.data(), 2, 64, q);
  EXPECT_TRUE(std::isnan(q.scale_inv_at(1, 6)));
  std::vector<float> y(x.size());
  dequantize(q, y.data());
  EXPECT_TRUE(std::isnan(y[70]));
}

INSTANTIATE_TEST_SUITE_P(Recipes, DegenerateTest, ::testing::ValuesIn(kRecipes),
                         [](const auto& p) { return recipe_id(p.param); });

TEST(Degenerate, AllZeroRowKeepsItsOwnScale) {
  QuantConfig cfg;
  cfg.recipe = Recipe::Row;
  Quantizer qz(cfg, Role::Activation);
  std::vector<float> x = test::normal_values(3 * 50, 5);
  std::fill(x.begin() + 50, x.begin() + 100, 0.0f);
  QTensor q;
  qz.quantize(x.data(), 3, 50, q);
  EXPECT_EQ(q.scale_inv[1], 1.0f);
  for (int c = 0; c < 50; ++c) EXPECT_EQ(q.codes[size_t(50 + c)], 0);
  EXPECT_NE(q.scale_inv[0], 1.0f);
  std::vector<float> y(x.size());
  dequantize(q, y.data());
  for (int c = 0; c < 50; ++c) EXPECT_EQ(y[size_t(50 + c)], 0.0f);
}

TEST(Degenerate, ZeroBlocksAroundOneNonZeroWeightBlock) {
  // 256x256 weight whose only non-zero part is the block (1, 0): the three zero blocks quantize to
  // codes 0 with scale 1, and the non-zero block equals quantizing it alone.
  QuantConfig cfg;
  cfg.recipe = Recipe::Block;
  std::vector<float> x(256 * 256, 0.0f), blk = test::normal_values(128 * 128, 6);
  for (int r = 0; r < 128; ++r)
    for (int c = 0; c < 128; ++c) x[size_t((128 + r) * 256 + c)] = blk[size_t(r * 128 + c)];
  QTensor q, alone;
  Quantizer(cfg, Role::Weight).quantize(x.data(), 256, 256, q);
  Quantizer(cfg, Role::Weight).quantize(blk.data(), 128, 128, alone);
  ASSERT_EQ(q.scale_inv.size(), 4u);
  EXPECT_EQ(q.scale_inv[0], 1.0f);
  EXPECT_EQ(q.scale_inv[1], 1.0f);
  EXPECT_EQ(q.scale_inv[3], 1.0f);
  EXPECT_EQ(q.scale_inv[2], alone.scale_inv[0]);
  std::vector<float> y(x.size());
  dequantize(q, y.data());
  for (int r = 0; r < 256; ++r)
    for (int c = 0; c < 256; ++c) {
      const size_t i = size_t(r * 256 + c);
      if (r >= 128 && c < 128) {
        ASSERT_EQ(q.codes[i], alone.codes[size_t((r - 128) * 128 + c)]);
      } else {
        ASSERT_EQ(q.codes[i], 0);
        ASSERT_EQ(y[i], 0.0f);
      }
    }
}

TEST(Degenerate, BadArgumentsThrow) {
  QuantConfig cfg;
  cfg.amax_history_len = 0;
  EXPECT_THROW(Quantizer(cfg, Role::Weight), Error);
  cfg = {};
  cfg.unit_scale = 0.0f;
  EXPECT_THROW(Quantizer(cfg, Role::Weight), Error);
  cfg.unit_scale = kInf;
  EXPECT_THROW(Quantizer(cfg, Role::Weight), Error);
  Quantizer qz({}, Role::Weight);
  QTensor q;
  float x = 1.0f;
  EXPECT_THROW(qz.quantize(&x, 0, 4, q), Error);
  EXPECT_THROW(qz.quantize_transposed(&x, 1, 0, q), Error);
}

// ---- power-of-two scales, unit scales, buffer reuse ----

TEST(Scales, Pow2ScalesAreExactPowersAndNeverOverflow) {
  for (Recipe r : {Recipe::TensorCurrent, Recipe::Row, Recipe::Block, Recipe::MX}) {
    QuantConfig cfg;
    cfg.recipe = r;
    cfg.pow2_scales = true;
    Quantizer qz(cfg, Role::Activation);
    const std::vector<float> x = test::normal_values(5 * 260, 8, 3.0f);
    QTensor q;
    qz.quantize(x.data(), 5, 260, q);
    for (float s : q.scale_inv) {
      int e;
      ASSERT_EQ(std::frexp(s, &e), 0.5f) << to_string(r) << " scale_inv " << s;
    }
    if (r != Recipe::MX) {
      EXPECT_EQ(q.n_saturated, 0) << to_string(r);
    }
  }
}

TEST(Scales, UnitRecipeUsesTheStaticScale) {
  QuantConfig cfg;
  cfg.recipe = Recipe::Unit;
  cfg.unit_scale = 4.0f;
  Quantizer qz(cfg, Role::Activation);
  const std::vector<float> x = {1.0f, 100.0f, 200.0f, -0.001f};  // 200·4 = 800 > 448: saturates
  QTensor q;
  qz.quantize(x.data(), 1, 4, q);
  EXPECT_EQ(q.scale_inv[0], 0.25f);
  EXPECT_EQ(q.codes[2], 0x7E);
  EXPECT_EQ(q.n_saturated, 1);
  EXPECT_EQ(fp8_decode(q.codes[0], Format::E4M3), 4.0f);
}

TEST(Scales, BuffersAreReusedAcrossCalls) {
  for (Recipe r : kRecipes) {
    QuantConfig cfg;
    cfg.recipe = r;
    Quantizer qz(cfg, Role::Weight);
    const std::vector<float> x = test::normal_values(200 * 300, 9);
    QTensor q;
    qz.quantize(x.data(), 200, 300, q);
    const uint8_t* codes = q.codes.data();
    const float* scales = q.scale_inv.data();
    for (int i = 0; i < 3; ++i) {
      qz.quantize(x.data(), 200, 300, q);
      qz.quantize(x.data(), 100, 300, q);  // smaller shapes fit the same buffers
    }
    EXPECT_EQ(q.codes.data(), codes) << to_string(r);
    EXPECT_EQ(q.scale_inv.data(), scales) << to_string(r);
  }
}

// ---- tensor-delayed scaling (TE DelayedScaling, quantize-then-update) ----

std::vector<float> filled(int64_t n, float v) { return std::vector<float>(size_t(n), v); }

QuantConfig delayed(int history = 1024) {
  QuantConfig cfg;
  cfg.recipe = Recipe::TensorDelayed;
  cfg.amax_history_len = history;
  return cfg;
}

TEST(DelayedScaling, QuantizeKeepsTheScaleAndUpdateFoldsTheAmaxIn) {
  Quantizer qz(delayed(3), Role::Activation);
  EXPECT_EQ(qz.delayed_scale(), 1.0f);
  EXPECT_EQ(qz.pending_amax(), -1.0f);  // nothing recorded
  QTensor q;
  auto x = filled(10, 2.0f);
  qz.quantize(x.data(), 2, 5, q);  // fresh: its own amax 2 -> s = 224
  EXPECT_EQ(q.scale_inv[0], 1.0f / 224.0f);
  EXPECT_EQ(qz.delayed_scale(), 1.0f);  // quantize does not change the scale
  EXPECT_TRUE(qz.amax_history().empty());
  EXPECT_EQ(qz.pending_amax(), 2.0f);
  qz.update();
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{2.0f}));
  EXPECT_EQ(qz.delayed_scale(), 224.0f);
  EXPECT_EQ(qz.pending_amax(), -1.0f);
  x = filled(10, 4.0f);
  qz.quantize(x.data(), 2, 5, q);  // the history's scale (amax 2): 4·224 = 896 saturates
  EXPECT_EQ(q.scale_inv[0], 1.0f / 224.0f);
  EXPECT_EQ(q.n_saturated, 10);
  EXPECT_EQ(qz.delayed_scale(), 224.0f);  // still: no update yet
  qz.update();
  EXPECT_EQ(qz.delayed_scale(), 112.0f);  // max(2, 4) = 4
  x = filled(10, 1.0f);
  for (int i = 0; i < 2; ++i) {
    qz.quantize(x.data(), 2, 5, q);
    qz.update();
  }
  EXPECT_EQ(qz.delayed_scale(), 112.0f);  // history {4, 1, 1}
  qz.update();                            // nothing recorded: no change
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{4.0f, 1.0f, 1.0f}));
  qz.quantize(x.data(), 2, 5, q);
  qz.update();
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{1.0f, 1.0f, 1.0f}));  // H = 3: 4 fell out
  EXPECT_EQ(qz.delayed_scale(), 448.0f);
}

TEST(DelayedScaling, UpdateFoldsTheMaxOfAllQuantizationsSinceTheLast) {
  // Micro-batches between two updates share one scale and contribute their max amax.
  Quantizer qz(delayed(), Role::Activation);
  QTensor q1, q2;
  auto a = filled(8, 1.0f), b = filled(8, 8.0f);
  qz.quantize(a.data(), 2, 4, q1);
  qz.update();  // history {1}: s = 448
  qz.quantize(b.data(), 2, 4, q1);
  qz.quantize(a.data(), 2, 4, q2);
  EXPECT_EQ(q1.scale_inv[0], q2.scale_inv[0]);
  EXPECT_EQ(q1.scale_inv[0], 1.0f / 448.0f);
  EXPECT_EQ(qz.pending_amax(), 8.0f);
  qz.update();
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{1.0f, 8.0f}));  // one entry per update
  EXPECT_EQ(qz.delayed_scale(), 56.0f);
}

TEST(DelayedScaling, FreshQuantizerUsesItsOwnAmaxUntilTheFirstUpdate) {
  Quantizer qz(delayed(), Role::Weight);
  QTensor q;
  auto x = filled(6, 7.0f), y = filled(6, 0.5f);
  qz.quantize(x.data(), 2, 3, q);
  EXPECT_EQ(q.scale_inv[0], 1.0f / scale_from_amax(7.0f, Format::E4M3));
  qz.quantize(y.data(), 2, 3, q);  // still no history: its own amax
  EXPECT_EQ(q.scale_inv[0], 1.0f / scale_from_amax(0.5f, Format::E4M3));
  qz.quantize_transposed(x.data(), 2, 3, q);
  EXPECT_EQ(q.scale_inv[0], 1.0f / scale_from_amax(7.0f, Format::E4M3));
  qz.update();
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{7.0f}));
}

TEST(DelayedScaling, MostRecentAlgoAndMargin) {
  QuantConfig cfg = delayed();
  cfg.amax_algo = AmaxAlgo::MostRecent;
  cfg.margin = 1;
  Quantizer qz(cfg, Role::Activation);
  QTensor q;
  auto x = filled(4, 8.0f);
  qz.quantize(x.data(), 1, 4, q);
  qz.update();
  x = filled(4, 1.0f);
  qz.quantize(x.data(), 1, 4, q);
  qz.update();
  EXPECT_EQ(qz.delayed_scale(), 224.0f);  // 448 / 1 / 2^1, the 8 ignored by most_recent
}

TEST(DelayedScaling, NaNOrInfAmaxCountsAnOverflowAtUpdateAndKeepsTheScale) {
  for (float bad : {kNaN, kInf}) {
    Quantizer qz(delayed(), Role::Gradient);
    QTensor q;
    auto x = filled(6, 2.0f);
    qz.quantize(x.data(), 2, 3, q);
    qz.update();
    const float s = qz.delayed_scale();
    const auto history = qz.amax_history();
    EXPECT_FALSE(qz.last_overflow());
    x[4] = bad;
    qz.quantize(x.data(), 2, 3, q);
    EXPECT_EQ(q.scale_inv[0], 1.0f / s);  // quantized with the current scale
    EXPECT_EQ(qz.overflow_count(), 0);    // counted at the update, not here
    EXPECT_TRUE(std::isnan(q.amax) || std::isinf(q.amax));
    std::vector<float> y(6);
    dequantize(q, y.data());
    EXPECT_EQ(y[0], 2.0f);  // the finite values are intact
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(y[4]));
    }  // NaN carried in its code
    x[4] = 1.0f;
    qz.quantize(x.data(), 2, 3, q);  // a finite amax after the bad one: the bad one sticks
    qz.update();
    EXPECT_TRUE(qz.last_overflow());
    EXPECT_EQ(qz.overflow_count(), 1);
    EXPECT_EQ(qz.delayed_scale(), s);
    EXPECT_EQ(qz.amax_history(), history);  // did not advance
    qz.quantize(x.data(), 2, 3, q);
    qz.update();
    EXPECT_FALSE(qz.last_overflow());
    EXPECT_EQ(qz.overflow_count(), 1);
  }
}

TEST(DelayedScaling, BothOrientationsShareOneScale) {
  // A weight quantized for the forward and, transposed, for dgrad in the same step: one scale,
  // and the transposed codes are the transpose of the forward's.
  Quantizer qz(delayed(), Role::Weight);
  const std::vector<float> w1 = test::normal_values(64 * 48, 10);
  std::vector<float> w2 = w1;
  for (auto& v : w2) v *= 3.0f;
  QTensor q, qt;
  qz.quantize(w1.data(), 64, 48, q);
  qz.update();
  qz.quantize(w2.data(), 64, 48, q);  // step 2: scale from step 1's amax
  for (int micro = 0; micro < 4; ++micro) qz.quantize_transposed(w2.data(), 64, 48, qt);
  EXPECT_EQ(qt.scale_inv[0], q.scale_inv[0]);
  EXPECT_EQ(1.0f / q.scale_inv[0], qz.delayed_scale());
  for (int r = 0; r < 64; ++r)
    for (int c = 0; c < 48; ++c) ASSERT_EQ(qt.codes[size_t(c * 64 + r)], q.codes[size_t(r * 48 + c)]);
  qz.update();
  EXPECT_EQ(qz.amax_history().size(), 2u);  // the orientations and micro-batches: one entry
}

TEST(DelayedScaling, PendingAmaxCanBeReplacedBeforeTheUpdate) {
  // The cross-rank reduction: this rank saw amax 1, another 8; after set_pending_amax(8) the
  // update gives the E4M3 scale 448 / 8 = 56.
  Quantizer qz(delayed(), Role::Activation);
  QTensor q;
  auto x = filled(4, 1.0f);
  qz.quantize(x.data(), 1, 4, q);
  EXPECT_EQ(qz.pending_amax(), 1.0f);
  qz.set_pending_amax(std::max(qz.pending_amax(), 8.0f));
  qz.update();
  EXPECT_EQ(qz.delayed_scale(), 56.0f);
  EXPECT_EQ(qz.amax_history(), (std::vector<float>{8.0f}));
}

}  // namespace
