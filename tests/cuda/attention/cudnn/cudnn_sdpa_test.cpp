// cudnn_sdpa_test.cpp — the CUDA backend's BF16 attention in form 'flash' (cuDNN's fused SDPA,
// src/cuda/attention/cudnn/cudnn_attention.cpp) against its CPU twin (precision bf16, stale delta: what the
// bf16 and fp8-linear arms run) and the FP64 oracle (octet/attention.h).
//
// Tolerances. cuDNN rounds the same operands to BF16 as the twin (Q, K, V, P, dO, dS; O stored BF16)
// but normalizes P by its FP32 row sum and sums in another order, so it is not bitwise the twin:
//   * FlashAttention-3's test rule (its hopper/test_flash_attn.py), as
//   tests/cuda/attention/attention_test.cpp: for O, dQ, dK, dV the
//     relative L2 error against the oracle is at most 2x the twin's + 1e-3;
//   * against the twin directly: L2 distance relative to the oracle's norm <= 2x the twin's own
//     error + 1e-3 (both are BF16-rounding away from the oracle, by the triangle inequality at
//     most their sum);
//   * LSE: |LSE_gpu − LSE_twin| <= 1e-3 + 1e-5·|LSE| (same BF16 Q, K; FP32 sums, natural log).
// Exact checks: zeros in give zeros out and LSE = log(keys seen); F32 and BF16 activations give the
// same bits (both round the inputs to BF16 the same way); two backwards give identical bits (the
// deterministic backward); two forwards then two backwards equal one at a time; a causal Tq > Tk
// shape (cuDNN cannot express it) runs the unfused path, bitwise form 'whole'; the bf16 arms pick
// form flash on cuda.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/model.h"

namespace octet {
namespace {

AttentionConfig cudnn_config() {
  AttentionConfig c;
  c.precision = AttnPrecision::BF16;
  c.delta = DeltaMode::Stale;  // cuDNN's delta; the bf16 arms' (attention_config)
  c.form = AttnForm::Flash;
  return c;
}

// ||x − y||₂ / ||ref||₂ (||x − y||₂ where ref is 0): the distance of two implementations in the
// units of attention_errors' relative errors, so that by the triangle inequality it is at most the
// sum of their errors against ref (a twin's relative distance ||x − y|| / ||y|| is ~1 where the
// exact result is 0 and y holds only rounding, e.g. dQ at T = 1).
double distance(const std::vector<float>& x, const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(x[i]) - double(y[i]);
    num += d * d;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

struct Case {
  int64_t b, h, g, tq, tk, d;
  bool causal;
};

std::string name_of(const Case& c) {
  return "B" + std::to_string(c.b) + " H" + std::to_string(c.h) + "/G" + std::to_string(c.g) + " Tq" +
         std::to_string(c.tq) + " Tk" + std::to_string(c.tk) + " D" + std::to_string(c.d) +
         (c.causal ? " causal" : "");
}

AttentionShape shape_of(const Case& c) {
  AttentionShape s;
  s.batch = c.b, s.n_heads = c.h, s.n_kv_heads = c.g, s.seq_q = c.tq, s.seq_k = c.tk;
  s.head_dim = c.d, s.causal = c.causal;
  return s;
}

TEST(CudnnSdpa, MatchesCpuTwinAndOracle) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  std::vector<Case> cases;
  for (int64_t t : {1, 17, 127, 129, 1000})
    for (int64_t d : {64, 128})
      for (bool causal : {false, true}) cases.push_back({t == 1000 ? 1 : 2, 8, 2, t, t, d, causal});
  cases.push_back({1, 8, 2, 64, 256, 64, true});  // Tq < Tk: bottom-right causal
  cases.push_back({1, 8, 2, 64, 256, 128, false});
  cases.push_back({2, 8, 8, 100, 100, 128, true});  // no GQA
  const AttentionConfig cfg = cudnn_config();
  for (const Case& c : cases) {
    const std::string what = name_of(c);
    const AttentionShape s = shape_of(c);
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 11);
    const auto ref = run_attention_oracle(s, in);
    std::vector<float> o(in.q.size()), lse(size_t(c.b * c.h * c.tq)), dq(in.q.size()), dk(in.k.size()),
        dv(in.k.size());
    AttentionSaved saved;
    attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
    attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), nullptr);
    const auto ce = attention_errors(s, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
    const GpuRun g = run_gpu(*gpu, s, cfg, in);
    const auto ge =
        attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
    const double to_twin[4] = {distance(g.o, o, ref.o), distance(g.dq, dq, ref.dq),
                               distance(g.dk, dk, ref.dk), distance(g.dv, dv, ref.dv)};
    std::printf(
        "[cudnn-sdpa] %-32s rel err vs FP64 gpu/cpu O %.2e/%.2e dQ %.2e/%.2e dK %.2e/%.2e "
        "dV %.2e/%.2e; gpu vs twin %.1e %.1e %.1e %.1e\n",
        what.c_str(), ge.o_rel_err, ce.o_rel_err, ge.dq_rel_err, ce.dq_rel_err, ge.dk_rel_err, ce.dk_rel_err,
        ge.dv_rel_err, ce.dv_rel_err, to_twin[0], to_twin[1], to_twin[2], to_twin[3]);
    const char* names[4] = {"O", "dQ", "dK", "dV"};
    const double gpu_err[4] = {ge.o_rel_err, ge.dq_rel_err, ge.dk_rel_err, ge.dv_rel_err};
    const double cpu_err[4] = {ce.o_rel_err, ce.dq_rel_err, ce.dk_rel_err, ce.dv_rel_err};
    for (int i = 0; i < 4; ++i) {
      EXPECT_LE(gpu_err[i], 2 * cpu_err[i] + 1e-3)
          << what << ": " << names[i] << " of cuDNN vs the FP64 oracle, rel L2 " << gpu_err[i]
          << " > 2 x the CPU bf16 twin's " << cpu_err[i] << " + 1e-3";
      EXPECT_LE(to_twin[i], 2 * cpu_err[i] + 1e-3)
          << what << ": " << names[i] << " of cuDNN vs the CPU bf16 twin, distance " << to_twin[i]
          << " (relative to the oracle's norm) > 2 x the twin's error " << cpu_err[i] << " + 1e-3";
    }
    double lse_worst = 0;
    size_t lse_at = 0;
    for (size_t i = 0; i < lse.size(); ++i) {
      const double e = std::fabs(double(g.lse[i]) - double(lse[i])) - 1e-5 * std::fabs(lse[i]);
      if (!(e <= lse_worst)) lse_worst = e, lse_at = i;  // NaN counts as worst
    }
    EXPECT_LE(lse_worst, 1e-3) << what << ": LSE row " << lse_at << " cuDNN " << g.lse[lse_at] << " vs twin "
                               << lse[lse_at] << " (natural log)";
    if (!(s.seq_q == 1 &&
          s.seq_k == 1)) {  // Tq = Tk = 1 runs the unfused path (sdpa_unsupported), which measures it
      EXPECT_EQ(g.stats.row_residual_max, 0.0)
          << what << ": the cuDNN path leaves the residual accumulator unchanged";
    }
    if (HasFailure()) return;
  }
}

