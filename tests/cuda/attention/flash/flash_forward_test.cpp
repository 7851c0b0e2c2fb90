// flash_forward_test.cpp — the flash FP8 attention forward (src/cuda/attention/flash/, run by the CUDA
// attention for form 'flash') against its CPU twin, the flash form with the same config (src/cpu/
// attention_flash.cpp), and the FP64 oracle; the backward after it (the flash backward since form
// 'flash' runs both; large logits are tests/cuda/attention/flash/flash_backward_test.cpp's
// LargeLogitsMatchedResidual).
//
// Tolerances. The fused kernel computes the twin's formula with another FP32 summation order and
// each exponential as one FFMA and ex2 (flash_softmax.cuh: its argument a few FP32 ulp of |S| off
// the twin's; flash_fwd_sm89.cu): a P̃ code or a BF16 output element then differs by one rounding step only
// where a value lies within FP32 rounding of a rounding boundary (rare: a P̃ flip moves one term
// by 1/16 of itself, a BF16 flip one element by 2^-8), so O agrees with the twin to a relative L2
// of 1e-3 (flash_backward_codes.h o_tol_vs_twin), and the LSE to kLseTol = 1e-4 absolute (FP32
// rounding of logits of size ~10; bounds set from this estimate, then met on an H200). Gradients
// (the backward on nearly the same m, l and O) agree with the CPU flash backward to 1e-2 relative L2
// (dŜ is E5M2 per tile: a code flip in dS moves a gradient element by ~1/8 of a term). And every
// result obeys FlashAttention-3's rule against the FP64 oracle (FlashAttention-3's test rule): error
// <= 2 x the CPU twin's error + 1e-3. The wgmma flavor computes S = Q̂K̂ᵀ and each tile's P̃V̂ and l̃
// on the FP8 tensor core, whose accumulator keeps ~13 mantissa bits (truncating; DeepSeek-V3
// §3.3.2; docs/attention.md §"Numerics of the wgmma forward"): its S is within
// kSAccRel·Σ|τ·sq·sk·q̂·k̂| of the exact sum (LogitsWithinTheAccumulatorBound), so its LSE, m and l
// move by about that (kLseTolWgmma, kLTolWgmma), P̃ codes flip where S moved, and O agrees with the
// twin and the mma.sync flavor to o_tol_vs_twin(wgmma) = 1e-2 (measured up to 5.4e-3; V = 1 still
// gives O = 1 exactly: O and l̃ are summed by the same instruction).
// The kernels directly (flash.h): the saved m is bit for bit the max of run_logits's S,
// l its Σ exp(S − m), LSE = m + log l, S's pads 0.
// Determinism: the same call gives the same bits run to run (no atomics in the forward).
// Identities: V = 1 gives O = 1 exactly up to 2^18 keys (P̃ is row-max-relative: no underflow);
// zero inputs give O = 0 and LSE = log(visible keys); a row that sees no key gives O = 0, LSE =
// −inf and finite gradients (dQ = 0); an unsupported head_dim or block_k raises octet::Error.
// Every test runs once per kernel flavor (flash.h ForwardKernel: mma_sync, and wgmma on an
// sm_90 GPU, skipped elsewhere), chosen by OCTET_FLASH_FORWARD for the tests through the CUDA attention
// and by ForwardParams::kernel for the direct ones; the two flavors agree with each other to the
// twin's tolerances (FlavorsAgree), and a bad OCTET_FLASH_FORWARD is an octet::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/cuda_test_util.h"
#include "cuda/attention/flash/flash_backward_codes.h"
#include "octet/attention.h"
#include "octet/backend.h"

namespace octet {
namespace {

constexpr double kLseTol = 1e-4;
// The wgmma flavor's S bound (a relative 2^-10 of Σ|terms|: 2^-13 per k32 instruction's truncation,
// over D/32 <= 4 instructions, x 2 margin) and what it moves: LSE, m by at most the largest |ΔS| of
// the row; l by its relative exp(|ΔS|) − 1, ~2|ΔS|. At these tests' logits (Σ|terms| <= ~10): 1e-2.
constexpr double kSAccRel = 1.0 / 1024, kLseTolWgmma = 1e-2, kLTolWgmma = 2e-2;
using cuda::flash::ForwardKernel;
using test::device_is_sm90;

double lse_tol(ForwardKernel k) { return k == ForwardKernel::Wgmma ? kLseTolWgmma : kLseTol; }

/// E4M3 codes of sigma·N(0, 1) for `heads` (b, head) pairs of T rows of D, padded to T_p rows with
/// zero codes: [heads, T_p, D], or transposed [heads, D, T_p] (V̂ᵀ's layout).
std::vector<uint8_t> random_codes(std::mt19937& rng, float sigma, int64_t heads, int64_t T, int64_t T_p,
                                  int64_t D, bool transposed) {
  std::normal_distribution<float> nd;
  std::vector<uint8_t> x(size_t(heads * T_p * D), 0);
  for (int64_t bh = 0; bh < heads; ++bh)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d)
        x[size_t(transposed ? (bh * D + d) * T_p + t : (bh * T_p + t) * D + d)] =
            fp8_encode(sigma * nd(rng), Format::E4M3, true);
  return x;
}

/// The kernels' own dimensions (flash.h ForwardParams).
struct Dims {
  int64_t B, H, G, Tq, Tk, D;
  bool causal;
  int64_t block_k;
};

/// One forward call on random codes, through the direct entry: E4M3 codes of sigma·N(0, 1) for Q̂,
/// K̂, V̂ᵀ (seeded), every scale_inv = scale_inv, and the output buffers.
struct DirectForward {
  Dims c;
  int64_t Tq_p, Tk_p;
  test::Dev<uint8_t> q, k, vt;
  test::Dev<float> scales, o, lse, m, l;

