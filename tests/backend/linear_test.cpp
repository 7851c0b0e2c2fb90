// CpuLinear (Backend::make_linear): the three GEMMs of Y = X Wᵀ against FP64 references.
//  - BF16 / FP32: Y, dX, dW against gemm_f64_reference of the BF16-rounded (resp. exact) operands.
//  - FP8, for every recipe and both format policies: against gemm_f64_reference of the dequantized
//    operands that a mirror set of Quantizers (same config and roles, driven through the call
//    order octet/backend.h documents: the forward quantizes X, W and X̂ᵀ, Ŵᵀ; the backward dY and
//    dŶᵀ; update_scales() updates all three) produces — forward X̂Ŵᵀ, dgrad dŶ·Ŵᵀ, wgrad dŶᵀ·X̂ᵀ —
//    over three steps so that delayed-scaling histories take part; plus the delayed recipe's
//    scale sequence in numbers (quantize-then-update) and the QuantStats (amax, scale range,
//    underflow and saturation fractions).
//  - Saved state: two forwards followed by two backwards equal forward+backward one at a time
//    (BF16, FP32, FP8 tensor-current / tensor-delayed / block); another linear's SavedLinear throws;
//    a forward without y (how the C ABI's backward re-quantizes without `saved`) saves the same
//    operands; the state placed in caller memory (forward_to, saved_from) gives the same bits.
//  - A producer's amax: under tensor-current it must be the tensor's (else an error).
// Tolerance of an FP32-accumulated GEMM: |C − C64| <= (K + 8)·2^-23·Σ_k |A_ik||B_jk|. Scales in
// QuantStats are 1/scale_inv, so they are compared to scale_from_amax within 4 ulps (FLOAT_EQ).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/fp8.h"
#include "octet/gemm.h"
#include "octet/quant.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

constexpr int64_t M = 37, IN = 160, OUT = 48;  // awkward: partial 128-blocks along every dim

// Views of host matrices: X-like [M, IN], W-like [OUT, IN], Y-like [M, OUT].
Tensor xm(const std::vector<float>& v) { return view(v, {int64_t(v.size()) / IN, IN}); }
Tensor wm(const std::vector<float>& v) { return view(v, {OUT, IN}); }
Tensor ym(const std::vector<float>& v) { return view(v, {int64_t(v.size()) / OUT, OUT}); }

std::vector<double> to_f64(const std::vector<float>& v, bool round_bf16 = false) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = round_bf16 ? bf16_round(v[i]) : v[i];
  return d;
}

std::vector<double> dequantized(const QTensor& q) {
  std::vector<float> f(size_t(q.rows * q.cols));
  dequantize(q, f.data());
  return to_f64(f);
}

std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[size_t(c * rows + r)] = a[size_t(r * cols + c)];
  return t;
}

// C = A·Bᵀ in FP64 (A [m,k], B [n,k]) and the per-element error scale Σ_k |A||B|.
struct RefGemm {
  std::vector<double> c, abs;
};
RefGemm ref_gemm(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                 int64_t k) {
  RefGemm r{std::vector<double>(size_t(m * n)), std::vector<double>(size_t(m * n))};
  gemm_f64_reference(a.data(), b.data(), r.c.data(), m, n, k);
  std::vector<double> aa(a.size()), ba(b.size());
  for (size_t i = 0; i < a.size(); ++i) aa[i] = std::fabs(a[i]);
  for (size_t i = 0; i < b.size(); ++i) ba[i] = std::fabs(b[i]);
  gemm_f64_reference(aa.data(), ba.data(), r.abs.data(), m, n, k);
  return r;
}

