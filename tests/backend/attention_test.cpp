// CpuAttention (Backend::make_attention): the forward returns the saved state its backward needs
// and the pair returns exactly what the reference functions of octet/attention.h return (same
// bits, same residual stats), across repeated steps; two forwards followed by two backwards equal
// forward+backward one at a time (BF16; FP8 stale and matched); in FP64 precision it agrees with
// the FP64 oracle; the state through caller memory (forward_to, saved_from) gives the same bits;
// the tokens-major layout gives the heads-major results bitwise; another layer's saved state is an
// error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attention/layout_check.h"
#include "backend_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

using namespace octet;
using octet::test::randn;
using octet::test::view;

namespace {

AttentionShape small_shape() {
  AttentionShape s;
  s.batch = 1;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.seq_q = 9;
  s.seq_k = 9;
  s.head_dim = 16;
  s.causal = true;
  return s;
}

Shape q_shape(const AttentionShape& s) { return {s.batch, s.n_heads, s.seq_q, s.head_dim}; }
Shape k_shape(const AttentionShape& s) { return {s.batch, s.n_kv_heads, s.seq_k, s.head_dim}; }
Shape lse_shape(const AttentionShape& s) { return {s.batch, s.n_heads, s.seq_q}; }

size_t q_size(const AttentionShape& s) { return size_t(s.batch * s.n_heads * s.seq_q * s.head_dim); }
size_t k_size(const AttentionShape& s) { return size_t(s.batch * s.n_kv_heads * s.seq_k * s.head_dim); }

TEST(CpuAttention, MatchesTheReferenceFunctionsOverSteps) {
  const AttentionShape shape = small_shape();
  AttentionConfig config;  // FP8, matched delta
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  for (int step = 0; step < 2; ++step) {
    auto q = randn(q_size(shape), 121 + step), k = randn(k_size(shape), 123 + step),
         v = randn(k_size(shape), 125 + step), d_o = randn(q_size(shape), 127 + step);
    const size_t nl = size_t(shape.batch * shape.n_heads * shape.seq_q);
    std::vector<float> o(q.size()), lse(nl), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<float> o2 = o, lse2 = lse, dq2 = dq, dk2 = dk, dv2 = dv;
    test::Acc res;
    const SavedAttention sa =
        attn->forward(view(q, q_shape(shape)), view(k, k_shape(shape)), view(v, k_shape(shape)),
                      view(o, q_shape(shape)), view(lse, lse_shape(shape)));
    attn->backward(sa, view(d_o, q_shape(shape)), view(dq, q_shape(shape)), view(dk, k_shape(shape)),
                   view(dv, k_shape(shape)), res.t(2));

    AttentionSaved saved;
    attention_forward(shape, config, q.data(), k.data(), v.data(), o2.data(), lse2.data(), &saved);
    AttentionStats st2;
    attention_backward(saved, d_o.data(), dq2.data(), dk2.data(), dv2.data(), &st2);
    EXPECT_EQ(o, o2);
    EXPECT_EQ(lse, lse2);
    EXPECT_EQ(dq, dq2);
    EXPECT_EQ(dk, dk2);
    EXPECT_EQ(dv, dv2);
    EXPECT_EQ(res.v[0], st2.row_residual_max);
    EXPECT_EQ(res.v[1], st2.row_residual_mean);
  }
}

TEST(CpuAttention, Fp64PrecisionAgreesWithTheOracle) {
  const AttentionShape shape = small_shape();
  AttentionConfig config;
  config.precision = AttnPrecision::FP64;
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  auto q = randn(q_size(shape), 131), k = randn(k_size(shape), 132), v = randn(k_size(shape), 133),
       d_o = randn(q_size(shape), 134);
  const size_t nl = size_t(shape.batch * shape.n_heads * shape.seq_q);
  std::vector<float> o(q.size()), lse(nl), dq(q.size()), dk(k.size()), dv(v.size());
  const SavedAttention sa =
      attn->forward(view(q, q_shape(shape)), view(k, k_shape(shape)), view(v, k_shape(shape)),
                    view(o, q_shape(shape)), view(lse, lse_shape(shape)));
  attn->backward(sa, view(d_o, q_shape(shape)), view(dq, q_shape(shape)), view(dk, k_shape(shape)),
                 view(dv, k_shape(shape)), Tensor());

  auto f64 = [](const std::vector<float>& a) { return std::vector<double>(a.begin(), a.end()); };
  auto Q = f64(q), K = f64(k), V = f64(v), DO = f64(d_o);
  std::vector<double> O(q.size()), L(nl), DQ(q.size()), DK(k.size()), DV(v.size());
  attention_forward_fp64(shape, Q.data(), K.data(), V.data(), O.data(), L.data());
  attention_backward_fp64(shape, Q.data(), K.data(), V.data(), O.data(), L.data(), DO.data(), DQ.data(),
                          DK.data(), DV.data());
  auto expect_near = [](const std::vector<float>& a, const std::vector<double>& b, const char* w) {
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i]))) << w << " index " << i;
  };
  expect_near(o, O, "o");
  expect_near(lse, L, "lse");
  expect_near(dq, DQ, "dq");
  expect_near(dk, DK, "dk");
  expect_near(dv, DV, "dv");
}

