// Backend::gated_delta_forward/backward on the CPU backend (backend.h GatedDeltaArgs): the output
// and every input gradient, including the chain rule through the model's gates (gates [B, T, 2H]
// → g = log σ(a)/16, β = σ(b)), against the FP64 naive recurrence of octet/recurrent.h; BF16
// tensors give the F32 results rounded once; shape mismatches are named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "octet/backend.h"
#include "octet/error.h"
#include "octet/recurrent.h"

using namespace octet;

namespace {

constexpr int64_t B = 2, H = 3, T = 21, Dk = 8, Dv = 4;

struct Host {
  std::vector<float> q, k, v, gates, d_o;
  Host() {
    std::mt19937_64 rng(17);
    std::normal_distribution<float> n01;
    auto fill = [&](std::vector<float>& x, int64_t n) {
      x.resize(size_t(n));
      for (float& e : x) e = n01(rng);
    };
    fill(q, B * H * T * Dk);
    fill(k, B * H * T * Dk);
    for (int64_t r = 0; r < B * H * T; ++r) {  // unit keys, as the model feeds them
      double ss = 0;
      for (int64_t c = 0; c < Dk; ++c) ss += double(k[size_t(r * Dk + c)]) * k[size_t(r * Dk + c)];
      for (int64_t c = 0; c < Dk; ++c) k[size_t(r * Dk + c)] = float(k[size_t(r * Dk + c)] / std::sqrt(ss));
    }
    fill(v, B * H * T * Dv);
    fill(gates, B * T * 2 * H);
    for (float& a : gates) a *= 3.0f;
    fill(d_o, B * H * T * Dv);
  }
};

double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(double(a[i]) - b[i]));
    s = std::max(s, std::fabs(b[i]));
  }
  return m / s;
}

