// tests/attention/attention_test_util.h — helpers of the attention tests: build a shape, run one
// implementation forward and backward, and measure it against the FP64 oracle.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "octet/attention.h"

namespace octet::test {

inline AttentionShape make_shape(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk,
                                 int64_t d, bool causal) {
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

inline RunResult run_attention(const AttentionShape& s, const AttentionConfig& c,
                               const AttentionInputs& in, bool want_rows = false) {
  RunResult r;
  r.o.resize(in.q.size());
  r.lse.resize(size_t(s.batch * s.n_heads * s.seq_q));
  r.dq.resize(in.q.size());
  r.dk.resize(in.k.size());
  r.dv.resize(in.k.size());
  attention_forward(s, c, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data(),
                    &r.saved);
  attention_backward(r.saved, in.d_o.data(), r.dq.data(), r.dk.data(), r.dv.data(), &r.stats,
                     want_rows);
  return r;
}

inline AttentionErrors errors_of(const AttentionShape& s, const AttentionInputs& in,
                                 const AttentionOracle& ref, const RunResult& r) {
  return attention_errors(s, in, ref, r.o.data(), r.lse.data(), r.dq.data(), r.dk.data(),
                          r.dv.data());
}

inline bool all_finite(const std::vector<float>& x) {
  for (float v : x)
    if (!std::isfinite(v)) return false;
  return true;
}

inline std::string name_of(AttnPrecision p, AttnForm f) { return to_string(p) + "_" + to_string(f); }

}  // namespace octet::test
