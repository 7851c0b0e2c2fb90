// Gated DeltaNet (octet/recurrent.h; arXiv 2412.06464): the chunked WY/UT form against the naive
// sequential recurrence in FP64 (forward and every gradient; chunk sizes 1, 16, 64 and a length
// that is no multiple of the chunk), the naive backward against central finite differences, the
// FP32 chunked form against the FP64 reference, and identities with known answers: β = 0 keeps the
// state at 0 (o = 0); zeros in give zeros out; α = 1, β = 1 with orthonormal keys is a key-value
// memory whose read-out is the last value written under the queried key; the gates' derivatives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "octet/error.h"
#include "octet/recurrent.h"

using namespace octet;

namespace {

// Inputs of one call in FP64: unit-norm q and k per (head, position), Gaussian v, log decays
// g = log σ(a)/16 and β = σ(b) from Gaussian a, b (the model's gates).
struct Case {
  GatedDeltaShape s;
  std::vector<double> q, k, v, g, beta, d_o;
  double scale = 0.5;

  explicit Case(GatedDeltaShape shape, uint64_t seed = 1) : s(shape) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> n01;
    const int64_t rows = s.batch * s.heads * s.seq;
    auto unit_rows = [&](std::vector<double>& x, int64_t d) {
      x.resize(size_t(rows * d));
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < d; ++c) ss += (x[size_t(r * d + c)] = n01(rng)) * x[size_t(r * d + c)];
        for (int64_t c = 0; c < d; ++c) x[size_t(r * d + c)] /= std::sqrt(ss);
      }
    };
    unit_rows(q, s.dk);
    unit_rows(k, s.dk);
    v.resize(size_t(rows * s.dv));
    d_o.resize(v.size());
    for (double& x : v) x = n01(rng);
    for (double& x : d_o) x = n01(rng);
    g.resize(size_t(rows));
    beta.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) {
      // a spread wide so that some α are far below 1 (strong decay) and some near 1.
      const GateValues gv = gated_delta_gates(3.0 * n01(rng), 1.5 * n01(rng));
      g[size_t(r)] = gv.g * 8.0;
      beta[size_t(r)] = gv.beta;
    }
  }
  GatedDeltaInputs<double> in() const { return {q.data(), k.data(), v.data(), g.data(), beta.data(), scale}; }
};

struct Grads {
  std::vector<double> dq, dk, dv, dg, dbeta;
  explicit Grads(const Case& c)
      : dq(c.q.size()), dk(c.k.size()), dv(c.v.size()), dg(c.g.size()), dbeta(c.beta.size()) {}
  GatedDeltaGrads<double> view() { return {dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data()}; }
};

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::fabs(v));
  return m;
}
// max |a − b| / max |b|
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m / std::max(max_abs(b), 1e-300);
}

GatedDeltaShape shape(int64_t seq, int64_t dk = 8, int64_t dv = 6) {
  GatedDeltaShape s;
  s.batch = 2;
  s.heads = 2;
  s.seq = seq;
  s.dk = dk;
  s.dv = dv;
  return s;
}

class ChunkedVsNaive : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(ChunkedVsNaive, ForwardAndGradientsAgreeInFp64) {
  const auto [seq, chunk] = GetParam();
  Case c(shape(seq), uint64_t(seq * 131 + chunk));
  std::vector<double> o_ref(c.v.size()), o(c.v.size());
  gated_delta_naive_forward(c.s, c.in(), o_ref.data());
  gated_delta_chunked_forward(c.s, c.in(), chunk, o.data());
  ASSERT_GT(max_abs(o_ref), 0.1);
  EXPECT_LT(rel_err(o, o_ref), 1e-12);

  Grads ref(c), got(c);
  gated_delta_naive_backward(c.s, c.in(), c.d_o.data(), ref.view());
  gated_delta_chunked_backward(c.s, c.in(), chunk, c.d_o.data(), got.view());
  EXPECT_LT(rel_err(got.dq, ref.dq), 1e-12);
  EXPECT_LT(rel_err(got.dk, ref.dk), 1e-12);
  EXPECT_LT(rel_err(got.dv, ref.dv), 1e-12);
  EXPECT_LT(rel_err(got.dg, ref.dg), 1e-12);
  EXPECT_LT(rel_err(got.dbeta, ref.dbeta), 1e-12);
}

// (seq, chunk): chunk 1 (the recurrence itself), 16 and 64 on multiples, then lengths that are
// not a multiple (a short last chunk) and a chunk longer than the sequence.
INSTANTIATE_TEST_SUITE_P(Chunks, ChunkedVsNaive,
                         ::testing::Values(std::pair<int64_t, int64_t>{37, 1}, std::pair{64, 16},
                                           std::pair{128, 64}, std::pair{100, 16}, std::pair{150, 64},
                                           std::pair{20, 64}),
                         [](const auto& info) {
                           return "T" + std::to_string(info.param.first) + "C" +
                                  std::to_string(info.param.second);
                         });