// got ≈ base + ref.c within the FP32-accumulation bound (base: the accumulated-into start value).
void expect_gemm_near(const std::vector<float>& got, const RefGemm& ref, int64_t k, const std::string& what,
                      const std::vector<float>* base = nullptr) {
  ASSERT_EQ(got.size(), ref.c.size());
  const double u = std::ldexp(1.0, -23);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double b0 = base ? (*base)[i] : 0.0;
    const double want = b0 + ref.c[i];
    const double tol = double(k + 8) * u * ref.abs[i] + 2 * u * std::fabs(want) + 1e-30;
    if (!(std::fabs(got[i] - want) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " got " << got[i] << " want " << want << " (tolerance "
                    << tol << ")";
  }
  EXPECT_EQ(bad, 0) << what;
}

// ---------------------------------------------------------------- BF16 and FP32

void check_dense(LinearPrecision precision) {
  const bool bf16 = precision == LinearPrecision::BF16;
  auto be = make_cpu_backend();
  LinearSpec spec{IN, OUT, precision, {}};
  auto lin = be->make_linear(spec);
  auto x = randn(M * IN, 81), w = randn(OUT * IN, 82, 0.1f), dy = randn(M * OUT, 83);
  auto dw0 = randn(OUT * IN, 84);
  std::vector<float> y(M * OUT), dx(M * IN), dw = dw0;
  const SavedLinear saved = lin->forward(xm(x), wm(w), ym(y));
  lin->backward(saved, ym(dy), xm(dx), wm(dw));
  const auto X = to_f64(x, bf16), W = to_f64(w, bf16), DY = to_f64(dy, bf16);
  const std::string name = bf16 ? "bf16" : "fp32";
  expect_gemm_near(y, ref_gemm(X, W, M, OUT, IN), IN, name + " forward");
  expect_gemm_near(dx, ref_gemm(DY, transposed(W, OUT, IN), M, IN, OUT), OUT, name + " dgrad");
  expect_gemm_near(dw, ref_gemm(transposed(DY, M, OUT), transposed(X, M, IN), OUT, IN, M), M, name + " wgrad",
                   &dw0);
  // dx = empty skips dgrad; dw keeps accumulating.
  std::vector<float> dw2 = dw;
  lin->backward(saved, ym(dy), Tensor(), wm(dw2));
  expect_gemm_near(dw2, ref_gemm(transposed(DY, M, OUT), transposed(X, M, IN), OUT, IN, M), M,
                   name + " wgrad, second accumulation", &dw);
  EXPECT_EQ(lin->stats_x().amax, 0.0f);  // no quantization outside FP8
}

TEST(LinearDense, Bf16MatchesFp64OfRoundedOperands) { check_dense(LinearPrecision::BF16); }
TEST(LinearDense, Fp32MatchesFp64OfExactOperands) { check_dense(LinearPrecision::FP32); }

TEST(LinearDense, Bf16RoundingIsVisible) {
  // The BF16 path must actually round: 1 + 2^-10 is not a BF16 value (7 mantissa bits).
  auto be = make_cpu_backend();
  auto lin = be->make_linear({1, 1, LinearPrecision::BF16, {}});
  std::vector<float> x{1.0f + 0x1p-10f}, w{1.0f}, y{0.0f};
  lin->forward(view(x, {1, 1}), view(w, {1, 1}), view(y, {1, 1}));
  EXPECT_EQ(y[0], 1.0f);
}

// ---------------------------------------------------------------- FP8, every recipe

struct Fp8Case {
  Recipe recipe;
  FormatPolicy formats;
};

class LinearFp8 : public ::testing::TestWithParam<Fp8Case> {};

QuantConfig config_of(const Fp8Case& c) {
  QuantConfig q;
  q.recipe = c.recipe;
  q.formats = c.formats;
  q.amax_history_len = 2;
  q.unit_scale = 32.0f;
  return q;
}

TEST_P(LinearFp8, MatchesFp64OfDequantizedOperandsOverSteps) {
  const QuantConfig qc = config_of(GetParam());
  auto be = make_cpu_backend();
  auto lin = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  Quantizer qx(qc, Role::Activation), qw(qc, Role::Weight), qdy(qc, Role::Gradient);  // mirror
  QTensor X, W, DY, WT, DYT, XT;
  auto w = randn(OUT * IN, 90, 0.05f);
  std::vector<float> dw = randn(OUT * IN, 91, 0.01f);
  for (int step = 0; step < 3; ++step) {
    const std::string at =
        to_string(qc.recipe) + "/" + to_string(qc.formats) + " step " + std::to_string(step);
    // Activations and gradients shrink from step to step, so a delayed history's max comes from
    // an older step: a quantize() too many or too few in the layer changes the scales.
    auto x = randn(M * IN, 92 + step, 3.0f - step), dy = randn(M * OUT, 95 + step, 1e-3f * (3 - step));
    std::vector<float> y(M * OUT), dx(M * IN), dw0 = dw;
    const SavedLinear saved = lin->forward(xm(x), wm(w), ym(y));
    lin->backward(saved, ym(dy), xm(dx), wm(dw));
    lin->update_scales();

    qx.quantize(x.data(), M, IN, X);
    qw.quantize(w.data(), OUT, IN, W);
    qx.quantize_transposed(x.data(), M, IN, XT);
    qw.quantize_transposed(w.data(), OUT, IN, WT);
    qdy.quantize(dy.data(), M, OUT, DY);
    qdy.quantize_transposed(dy.data(), M, OUT, DYT);
    for (Quantizer* q : {&qx, &qw, &qdy}) q->update();
    ASSERT_EQ(DY.format, format_for(qc.formats, Role::Gradient));
    expect_gemm_near(y, ref_gemm(dequantized(X), dequantized(W), M, OUT, IN), IN, at + " forward");
    expect_gemm_near(dx, ref_gemm(dequantized(DY), dequantized(WT), M, IN, OUT), OUT, at + " dgrad");
    expect_gemm_near(dw, ref_gemm(dequantized(DYT), dequantized(XT), OUT, IN, M), M, at + " wgrad", &dw0);
    EXPECT_EQ(lin->stats_x().amax, X.amax) << at;
    EXPECT_EQ(lin->stats_dy().amax, DY.amax) << at;

    if (qc.recipe != Recipe::Unit && qc.recipe != Recipe::TensorDelayed) {
      // Sanity against the unquantized product: FP8 forward within ~10% (Frobenius).
      auto exact = ref_gemm(to_f64(x), to_f64(w), M, OUT, IN);
      double num = 0, den = 0;
      for (size_t i = 0; i < y.size(); ++i) {
        num += (y[i] - exact.c[i]) * (y[i] - exact.c[i]);
        den += exact.c[i] * exact.c[i];
      }
      EXPECT_LT(std::sqrt(num / den), 0.1) << at;
    }
  }
}

std::string case_name(const ::testing::TestParamInfo<Fp8Case>& info) {
  std::string s = to_string(info.param.recipe) + "X" + to_string(info.param.formats);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Recipes, LinearFp8,
                         ::testing::Values(Fp8Case{Recipe::TensorCurrent, FormatPolicy::E4M3},
                                           Fp8Case{Recipe::TensorCurrent, FormatPolicy::Hybrid},
                                           Fp8Case{Recipe::TensorDelayed, FormatPolicy::Hybrid},
                                           Fp8Case{Recipe::Row, FormatPolicy::E4M3},
                                           Fp8Case{Recipe::Block, FormatPolicy::E4M3},
                                           Fp8Case{Recipe::Block, FormatPolicy::Hybrid},
                                           Fp8Case{Recipe::MX, FormatPolicy::E4M3},
                                           Fp8Case{Recipe::Unit, FormatPolicy::Hybrid}),
                         case_name);

// ---------------------------------------------------------------- delayed scaling, in numbers

TEST(LinearFp8Delayed, QuantizeThenUpdate) {
  // quantize uses the current scale and records the amax; update_scales() folds it in.
  QuantConfig qc;
  qc.recipe = Recipe::TensorDelayed;
  qc.amax_history_len = 4;
  qc.amax_algo = AmaxAlgo::Max;
  auto be = make_cpu_backend();
  auto lin = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  auto w = randn(OUT * IN, 101, 0.05f);
  auto x1 = randn(M * IN, 102, 0.1f), x2 = randn(M * IN, 103, 0.1f);
  x1[5] = 2.0f;    // amax(x1) = 2
  x2[17] = -8.0f;  // amax(x2) = 8
  std::vector<float> y(M * OUT);
  const float s2 = scale_from_amax(2.0f, Format::E4M3), s8 = scale_from_amax(8.0f, Format::E4M3);

  lin->forward(xm(x1), wm(w), ym(y));  // fresh: its own amax
  EXPECT_EQ(lin->stats_x().amax, 2.0f);
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, s2);
  lin->update_scales();                // history {2}
  lin->forward(xm(x2), wm(w), ym(y));  // scale from history {2}
  EXPECT_EQ(lin->stats_x().amax, 8.0f);
  EXPECT_FLOAT_EQ(lin->stats_x().scale_min, s2);
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, s2);
  // 8·224 > 448: every |x2| > 2 saturated; count them from the definition.
  int64_t over = 0;
  for (float v : x2) over += std::fabs(v) * s2 > 448.0f;
  ASSERT_GT(over, 0);
  EXPECT_DOUBLE_EQ(lin->stats_x().saturated_frac, double(over) / double(M * IN));
  lin->forward(xm(x1), wm(w), ym(y));  // no update yet: still s2
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, s2);
  lin->update_scales();  // history {2, 8}: max 8
  lin->forward(xm(x1), wm(w), ym(y));
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, s8);
  lin->update_scales();  // history {2, 8, 2}: still 8
  lin->forward(xm(x1), wm(w), ym(y));
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, s8);
  EXPECT_EQ(lin->stats_x().saturated_frac, 0.0);
}

