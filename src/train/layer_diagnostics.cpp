// src/train/layer_diagnostics.cpp — the per-layer diagnostics of an evaluation (octet/eval.h
// layer_diagnostics): the model's own (kurtosis, row residual, quantizer stats: Model::diagnostics)
// and the dQ bias along the mean key, measured by replaying each attention layer's last backward on
// the CPU reference for a sample of query rows (attention_dq_bias). The bias: with a non-zero row
// sum r_i = Σ_j dS_ij, dQ_i carries τ r_i k̄_i, k̄_i = Σ_j P_ij K̂_j (docs/delta-matching.md §"The
// dQ bias along the mean key"; where the numbers go: docs/training.md §Output).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <thread>

#include "octet/attention.h"
#include "octet/error.h"
#include "octet/eval.h"

namespace octet {

std::vector<DqSampleBlock> dq_sample_blocks(int64_t seq_len) {
  OCTET_CHECK(seq_len >= 1, "dq_sample_blocks: seq_len must be >= 1, got " + std::to_string(seq_len));
  const int64_t rows = std::clamp<int64_t>(8192 / seq_len, 1, 16);
  std::vector<DqSampleBlock> blocks;
  int64_t prev = 0;
  for (int64_t k = 1; k <= 4; ++k) {
    const int64_t end = (k * seq_len + 3) / 4;  // ⌈k·T/4⌉
    if (end == prev) continue;
    blocks.push_back({end - std::min(rows, end - prev), end});
    prev = end;
  }
  return blocks;
}

DqBias attention_dq_bias(const AttentionSample& s) {
  const AttentionShape& full = s.shape;
  full.validate();
  const int64_t H = full.n_heads, G = full.n_kv_heads, T = full.seq_q, D = full.head_dim;
  OCTET_CHECK(
      full.batch == 1 && full.seq_k == T,
      "attention_dq_bias: the sample must be one sequence of self-attention (batch 1, seq_q = seq_k)");
  OCTET_CHECK(int64_t(s.q.size()) == H * T * D && int64_t(s.k.size()) == G * T * D &&
                  int64_t(s.v.size()) == G * T * D,
              "attention_dq_bias: q, k, v do not match the sample's shape " + std::to_string(H) + "/" +
                  std::to_string(G) + " heads x " + std::to_string(T) + " x " + std::to_string(D));
  OCTET_CHECK(!s.d_o.empty(),
              "attention_dq_bias: the sample holds no dO (the backward ran without "
              "Model::set_attention_capture(true))");
  OCTET_CHECK(s.d_o.size() == s.q.size(), "attention_dq_bias: d_o does not match q's shape");
  const double tau = double(full.tau());
  DqBias out;
  double bias_sq = 0, dq_sq = 0, bias_sum = 0, residual_sum = 0;
  int64_t residual_rows = 0;
  for (const DqSampleBlock& blk : dq_sample_blocks(T)) {
    // query rows [begin, end) and the keys they see: [0, end) causal (bottom-right aligned, so the
    // rows are exactly those of the full causal attention), all T keys otherwise
    const int64_t R = blk.end - blk.begin, Tk = full.causal ? blk.end : T;
    AttentionShape sh = full;
    sh.seq_q = R;
    sh.seq_k = Tk;
    std::vector<float> q(size_t(H * R * D)), d_o(q.size()), k(size_t(G * Tk * D)), v(k.size());
    for (int64_t h = 0; h < H; ++h) {
      const size_t from = size_t((h * T + blk.begin) * D), to = size_t(h * R * D);
      std::copy_n(s.q.begin() + long(from), R * D, q.begin() + long(to));
      std::copy_n(s.d_o.begin() + long(from), R * D, d_o.begin() + long(to));
    }
    for (int64_t g = 0; g < G; ++g) {
      std::copy_n(s.k.begin() + long(g * T * D), Tk * D, k.begin() + long(g * Tk * D));
      std::copy_n(s.v.begin() + long(g * T * D), Tk * D, v.begin() + long(g * Tk * D));
    }
    AttentionSaved saved;
    std::vector<float> o(q.size()), lse(size_t(H * R)), dq(q.size()), dk(k.size()), dv(k.size());
    attention_forward(sh, s.config, q.data(), k.data(), v.data(), o.data(), lse.data(), &saved);
    AttentionStats st;
    attention_backward(saved, d_o.data(), dq.data(), dk.data(), dv.data(), &st, true);
    for (int64_t r = 0; r < H * R; ++r) {
      double kbar = 0, g = 0;
      for (int64_t c = 0; c < D; ++c) {
        kbar += st.mean_key[size_t(r * D + c)] * st.mean_key[size_t(r * D + c)];
        g += double(dq[size_t(r * D + c)]) * double(dq[size_t(r * D + c)]);
      }
      const double bias = tau * std::fabs(st.row_sum[size_t(r)]) * std::sqrt(kbar);  // ||τ r_i k̄_i||
      residual_sum += st.row_residual[size_t(r)];
      residual_rows += 1;
      bias_sq += bias * bias;
      dq_sq += g;
      if (g == 0) continue;  // a row without gradient (matched delta, one key): nothing to compare
      const double b = bias / std::sqrt(g);  // NaN stays NaN
      bias_sum += b;
      if (b != b || (out.max == out.max && b > out.max)) out.max = b;  // a NaN is reported, never hidden
      out.rows += 1;
    }
  }
  out.mean = out.rows ? bias_sum / double(out.rows) : 0.0;
  out.norm = dq_sq > 0 ? std::sqrt(bias_sq / dq_sq) : (bias_sq > 0 ? double(INFINITY) : 0.0);
  out.row_residual_mean = residual_rows ? residual_sum / double(residual_rows) : 0.0;
  return out;
}

std::vector<LayerReport> layer_diagnostics(Model& model) {
  std::vector<LayerReport> out;
  std::vector<LayerDiag> diags = model.diagnostics();
  std::vector<std::pair<size_t, AttentionSample>> samples;  // downloaded here: the backend is not shared
  for (size_t l = 0; l < diags.size(); ++l) {
    LayerReport r;
    r.diag = std::move(diags[l]);
    r.attention = model.config().attention_layer(int64_t(l));
    if (r.attention) {
      AttentionSample s = model.attention_sample(int64_t(l));
      if (!s.d_o.empty()) samples.emplace_back(l, std::move(s));
    }
    out.push_back(std::move(r));
  }
  // the replays (host only, independent) on up to 8 threads, each taking the next sample
  std::vector<std::optional<DqBias>> bias(samples.size());
  std::vector<std::exception_ptr> errors(samples.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < samples.size();) {
      try {
        bias[i] = attention_dq_bias(samples[i].second);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t n = std::min<size_t>({samples.size(), 8, std::max(1u, std::thread::hardware_concurrency())});
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < samples.size(); ++i) {
    if (errors[i]) std::rethrow_exception(errors[i]);
    out[samples[i].first].dq_bias = bias[i];
  }
  return out;
}

}  // namespace octet