// One attention layer's forward outputs and backward gradients, and its residual accumulator.
struct AttnRun {
  std::vector<float> o, lse, dq, dk, dv;
  test::Acc res;
};

// Runs two micro-batches either interleaved (fwd 1, fwd 2, bwd 2, bwd 1: what activation
// checkpointing and autograd do) or one at a time (fwd 1, bwd 1, fwd 2, bwd 2).
void two_micro_batches(const AttentionShape& shape, const AttentionConfig& config, bool interleaved,
                       AttnRun out[2]) {
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  std::vector<float> q[2], k[2], v[2], d_o[2];
  SavedAttention saved[2];
  for (int i = 0; i < 2; ++i) {
    q[i] = randn(q_size(shape), 141 + i), k[i] = randn(k_size(shape), 143 + i);
    v[i] = randn(k_size(shape), 145 + i), d_o[i] = randn(q_size(shape), 147 + i);
    out[i].o.assign(q_size(shape), 0), out[i].lse.assign(size_t(lse_shape(shape).numel()), 0);
    out[i].dq.assign(q_size(shape), 0), out[i].dk.assign(k_size(shape), 0);
    out[i].dv.assign(k_size(shape), 0);
  }
  auto fwd = [&](int i) {
    saved[i] =
        attn->forward(view(q[i], q_shape(shape)), view(k[i], k_shape(shape)), view(v[i], k_shape(shape)),
                      view(out[i].o, q_shape(shape)), view(out[i].lse, lse_shape(shape)));
  };
  auto bwd = [&](int i) {
    attn->backward(saved[i], view(d_o[i], q_shape(shape)), view(out[i].dq, q_shape(shape)),
                   view(out[i].dk, k_shape(shape)), view(out[i].dv, k_shape(shape)), out[i].res.t(2));
  };
  if (interleaved) {
    fwd(0), fwd(1), bwd(1), bwd(0);
  } else {
    fwd(0), bwd(0), fwd(1), bwd(1);
  }
}

// A (precision, delta) pair of the arms: its config and its name in failure messages.
struct ArmCase {
  AttnPrecision precision;
  DeltaMode delta;
  AttentionConfig config() const {
    AttentionConfig c;
    c.precision = precision;
    c.delta = delta;
    return c;
  }
  std::string name() const { return to_string(precision) + "/" + to_string(delta); }
};

TEST(CpuAttention, TwoForwardsThenTwoBackwardsEqualOneAtATime) {
  const AttentionShape shape = small_shape();
  for (const ArmCase c :
       {ArmCase{AttnPrecision::BF16, DeltaMode::Stale}, ArmCase{AttnPrecision::FP8, DeltaMode::Stale},
        ArmCase{AttnPrecision::FP8, DeltaMode::Matched}}) {
    const AttentionConfig config = c.config();
    AttnRun a[2], b[2];
    two_micro_batches(shape, config, true, a);
    two_micro_batches(shape, config, false, b);
    const std::string what = c.name();
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(a[i].o, b[i].o) << what;
      EXPECT_EQ(a[i].dq, b[i].dq) << what;
      EXPECT_EQ(a[i].dk, b[i].dk) << what;
      EXPECT_EQ(a[i].dv, b[i].dv) << what;
      EXPECT_EQ(a[i].res.v[0], b[i].res.v[0]) << what;
    }
    // The two micro-batches differ (so the comparison above could fail).
    EXPECT_NE(a[0].dq, a[1].dq) << what;
  }
}