// ---------------------------------------------------------------- saved state

// One linear's outputs for two micro-batches, interleaved (fwd 1, fwd 2, bwd 2, bwd 1) or one
// at a time (fwd 1, bwd 1, fwd 2, bwd 2); dW accumulates over both.
struct LinRun {
  std::vector<float> y[2], dx[2], dw;
};
LinRun two_micro_batches(const LinearSpec& spec, bool interleaved) {
  auto be = make_cpu_backend();
  auto lin = be->make_linear(spec);
  auto w = randn(OUT * IN, 150, 0.05f);
  std::vector<float> x[2], dy[2];
  SavedLinear saved[2];
  LinRun r;
  r.dw.assign(size_t(OUT * IN), 0.0f);
  for (int i = 0; i < 2; ++i) {
    x[i] = randn(M * IN, 151 + i, 1.0f + i), dy[i] = randn(M * OUT, 153 + i, 1.0f + 2 * i);
    r.y[i].assign(size_t(M * OUT), 0.0f);
    r.dx[i].assign(size_t(M * IN), 0.0f);
  }
  auto fwd = [&](int i) { saved[i] = lin->forward(xm(x[i]), wm(w), ym(r.y[i])); };
  auto bwd = [&](int i) { lin->backward(saved[i], ym(dy[i]), xm(r.dx[i]), wm(r.dw)); };
  if (interleaved) {
    fwd(0), fwd(1), bwd(0), bwd(1);
  } else {
    fwd(0), bwd(0), fwd(1), bwd(1);
  }
  lin->update_scales();
  return r;
}