// Q = K = V = dO = 0: every row sees uniform logits 0, so O = mean of V = 0, LSE = log(keys seen)
// (bottom-right causal: i + 1 + Tk − Tq), and every gradient 0 — exactly.
TEST(CudnnSdpa, ZerosGiveZeros) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  for (const Case& c : {Case{2, 8, 2, 129, 129, 128, true}, Case{1, 4, 1, 64, 200, 64, true},
                        Case{1, 4, 4, 17, 17, 64, false}}) {
    const AttentionShape s = shape_of(c);
    AttentionInputs in;
    in.q.assign(size_t(c.b * c.h * c.tq * c.d), 0.0f);
    in.d_o = in.q;
    in.k.assign(size_t(c.b * c.g * c.tk * c.d), 0.0f);
    in.v = in.k;
    const GpuRun g = run_gpu(*gpu, s, cudnn_config(), in);
    for (const auto* x : {&g.o, &g.dq, &g.dk, &g.dv})
      for (size_t i = 0; i < x->size(); ++i) ASSERT_EQ((*x)[i], 0.0f) << name_of(c) << " at " << i;
    for (int64_t r = 0; r < c.b * c.h * c.tq; ++r) {
      const int64_t i = r % c.tq, seen = c.causal ? i + 1 + c.tk - c.tq : c.tk;
      ASSERT_NEAR(g.lse[size_t(r)], std::log(double(seen)), 1e-5) << name_of(c) << " row " << r;
    }
  }
}

// One forward + backward of `a` on device tensors of dtype act; results as F32.
GpuRun run_io(Backend& be, Attention& a, const AttentionShape& s, DType act, const AttentionInputs& in) {
  AttnIo io(be, s, act);
  io.set(be, in);
  {
    const SavedAttention saved = a.forward(io.q, io.k, io.v, io.o, io.lse);
    a.backward(saved, io.d_o, io.dq, io.dk, io.dv, io.residual);
  }
  GpuRun r;
  r.o = be.download_f32(io.o), r.lse = be.download_f32(io.lse), r.dq = be.download_f32(io.dq);
  r.dk = be.download_f32(io.dk), r.dv = be.download_f32(io.dv);
  return r;
}