TEST(CpuAttention, ForwardToThenSavedFromEqualsOwnState) {
  // The saved state through caller memory (backend.h forward_to / saved_from: what the PyTorch ops
  // keep as a tensor), read back by another layer object of the same shape and config, gives the
  // bits of the layer's own state; memory too small is refused before anything is written.
  const AttentionShape shape = small_shape();
  for (const ArmCase c :
       {ArmCase{AttnPrecision::BF16, DeltaMode::Stale}, ArmCase{AttnPrecision::FP8, DeltaMode::Stale},
        ArmCase{AttnPrecision::FP8, DeltaMode::Matched}, ArmCase{AttnPrecision::FP64, DeltaMode::Matched}}) {
    const AttentionConfig config = c.config();
    const std::string what = c.name();
    auto be = make_cpu_backend();
    auto own = be->make_attention(shape, config), placer = be->make_attention(shape, config),
         reader = be->make_attention(shape, config);
    const auto q = randn(q_size(shape), 161), k = randn(k_size(shape), 162), v = randn(k_size(shape), 163),
               d_o = randn(q_size(shape), 164);
    AttnRun a, b;
    for (AttnRun* r : {&a, &b}) {
      r->o.assign(q.size(), 0), r->lse.assign(size_t(lse_shape(shape).numel()), 0);
      r->dq.assign(q.size(), 0), r->dk.assign(k.size(), 0), r->dv.assign(k.size(), 0);
    }
    auto qv = q, kv = k, vv = v, dov = d_o;  // views need mutable storage
    {
      const SavedAttention st =
          own->forward(view(qv, q_shape(shape)), view(kv, k_shape(shape)), view(vv, k_shape(shape)),
                       view(a.o, q_shape(shape)), view(a.lse, lse_shape(shape)));
      own->backward(st, view(dov, q_shape(shape)), view(a.dq, q_shape(shape)), view(a.dk, k_shape(shape)),
                    view(a.dv, k_shape(shape)), a.res.t(2));
    }
    const int64_t bytes = placer->saved_bytes();
    ASSERT_GT(bytes, 0) << what;
    std::vector<uint8_t> memory(size_t(bytes), 0xFF);
    const Tensor mem(memory.data(), DType::E4M3, {bytes});
    (void)placer->forward_to(view(qv, q_shape(shape)), view(kv, k_shape(shape)), view(vv, k_shape(shape)),
                             view(b.o, q_shape(shape)), view(b.lse, lse_shape(shape)), mem);
    qv.assign(qv.size(), 0.0f), kv.assign(kv.size(), 0.0f), vv.assign(vv.size(), 0.0f);  // not read again
    {
      const SavedAttention st =
          reader->saved_from(view(b.o, q_shape(shape)), view(b.lse, lse_shape(shape)), mem);
      reader->backward(st, view(dov, q_shape(shape)), view(b.dq, q_shape(shape)), view(b.dk, k_shape(shape)),
                       view(b.dv, k_shape(shape)), b.res.t(2));
    }
    EXPECT_EQ(a.o, b.o) << what;
    EXPECT_EQ(a.lse, b.lse) << what;
    EXPECT_EQ(a.dq, b.dq) << what;
    EXPECT_EQ(a.dk, b.dk) << what;
    EXPECT_EQ(a.dv, b.dv) << what;
    EXPECT_EQ(a.res.v[0], b.res.v[0]) << what;
    EXPECT_EQ(a.res.v[1], b.res.v[1]) << what;
    EXPECT_NE(a.dq, std::vector<float>(a.dq.size(), 0.0f)) << what << ": vacuous";
    const Tensor short_by_one(memory.data(), DType::E4M3, {bytes - 1});
    EXPECT_THROW(
        (void)placer->forward_to(view(qv, q_shape(shape)), view(kv, k_shape(shape)), view(vv, k_shape(shape)),
                                 view(b.o, q_shape(shape)), view(b.lse, lse_shape(shape)), short_by_one),
        Error)
        << what;
    EXPECT_THROW(
        (void)reader->saved_from(view(b.o, q_shape(shape)), view(b.lse, lse_shape(shape)), short_by_one),
        Error)
        << what;
  }
}