  DirectForward(const Dims& dims, float sigma, float scale_inv, uint32_t seed)
      : c(dims), Tq_p((dims.Tq + 15) / 16 * 16), Tk_p((dims.Tk + 15) / 16 * 16) {
    std::mt19937 rng(seed);
    q.set(random_codes(rng, sigma, c.B * c.H, c.Tq, Tq_p, c.D, false));
    k.set(random_codes(rng, sigma, c.B * c.G, c.Tk, Tk_p, c.D, false));
    vt.set(random_codes(rng, sigma, c.B * c.G, c.Tk, Tk_p, c.D, true));
    scales.set(std::vector<float>{scale_inv, scale_inv, scale_inv});
    for (auto* x : {&lse, &m, &l}) x->resize(size_t(c.B * c.H * c.Tq));
    o.resize(size_t(c.B * c.H * c.Tq * c.D));
    poison_outputs();
  }
  /// Every output element NaN (bytes 0xFF), so that one a kernel leaves unwritten is seen.
  void poison_outputs() {
    for (auto* x : {&o, &lse, &m, &l}) {
      OCTET_CUDA_CHECK(cudaDeviceSynchronize());
      OCTET_CUDA_CHECK(cudaMemset(x->p, 0xFF, x->n * sizeof(float)));
    }
  }
  cuda::flash::ForwardParams params(ForwardKernel kernel) {
    cuda::flash::ForwardParams p;
    p.q = q.p, p.k = k.p, p.v_t = vt.p;
    p.q_scale_inv = scales.p, p.k_scale_inv = scales.p + 1, p.v_scale_inv = scales.p + 2;
    p.o = o.p, p.lse = lse.p, p.row_max = m.p, p.row_sum = l.p;
    p.B = c.B, p.H = c.H, p.G = c.G, p.Tq = c.Tq, p.Tk = c.Tk, p.Tq_p = Tq_p, p.Tk_p = Tk_p, p.D = c.D;
    p.causal = c.causal;
    p.tau = 1.0f / std::sqrt(float(c.D));
    p.block_k = c.block_k;
    p.kernel = kernel;
    return p;
  }
  std::string name() const {
    return "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + "/G" + std::to_string(c.G) + " " +
           std::to_string(c.Tq) + "x" + std::to_string(c.Tk) + " d" + std::to_string(c.D) +
           (c.causal ? " causal" : "") + " bk" + std::to_string(c.block_k);
  }
};

/// OCTET_FLASH_FORWARD = value (null: unset) for the scope of a test.
struct ScopedForwardEnv : test::ScopedEnv {
  explicit ScopedForwardEnv(const char* value) : test::ScopedEnv("OCTET_FLASH_FORWARD", value) {}
};

/// The tests of this file, once per kernel flavor: the environment names it for the CUDA attention.
class FlashForward : public testing::TestWithParam<ForwardKernel> {
 protected:
  void SetUp() override {
    OCTET_REQUIRE_GPU();
    if (GetParam() == ForwardKernel::Wgmma && !device_is_sm90())
      GTEST_SKIP() << "the wgmma forward needs an sm_90 GPU";
    env_ = std::make_unique<ScopedForwardEnv>(cuda::flash::forward_kernel_name(GetParam()));
  }
  void TearDown() override { env_.reset(); }
  std::unique_ptr<ScopedForwardEnv> env_;
};

double rel_l2(const std::vector<float>& x, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = double(x[i]) - double(ref[i]);
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

AttentionConfig fused_config(DeltaMode delta, int64_t block_k = 128) {
  AttentionConfig c;
  c.precision = AttnPrecision::FP8;
  c.form = AttnForm::Flash;
  c.delta = delta;
  c.block_k = block_k;
  return c;
}

AttentionShape make_shape(int64_t h, int64_t g, int64_t tq, int64_t tk, int64_t d, bool causal) {
  AttentionShape s;
  s.batch = 1, s.n_heads = h, s.n_kv_heads = g, s.seq_q = tq, s.seq_k = tk, s.head_dim = d;
  s.causal = causal;
  return s;
}

struct Case {
  int64_t h, g, tq, tk, d;
  bool causal;
  int64_t block_k;
};

TEST_P(FlashForward, MatchesCpuFlashTwinAndTheBackwardFollows) {
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {2, 2, 1, 1, 64, false, 128},       {2, 1, 17, 17, 128, true, 128},
      {2, 2, 127, 127, 64, true, 64},     {2, 2, 129, 129, 128, false, 128},
      {2, 1, 1000, 1000, 128, true, 128}, {2, 2, 1000, 1000, 64, false, 64},
      {4, 2, 64, 256, 128, true, 128},    {4, 4, 64, 256, 64, true, 64},
      {8, 2, 150, 150, 64, true, 128},    {8, 1, 150, 150, 128, false, 64},
      {8, 2, 129, 300, 128, false, 128},  {8, 1, 200, 90, 64, true, 128},
      {2, 2, 1000, 1000, 128, false, 64}, {2, 1, 1000, 1000, 64, true, 128},
      {2, 2, 17, 17, 64, false, 64},      {2, 2, 129, 129, 64, true, 128},
  };
  for (const Case& c : cases) {
    const AttentionShape s = make_shape(c.h, c.g, c.tq, c.tk, c.d, c.causal);
    const auto in = make_attention_inputs(s, AttnInputDist::Normal, 17);
    const auto ref = run_attention_oracle(s, in);
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const AttentionConfig cfg = fused_config(delta, c.block_k);
      const std::string what = std::string(cuda::flash::forward_kernel_name(GetParam())) + " H" +
                               std::to_string(c.h) + "/G" + std::to_string(c.g) + " " + std::to_string(c.tq) +
                               "x" + std::to_string(c.tk) + " d" + std::to_string(c.d) +
                               (c.causal ? " causal" : "") + " bk" + std::to_string(c.block_k) + " " +
                               to_string(delta);
      std::vector<float> o(in.q.size()), lse(size_t(c.h * c.tq)), dq(in.q.size()), dk(in.k.size()),
          dv(in.k.size());
      AttentionSaved saved;
      attention_forward(s, cfg, in.q.data(), in.k.data(), in.v.data(), o.data(), lse.data(), &saved);
      attention_backward(saved, in.d_o.data(), dq.data(), dk.data(), dv.data(), nullptr);
      const GpuRun g = run_gpu(*gpu, s, cfg, in);
      double lse_err = 0;
      for (size_t i = 0; i < lse.size(); ++i)
        lse_err = std::max(lse_err, double(std::fabs(g.lse[i] - lse[i])));
      const double eo = rel_l2(g.o, o), eq = rel_l2(g.dq, dq), ek = rel_l2(g.dk, dk), ev = rel_l2(g.dv, dv);
      std::printf("[flash fwd] %-51s vs twin: O %.1e LSE %.1e dQ %.1e dK %.1e dV %.1e\n", what.c_str(), eo,
                  lse_err, eq, ek, ev);
      EXPECT_LE(eo, test::o_tol_vs_twin(GetParam())) << what;
      EXPECT_LE(lse_err, lse_tol(GetParam())) << what;
      // The stale delta after the wgmma forward: the FP64-oracle rule below is the check
      // (flash_backward_codes.h stale_reads_wgmma_o says why).
      if (!test::stale_reads_wgmma_o(delta, GetParam())) {
        const double tol = test::grad_tol_vs_twin(c.d, 128, c.block_k);  // the backward's flavor
        EXPECT_LE(eq, tol) << what;
        EXPECT_LE(ek, tol) << what;
      }
      EXPECT_LE(ev, test::dv_tol_vs_twin(GetParam())) << what;
      const auto ce = attention_errors(s, in, ref, o.data(), lse.data(), dq.data(), dk.data(), dv.data());
      const auto ge =
          attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
      EXPECT_LE(ge.o_rel_err, 2 * ce.o_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << what;
      if (delta == DeltaMode::Matched) {
        EXPECT_LE(g.stats.row_residual_max, 1e-5) << what;
      }
      if (HasFailure()) return;
    }
  }
}

// V = 1: O = Σ P̃·1 / Σ P̃ = 1 exactly (then BF16), however long and flat the row; exp(S − L)
// would underflow E4M3 in a uniform row over 2^18 keys (docs/delta-matching.md). At both
// head_dims, with Q, K, V scaled per tensor and per (head, 128-token block).
TEST_P(FlashForward, ValueOnesGiveOnesUpTo2Pow18Keys) {
  auto gpu = make_cuda_backend();
  for (int64_t d : {64, 128})
    for (QkvScaling scaling : {QkvScaling::Tensor, QkvScaling::HeadBlock})
      for (int64_t tk : {int64_t(1) << 12, int64_t(1) << 18})
        for (bool causal : {false, true})
          for (bool flat : {true, false}) {
            const AttentionShape s = make_shape(2, 1, 80, tk, d, causal);
            auto in = make_attention_inputs(s, AttnInputDist::Normal, 5);
            std::fill(in.v.begin(), in.v.end(), 1.0f);
            if (flat) std::fill(in.q.begin(), in.q.end(), 0.0f);  // S = 0: a uniform row
            AttentionConfig cfg = fused_config(DeltaMode::Matched);
            cfg.qkv_scaling = scaling;
            auto attn = gpu->make_attention(s, cfg);
            AttnIo io(*gpu, s, DType::F32);
            io.set(*gpu, in);
            { const SavedAttention sv = attn->forward(io.q, io.k, io.v, io.o, io.lse); }
            const auto o = gpu->download_f32(io.o);
            const auto lse = gpu->download_f32(io.lse);
            size_t bad = 0;
            for (float x : o) bad += x != 1.0f;
            EXPECT_EQ(bad, 0u) << "D " << d << (scaling == QkvScaling::HeadBlock ? " head-block" : "")
                               << " Tk " << tk << (causal ? " causal" : "") << (flat ? " flat" : "");
            if (flat) {  // S = 0: LSE = log(visible keys); the last row sees all Tk
              EXPECT_NEAR(lse.back(), std::log(double(tk)), 1e-5 * std::log(double(tk)));
            }
          }
}

// Zero Q, K, V: O = 0 exactly, LSE = log(visible(i)); with Tq > Tk causal, the first Tq − Tk rows
// see no key: O = 0, LSE = −inf, and the backward's gradients are finite with dQ = 0 there.
TEST_P(FlashForward, ZerosAndRowsWithoutKeys) {
  auto gpu = make_cuda_backend();
  for (bool zeros : {true, false}) {
    const AttentionShape s = make_shape(4, 2, 150, 70, 128, true);
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
    if (zeros)
      for (auto* x : {&in.q, &in.k, &in.v}) std::fill(x->begin(), x->end(), 0.0f);
    const GpuRun g = run_gpu(*gpu, s, fused_config(DeltaMode::Matched), in);
    for (int64_t h = 0; h < s.n_heads; ++h)
      for (int64_t i = 0; i < s.seq_q; ++i) {
        const int64_t n = std::max<int64_t>(0, i + s.seq_k - s.seq_q + 1), row = h * s.seq_q + i;
        for (int64_t c = 0; c < s.head_dim; ++c) {
          const size_t at = size_t(row * s.head_dim + c);
          if (zeros || n == 0) {
            ASSERT_EQ(g.o[at], 0.0f) << "row " << i;
          }
          ASSERT_TRUE(std::isfinite(g.o[at]) && std::isfinite(g.dq[at])) << "row " << i;
          if (n == 0) {
            ASSERT_EQ(g.dq[at], 0.0f) << "row " << i;
          }
        }
        const float l = g.lse[size_t(row)];
        if (n == 0) {
          ASSERT_TRUE(std::isinf(l) && l < 0) << "row " << i;
        } else if (zeros) {
          ASSERT_NEAR(l, std::log(double(n)), 1e-6 * (1 + std::log(double(n)))) << "row " << i;
        }
      }
    for (float x : g.dk) ASSERT_TRUE(std::isfinite(x));
    for (float x : g.dv) ASSERT_TRUE(std::isfinite(x));
  }
}

// The kernels directly, on random E4M3 codes (scales 1): the saved row_max is bit for bit the max
// of run_logits's S over the row's visible keys, row_sum = Σ exp(S − m) over them (FP64
// reference, 1e-5 relative: FP32 sums of <= 150 terms, each exponential a few ulp off in the
// forward's FFMA form), LSE = m + log l; S pads are 0.
TEST_P(FlashForward, SavedStatisticsDescribeTheLogitsKernelsS) {
  for (const Dims c : {Dims{2, 4, 2, 100, 150, 128, true, 64}, Dims{1, 2, 1, 129, 129, 64, false, 128},
                       Dims{1, 2, 2, 200, 90, 64, true, 128}}) {
    DirectForward run(c, 1.0f, 1.0f, 3);
    const int64_t Tq_p = run.Tq_p, Tk_p = run.Tk_p;
    test::Dev<float> S(size_t(c.B * c.H * Tq_p * Tk_p));
    OCTET_CUDA_CHECK(cudaMemset(S.p, 0xFF, S.n * sizeof(float)));  // NaN: every element written
    const cuda::flash::ForwardParams p = run.params(GetParam());
    cuda::flash::run_forward(p, nullptr);
    cuda::flash::run_logits(p, S.p, nullptr);
    const auto hs = S.get(), hm = run.m.get(), hl = run.l.get(), hlse = run.lse.get(), ho = run.o.get();
    for (float x : ho) ASSERT_TRUE(std::isfinite(x));
    for (int64_t bh = 0; bh < c.B * c.H; ++bh)
      for (int64_t i = 0; i < Tq_p; ++i) {
        const float* srow = hs.data() + (bh * Tq_p + i) * Tk_p;
        if (i >= c.Tq) {
          for (int64_t j = 0; j < Tk_p; ++j) ASSERT_EQ(srow[j], 0.0f) << "pad row " << i;
          continue;
        }
        for (int64_t j = c.Tk; j < Tk_p; ++j) ASSERT_EQ(srow[j], 0.0f) << "pad key " << j;
        const int64_t n = c.causal ? std::clamp<int64_t>(i + c.Tk - c.Tq + 1, 0, c.Tk) : c.Tk;
        const size_t row = size_t(bh * c.Tq + i);
        float m_ref = -INFINITY;
        for (int64_t j = 0; j < n; ++j) m_ref = std::max(m_ref, srow[j]);
        ASSERT_EQ(hm[row], m_ref) << "head " << bh << " row " << i;
        double l_ref = 0;
        for (int64_t j = 0; j < n; ++j) l_ref += std::exp(double(srow[j]) - double(m_ref));
        ASSERT_NEAR(hl[row], l_ref, 1e-5 * l_ref) << "head " << bh << " row " << i;
        if (n == 0) {
          ASSERT_TRUE(std::isinf(hlse[row]) && hlse[row] < 0);
        } else {
          ASSERT_NEAR(hlse[row], double(m_ref) + std::log(l_ref), 1e-5 * (1 + std::fabs(m_ref)));
        }
      }
  }
}

// S from run_logits against the exact sum of the codes' products (FP64): |S − S_exact| <= kSAccRel ·
// τ·sq·sk·Σ_d |q̂_d·k̂_d| + 2^-22·|S_exact| in every real (row, key), both flavors — the bound the
// FP8 tensor core's accumulator keeps (the forward's m, l and LSE describe this S: the statistics
// test above; the backward's recomputed S obeys the same bound, so its P rows sum to 1 within
// exp(±2·bound)).
TEST_P(FlashForward, LogitsWithinTheAccumulatorBound) {
  for (const Dims c : {Dims{1, 2, 1, 200, 300, 128, false, 128}, Dims{1, 2, 2, 129, 150, 64, true, 64}}) {
    for (const float sigma : {1.0f, 8.0f}) {
      DirectForward run(c, sigma, 1.0f / sigma, 21);
      const int64_t Tq_p = run.Tq_p, Tk_p = run.Tk_p;
      test::Dev<float> S(size_t(c.B * c.H * Tq_p * Tk_p));
      cuda::flash::run_logits(run.params(GetParam()), S.p, nullptr);
      const std::vector<float> hs = S.get();
      const std::vector<uint8_t> hq = run.q.get(), hk = run.k.get();
      const double scale = (1.0 / std::sqrt(double(c.D))) / (double(sigma) * sigma);  // τ·sq·sk
      double worst = 0;  // max |ΔS| / Σ|terms| seen
      for (int64_t bh = 0; bh < c.B * c.H; ++bh) {
        const int64_t bg = bh / c.H * c.G + bh % c.H / (c.H / c.G);
        for (int64_t i = 0; i < c.Tq; ++i)
          for (int64_t j = 0; j < c.Tk; ++j) {
            double sum = 0, mag = 0;
            for (int64_t d = 0; d < c.D; ++d) {
              const double x = fp8_decode(hq[size_t((bh * Tq_p + i) * c.D + d)], Format::E4M3) *
                               fp8_decode(hk[size_t((bg * Tk_p + j) * c.D + d)], Format::E4M3);
              sum += x;
              mag += std::fabs(x);
            }
            const double err = std::fabs(double(hs[size_t((bh * Tq_p + i) * Tk_p + j)]) - scale * sum);
            if (mag > 0) worst = std::max(worst, err / (scale * mag));
            ASSERT_LE(err, kSAccRel * scale * mag + std::ldexp(std::fabs(scale * sum), -22))
                << run.name() << " sigma " << sigma << " head " << bh << " row " << i << " key " << j;
          }
      }
      std::printf("[flash fwd] %s logits %-36s sigma %g: max |dS| / sum|terms| %.2e\n",
                  cuda::flash::forward_kernel_name(GetParam()), run.name().c_str(), sigma, worst);
    }
  }
}

// The same call twice gives the same bits: O, LSE, m, l (the forward has no atomics and a fixed
// order of every sum).
TEST_P(FlashForward, SameBitsRunToRun) {
  for (const Dims c : {Dims{2, 8, 2, 1000, 1000, 128, true, 128}, Dims{1, 4, 4, 300, 517, 64, false, 64}}) {
    DirectForward run(c, 4.0f, 0.25f, 5);
    const cuda::flash::ForwardParams p = run.params(GetParam());
    cuda::flash::run_forward(p, nullptr);
    const auto o0 = run.o.get(), lse0 = run.lse.get(), m0 = run.m.get(), l0 = run.l.get();
    run.poison_outputs();
    cuda::flash::run_forward(p, nullptr);
    EXPECT_TRUE(run.o.get() == o0 && run.lse.get() == lse0 && run.m.get() == m0 && run.l.get() == l0)
        << run.name();
  }
}

// O written as BF16 by the kernel (ForwardParams::o_bf16, what a BF16 caller gets without a
// conversion pass) holds exactly the BF16 bits of the values the F32 output holds (both are
// BF16-rounded in the epilogue); LSE, m, l are the same bits; giving both outputs or none is an
// octet::Error.
TEST_P(FlashForward, BF16OutputIsTheF32OutputsBits) {
  for (const Dims c : {Dims{2, 4, 2, 100, 150, 128, true, 64}, Dims{1, 2, 1, 129, 129, 64, false, 128}}) {
    DirectForward run(c, 2.0f, 0.5f, 7);
    cuda::flash::ForwardParams p = run.params(GetParam());
    cuda::flash::run_forward(p, nullptr);
    const auto o32 = run.o.get(), lse0 = run.lse.get(), m0 = run.m.get(), l0 = run.l.get();
    test::Dev<uint16_t> o16(o32.size());
    OCTET_CUDA_CHECK(cudaMemset(o16.p, 0xFF, o16.n * sizeof(uint16_t)));
    run.poison_outputs();
    p.o = nullptr;
    p.o_bf16 = o16.p;
    cuda::flash::run_forward(p, nullptr);
    const auto ob = o16.get();
    for (size_t i = 0; i < o32.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &o32[i], 4);
      ASSERT_EQ(ob[i], uint16_t(bits >> 16)) << run.name() << " element " << i;
      ASSERT_EQ(bits & 0xFFFFu, 0u) << "the F32 output holds BF16 values";
    }
    EXPECT_EQ(run.lse.get(), lse0);
    EXPECT_EQ(run.m.get(), m0);
    EXPECT_EQ(run.l.get(), l0);
    p.o = run.o.p;  // both outputs: refused
    EXPECT_THROW(cuda::flash::run_forward(p, nullptr), Error);
    p.o = nullptr, p.o_bf16 = nullptr;  // none: refused
    EXPECT_THROW(cuda::flash::run_forward(p, nullptr), Error);
  }
}