TEST(GatedDeltaNaive, GradientsMatchFiniteDifferences) {
  Case c(shape(13, 5, 4), 7);
  Grads gr(c);
  gated_delta_naive_backward(c.s, c.in(), c.d_o.data(), gr.view());
  // L = Σ d_o · o; central differences with h = 1e-5 (truncation ~ h² ~ 1e-10).
  auto loss = [&]() {
    std::vector<double> o(c.v.size());
    gated_delta_naive_forward(c.s, c.in(), o.data());
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += c.d_o[i] * o[i];
    return l;
  };
  struct Input {
    const char* name;
    std::vector<double>* x;
    const std::vector<double>* grad;
  };
  const Input inputs[] = {{"q", &c.q, &gr.dq},
                          {"k", &c.k, &gr.dk},
                          {"v", &c.v, &gr.dv},
                          {"g", &c.g, &gr.dg},
                          {"beta", &c.beta, &gr.dbeta}};
  for (const Input& x : inputs) {
    const size_t stride = std::max<size_t>(1, x.x->size() / 23);
    for (size_t i = 0; i < x.x->size(); i += stride) {
      const double h = 1e-5, old = (*x.x)[i];
      (*x.x)[i] = old + h;
      const double lp = loss();
      (*x.x)[i] = old - h;
      const double lm = loss();
      (*x.x)[i] = old;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR((*x.grad)[i], fd, 1e-7 * (1 + std::fabs(fd))) << x.name << "[" << i << "]";
    }
  }
}

TEST(GatedDeltaChunked, Fp32AgreesWithFp64Reference) {
  Case c(shape(100, 16, 16), 3);
  auto f32 = [](const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); };
  const std::vector<float> q = f32(c.q), k = f32(c.k), v = f32(c.v), g = f32(c.g), beta = f32(c.beta),
                           d_o = f32(c.d_o);
  const GatedDeltaInputs<float> in{q.data(), k.data(), v.data(), g.data(), beta.data(), float(c.scale)};
  std::vector<float> o(v.size()), dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), db(beta.size());
  gated_delta_chunked_forward(c.s, in, 16, o.data());
  gated_delta_chunked_backward(c.s, in, 16, d_o.data(),
                               GatedDeltaGrads<float>{dq.data(), dk.data(), dv.data(), dg.data(), db.data()});
  // The reference on the FP32-rounded inputs, so only the FP32 arithmetic differs.
  Case r = c;
  r.q.assign(q.begin(), q.end());
  r.k.assign(k.begin(), k.end());
  r.v.assign(v.begin(), v.end());
  r.g.assign(g.begin(), g.end());
  r.beta.assign(beta.begin(), beta.end());
  r.d_o.assign(d_o.begin(), d_o.end());
  std::vector<double> o_ref(v.size());
  gated_delta_naive_forward(r.s, r.in(), o_ref.data());
  Grads ref(r);
  gated_delta_naive_backward(r.s, r.in(), r.d_o.data(), ref.view());
  auto d = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  // FP32 with sums over ≤ 16·16 terms and a chunk's substitution: a few 1e-6 relative.
  EXPECT_LT(rel_err(d(o), o_ref), 2e-5);
  EXPECT_LT(rel_err(d(dq), ref.dq), 2e-5);
  EXPECT_LT(rel_err(d(dk), ref.dk), 2e-5);
  EXPECT_LT(rel_err(d(dv), ref.dv), 2e-5);
  EXPECT_LT(rel_err(d(dg), ref.dg), 2e-5);
  EXPECT_LT(rel_err(d(db), ref.dbeta), 2e-5);
}

TEST(GatedDeltaIdentities, ZeroBetaKeepsTheStateAtZero) {
  Case c(shape(50), 11);
  std::fill(c.beta.begin(), c.beta.end(), 0.0);
  std::vector<double> o(c.v.size(), 1.0);
  gated_delta_chunked_forward(c.s, c.in(), 16, o.data());
  EXPECT_EQ(max_abs(o), 0.0);
  gated_delta_naive_forward(c.s, c.in(), o.data());
  EXPECT_EQ(max_abs(o), 0.0);
  // Nothing was written, so q, k, g and v get no gradient (β itself does: dβ = kᵀG v).
  Grads gr(c);
  gated_delta_chunked_backward(c.s, c.in(), 16, c.d_o.data(), gr.view());
  EXPECT_EQ(max_abs(gr.dq), 0.0);
  EXPECT_EQ(max_abs(gr.dk), 0.0);
  EXPECT_EQ(max_abs(gr.dv), 0.0);
  EXPECT_EQ(max_abs(gr.dg), 0.0);
  EXPECT_GT(max_abs(gr.dbeta), 0.0);
}

TEST(GatedDeltaIdentities, ZerosInGiveZerosOut) {
  Case c(shape(40), 5);
  for (auto* x : {&c.q, &c.k, &c.v, &c.g}) std::fill(x->begin(), x->end(), 0.0);
  std::vector<double> o(c.v.size(), 1.0);
  gated_delta_chunked_forward(c.s, c.in(), 16, o.data());
  EXPECT_EQ(max_abs(o), 0.0);
  Grads gr(c);
  gated_delta_chunked_backward(c.s, c.in(), 16, c.d_o.data(), gr.view());
  for (auto* x : {&gr.dq, &gr.dk, &gr.dv, &gr.dg, &gr.dbeta}) EXPECT_EQ(max_abs(*x), 0.0);
}