TEST(CpuAttention, SizeTermsGiveTheSavedBytesAtEveryShape) {
  // saved_size_terms() (backend.h, saved_size.h) taken at one shape give saved_bytes() of a layer
  // of any other batch and sequence lengths, and that is the AttentionSaved's arrays counted from
  // their definition (octet/attention.h): Q̂ and O, FP32 [B, H, Tq, D]; K̂ and V̂, FP32 [B, G, Tk,
  // D]; the LSE FP32 and the row statistics FP64 [B, H, Tq]; in fp64 also O in FP64.
  AttentionShape at = small_shape();
  for (const ArmCase c :
       {ArmCase{AttnPrecision::BF16, DeltaMode::Stale}, ArmCase{AttnPrecision::FP8, DeltaMode::Matched},
        ArmCase{AttnPrecision::FP64, DeltaMode::Matched}}) {
    const AttentionConfig config = c.config();
    auto be = make_cpu_backend();
    const std::vector<AttnSizeTerm> terms = be->make_attention(at, config)->saved_size_terms();
    ASSERT_FALSE(terms.empty()) << c.name();
    for (const int64_t batch : {1, 3})
      for (const int64_t seq_q : {1, 7, 16, 129})
        for (const int64_t seq_k : {1, 9, 300}) {
          AttentionShape s = at;
          s.batch = batch, s.seq_q = seq_q, s.seq_k = seq_k, s.causal = false;
          auto attn = be->make_attention(s, config);
          const int64_t nq = int64_t(q_size(s)), nk = int64_t(k_size(s)), rows = batch * s.n_heads * seq_q;
          const int64_t want = 4 * (2 * nq + 2 * nk) + 4 * rows + 2 * 8 * rows +
                               (c.precision == AttnPrecision::FP64 ? 8 * nq : 0);
          const std::string what = c.name() + " B" + std::to_string(batch) + " Tq" + std::to_string(seq_q) +
                                   " Tk" + std::to_string(seq_k);
          EXPECT_EQ(attn->saved_bytes(), want) << what;
          EXPECT_EQ(attention_saved_size(terms, attn_sizes(s)), want) << what;
        }
  }
  // A size beyond int64 (no valid shape reaches it: AttentionShape caps a tensor at 2^56
  // elements) is -1 from the formula and an octet::Error naming the shape, not a wrapped size.
  AttentionShape huge = at;
  huge.batch = huge.seq_q = huge.seq_k = huge.head_dim = int64_t(1) << 20;
  const std::vector<AttnSizeTerm> wide = {{8, kAttnAllDims, 1, 1}};
  EXPECT_EQ(attention_saved_size(wide, attn_sizes(huge)), -1);
  EXPECT_EQ(attention_saved_size({{1, kAttnBatch, 1, 256}, {1, kAttnBatch, 1, 256}},
                                 AttnSizes{int64_t(1) << 62, 1, 1, 1, 1, 1}),
            -1);  // each term fits, their sum does not
  EXPECT_THROW((void)attention_saved_bytes(wide, huge), Error);
  // A malformed term is -1 too, not a division by zero or a negative size.
  const AttnSizes one{1, 1, 1, 1, 1, 1};
  EXPECT_EQ((AttnSizeTerm{1, kAttnSeqQ, 0, 1}.bytes(one)), -1);       // seq_step 0
  EXPECT_EQ((AttnSizeTerm{1, kAttnBatch, 1, 0}.bytes(one)), -1);      // align 0
  EXPECT_EQ((AttnSizeTerm{-1, kAttnBatch, 1, 1}.bytes(one)), -1);     // negative bytes
  EXPECT_EQ((AttnSizeTerm{1, 64, 1, 1}.bytes(one)), -1);              // a dims bit beyond kAttnAllDims
  EXPECT_EQ((AttnSizeTerm{16, kAttnSeqQ, 16, 256}.bytes(one)), 256);  // a well-formed one
}

TEST(CpuAttention, BackwardAccumulatesTheRowResidual) {
  // residual[0] = max(residual[0], max), residual[1] += mean: a large preset max is kept.
  const AttentionShape shape = small_shape();
  AttentionConfig config;
  config.delta = DeltaMode::Stale;
  AttnRun r[2];
  two_micro_batches(shape, config, false, r);
  EXPECT_GT(r[0].res.v[0], 0.0);
  EXPECT_GT(r[0].res.v[1], 0.0);
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  auto q = randn(q_size(shape), 141), k = randn(k_size(shape), 143), v = randn(k_size(shape), 145),
       d_o = randn(q_size(shape), 147);
  std::vector<float> o(q.size()), lse(size_t(lse_shape(shape).numel())), dq(q.size()), dk(k.size()),
      dv(k.size());
  const SavedAttention sa =
      attn->forward(view(q, q_shape(shape)), view(k, k_shape(shape)), view(v, k_shape(shape)),
                    view(o, q_shape(shape)), view(lse, lse_shape(shape)));
  test::Acc acc;
  acc.v[0] = 5.0, acc.v[1] = 1.0;
  attn->backward(sa, view(d_o, q_shape(shape)), view(dq, q_shape(shape)), view(dk, k_shape(shape)),
                 view(dv, k_shape(shape)), acc.t(2));
  EXPECT_EQ(acc.v[0], 5.0);
  EXPECT_EQ(acc.v[1], 1.0 + r[0].res.v[1]);
}