TEST(GatedDeltaBackendOp, MatchesFp64ReferenceThroughTheGates) {
  const Host h;
  auto be = make_cpu_backend();
  auto up = [&](const std::vector<float>& x, Shape s) {
    Buffer b = be->alloc(DType::F32, s);
    be->upload(b.tensor(), x.data());
    return b;
  };
  const Shape sq{B, H, T, Dk}, sv{B, H, T, Dv}, sg{B, T, 2 * H};
  Buffer q = up(h.q, sq), k = up(h.k, sq), v = up(h.v, sv), gates = up(h.gates, sg), d_o = up(h.d_o, sv);
  Buffer o = be->alloc(DType::F32, sv), dq = be->alloc(DType::F32, sq), dk = be->alloc(DType::F32, sq),
         dv = be->alloc(DType::F32, sv), dgates = be->alloc(DType::F32, sg);
  const GatedDeltaArgs args{q.tensor(), k.tensor(), v.tensor(), gates.tensor(), 0.25f, 8};
  be->gated_delta_forward(args, o.tensor());
  be->gated_delta_backward(args, d_o.tensor(), dq.tensor(), dk.tensor(), dv.tensor(), dgates.tensor());

  // FP64 reference: gates → g, β in the [B, H, T] layout, the naive recurrence, the chain rule.
  std::vector<double> g(size_t(B * H * T)), beta(g.size()), dg_da(g.size()), db_db(g.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        const size_t i = size_t((b * H + hh) * T + t), tok = size_t((b * T + t) * 2 * H);
        const GateValues gv = gated_delta_gates(h.gates[tok + size_t(hh)], h.gates[tok + size_t(H + hh)]);
        g[i] = gv.g, beta[i] = gv.beta, dg_da[i] = gv.dg_da, db_db[i] = gv.dbeta_db;
      }
  auto dbl = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  const std::vector<double> Q = dbl(h.q), K = dbl(h.k), V = dbl(h.v), DO = dbl(h.d_o);
  GatedDeltaShape s;
  s.batch = B, s.heads = H, s.seq = T, s.dk = Dk, s.dv = Dv;
  const GatedDeltaInputs<double> in{Q.data(), K.data(), V.data(), g.data(), beta.data(), 0.25};
  std::vector<double> o_ref(V.size()), rq(Q.size()), rk(K.size()), rv(V.size()), rg(g.size()), rb(g.size());
  gated_delta_naive_forward(s, in, o_ref.data());
  gated_delta_naive_backward(s, in, DO.data(), {rq.data(), rk.data(), rv.data(), rg.data(), rb.data()});
  std::vector<double> rgates(h.gates.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t hh = 0; hh < H; ++hh) {
        const size_t i = size_t((b * H + hh) * T + t), tok = size_t((b * T + t) * 2 * H);
        rgates[tok + size_t(hh)] = rg[i] * dg_da[i];
        rgates[tok + size_t(H + hh)] = rb[i] * db_db[i];
      }
  // FP32 arithmetic over sums of ≤ 8·8 terms and 21 positions: well inside 1e-4 relative.
  EXPECT_LT(rel_err(be->download_f32(o.tensor()), o_ref), 1e-4);
  EXPECT_LT(rel_err(be->download_f32(dq.tensor()), rq), 1e-4);
  EXPECT_LT(rel_err(be->download_f32(dk.tensor()), rk), 1e-4);
  EXPECT_LT(rel_err(be->download_f32(dv.tensor()), rv), 1e-4);
  EXPECT_LT(rel_err(be->download_f32(dgates.tensor()), rgates), 1e-4);

  // BF16 tensors: the inputs rounded to BF16 give outputs that are the F32 op's outputs rounded once.
  auto bf = [&](const Buffer& f32, Shape sh) {
    Buffer b = be->alloc(DType::BF16, sh);
    be->copy(b.tensor(), f32.tensor());
    return b;
  };
  Buffer qb = bf(q, sq), kb = bf(k, sq), vb = bf(v, sv), gb = bf(gates, sg), ob = be->alloc(DType::BF16, sv);
  be->gated_delta_forward({qb.tensor(), kb.tensor(), vb.tensor(), gb.tensor(), 0.25f, 8}, ob.tensor());
  Buffer qf = be->alloc(DType::F32, sq), kf = be->alloc(DType::F32, sq), vf = be->alloc(DType::F32, sv),
         gf = be->alloc(DType::F32, sg), of = be->alloc(DType::F32, sv), ofb = be->alloc(DType::BF16, sv);
  be->copy(qf.tensor(), qb.tensor());
  be->copy(kf.tensor(), kb.tensor());
  be->copy(vf.tensor(), vb.tensor());
  be->copy(gf.tensor(), gb.tensor());
  be->gated_delta_forward({qf.tensor(), kf.tensor(), vf.tensor(), gf.tensor(), 0.25f, 8}, of.tensor());
  be->copy(ofb.tensor(), of.tensor());
  EXPECT_EQ(be->download_f32(ob.tensor()), be->download_f32(ofb.tensor()));
}

TEST(GatedDeltaBackendOp, ShapeMismatchesAreNamed) {
  auto be = make_cpu_backend();
  Buffer q = be->alloc(DType::F32, {1, 2, 5, 4}), v = be->alloc(DType::F32, {1, 2, 5, 3}),
         gates = be->alloc(DType::F32, {1, 5, 3}), o = be->alloc(DType::F32, {1, 2, 5, 3});
  try {
    be->gated_delta_forward({q.tensor(), q.tensor(), v.tensor(), gates.tensor(), 1.0f, 4}, o.tensor());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gates"), std::string::npos) << e.what();
  }
  Buffer gates_ok = be->alloc(DType::F32, {1, 5, 4});
  EXPECT_THROW(
      be->gated_delta_forward({q.tensor(), q.tensor(), v.tensor(), gates_ok.tensor(), 1.0f, 0}, o.tensor()),
      Error);
  EXPECT_NO_THROW(
      be->gated_delta_forward({q.tensor(), q.tensor(), v.tensor(), gates_ok.tensor(), 1.0f, 4}, o.tensor()));
}

}  // namespace
