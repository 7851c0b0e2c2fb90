// src/cpu/attention_inputs.cpp — deterministic inputs for the attention checks and tests, shaped
// so that the issues of real models show: keys with a non-zero mean (the direction a stale delta
// biases dQ along, docs/design.md §"The two deltas"), heavy-tailed activations (outliers that stretch a
// per-tensor FP8 scale), and attention sinks (one key that takes most of the attention mass, as observed in
// trained LLMs: Xiao et al., "Efficient Streaming Language Models with Attention Sinks",
// arXiv 2309.17453).
#include <cmath>
#include <random>

#include "cpu/attention_impl.h"

namespace octet {
namespace {

// Logit of the sink key above the rest (before noise): P(sink) ~ 0.6 at 1024 keys, ~1 in the
// first causal rows.
constexpr double kSinkLogit = 8.0;

struct Sampler {
  std::mt19937_64 rng;
  AttnInputDist dist;
  std::normal_distribution<double> normal{0.0, 1.0};
  std::student_t_distribution<double> t3{3.0};
  // Unit variance in every distribution (Student-t with ν = 3 has variance 3).
  double next() { return dist == AttnInputDist::Heavy ? t3(rng) / std::sqrt(3.0) : normal(rng); }
  void fill(std::vector<float>& x) {
    for (auto& e : x) e = float(next());
  }
};

}  // namespace

AttentionInputs make_attention_inputs(const AttentionShape& shape, AttnInputDist dist, uint64_t seed) {
  shape.validate();
  const attn::Problem p(shape, AttentionConfig{});
  AttentionInputs in;
  in.q.resize(size_t(p.B * p.H * p.Tq * p.D));
  in.d_o.resize(in.q.size());
  in.k.resize(size_t(p.B * p.G * p.Tk * p.D));
  in.v.resize(in.k.size());
  Sampler smp{std::mt19937_64(seed), dist};
  smp.fill(in.q);
  smp.fill(in.k);
  smp.fill(in.v);
  smp.fill(in.d_o);

  // Per KV head: a key mean mu (entries N(0,1)) and, for sinks, a unit direction u.
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> mu(p.D), u(p.D);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t g = 0; g < p.G; ++g) {
      double norm = 0;
      for (int64_t c = 0; c < p.D; ++c) {
        mu[c] = normal(smp.rng);
        u[c] = normal(smp.rng);
        norm += u[c] * u[c];
      }
      for (auto& x : u) x /= std::sqrt(norm);
      // mu ⟂ u: the sink strength then does not depend on how the key mean meets the sink.
      double mu_u = 0;
      for (int64_t c = 0; c < p.D; ++c) mu_u += mu[c] * u[c];
      for (int64_t c = 0; c < p.D; ++c) mu[c] -= mu_u * u[c];
      float* K = in.k.data() + (b * p.G + g) * p.Tk * p.D;
      for (int64_t j = 0; j < p.Tk; ++j)
        for (int64_t c = 0; c < p.D; ++c) K[j * p.D + c] += float(mu[c]);
      if (dist != AttnInputDist::Sink) continue;
      // Sink: the queries of this KV head's group share the component a·u, and key 0 is c·u with
      // τ·c = 1 and τ·c·a = kSinkLogit, so S_i0 = kSinkLogit + N(0, 1).
      const double c_len = 1.0 / p.tau, a = kSinkLogit;
      for (int64_t c = 0; c < p.D; ++c) K[c] = float(c_len * u[c]);
      for (int64_t h = g * p.group; h < (g + 1) * p.group; ++h) {
        float* Q = in.q.data() + p.q_off(b, h);
        for (int64_t i = 0; i < p.Tq; ++i)
          for (int64_t c = 0; c < p.D; ++c) Q[i * p.D + c] += float(a * u[c]);
      }
    }
  return in;
}

}  // namespace octet