TEST(CpuAttention, ANaNReachesTheRowResidualAccumulator) {
  // A non-finite input must show in the diagnostic (as on the GPU), never read as a healthy 0.
  const AttentionShape shape = small_shape();
  AttentionConfig config;  // FP8, matched
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, config);
  auto q = randn(q_size(shape), 151), k = randn(k_size(shape), 153), v = randn(k_size(shape), 155),
       d_o = randn(q_size(shape), 157);
  q[3] = NAN;
  std::vector<float> o(q.size()), lse(size_t(lse_shape(shape).numel())), dq(q.size()), dk(k.size()),
      dv(k.size());
  const SavedAttention sa =
      attn->forward(view(q, q_shape(shape)), view(k, k_shape(shape)), view(v, k_shape(shape)),
                    view(o, q_shape(shape)), view(lse, lse_shape(shape)));
  test::Acc acc;
  attn->backward(sa, view(d_o, q_shape(shape)), view(dq, q_shape(shape)), view(dk, k_shape(shape)),
                 view(dv, k_shape(shape)), acc.t(2));
  EXPECT_TRUE(std::isnan(acc.v[0])) << "residual max " << acc.v[0];
}

TEST(CpuAttention, AnotherLayersSavedStateIsAnError) {
  const AttentionShape shape = small_shape();
  auto be = make_cpu_backend();
  auto attn = be->make_attention(shape, AttentionConfig{});
  auto other = be->make_attention(shape, AttentionConfig{});
  std::vector<float> q(q_size(shape)), k(k_size(shape)), o(q_size(shape)),
      lse(size_t(lse_shape(shape).numel())), dq(q_size(shape)), dk(k_size(shape)), dv(k_size(shape));
  const SavedAttention sa =
      other->forward(view(q, q_shape(shape)), view(k, k_shape(shape)), view(k, k_shape(shape)),
                     view(o, q_shape(shape)), view(lse, lse_shape(shape)));
  EXPECT_THROW(attn->backward(sa, view(q, q_shape(shape)), view(dq, q_shape(shape)), view(dk, k_shape(shape)),
                              view(dv, k_shape(shape)), Tensor()),
               Error);
  SavedAttention empty;  // no state at all (e.g. another backend's, or none)
  EXPECT_THROW(attn->backward(empty, view(q, q_shape(shape)), view(dq, q_shape(shape)),
                              view(dk, k_shape(shape)), view(dv, k_shape(shape)), Tensor()),
               Error);
}

TEST(CpuAttention, TokensMajorLayoutEqualsHeadsMajor) {
  auto be = make_cpu_backend();
  AttentionShape s = small_shape();
  s.batch = 2, s.seq_q = 7, s.seq_k = 12;  // Tq != Tk, causal bottom-right, GQA 4/2
  for (const ArmCase c :
       {ArmCase{AttnPrecision::BF16, DeltaMode::Stale}, ArmCase{AttnPrecision::FP8, DeltaMode::Stale},
        ArmCase{AttnPrecision::FP8, DeltaMode::Matched}, ArmCase{AttnPrecision::FP64, DeltaMode::Matched}})
    for (DType act : {DType::F32, DType::BF16})
      test::expect_layouts_agree(*be, s, c.config(), act, c.name() + (act == DType::BF16 ? " bf16" : " f32"));
}

TEST(CpuAttention, TheReferenceFunctionsRefuseTokensMajor) {
  AttentionShape s = small_shape();
  s.layout = AttnLayout::TokensMajor;
  std::vector<float> q(q_size(s)), k(k_size(s)), o(q_size(s)), lse(size_t(s.n_heads * s.seq_q));
  EXPECT_THROW(
      attention_forward(s, AttentionConfig{}, q.data(), k.data(), k.data(), o.data(), lse.data(), nullptr),
      Error);
}

TEST(CpuAttention, InvalidShapeIsRejectedAtConstruction) {
  AttentionShape shape = small_shape();
  shape.n_kv_heads = 3;  // does not divide 4
  auto be = make_cpu_backend();
  EXPECT_THROW(be->make_attention(shape, AttentionConfig{}), Error);
}

}  // namespace
