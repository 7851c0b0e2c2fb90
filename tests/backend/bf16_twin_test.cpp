// The BF16 twin property of the CPU backend (octet/backend.h "act"): every op run on BF16 tensors
// equals the same op run on F32 tensors holding the same (BF16-representable) values, with each
// output rounded to BF16 afterwards — bit for bit — and so a BF16-stored output is within half a
// BF16 ulp of the F32 one. This is what makes the CPU backend with BF16 activations the twin of
// the CUDA backend's BF16 kernels (read as FP32, compute in FP32, round once on store).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend_test_util.h"
#include "octet/backend.h"
#include "octet/fp8.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

/// One act argument: its initial values (rounded to BF16 first, so both runs see the same
/// numbers), its shape, and whether it is an output to compare.
struct Arg {
  std::vector<float> init;
  Shape shape;
  bool out = false;
};

Arg in(std::vector<float> v, Shape s) { return {std::move(v), s, false}; }
Arg out(Shape s) { return {std::vector<float>(size_t(s.numel()), 0.0f), s, true}; }
Arg inout(std::vector<float> v, Shape s) { return {std::move(v), s, true}; }

using Op = std::function<void(Backend&, const std::vector<Tensor>&)>;

// Runs op once on F32 and once on BF16 tensors and checks every output.
void expect_twin(const std::string& name, std::vector<Arg> args, const Op& op) {
  auto be = make_cpu_backend();
  for (Arg& a : args)
    for (float& v : a.init) v = bf16_round(v);
  std::vector<std::vector<float>> f32(args.size());
  std::vector<std::vector<uint16_t>> b16(args.size());
  std::vector<Tensor> tf, tb;
  for (size_t i = 0; i < args.size(); ++i) {
    f32[i] = args[i].init;
    for (float v : args[i].init) b16[i].push_back(bf16_from_float(v));
    tf.push_back(view(f32[i], args[i].shape));
    tb.push_back(Tensor(b16[i].data(), DType::BF16, args[i].shape));
  }
  op(*be, tf);
  op(*be, tb);
  for (size_t i = 0; i < args.size(); ++i) {
    if (!args[i].out) continue;
    int bad = 0;
    for (size_t j = 0; j < f32[i].size(); ++j) {
      const float ref = f32[i][j], got = bf16_to_float(b16[i][j]);
      const bool same_bits = b16[i][j] == bf16_from_float(ref);
      const double half_ulp = ref == 0.0f ? 0.0 : std::ldexp(1.0, std::ilogb(ref) - 8);
      if ((!same_bits || !(std::fabs(double(got) - ref) <= half_ulp)) && bad++ < 3)
        ADD_FAILURE() << name << ": output " << i << " element " << j << ": bf16 " << got << " vs f32 "
                      << ref;
    }
    EXPECT_EQ(bad, 0) << name << " output " << i;
    // The outputs carry information (a vacuous all-zero output would pass trivially).
    double norm = 0;
    for (float v : f32[i]) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0) << name << " output " << i;
  }
}

constexpr int64_t R = 6, C = 40;  // rows, cols of row-wise ops

