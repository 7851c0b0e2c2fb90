// tests/attention/attention_test_util.h — helpers of the attention tests: build a shape, run one
// implementation forward and backward, and measure it against the FP64 oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "octet/attention.h"

namespace octet::test {

inline AttentionShape make_shape(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d,
                                 bool causal) {
  AttentionShape s;
  s.batch = b, s.n_heads = h, s.n_kv_heads = g, s.seq_q = tq, s.seq_k = tk, s.head_dim = d;
  s.causal = causal;
  return s;
}

inline AttentionConfig make_config(AttnPrecision p, AttnForm f, DeltaMode d) {
  AttentionConfig c;
  c.precision = p, c.form = f, c.delta = d;
  return c;
}

/// Everything one forward + backward produces.
struct RunResult {
  std::vector<float> o, lse, dq, dk, dv;
  AttentionSaved saved;
  AttentionStats stats;
};

inline RunResult run_attention(const AttentionShape& s, const AttentionConfig& c, const AttentionInputs& in,
                               bool want_rows = false) {
  RunResult r;
  r.o.resize(in.q.size());
  r.lse.resize(size_t(s.batch * s.n_heads * s.seq_q));
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.k.size());
  attention_forward(s, c, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data(), &r.saved);
  attention_backward(r.saved, in.d_o.data(), r.dq.data(), r.dk.data(), r.dv.data(), &r.stats, want_rows);
  return r;
}

inline AttentionErrors errors_of(const AttentionShape& s, const AttentionInputs& in,
                                 const AttentionOracle& ref, const RunResult& r) {
  return attention_errors(s, in, ref, r.o.data(), r.lse.data(), r.dq.data(), r.dk.data(), r.dv.data());
}

inline bool all_finite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

/// dÔ as the FP8 backward sees it, quantized here independently of octet's code path: E5M2 with
/// one current scale per tensor, s = 57344 / amax (the OFP8 E5M2 max over the tensor amax).
inline std::vector<double> independent_do_hat_e5m2(const std::vector<float>& d_o) {
  float amax = 0;
  for (float x : d_o) amax = std::max(amax, std::fabs(x));
  const float sc = 57344.0f / amax;
  std::vector<double> do_hat(d_o.size());
  for (size_t i = 0; i < d_o.size(); ++i)
    do_hat[i] = double(fp8_round(d_o[i] * sc, Format::E5M2) * (1.0f / sc));
  return do_hat;
}

/// Inputs with large logits (as trainings grow them): make_attention_inputs' normal draws with a
/// added to every entry of Q and K, so S_ij = τ (a u + n_i)·(a u + n_j) (u the all-ones direction)
/// has a mean ~τ a² D plus a spread of a few units per row: with D = 64 and a = 3.2, S ~ 60-110.
inline AttentionInputs large_logit_inputs(const AttentionShape& s, float a, uint64_t seed) {
  auto in = make_attention_inputs(s, AttnInputDist::Normal, seed);
  for (auto* x : {&in.q, &in.k})
    for (float& v : *x) v += a;
  return in;
}

/// The dQ row-sum projection's case (AttentionConfig::dq_projection): Q and K entries
/// 0.1·N(0, 1), V and dO N(0, 1); with `common`, the first coordinate of every key is −80 (a common
/// component ~100x the keys' spread: attention sinks, massive activations).
inline AttentionInputs common_key_inputs(const AttentionShape& s, bool common, uint64_t seed) {
  AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, seed);  // sizes, V, dO
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& x : in.q) x = float(0.1 * normal(rng));
  for (size_t e = 0; e < in.k.size(); ++e)
    in.k[e] = common && e % size_t(s.head_dim) == 0 ? -80.0f : float(0.1 * normal(rng));
  return in;
}

/// The row shape that broke the former matched-delta pivot rule in NoPE training
/// (docs/delta-matching.md, "The delta rule"): every 4th key is one repeated token — the same K row,
/// tied exactly at the max logit (S = τ·20·40 = 100 at D = 64) — whose V row is 0, so dP = 0 on the
/// tied keys; the other keys sit ~100 nats below. Q gets +20 along the first coordinate.
inline AttentionInputs tied_max_key_inputs(const AttentionShape& s, uint64_t seed) {
  auto in = make_attention_inputs(s, AttnInputDist::Normal, seed);
  const int64_t D = s.head_dim;
  for (int64_t r = 0; r < s.batch * s.n_heads * s.seq_q; ++r) in.q[size_t(r * D)] += 20.0f;
  for (int64_t r = 0; r < s.batch * s.n_kv_heads * s.seq_k; ++r) {
    if (r % s.seq_k % 4 != 0) continue;
    for (int64_t c = 0; c < D; ++c) {
      in.k[size_t(r * D + c)] = c == 0 ? 40.0f : 0.0f;
      in.v[size_t(r * D + c)] = 0.0f;
    }
  }
  return in;
}

inline std::string name_of(AttnPrecision p, AttnForm f) { return to_string(p) + "_" + to_string(f); }

}  // namespace octet::test