// O where the kernel's epilogue cannot store pairs (a tensor one element into its buffer: an F32
// O 4- but not 8-byte aligned, a BF16 O 2- but not 4-byte aligned) is written through FP32
// scratch and one pass: the same bits as an aligned O, through the attention a user calls. The
// element before the tensor and after it keep their poison (nothing outside O is written).
TEST_P(FlashForward, OutputAtAnOddElementOffsetIsTheAlignedOutputsBits) {
  auto gpu = make_cuda_backend();
  const AttentionShape s = make_shape(4, 2, 130, 130, 64, true);
  const AttentionInputs in = make_attention_inputs(s, AttnInputDist::Normal, 5);
  for (DType act : {DType::F32, DType::BF16}) {
    const Shape qs = s.q_shape();
    const int64_t n = qs.numel();
    Buffer q = gpu->alloc(act, qs), k = gpu->alloc(act, s.kv_shape()), v = gpu->alloc(act, s.kv_shape());
    test::upload_values(*gpu, q.tensor(), in.q);
    test::upload_values(*gpu, k.tensor(), in.k);
    test::upload_values(*gpu, v.tensor(), in.v);
    Buffer lse = gpu->alloc(DType::F32, {s.batch, s.n_heads, s.seq_q});
    Buffer aligned = gpu->alloc(act, qs), wide = gpu->alloc(act, {n + 2});
    const size_t es = dtype_size(act);
    std::vector<uint8_t> poison(size_t(n + 2) * es, 0x7F);
    gpu->upload(wide.tensor(), poison.data());
    const Tensor odd(static_cast<uint8_t*>(wide.tensor().data) + es, act, qs);
    auto attn = gpu->make_attention(s, fused_config(DeltaMode::Matched));
    for (const Tensor* o : {&aligned.tensor(), &odd})
      (void)attn->forward(q.tensor(), k.tensor(), v.tensor(), *o, lse.tensor());
    gpu->synchronize();
    std::vector<uint8_t> a(size_t(n) * es), w(size_t(n + 2) * es);
    gpu->download(a.data(), aligned.tensor());
    gpu->download(w.data(), wide.tensor());
    const std::string at = to_string(act);
    EXPECT_EQ(std::vector<uint8_t>(w.begin() + long(es), w.end() - long(es)), a) << at;
    for (size_t b = 0; b < es; ++b) {
      EXPECT_EQ(w[b], 0x7F) << at << ": the element before O was written";
      EXPECT_EQ(w[w.size() - 1 - b], 0x7F) << at << ": the element after O was written";
    }
  }
}