// An FP8 linear of `recipe` and `formats`, named "<prefix><recipe>".
std::pair<std::string, LinearSpec> fp8_case(const std::string& prefix, Recipe recipe, FormatPolicy formats) {
  QuantConfig q;
  q.recipe = recipe;
  q.formats = formats;
  return {prefix + to_string(recipe), {IN, OUT, LinearPrecision::FP8, q}};
}

// The saved-state tests' linears: BF16, FP32 and FP8 tensor-current / tensor-delayed / block.
std::vector<std::pair<std::string, LinearSpec>> saved_state_cases() {
  std::vector<std::pair<std::string, LinearSpec>> cases;
  cases.push_back({"bf16", {IN, OUT, LinearPrecision::BF16, {}}});
  cases.push_back({"fp32", {IN, OUT, LinearPrecision::FP32, {}}});
  for (Recipe r : {Recipe::TensorCurrent, Recipe::TensorDelayed, Recipe::Block})
    cases.push_back(fp8_case("fp8 ", r, FormatPolicy::Hybrid));
  return cases;
}

// saved_state_cases() and the other FP8 recipes (row, MX, unit; E4M3 only).
std::vector<std::pair<std::string, LinearSpec>> every_recipe_cases() {
  auto cases = saved_state_cases();
  for (Recipe r : {Recipe::Row, Recipe::MX, Recipe::Unit})
    cases.push_back(fp8_case("fp8 e4m3 ", r, FormatPolicy::E4M3));
  return cases;
}

TEST(LinearSaved, TwoForwardsThenTwoBackwardsEqualOneAtATime) {
  for (const auto& [name, spec] : saved_state_cases()) {
    const LinRun a = two_micro_batches(spec, true), b = two_micro_batches(spec, false);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(a.y[i], b.y[i]) << name << " y " << i;
      EXPECT_EQ(a.dx[i], b.dx[i]) << name << " dx " << i;
    }
    EXPECT_EQ(a.dw, b.dw) << name << " dw";
    EXPECT_NE(a.y[0], a.y[1]) << name;  // the micro-batches differ: the test can fail
  }
}

// One step of two linears run two ways: y, dx and the accumulated dw bitwise equal (dx not all
// zero: the comparison can fail); then both update_scales() and their quantizer states equal.
void expect_same_step(const std::string& name, int step, const std::vector<float>& y_a,
                      const std::vector<float>& y_b, const std::vector<float>& dx_a,
                      const std::vector<float>& dx_b, const std::vector<float>& dw_a,
                      const std::vector<float>& dw_b, Linear& la, Linear& lb) {
  EXPECT_EQ(y_a, y_b) << name;
  EXPECT_EQ(dx_a, dx_b) << name << " dx, step " << step;
  EXPECT_EQ(dw_a, dw_b) << name << " dw, step " << step;
  EXPECT_NE(dx_a, std::vector<float>(M * IN, 0.0f)) << name;  // not vacuous
  la.update_scales();
  lb.update_scales();
  EXPECT_EQ(la.quant_state(), lb.quant_state()) << name;
}

