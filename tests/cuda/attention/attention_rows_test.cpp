// attention_rows_test.cpp — the rows where the FP8 attention's softmax numerics are hardest, on the
// GPU against the CPU reference and the FP64 oracle (octet/attention.h; docs/delta-matching.md):
//  - rows that see one key (the first query row of a causal sequence, where the exact dS is 0) and
//    rows with a dominant key (P > 1/2): the matched delta's row residual
//    |Σ_j dS_ij| / Σ_j P_ij(|dP_ij| + |D_i|) must stay <= 1e-6 in every row — the GPU uses the
//    CPU's one rule (octet/delta_rule.h), so both backends meet the same bound;
//  - large logits (S ~ 60-110, as trainings grow them; T = 1024, causal): the backward's
//    P = exp(S − m) / l from the forward's saved (m, l) sums to 1 at any logit size, so the same
//    residual bound holds (exp(S − L) summed to 1 only to one FP32 ulp of L ~ 8e-6: residuals up
//    to 1e-4 in trainings; the CPU twin is tests/attention/large_logits_test.cpp);
//  - long flat rows ("P without underflow"): with Q = 0 and V = 1 over 2^18 keys every P is 2^-18,
//    below E4M3's range after the static scale; O must still be 1 and dV must match the oracle.
// Tolerance rule as in attention_test.cpp (FlashAttention-3's): GPU error <= 2x the CPU
// reference's error in the same precision + 1e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"

namespace octet {
namespace {

AttentionConfig fp8_config(DeltaMode delta) {
  AttentionConfig c;
  c.precision = AttnPrecision::FP8;
  c.delta = delta;
  return c;
}

AttentionShape shape_of(int64_t b, int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d, bool causal) {
  AttentionShape s;
  s.batch = b, s.n_heads = h, s.n_kv_heads = g, s.seq_q = tq, s.seq_k = tk, s.head_dim = d;
  s.causal = causal;
  return s;
}

// The CPU reference's errors against the oracle (and its stats) for one config.
AttentionErrors cpu_errors(const AttentionShape& s, const AttentionConfig& cfg, const AttentionInputs& in,
                           const AttentionOracle& ref, AttentionStats* stats) {
  std::vector<float> o(in.q.size()), lse(size_t(s.batch * s.n_heads * s.seq_q)), dq(in.q.size()),
      dk(in.k.size()), dv(in.k.size());
  AttentionSaved saved;
  attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
  attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), stats);
  return attention_errors(s, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
}

// The GPU against the CPU reference of the same config (tolerance rule) and the row bound.
void expect_rows_match(Backend& gpu, const AttentionShape& s, const AttentionInputs& in,
                       const std::string& what) {
  const auto ref = run_attention_oracle(s, in);
  for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
    const AttentionConfig cfg = fp8_config(delta);
    AttentionStats cst;
    const auto ce = cpu_errors(s, cfg, in, ref, &cst);
    const GpuRun g = run_gpu(gpu, s, cfg, in);
    const auto ge =
        attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
    const std::string w = what + " " + to_string(delta);
    std::printf("[attention rows] %-36s residual max gpu %.2e cpu %.2e; dQ err %.2e/%.2e\n", w.c_str(),
                g.stats.row_residual_max, cst.row_residual_max, ge.dq_rel_err, ce.dq_rel_err);
    EXPECT_LE(ge.o_rel_err, 2 * ce.o_rel_err + 1e-3) << w;
    EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << w;
    EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << w;
    EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << w;
    if (delta == DeltaMode::Matched) {
      EXPECT_LE(g.stats.row_residual_max, 1e-6) << w;
      EXPECT_LE(cst.row_residual_max, 1e-6) << w;
    }
  }
}

// Causal, Tq = Tk: row 0 of every (batch, head) sees exactly one key, where dS must be 0.
TEST(CudaAttentionRows, OneKeyRowsKeepTheMatchedResidual) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const auto s = shape_of(8, 4, 2, 96, 96, 64, true);
  for (AttnInputDist dist : {AttnInputDist::Normal, AttnInputDist::Heavy, AttnInputDist::Sink})
    for (uint64_t seed : {1u, 2u, 3u})
      expect_rows_match(*gpu, s, make_attention_inputs(s, dist, seed),
                        "one-key " + to_string(dist) + " seed " + std::to_string(seed));
}