TEST_P(FlashForward, RefusesUnsupportedHeadDimAndKeyTile) {
  auto gpu = make_cuda_backend();
  for (int64_t d : {16, 32, 96, 256}) {
    try {
      gpu->make_attention(make_shape(2, 2, 16, 16, d, false), fused_config(DeltaMode::Matched));
      ADD_FAILURE() << "head_dim " << d << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("64 or 128"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(gpu->make_attention(make_shape(2, 2, 16, 16, 64, false), fused_config(DeltaMode::Matched, 96)),
               Error);
  // BF16 in form flash is no longer refused: it runs cuDNN's fused SDPA
  // (tests/cuda/attention/cudnn/cudnn_sdpa_test.cpp).
}

// The two flavors on the same E4M3 codes (direct entry, ForwardParams::kernel): O to o_tol_vs_twin(wgmma)
// relative L2 (the FP8 tile sums of P̃V̂), LSE and m to kLseTol (S may differ at FP32 rounding
// level: the tensor cores' sums over head_dim), l to 1e-5 relative; every block_k and head_dim,
// causal with Tq < Tk and Tq > Tk (rows without keys: both LSE −inf and l 0).
TEST(FlashForwardFlavors, FlavorsAgree) {
  OCTET_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma forward needs an sm_90 GPU";
  for (const Dims c : {Dims{2, 8, 2, 1000, 1000, 128, false, 128}, Dims{1, 8, 1, 333, 1000, 128, true, 64},
                       Dims{2, 4, 4, 517, 129, 64, true, 128}, Dims{1, 4, 2, 1, 77, 64, false, 64},
                       Dims{1, 2, 1, 4096, 4096, 128, true, 128}}) {
    DirectForward run(c, 4.0f, 0.25f, 11);
    const size_t nr = size_t(c.B * c.H * c.Tq);
    cuda::flash::run_forward(run.params(ForwardKernel::MmaSync), nullptr);
    const auto o0 = run.o.get(), lse0 = run.lse.get(), m0 = run.m.get(), l0 = run.l.get();
    run.poison_outputs();
    cuda::flash::run_forward(run.params(ForwardKernel::Wgmma), nullptr);
    const auto o1 = run.o.get(), lse1 = run.lse.get(), m1 = run.m.get(), l1 = run.l.get();
    const std::string what = run.name();
    double lse_err = 0, m_err = 0, l_err = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < nr; ++i) {
      ASSERT_FALSE(std::isnan(lse1[i]) || std::isnan(m1[i]) || std::isnan(l1[i]))
          << what << " row " << i << " not written";
      if (std::isinf(lse0[i]) || std::isinf(lse1[i])) {  // a row without keys: both −inf, l = 0
        EXPECT_TRUE(lse0[i] == lse1[i] && l0[i] == 0.0f && l1[i] == 0.0f) << what << " row " << i;
        continue;
      }
      lse_err = std::max(lse_err, double(std::fabs(lse0[i] - lse1[i])));
      m_err = std::max(m_err, double(std::fabs(m0[i] - m1[i])));
      l_err = std::max(l_err, std::fabs(double(l0[i]) - double(l1[i])) / double(l0[i]));
    }
    for (float x : o1) nonfinite += !std::isfinite(x);
    const double eo = rel_l2(o1, o0);
    std::printf("[flash fwd] wgmma vs mma_sync %-36s O %.1e LSE %.1e m %.1e l %.1e\n", what.c_str(), eo,
                lse_err, m_err, l_err);
    EXPECT_EQ(nonfinite, 0u) << what;
    EXPECT_LE(eo, test::o_tol_vs_twin(ForwardKernel::Wgmma)) << what;
    EXPECT_LE(lse_err, kLseTolWgmma) << what;
    EXPECT_LE(m_err, kLseTolWgmma) << what;
    EXPECT_LE(l_err, kLTolWgmma) << what;
  }
}

// The choice of flavor: OCTET_FLASH_FORWARD names one, an explicit ForwardParams::kernel wins, a
// bad name is an octet::Error naming the accepted values.
TEST(FlashForwardFlavors, EnvironmentChoosesTheKernel) {
  OCTET_REQUIRE_GPU();
  {
    ScopedForwardEnv env("mma_sync");
    EXPECT_EQ(cuda::flash::select_forward_kernel(), ForwardKernel::MmaSync);
    if (device_is_sm90()) {
      EXPECT_EQ(cuda::flash::select_forward_kernel(ForwardKernel::Wgmma), ForwardKernel::Wgmma);
    }
  }
  {
    ScopedForwardEnv env("wgmma");
    if (device_is_sm90()) {
      EXPECT_EQ(cuda::flash::select_forward_kernel(), ForwardKernel::Wgmma);
    } else {
      EXPECT_THROW(cuda::flash::select_forward_kernel(), Error);
    }
  }
  {
    ScopedForwardEnv env("tensor-cores");
    try {
      cuda::flash::select_forward_kernel();
      ADD_FAILURE() << "OCTET_FLASH_FORWARD=tensor-cores accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("mma_sync or wgmma"), std::string::npos) << e.what();
    }
  }
  ScopedForwardEnv env(nullptr);
  EXPECT_EQ(cuda::flash::select_forward_kernel(),
            device_is_sm90() ? ForwardKernel::Wgmma : ForwardKernel::MmaSync);
}

// Part of the exponentials on the FMA units (ForwardParams::exp2_poly 1..3, flash_exp2.h) against
// all on the SFU (0), the wgmma kernel on the same codes: m bit for bit (the max comes before the
// exponentials), l within 1e-5 relative (each term within exp2_poly's 3e-6), the LSE within 1e-5,
// O within 1e-3 relative L2 (a P̃ code changes only where a value lies within 3e-6 of a rounding
// boundary), and the same bits on a second run. OCTET_FLASH_EXP2_POLY chooses the default; a
// bad value is an octet::Error.
TEST(FlashForwardFlavors, Exp2PolyAgreesWithTheSfu) {
  OCTET_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma forward needs an sm_90 GPU";
  for (const Dims c : {Dims{2, 8, 2, 1000, 1000, 128, false, 128}, Dims{1, 8, 1, 333, 1000, 128, true, 64},
                       Dims{2, 4, 4, 517, 129, 64, true, 128}, Dims{1, 2, 1, 4096, 4096, 128, true, 128}}) {
    DirectForward run(c, 4.0f, 0.25f, 12);
    const size_t nr = size_t(c.B * c.H * c.Tq);
    cuda::flash::ForwardParams p = run.params(ForwardKernel::Wgmma);
    p.exp2_poly = 0;
    cuda::flash::run_forward(p, nullptr);
    const auto o0 = run.o.get(), lse0 = run.lse.get(), m0 = run.m.get(), l0 = run.l.get();
    for (int poly = 1; poly <= 3; ++poly) {
      p.exp2_poly = poly;
      run.poison_outputs();
      cuda::flash::run_forward(p, nullptr);
      const auto o1 = run.o.get(), lse1 = run.lse.get(), m1 = run.m.get(), l1 = run.l.get();
      const std::string what = run.name() + " exp2_poly " + std::to_string(poly);
      double lse_err = 0, l_err = 0;
      for (size_t i = 0; i < nr; ++i) {
        ASSERT_EQ(m0[i], m1[i]) << what << " row " << i;
        if (std::isinf(lse0[i])) {  // a row without keys
          EXPECT_TRUE(lse0[i] == lse1[i] && l1[i] == 0.0f) << what << " row " << i;
          continue;
        }
        lse_err = std::max(lse_err, double(std::fabs(lse0[i] - lse1[i])));
        l_err = std::max(l_err, std::fabs(double(l0[i]) - double(l1[i])) / double(l0[i]));
      }
      const double eo = rel_l2(o1, o0);
      std::printf("[flash fwd] exp2_poly %d vs 0 %-36s O %.1e LSE %.1e l %.1e\n", poly, run.name().c_str(),
                  eo, lse_err, l_err);
      EXPECT_LE(l_err, 1e-5) << what;
      EXPECT_GT(l_err, 0.0) << what << ": l is the SFU's bit for bit: is exp2_poly running?";
      EXPECT_LE(lse_err, 1e-5) << what;
      EXPECT_LE(eo, 1e-3) << what;
      run.poison_outputs();
      cuda::flash::run_forward(p, nullptr);
      EXPECT_TRUE(run.o.get() == o1 && run.lse.get() == lse1 && run.l.get() == l1)
          << what << ": not deterministic";
    }
  }
  {
    test::ScopedEnv env("OCTET_FLASH_EXP2_POLY", "2");
    EXPECT_EQ(cuda::flash::forward_exp2_poly(), 2);
  }
  {
    test::ScopedEnv env("OCTET_FLASH_EXP2_POLY", "4");
    try {
      (void)cuda::flash::forward_exp2_poly();
      ADD_FAILURE() << "OCTET_FLASH_EXP2_POLY=4 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("0, 1, 2 or 3"), std::string::npos) << e.what();
    }
  }
  test::ScopedEnv env("OCTET_FLASH_EXP2_POLY", nullptr);
  EXPECT_EQ(cuda::flash::forward_exp2_poly(), 0);
}

// `variant` of the forward gives `base`'s O, LSE, m and l bit for bit, on each of three runs (a race
// need not show on one), outputs poisoned before each. False after the first failure.
bool same_bits_each_run(DirectForward& run, const cuda::flash::ForwardParams& base,
                        const cuda::flash::ForwardParams& variant, const std::string& what) {
  cuda::flash::run_forward(base, nullptr);
  const auto o0 = run.o.get(), lse0 = run.lse.get(), m0 = run.m.get(), l0 = run.l.get();
  for (int rep = 0; rep < 3; ++rep) {
    run.poison_outputs();
    cuda::flash::run_forward(variant, nullptr);
    EXPECT_TRUE(run.o.get() == o0) << what << ": O, run " << rep;
    EXPECT_TRUE(run.lse.get() == lse0 && run.m.get() == m0 && run.l.get() == l0)
        << what << ": statistics, run " << rep;
    if (testing::Test::HasFailure()) return false;
  }
  return true;
}

// An on/off variable of the wgmma forward: 1 turns it on, 0 off, unset gives `unset` (the
// default), and another value ("yes", "on") is an octet::Error that says "0 or 1".
void expect_env_switch(const char* name, bool (*read)(), bool unset) {
  {
    test::ScopedEnv env(name, "1");
    EXPECT_TRUE(read()) << name << "=1";
  }
  {
    test::ScopedEnv env(name, "0");
    EXPECT_FALSE(read()) << name << "=0";
  }
  for (const char* bad : {"yes", "on"}) {
    test::ScopedEnv env(name, bad);
    try {
      (void)read();
      ADD_FAILURE() << name << "=" << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("0 or 1"), std::string::npos) << e.what();
    }
  }
  test::ScopedEnv env(name, nullptr);
  EXPECT_EQ(read(), unset) << name << " unset";
}

// The persistent grid (ForwardParams::persistent = 1: one CTA per SM walking the (query block,
// head) items) computes each item exactly as its own CTA does: O, LSE, m and l bit for bit equal
// to the grid of one CTA per item — with more items than SMs (every CTA walks several, the Q̂ tile
// and the K̂/V̂ᵀ ring reused across items), fewer, causal with rows that see no key, GQA, both
// head_dims and block_ks, and with exp2_poly. OCTET_FLASH_PERSISTENT chooses the default; a bad
// value is an octet::Error.
TEST(FlashForwardFlavors, PersistentGridGivesTheSameBits) {
  OCTET_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma forward needs an sm_90 GPU";
  // {dims, persistent_ctas (0: one per SM)}: on a 132-SM H200 the first four give CTAs several items
  // (causal and not, rows without keys and a partial last query block inside a walk, block_k 64);
  // the capped grids make one, two or three CTAs walk everything (both snake directions, every
  // ring and q_empty phase through one CTA).
  struct Case {
    Dims c;
    int ctas;
  };
  for (const Case& k :
       {Case{{2, 16, 4, 4096, 4096, 128, true, 128}, 0}, Case{{4, 12, 12, 1024, 1024, 64, true, 128}, 0},
        Case{{4, 32, 8, 2000, 300, 128, true, 64}, 0}, Case{{8, 16, 16, 1000, 1000, 64, false, 64}, 0},
        Case{{2, 8, 2, 1000, 1000, 128, false, 64}, 0}, Case{{1, 8, 1, 333, 1000, 128, true, 128}, 0},
        Case{{2, 4, 4, 517, 129, 64, true, 64}, 0}, Case{{1, 2, 1, 1, 77, 64, false, 128}, 0},
        Case{{2, 4, 2, 517, 300, 128, true, 64}, 1}, Case{{1, 8, 2, 700, 700, 64, false, 128}, 2},
        Case{{2, 4, 4, 333, 1000, 128, true, 128}, 3}}) {
    const Dims& c = k.c;
    for (int poly : {0, 2}) {
      DirectForward run(c, 4.0f, 0.25f, 13);
      cuda::flash::ForwardParams p = run.params(ForwardKernel::Wgmma);
      p.exp2_poly = poly;
      p.persistent = 0;
      cuda::flash::ForwardParams variant = p;
      variant.persistent = 1;
      variant.persistent_ctas = k.ctas;
      if (!same_bits_each_run(
              run, p, variant,
              run.name() + " exp2_poly " + std::to_string(poly) + " ctas " + std::to_string(k.ctas)))
        return;
    }
  }
  expect_env_switch("OCTET_FLASH_PERSISTENT", cuda::flash::forward_persistent, true);  // on by default
}

// The consumers' ping-pong (ForwardParams::pingpong = 1: named barriers hand the GEMM turn from
// one consumer warpgroup to the other) issues the same instructions in another order: O, LSE, m
// and l bit for bit equal to no ping-pong, three runs each — causal (items of different tile
// counts, rows without keys), GQA, both head_dims and block_ks, and on the persistent grid capped
// at 1 and 2 CTAs, where the turns run on across every item of a CTA (a lost or extra hand-over
// would hang or reorder there). OCTET_FLASH_PINGPONG chooses the default; a bad value is an
// octet::Error.
TEST(FlashForwardFlavors, PingPongGivesTheSameBits) {
  OCTET_REQUIRE_GPU();
  if (!device_is_sm90()) GTEST_SKIP() << "the wgmma forward needs an sm_90 GPU";
  struct Case {
    Dims c;
    int persistent, ctas;
  };
  for (const Case& k :
       {Case{{2, 16, 4, 4096, 4096, 128, true, 128}, 0, 0},
        Case{{4, 12, 12, 1024, 1024, 64, true, 128}, 0, 0}, Case{{4, 32, 8, 2000, 300, 128, true, 64}, 0, 0},
        Case{{2, 8, 2, 1000, 1000, 128, false, 64}, 0, 0}, Case{{1, 2, 1, 1, 77, 64, false, 128}, 0, 0},
        Case{{2, 4, 2, 517, 300, 128, true, 64}, 1, 1}, Case{{2, 4, 4, 333, 1000, 128, true, 128}, 1, 2},
        Case{{2, 16, 4, 2048, 2048, 64, true, 128}, 1, 0}}) {
    const Dims& c = k.c;
    DirectForward run(c, 4.0f, 0.25f, 17);
    cuda::flash::ForwardParams p = run.params(ForwardKernel::Wgmma);
    p.persistent = k.persistent;
    p.persistent_ctas = k.ctas;
    p.pingpong = 0;
    cuda::flash::ForwardParams variant = p;
    variant.pingpong = 1;
    if (!same_bits_each_run(
            run, p, variant,
            run.name() + " persistent " + std::to_string(k.persistent) + " ctas " + std::to_string(k.ctas)))
      return;
  }
  expect_env_switch("OCTET_FLASH_PINGPONG", cuda::flash::forward_pingpong, false);
}

// The work order (ForwardParams::head_group: heads taken N at a time, 0 all in one group) moves no
// bit: O, LSE, m and l (poisoned before each run) under groups 1, 3, 5 and 100 equal group 0's, for
// both kernels and, for wgmma, one CTA per item and the persistent grid (capped at 3 CTAs: each
// walks many items, causal ones too) — causal with rows that see no key, GQA, both head_dims,
// partial last groups (B·H = 32, 7 and 12 heads in groups of 5).
TEST(FlashForwardFlavors, HeadGroupMovesNoBit) {
  OCTET_REQUIRE_GPU();
  struct Case {
    Dims c;
    ForwardKernel kernel;
    int persistent, ctas;
  };
  const std::vector<Case> cases = {{{2, 16, 4, 1000, 1000, 128, true, 128}, ForwardKernel::MmaSync, 0, 0},
                                   {{2, 16, 4, 1000, 1000, 128, true, 128}, ForwardKernel::Wgmma, 0, 0},
                                   {{3, 8, 8, 517, 300, 64, true, 128}, ForwardKernel::Wgmma, 1, 0},
                                   {{1, 7, 7, 1000, 1000, 64, true, 128}, ForwardKernel::Wgmma, 1, 3},
                                   {{2, 6, 3, 333, 700, 128, false, 128}, ForwardKernel::Wgmma, 1, 3}};
  for (const Case& k : cases) {
    if (k.kernel == ForwardKernel::Wgmma && !device_is_sm90()) continue;
    DirectForward run(k.c, 4.0f, 0.25f, 19);
    cuda::flash::ForwardParams p = run.params(k.kernel);
    p.persistent = k.persistent;
    p.persistent_ctas = k.ctas;
    p.head_group = 0;
    for (int group : {1, 3, 5, 100}) {
      cuda::flash::ForwardParams variant = p;
      variant.head_group = group;
      if (!same_bits_each_run(run, p, variant,
                              run.name() + " head_group " + std::to_string(group) + " persistent " +
                                  std::to_string(k.persistent) + " ctas " + std::to_string(k.ctas)))
        return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, FlashForward, testing::Values(ForwardKernel::MmaSync, ForwardKernel::Wgmma),
                         [](const testing::TestParamInfo<ForwardKernel>& info) {
                           return std::string(info.param == ForwardKernel::Wgmma ? "wgmma" : "mma_sync");
                         });

}  // namespace
}  // namespace octet