TEST(Bf16Twin, Elementwise) {
  expect_twin("copy", {in(randn(R * C, 1), {R, C}), out({R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.copy(t[1], t[0]); });
  expect_twin("axpy", {in(randn(R * C, 2), {R, C}), inout(randn(R * C, 3), {R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.axpy(-0.3f, t[0], t[1]); });
  expect_twin("scale", {inout(randn(R * C, 4), {R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.scale(1.7f, t[0]); });
  expect_twin("fill", {out({R, C})}, [](Backend& be, const std::vector<Tensor>& t) { be.fill(t[0], 0.1); });
  expect_twin("gelu_forward", {in(randn(R * C, 5, 2.0f), {R, C}), out({R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.gelu_forward(t[0], t[1]); });
  expect_twin("gelu_backward", {in(randn(R * C, 6, 2.0f), {R, C}), in(randn(R * C, 7), {R, C}), out({R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.gelu_backward(t[0], t[1], t[2]); });
  expect_twin("swiglu_forward", {in(randn(R * 2 * C, 8, 2.0f), {R, 2 * C}), out({R, C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.swiglu_forward(t[0], t[1]); });
  expect_twin("swiglu_backward",
              {in(randn(R * 2 * C, 9, 2.0f), {R, 2 * C}), in(randn(R * C, 10), {R, C}), out({R, 2 * C})},
              [](Backend& be, const std::vector<Tensor>& t) { be.swiglu_backward(t[0], t[1], t[2]); });
}

TEST(Bf16Twin, NormsAndEmbedding) {
  const std::vector<float> w = randn(C, 11), b = randn(C, 12);
  expect_twin("rmsnorm",
              {in(randn(R * C, 13, 3.0f), {R, C}), out({R, C}), in(randn(R * C, 14), {R, C}), out({R, C})},
              [&](Backend& be, const std::vector<Tensor>& t) {
                std::vector<float> rstd(R), dw(C);
                be.rmsnorm_forward(t[0], view(w), t[1], view(rstd), 1e-5f);
                be.rmsnorm_backward(t[0], view(w), view(rstd), t[2], t[3], view(dw), false);
              });
  expect_twin("layernorm",
              {in(randn(R * C, 15, 3.0f), {R, C}), out({R, C}), in(randn(R * C, 16), {R, C}), out({R, C})},
              [&](Backend& be, const std::vector<Tensor>& t) {
                std::vector<float> mean(R), rstd(R), dw(C), db(C);
                be.layernorm_forward(t[0], view(w), view(b), t[1], view(mean), view(rstd), 1e-5f);
                be.layernorm_backward(t[0], view(w), view(mean), view(rstd), t[2], t[3], view(dw), view(db),
                                      false);
              });
  const std::vector<float> table = randn(10 * C, 17);
  const std::vector<int32_t> ids = {3, 0, 9, 3, 5, 1};
  expect_twin("embedding_forward", {out({R, C})}, [&](Backend& be, const std::vector<Tensor>& t) {
    be.embedding_forward(test::ids(ids), view(table, {10, C}), t[0]);
  });
}

TEST(Bf16Twin, RopeLayoutsAndLoss) {
  const int64_t B = 2, H = 4, G = 2, T = 5, D = 8;
  expect_twin("rope", {inout(randn(B * H * T * D, 18), {B, H, T, D})},
              [](Backend& be, const std::vector<Tensor>& t) {
                be.rope(t[0], 10000.0f, false, AttnLayout::HeadsMajor);
              });
  expect_twin("rope tokens-major", {inout(randn(B * H * T * D, 18), {B, T, H, D})},
              [](Backend& be, const std::vector<Tensor>& t) {
                be.rope(t[0], 10000.0f, false, AttnLayout::TokensMajor);
              });
  for (const AttnLayout layout : {AttnLayout::HeadsMajor, AttnLayout::TokensMajor}) {
    const bool tm = layout == AttnLayout::TokensMajor;
    const Shape sq = tm ? Shape{B, T, H, D} : Shape{B, H, T, D},
                sk = tm ? Shape{B, T, G, D} : Shape{B, G, T, D};
    expect_twin(tm ? "split_merge_qkv tokens-major" : "split_merge_qkv",
                {in(randn(B * T * (H + 2 * G) * D, 19), {B, T, (H + 2 * G) * D}), out(sq), out(sk), out(sk),
                 out({B, T, (H + 2 * G) * D})},
                [layout](Backend& be, const std::vector<Tensor>& t) {
                  be.split_qkv(t[0], t[1], t[2], t[3], layout);
                  be.scale(0.3f, t[1]);  // make the round trip round
                  be.merge_qkv(t[1], t[2], t[3], t[4], layout);
                });
  }
  expect_twin("heads_tokens",
              {in(randn(B * H * T * D, 20), {B, H, T, D}), out({B, T, H * D}), out({B, H, T, D})},
              [](Backend& be, const std::vector<Tensor>& t) {
                be.heads_to_tokens(t[0], t[1]);
                be.tokens_to_heads(t[1], t[2]);
              });
  const std::vector<int32_t> y = {1, -1, 7, 0, 39, 2};
  std::vector<double> loss;
  expect_twin("cross_entropy", {in(randn(R * C, 21, 3.0f), {R, C}), out({R, C})},
              [&](Backend& be, const std::vector<Tensor>& t) {
                test::Acc acc;
                be.cross_entropy(t[0], test::ids(y), t[1], 0.5f, acc.t());
                loss.push_back(acc.v[0]);
              });
  ASSERT_EQ(loss.size(), 2u);
  EXPECT_EQ(loss[0], loss[1]);  // the loss is computed from the same values
}

TEST(Bf16Twin, ReductionsSeeTheSameValues) {
  auto be = make_cpu_backend();
  std::vector<float> x = randn(R * C, 22);
  for (float& v : x) v = bf16_round(v);
  std::vector<uint16_t> xb;
  for (float v : x) xb.push_back(bf16_from_float(v));
  const Tensor tb(xb.data(), DType::BF16, {R, C});
  test::Acc a, b;
  be->sum_squares(view(x), a.t());
  be->sum_squares(tb, b.t());
  EXPECT_EQ(a.v[0], b.v[0]);
  EXPECT_EQ(be->moments(view(x)).kurtosis, be->moments(tb).kurtosis);
}

TEST(Bf16Twin, LinearAndAttention) {
  const int64_t M = 9, IN = 24, OUT = 16;
  const std::vector<float> w = randn(OUT * IN, 23, 0.2f);
  for (LinearPrecision p : {LinearPrecision::BF16, LinearPrecision::FP8, LinearPrecision::FP32}) {
    expect_twin(
        "linear",
        {in(randn(M * IN, 24), {M, IN}), out({M, OUT}), in(randn(M * OUT, 25), {M, OUT}), out({M, IN})},
        [&](Backend& be, const std::vector<Tensor>& t) {
          auto lin = be.make_linear({IN, OUT, p, {}});
          std::vector<float> dw(OUT * IN);
          const SavedLinear s = lin->forward(t[0], view(w, {OUT, IN}), t[1]);
          lin->backward(s, t[2], t[3], view(dw, {OUT, IN}));
        });
  }
  AttentionShape sh;
  sh.batch = 1, sh.n_heads = 2, sh.n_kv_heads = 1, sh.seq_q = sh.seq_k = 7, sh.head_dim = 8;
  sh.causal = true;
  const Shape sq{1, 2, 7, 8}, sk{1, 1, 7, 8};
  for (AttnPrecision p : {AttnPrecision::BF16, AttnPrecision::FP8}) {
    AttentionConfig cfg;
    cfg.precision = p;
    expect_twin("attention " + to_string(p),
                {in(randn(sq.numel(), 26), sq), in(randn(sk.numel(), 27), sk), in(randn(sk.numel(), 28), sk),
                 out(sq), in(randn(sq.numel(), 29), sq), out(sq), out(sk), out(sk)},
                [&](Backend& be, const std::vector<Tensor>& t) {
                  auto attn = be.make_attention(sh, cfg);
                  std::vector<float> lse(14);
                  const SavedAttention s = attn->forward(t[0], t[1], t[2], t[3], view(lse, {1, 2, 7}));
                  attn->backward(s, t[4], t[5], t[6], t[7], Tensor());
                });
  }
}

}  // namespace