// Linear::forward with an empty y (backend.h: how the C ABI's backward re-quantizes): the backward
// from its SavedLinear equals the backward from the full forward's, bitwise, over two steps with an
// update between (tensor-delayed: the re-recorded amax leaves the history as it was).
TEST(LinearSaved, ForwardWithoutYSavesTheSameOperands) {
  for (const auto& [name, spec] : saved_state_cases()) {
    auto be = make_cpu_backend();
    auto la = be->make_linear(spec), lb = be->make_linear(spec);
    std::vector<float> dw_a(OUT * IN, 0.0f), dw_b(OUT * IN, 0.0f);
    for (int step = 0; step < 2; ++step) {
      const auto x = randn(M * IN, 170 + step, 1.0f + step), w = randn(OUT * IN, 172 + step, 0.05f);
      const auto dy = randn(M * OUT, 174 + step);
      std::vector<float> y_a(M * OUT), y_b(M * OUT), dx_a(M * IN), dx_b(M * IN);
      const SavedLinear sa = la->forward(xm(x), wm(w), ym(y_a));
      la->backward(sa, ym(dy), xm(dx_a), wm(dw_a));
      (void)lb->forward(xm(x), wm(w), ym(y_b));                    // the op's forward
      const SavedLinear sb = lb->forward(xm(x), wm(w), Tensor{});  // the op's backward re-run
      lb->backward(sb, ym(dy), xm(dx_b), wm(dw_b));
      expect_same_step(name, step, y_a, y_b, dx_a, dx_b, dw_a, dw_b, *la, *lb);
    }
  }
}