void expect_same_bits(const GpuRun& x, const GpuRun& y, const std::string& what) {
  const char* names[5] = {"O", "LSE", "dQ", "dK", "dV"};
  const std::vector<float>* a[5] = {&x.o, &x.lse, &x.dq, &x.dk, &x.dv};
  const std::vector<float>* b[5] = {&y.o, &y.lse, &y.dq, &y.dk, &y.dv};
  for (int t = 0; t < 5; ++t) {
    ASSERT_EQ(a[t]->size(), b[t]->size()) << what << " " << names[t];
    bool nonzero = false;
    for (size_t i = 0; i < a[t]->size(); ++i) {
      nonzero |= (*a[t])[i] != 0.0f;
      ASSERT_TRUE(test::same_float((*a[t])[i], (*b[t])[i]))
          << what << ": " << names[t] << "[" << i << "] " << (*a[t])[i] << " vs " << (*b[t])[i];
    }
    EXPECT_TRUE(nonzero) << what << ": " << names[t] << " is all zero (vacuous)";
  }
}

TEST(CudnnSdpa, DeterministicAndActivationDtypeIndependent) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = shape_of({2, 8, 2, 300, 300, 128, true});
  const auto in = make_attention_inputs(s, AttnInputDist::Sink, 5);
  auto a = gpu->make_attention(s, cudnn_config());
  const GpuRun f32a = run_io(*gpu, *a, s, DType::F32, in);
  const GpuRun f32b = run_io(*gpu, *a, s, DType::F32, in);
  const GpuRun bf16 = run_io(*gpu, *a, s, DType::BF16, in);
  expect_same_bits(f32a, f32b, "two runs (deterministic backward)");
  expect_same_bits(f32a, bf16, "F32 vs BF16 activations");
}

// forward(1), forward(2), backward(1), backward(2) == one at a time, bitwise (saved state).
TEST(CudnnSdpa, TwoForwardsThenTwoBackwardsEqualOneAtATime) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = shape_of({2, 8, 2, 77, 77, 64, true});
  const auto in1 = make_attention_inputs(s, AttnInputDist::Normal, 3);
  const auto in2 = make_attention_inputs(s, AttnInputDist::Heavy, 4);
  auto a = gpu->make_attention(s, cudnn_config());
  AttnIo a1(*gpu, s, DType::BF16), a2(*gpu, s, DType::BF16);
  a1.set(*gpu, in1), a2.set(*gpu, in2);
  {
    const SavedAttention s1 = a->forward(a1.q, a1.k, a1.v, a1.o, a1.lse);
    const SavedAttention s2 = a->forward(a2.q, a2.k, a2.v, a2.o, a2.lse);
    a->backward(s1, a1.d_o, a1.dq, a1.dk, a1.dv, a1.residual);
    a->backward(s2, a2.d_o, a2.dq, a2.dk, a2.dv, a2.residual);
  }
  auto fetch = [&](AttnIo& io) {
    GpuRun r;
    r.o = gpu->download_f32(io.o), r.lse = gpu->download_f32(io.lse);
    r.dq = gpu->download_f32(io.dq), r.dk = gpu->download_f32(io.dk), r.dv = gpu->download_f32(io.dv);
    return r;
  };
  expect_same_bits(fetch(a1), run_io(*gpu, *a, s, DType::BF16, in1), "first of two outstanding");
  expect_same_bits(fetch(a2), run_io(*gpu, *a, s, DType::BF16, in2), "second of two outstanding");
}

// Causal Tq > Tk leaves rows without keys, which cuDNN's mask cannot express: form flash then runs
// the unfused BF16 path, bitwise form whole (rows without keys: O = 0, LSE = −inf, dQ = 0).
TEST(CudnnSdpa, CausalTqAboveTkFallsBackToUnfused) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = shape_of({1, 4, 2, 256, 64, 64, true});
  const auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
  AttentionConfig whole = cudnn_config();
  whole.form = AttnForm::Whole;
  const GpuRun flash = run_gpu(*gpu, s, cudnn_config(), in);
  const GpuRun unfused = run_gpu(*gpu, s, whole, in);
  expect_same_bits(flash, unfused, "causal Tq 256 > Tk 64: form flash vs whole");
}

TEST(CudnnSdpa, Bf16ArmsPickFormFlashOnCuda) {
  ModelConfig m;
  m.d_model = 512, m.n_head = 8, m.n_kv_head = 8;  // head_dim 64
  for (Arm arm : {Arm::BF16, Arm::FP8Linear}) {
    PrecisionConfig p;
    p.arm = arm;
    EXPECT_EQ(default_attn_form(m, p, "cuda"), AttnForm::Flash) << to_string(arm);
    EXPECT_EQ(default_attn_form(m, p, "cpu"), AttnForm::Whole) << to_string(arm);
  }
  m.d_model = 480;  // head_dim 60: cuDNN is not sent it
  PrecisionConfig p;
  p.arm = Arm::BF16;
  EXPECT_EQ(default_attn_form(m, p, "cuda"), AttnForm::Whole);
}

}  // namespace
}  // namespace octet