// α = 1, β = 1 and keys from an orthonormal set {e_0..e_{d−1}}: (I − k kᵀ) erases what was stored
// under k and leaves the other keys' content, so by induction S_t = Σ_c e_c v_{last(c, t)}ᵀ (the
// last value written under each key so far) and a query q = e_c reads o_t = scale·v_{last(c, t)}
// (0 if c was never written). Keys cycle through a rotated basis in a scrambled order.
TEST(GatedDeltaIdentities, UnitGatesWithOrthonormalKeysAreAKeyValueMemory) {
  GatedDeltaShape s = shape(45, 6, 3);
  s.batch = s.heads = 1;
  Case c(s, 9);
  std::mt19937_64 rng(4);
  std::normal_distribution<double> n01;
  // An orthonormal basis by Gram–Schmidt of random vectors.
  const int64_t d = s.dk;
  std::vector<std::vector<double>> e(static_cast<size_t>(d), std::vector<double>(static_cast<size_t>(d)));
  for (int64_t a = 0; a < d; ++a) {
    for (double& x : e[size_t(a)]) x = n01(rng);
    for (int64_t b = 0; b < a; ++b) {
      double p = 0;
      for (int64_t i = 0; i < d; ++i) p += e[size_t(a)][size_t(i)] * e[size_t(b)][size_t(i)];
      for (int64_t i = 0; i < d; ++i) e[size_t(a)][size_t(i)] -= p * e[size_t(b)][size_t(i)];
    }
    double n = 0;
    for (double x : e[size_t(a)]) n += x * x;
    for (double& x : e[size_t(a)]) x /= std::sqrt(n);
  }
  std::vector<int64_t> key(static_cast<size_t>(s.seq)), query(static_cast<size_t>(s.seq));
  for (int64_t t = 0; t < s.seq; ++t) {
    key[size_t(t)] = int64_t(rng() % uint64_t(d - 1));  // key d−1 is never written
    query[size_t(t)] = int64_t(rng() % uint64_t(d));
    for (int64_t i = 0; i < d; ++i) {
      c.k[size_t(t * d + i)] = e[size_t(key[size_t(t)])][size_t(i)];
      c.q[size_t(t * d + i)] = e[size_t(query[size_t(t)])][size_t(i)];
    }
  }
  std::fill(c.g.begin(), c.g.end(), 0.0);
  std::fill(c.beta.begin(), c.beta.end(), 1.0);
  for (int64_t chunk : {int64_t(1), int64_t(16)}) {
    std::vector<double> o(c.v.size());
    gated_delta_chunked_forward(c.s, c.in(), chunk, o.data());
    for (int64_t t = 0; t < s.seq; ++t) {
      int64_t last = -1;
      for (int64_t u = 0; u <= t; ++u)
        if (key[size_t(u)] == query[size_t(t)]) last = u;
      for (int64_t j = 0; j < s.dv; ++j) {
        const double want = last < 0 ? 0.0 : c.scale * c.v[size_t(last * s.dv + j)];
        EXPECT_NEAR(o[size_t(t * s.dv + j)], want, 1e-12) << "chunk " << chunk << " t " << t;
      }
    }
  }
}

TEST(GatedDeltaGates, RangesAndDerivatives) {
  for (double a : {-40.0, -3.0, -0.5, 0.0, 0.7, 5.0, 40.0}) {
    for (double b : {-30.0, -1.0, 0.0, 2.0, 30.0}) {
      const GateValues v = gated_delta_gates(a, b);
      EXPECT_LE(v.g, 0.0);
      EXPECT_TRUE(std::isfinite(v.g));
      EXPECT_GE(v.beta, 0.0);
      EXPECT_LE(v.beta, 1.0);
      const double h = 1e-6;
      EXPECT_NEAR(v.dg_da, (gated_delta_gates(a + h, b).g - gated_delta_gates(a - h, b).g) / (2 * h), 1e-8);
      EXPECT_NEAR(v.dbeta_db, (gated_delta_gates(a, b + h).beta - gated_delta_gates(a, b - h).beta) / (2 * h),
                  1e-8);
    }
  }
  EXPECT_NEAR(std::exp(gated_delta_gates(0.0, 0.0).g), std::pow(0.5, 1.0 / kGateTemperature), 1e-15);
}

TEST(GatedDeltaErrors, BadShapeChunkOrPointerIsNamed) {
  Case c(shape(8), 2);
  std::vector<double> o(c.v.size());
  EXPECT_THROW(gated_delta_chunked_forward(c.s, c.in(), 0, o.data()), Error);
  GatedDeltaShape bad = c.s;
  bad.dk = 0;
  try {
    gated_delta_naive_forward(bad, c.in(), o.data());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dk must be >= 1"), std::string::npos) << e.what();
  }
  GatedDeltaInputs<double> in = c.in();
  in.beta = nullptr;
  EXPECT_THROW(gated_delta_naive_forward(c.s, in, o.data()), Error);
}

}  // namespace