// Saved state in caller memory (backend.h forward_to / saved_from, what the PyTorch ops carry): the
// backward from saved_from equals the backward from the linear's own state, bitwise, over two
// steps with an update between, with x and w overwritten before the backward (it reads neither)
// and the memory filled with 0xFF first (every byte it reads is written). BF16 and FP32 keep no
// state of their own: size 0 and both calls refused.
TEST(LinearSaved, ForwardToAndSavedFromEqualTheOwnState) {
  auto cases = every_recipe_cases();
  for (const auto& [name, spec] : cases) {
    auto be = make_cpu_backend();
    auto la = be->make_linear(spec), lb = be->make_linear(spec);
    if (spec.precision != LinearPrecision::FP8) {
      EXPECT_EQ(lb->saved_bytes(M), 0) << name;
      std::vector<uint8_t> mem(64);
      const Tensor memory(mem.data(), DType::E4M3, {64});
      std::vector<float> x = randn(M * IN, 1), w = randn(OUT * IN, 2), y(M * OUT);
      EXPECT_THROW(lb->forward_to(xm(x), wm(w), ym(y), memory), Error) << name;
      EXPECT_THROW(lb->saved_from(M, memory), Error) << name;
      continue;
    }
    const int64_t bytes = lb->saved_bytes(M);
    ASSERT_GE(bytes, M * IN + OUT * IN) << name;  // the codes of X̂ᵀ and Ŵᵀ at least
    EXPECT_LT(lb->saved_bytes(M - 1), bytes) << name;
    EXPECT_THROW(lb->saved_bytes(0), Error) << name;
    std::vector<float> dw_a(OUT * IN, 0.0f), dw_b(OUT * IN, 0.0f);
    for (int step = 0; step < 2; ++step) {
      auto x = randn(M * IN, 180 + step, 1.0f + step), w = randn(OUT * IN, 182 + step, 0.05f);
      const auto dy = randn(M * OUT, 184 + step);
      std::vector<float> y_a(M * OUT), y_b(M * OUT), dx_a(M * IN), dx_b(M * IN);
      std::vector<uint8_t> mem(size_t(bytes), 0xFF);
      const Tensor memory(mem.data(), DType::E4M3, {bytes});
      const SavedLinear sa = la->forward(xm(x), wm(w), ym(y_a));
      la->backward(sa, ym(dy), xm(dx_a), wm(dw_a));
      (void)lb->forward_to(xm(x), wm(w), ym(y_b), memory);  // the op's forward
      std::fill(x.begin(), x.end(), 0.0f);                  // read by neither backward below
      std::fill(w.begin(), w.end(), 0.0f);
      lb->backward(lb->saved_from(M, memory), ym(dy), xm(dx_b), wm(dw_b));  // the op's backward
      expect_same_step(name, step, y_a, y_b, dx_a, dx_b, dw_a, dw_b, *la, *lb);
    }
    std::vector<uint8_t> small(size_t(bytes - 1));
    const Tensor short_memory(small.data(), DType::E4M3, {bytes - 1});
    std::vector<float> x = randn(M * IN, 1), w = randn(OUT * IN, 2), y(M * OUT);
    try {
      (void)lb->forward_to(xm(x), wm(w), ym(y), short_memory);
      ADD_FAILURE() << name << ": a memory one byte short was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("the saved state needs " + std::to_string(bytes)),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(lb->saved_from(M, short_memory), Error) << name;
  }
}

// saved_bytes(rows) is the sum of saved_size_terms() (what a caller tracing with a symbolic M
// computes), and forward_to fills exactly that many bytes (it checks) at row counts on both sides
// of every block edge, with in_features 160 and 37 (whose images need the 16-byte rounding);
// non-FP8 linears have no terms.
TEST(LinearSaved, SizeTermsGiveTheImageAtEveryRowCount) {
  auto cases = every_recipe_cases();
  for (const auto& c : std::vector(cases)) {  // each again with in_features 37
    LinearSpec odd = c.second;
    odd.in_features = 37;
    cases.push_back({c.first + " in 37", odd});
  }
  for (const auto& [name, spec] : cases) {
    const int64_t in = spec.in_features;
    auto be = make_cpu_backend();
    auto lin = be->make_linear(spec);
    const std::vector<SavedSizeTerm> terms = lin->saved_size_terms();
    if (spec.precision != LinearPrecision::FP8) {
      EXPECT_TRUE(terms.empty()) << name;
      continue;
    }
    int64_t last = 0;
    for (int64_t rows : {1, 2, 15, 16, 17, 31, 32, 33, 127, 128, 129, 300}) {
      const int64_t bytes = lin->saved_bytes(rows);
      EXPECT_EQ(saved_size(terms, rows), bytes) << name << " rows " << rows;
      EXPECT_GT(bytes, last) << name << " rows " << rows;  // X̂ᵀ's codes grow with every row
      last = bytes;
      std::vector<float> x = randn(rows * in, 190), w = randn(OUT * in, 191, 0.05f), y(rows * OUT);
      std::vector<uint8_t> mem(static_cast<size_t>(bytes));
      EXPECT_NO_THROW((void)lin->forward_to(
          Tensor(x.data(), DType::F32, {rows, in}), Tensor(w.data(), DType::F32, {OUT, in}),
          Tensor(y.data(), DType::F32, {rows, OUT}), Tensor(mem.data(), DType::E4M3, {bytes})))
          << name << " rows " << rows;
    }
  }
  // A malformed term is -1 (as a size beyond int64 is), not a division by zero or a negative size.
  EXPECT_EQ((SavedSizeTerm{1, 0, 0, 1}.bytes(5)), -1);   // step_rows 0
  EXPECT_EQ((SavedSizeTerm{1, 1, 0, 0}.bytes(5)), -1);   // align 0
  EXPECT_EQ((SavedSizeTerm{-1, 1, 0, 1}.bytes(5)), -1);  // negative bytes
  EXPECT_EQ((SavedSizeTerm{1, 1, -8, 1}.bytes(5)), -1);
  EXPECT_EQ((SavedSizeTerm{3, 2, 1, 4}.bytes(5)), 12);  // round_up(3·⌈5/2⌉ + 1, 4)
}

TEST(LinearSaved, AnotherLinearsOrBackendsSavedStateThrows) {
  auto be = make_cpu_backend(), be2 = make_cpu_backend();
  for (LinearPrecision p : {LinearPrecision::BF16, LinearPrecision::FP8}) {
    auto lin = be->make_linear({IN, OUT, p, {}});
    auto other = be->make_linear({IN, OUT, p, {}});
    auto other_be = be2->make_linear({IN, OUT, p, {}});
    auto x = randn(M * IN, 160), w = randn(OUT * IN, 161, 0.05f), dy = randn(M * OUT, 162);
    std::vector<float> y(M * OUT), dx(M * IN), dw(OUT * IN);
    const SavedLinear mine = lin->forward(xm(x), wm(w), ym(y));
    const SavedLinear theirs = other->forward(xm(x), wm(w), ym(y));
    const SavedLinear foreign = other_be->forward(xm(x), wm(w), ym(y));
    EXPECT_THROW(lin->backward(theirs, ym(dy), xm(dx), wm(dw)), Error);
    EXPECT_THROW(lin->backward(foreign, ym(dy), xm(dx), wm(dw)), Error);
    EXPECT_THROW(lin->backward(SavedLinear{}, ym(dy), xm(dx), wm(dw)), Error);
    EXPECT_NO_THROW(lin->backward(mine, ym(dy), xm(dx), wm(dw)));
  }
}

// ---------------------------------------------------------------- QuantStats

TEST(LinearFp8Stats, AmaxScaleRangeAndUnderflow) {
  QuantConfig qc;
  qc.recipe = Recipe::Block;
  auto be = make_cpu_backend();
  auto lin = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  auto x = randn(M * IN, 111, 0.5f), w = randn(OUT * IN, 112, 0.05f), dy = randn(M * OUT, 113);
  // X: 1x128 tiles; one tile holds a large value and a value far below its smallest subnormal.
  x[3] = 100.0f;
  x[4] = 1e-9f;
  // W: two 128x128 blocks along `in` (cols 0..127, 128..159); block 0 gets amax 4.
  w[0] = 4.0f;
  std::vector<float> y(M * OUT), dx(M * IN), dw(OUT * IN);
  const SavedLinear saved = lin->forward(xm(x), wm(w), ym(y));
  lin->backward(saved, ym(dy), xm(dx), wm(dw));

  auto sx = lin->stats_x();
  EXPECT_EQ(sx.amax, 100.0f);
  EXPECT_FLOAT_EQ(sx.scale_min, scale_from_amax(100.0f, Format::E4M3));
  EXPECT_GE(sx.underflow_frac, 1.0 / double(M * IN));  // x[4] at least
  EXPECT_EQ(sx.saturated_frac, 0.0);                   // current per-tile scales never saturate

  float amax_b1 = 0.0f;
  for (int64_t r = 0; r < OUT; ++r)
    for (int64_t c = 128; c < IN; ++c) amax_b1 = std::max(amax_b1, std::fabs(w[r * IN + c]));
  auto sw = lin->stats_w();
  EXPECT_EQ(sw.amax, 4.0f);
  EXPECT_FLOAT_EQ(sw.scale_min, scale_from_amax(4.0f, Format::E4M3));
  EXPECT_FLOAT_EQ(sw.scale_max, scale_from_amax(amax_b1, Format::E4M3));

  float amax_dy = 0.0f;
  for (float v : dy) amax_dy = std::max(amax_dy, std::fabs(v));
  EXPECT_EQ(lin->stats_dy().amax, amax_dy);
  EXPECT_GT(lin->stats_dy().scale_min, 0.0f);
}

TEST(LinearFp8Stats, UnderflowFractionCountsExactly) {
  // Tensor-current: amax 1 gives scale 448; values below half the smallest E4M3 subnormal
  // (2^-10 / 448) become 0.
  QuantConfig qc;
  qc.recipe = Recipe::TensorCurrent;
  auto be = make_cpu_backend();
  auto lin = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  std::vector<float> x(M * IN, 0.5f), w(OUT * IN, 0.01f), y(M * OUT);
  x[0] = 1.0f;
  for (int i = 1; i <= 10; ++i) x[size_t(i * 7)] = 1e-7f;  // 1e-7·448 = 4.5e-5 < 2^-10
  lin->forward(xm(x), wm(w), ym(y));
  EXPECT_DOUBLE_EQ(lin->stats_x().underflow_frac, 10.0 / double(M * IN));
  EXPECT_FLOAT_EQ(lin->stats_x().scale_max, 448.0f);
}

TEST(Linear, RejectsEmptyShapes) {
  auto be = make_cpu_backend();
  EXPECT_THROW(be->make_linear({0, 4, LinearPrecision::BF16, {}}), Error);
  auto lin = be->make_linear({4, 4, LinearPrecision::BF16, {}});
  std::vector<float> x(16), w(16), y(16);
  EXPECT_THROW(lin->forward(view(x).slice(0, 0).reshape({0, 4}), view(w, {4, 4}), view(y, {4, 4})), Error);
  EXPECT_THROW(lin->forward(view(x, {4, 4}), view(w, {2, 8}), view(y, {4, 4})), Error);  // W shape
  EXPECT_THROW(lin->forward(view(x, {4, 4}), view(w, {4, 4}), view(y, {2, 8})), Error);  // Y shape
}

}  // namespace