// Key 0 lengthened 1.6x along the sink direction: its logit is ~12.8 above the rest, so it holds
// P > 1/2 in every row (a nearly one-hot row), non-causal and causal.
TEST(CudaAttentionRows, DominantKeyRowsKeepTheMatchedResidual) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (bool causal : {false, true}) {
    const auto s = shape_of(2, 4, 4, 128, 128, 64, causal);
    auto in = make_attention_inputs(s, AttnInputDist::Sink, 4);
    for (int64_t bg = 0; bg < s.batch * s.n_kv_heads; ++bg)
      for (int64_t c = 0; c < s.head_dim; ++c) in.k[size_t(bg * s.seq_k * s.head_dim + c)] *= 1.6f;
    expect_rows_match(*gpu, s, in, std::string("dominant ") + (causal ? "causal" : "full"));
  }
}

// The row shape that broke the former pivot rule in NoPE training (docs/delta-matching.md, "The
// delta rule"): every 4th key is one repeated token — the same K row, tied exactly at the max
// logit (S = 100) — whose V row is 0, so dP = 0 on the tied keys; the other keys sit ~100 nats
// below. D is then tiny and the matched rule must still give every row a zero sum.
TEST(CudaAttentionRows, TiedMaxKeysWithZeroValueKeepTheMatchedResidual) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const auto s = shape_of(2, 4, 2, 256, 256, 64, true);
  const auto in = test::tied_max_key_inputs(s, 9);
  const AttentionConfig cfg = fp8_config(DeltaMode::Matched);
  const GpuRun g = run_gpu(*gpu, s, cfg, in);
  AttentionStats cst;
  const auto ref = run_attention_oracle(s, in);
  cpu_errors(s, cfg, in, ref, &cst);
  std::printf("[attention rows] tied max keys, V = 0: matched residual max gpu %.2e cpu %.2e\n",
              g.stats.row_residual_max, cst.row_residual_max);
  EXPECT_LE(g.stats.row_residual_max, 1e-6);
  EXPECT_LE(cst.row_residual_max, 1e-6);
  for (float x : g.dq) ASSERT_TRUE(std::isfinite(x));
}

// Q and K share a mean direction: S ~ 60-110 with a spread of a few units per row.
TEST(CudaAttentionRows, LargeLogitRowsKeepTheMatchedResidual) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const auto s = shape_of(1, 2, 1, 1024, 1024, 64, true);
  const auto in = test::large_logit_inputs(s, 3.2f, 21);
  expect_rows_match(*gpu, s, in, "large logits causal");
}

// Q = 0: every row is flat, P = 1/Tk. With V = 1, O = 1; dV_j = Σ_i dO_i / Tk matches the oracle.
TEST(CudaAttentionRows, LongFlatRowsKeepTheirProbability) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (int64_t tk : {int64_t(4096), int64_t(1) << 18}) {
    const auto s = shape_of(1, 1, 1, 16, tk, 64, false);
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 5);
    std::fill(in.q.begin(), in.q.end(), 0.0f);
    std::fill(in.v.begin(), in.v.end(), 1.0f);
    const auto ref = run_attention_oracle(s, in);
    const AttentionConfig cfg = fp8_config(DeltaMode::Matched);
    const GpuRun g = run_gpu(*gpu, s, cfg, in);
    const auto ge =
        attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
    const auto ce = cpu_errors(s, cfg, in, ref, nullptr);
    std::printf("[attention rows] flat Tk %lld: gpu/cpu O err %.2e/%.2e dV err %.2e/%.2e\n", (long long)tk,
                ge.o_rel_err, ce.o_rel_err, ge.dv_rel_err, ce.dv_rel_err);
    for (float x : g.o) ASSERT_NEAR(x, 1.0f, 1e-3f) << "Tk " << tk;
    EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << "Tk " << tk;
    EXPECT_LT(ce.dv_rel_err, 0.15) << "Tk " << tk;  // dV = 0 (rel. err 1) when P underflows
    EXPECT_LE(g.stats.row_residual_max, 1e-6) << "Tk " << tk;
  }
}

}  // namespace
}  // namespace octet