// A producer's amax (backend.h x_amax, dy_amax) given to the CPU linear: under tensor-current it must
// be the amax of the tensor, bit for bit (the reference checks the caller's wiring: another
// tensor's amax is an error naming the argument); the outputs equal a call without it. Other
// recipes and precisions take it unchecked; a tensor that is not I32 [1] is refused.
TEST(CpuLinear, GivenAmaxMustBeTheTensorsUnderTensorCurrent) {
  auto be = make_cpu_backend();
  auto w = randn(OUT * IN, 111, 0.05f), x = randn(M * IN, 112), dy = randn(M * OUT, 113, 1e-3f);
  auto bits_amax = [](const std::vector<float>& v) {
    uint32_t m = 0;
    for (float f : v) m = std::max(m, detail::f32_bits(std::fabs(f)));
    return int32_t(m);
  };
  int32_t ax = bits_amax(x), ady = bits_amax(dy), wrong = bits_amax(x) + 1;
  const Tensor tx(&ax, DType::I32, {1}), tdy(&ady, DType::I32, {1}), twrong(&wrong, DType::I32, {1});
  QuantConfig qc;  // tensor-current
  auto a = be->make_linear({IN, OUT, LinearPrecision::FP8, qc}),
       b = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  std::vector<float> ya(M * OUT), yb(M * OUT), dxa(M * IN), dxb(M * IN), dwa(OUT * IN, 0.0f),
      dwb(OUT * IN, 0.0f);
  const SavedLinear sa = a->forward(xm(x), wm(w), ym(ya));
  a->backward(sa, ym(dy), xm(dxa), wm(dwa));
  const SavedLinear sb = b->forward(xm(x), wm(w), ym(yb), tx);
  b->backward(sb, ym(dy), xm(dxb), wm(dwb), tdy);
  EXPECT_EQ(ya, yb);
  EXPECT_EQ(dxa, dxb);
  EXPECT_EQ(dwa, dwb);
  EXPECT_THROW(b->forward(xm(x), wm(w), ym(yb), twrong), Error);
  EXPECT_THROW(b->backward(sb, ym(dy), xm(dxb), wm(dwb), twrong), Error);
  int32_t two[2] = {ax, ax};
  EXPECT_THROW(b->forward(xm(x), wm(w), ym(yb), Tensor(two, DType::I32, {2})), Error);
  qc.recipe = Recipe::TensorDelayed;  // takes no given amax: unchecked
  auto d = be->make_linear({IN, OUT, LinearPrecision::FP8, qc});
  EXPECT_NO_THROW(d->forward(xm(x), wm(w), ym(yb), twrong));
}

// Linear::forward's residual (backend.h): y = X̂Ŵᵀ + r with the sum formed in FP32 and rounded once
// — the plain forward's y plus r within FP32 accumulation error, for every precision and recipe; r may
// be y itself (the same bits as a separate r); a residual unlike y, or without a y, is refused.
TEST(LinearResidual, AddsTheResidualToTheProductAndMayAliasY) {
  for (const auto& [name, spec] : saved_state_cases()) {
    auto be = make_cpu_backend();
    auto la = be->make_linear(spec), lb = be->make_linear(spec), lc = be->make_linear(spec);
    const auto x = randn(M * IN, 180), w = randn(OUT * IN, 181, 0.05f), r = randn(M * OUT, 182, 3.0f);
    std::vector<float> y(M * OUT), y_res(M * OUT), y_alias = r;
    (void)la->forward(xm(x), wm(w), ym(y));
    (void)lb->forward(xm(x), wm(w), ym(y_res), {}, ym(r));
    (void)lc->forward(xm(x), wm(w), ym(y_alias), {}, ym(y_alias));
    EXPECT_EQ(y_res, y_alias) << name;
    std::vector<float> zero(M * OUT, 0.0f), y_zero(M * OUT);
    (void)lc->forward(xm(x), wm(w), ym(y_zero), {}, ym(zero));
    EXPECT_EQ(y_zero, y) << name << ": a zero residual adds nothing";
    // the GEMMs accumulate in FP32 (block order), the residual joining first: an FP32-accumulation
    // error against the product's scale, not an exact one-rounding identity
    float peak = 0.0f;
    for (float v : y) peak = std::max(peak, std::fabs(v));
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_NEAR(y_res[i], y[i] + r[i], 1e-5 * (peak + std::fabs(r[i]))) << name << " " << i;
    EXPECT_NE(y_res, y) << name;  // r is not zero: the test can fail
    std::vector<float> short_r(M * OUT - 1);
    EXPECT_THROW((void)lb->forward(xm(x), wm(w), ym(y_res), {}, view(short_r)), Error) << name;
    EXPECT_THROW((void)lb->forward(xm(x), wm(w), Tensor{}, {}, ym(r)), Error) << name;
  }
}
