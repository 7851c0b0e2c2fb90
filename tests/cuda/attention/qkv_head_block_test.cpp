// qkv_head_block_test.cpp — Q, K, V scaled per (batch, head, 128-token block) (QkvScaling::HeadBlock)
// on the flash FP8 attention: the pack's block amaxes (src/cuda/attention/glue/glue.cu) and the kernels'
// per-tile scales (src/cuda/attention/flash/flash_qkv_scales.cuh), both flavors of both kernels.
// Right values: the CPU flash twin with the same blocks (src/cpu/attention_quant.cpp round_qkv)
// within the flash kernels' tolerances (flash_backward_codes.h, flash_forward_test.cpp); the FA3
// rule against the FP64 oracle (error <= 2 x the twin's + 1e-3); matched residual <= 1e-6 and stale
// >> matched; an identity: when every block's amax is the tensor's, the block scales equal the
// tensor scale, so O, LSE and dV are bitwise per-tensor scaling's and dQ, dK (scaled per tile
// instead of once) agree to FP32 rounding; and the reason for the option: a block 2^-16 below the
// rest, which one scale per tensor flushes to FP8's subnormals, keeps FP8's relative precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/attention/flash/flash.h"
#include "cuda/cuda_test_util.h"
#include "cuda/attention/flash/flash_backward_codes.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"

namespace octet {
namespace {

using test::fused_config;
using test::rel_l2;

AttentionConfig block_config(DeltaMode delta, QkvScaling q = QkvScaling::HeadBlock) {
  AttentionConfig c = fused_config(delta);
  c.qkv_scaling = q;
  return c;
}

/// x [B, heads, T, D] with token t of every head multiplied by factor(t / 128).
template <class F>
void scale_blocks(std::vector<float>& x, int64_t T, int64_t D, F&& factor) {
  for (size_t i = 0; i < x.size(); ++i) x[i] *= factor(int64_t(i) / D % T / kQkvScaleBlock);
}

/// Q, K and V of `in` (shape s) with every block scaled by factor(block index).
template <class F>
void scale_qkv_blocks(AttentionInputs& in, const AttentionShape& s, F&& factor) {
  scale_blocks(in.q, s.seq_q, s.head_dim, factor);
  scale_blocks(in.k, s.seq_k, s.head_dim, factor);
  scale_blocks(in.v, s.seq_k, s.head_dim, factor);
}

/// ‖x − ref‖ / ‖ref‖ over rows [r0, r1) of every head of [heads, T, D] tensors (B = 1).
double rows_rel_err(const std::vector<float>& x, const std::vector<double>& ref, int64_t heads, int64_t T,
                    int64_t D, int64_t r0, int64_t r1) {
  double num = 0, den = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = (h * T + r0) * D; i < (h * T + r1) * D; ++i) {
      num += (x[i] - ref[i]) * (x[i] - ref[i]);
      den += ref[i] * ref[i];
    }
  return std::sqrt(num / den);
}

struct Case {
  int64_t h, g, tq, tk;
  bool causal;
};

/// The mma.sync backward (forced) on head-block inputs after the current forward flavor (named
/// `forward` in the messages), against the CPU twin on tiles of 64 and 128.
void check_mma_sync_backward(int64_t D, const char* forward) {
  const test::ScopedEnv bwd("OCTET_FLASH_BACKWARD", "mma_sync");
  auto gpu = make_cuda_backend();
  struct Tiles {
    Case c;
    int64_t bq, bk;
  };
  const Tiles cases[] = {{{2, 1, 300, 300, true}, 128, 128},
                         {{2, 1, 300, 300, true}, 64, 64},
                         {{4, 2, 129, 257, false}, 128, 64},
                         {{4, 2, 200, 130, true}, 64, 128}};
  for (const Tiles& tc : cases) {
    const Case& c = tc.c;
    const AttentionShape s = test::make_shape(2, c.h, c.g, c.tq, c.tk, D, c.causal);
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 41);
    scale_qkv_blocks(in, s, [](int64_t blk) { return std::ldexp(1.0f, blk % 2 ? -5 : 0); });
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      AttentionConfig cfg = fused_config(delta, tc.bq, tc.bk);
      cfg.qkv_scaling = QkvScaling::HeadBlock;
      const std::string what = std::string(forward) + " fwd D" + std::to_string(D) + " " +
                               std::to_string(c.tq) + "x" + std::to_string(c.tk) + " tiles " +
                               std::to_string(tc.bq) + "x" + std::to_string(tc.bk) + " " + to_string(delta);
      const test::RunResult cpu = test::run_attention(s, cfg, in);
      const GpuRun g = run_gpu(*gpu, s, cfg, in);
      const double eo = rel_l2(g.o, cpu.o), eq = rel_l2(g.dq, cpu.dq), ek = rel_l2(g.dk, cpu.dk),
                   ev = rel_l2(g.dv, cpu.dv);
      std::printf(
          "[head-block mma.sync bwd] %-44s vs twin: O %.1e dQ %.1e dK %.1e dV %.1e | "
          "residual %.1e\n",
          what.c_str(), eo, eq, ek, ev, g.stats.row_residual_max);
      EXPECT_LE(eo, test::o_tol_vs_twin()) << what;
      if (!test::stale_reads_wgmma_o(delta)) {
        EXPECT_LE(eq, test::mma_sync_grad_tol_vs_twin()) << what;
        EXPECT_LE(ek, test::mma_sync_grad_tol_vs_twin()) << what;
      }
      EXPECT_LE(ev, test::dv_tol_vs_twin()) << what;
      if (delta == DeltaMode::Matched) {
        EXPECT_LE(g.stats.row_residual_max, 1e-6) << what;
      }
    }
  }
}

class QkvHeadBlock : public ::testing::TestWithParam<int64_t> {};

// Blocks of different sizes against the twin and the oracle.
TEST_P(QkvHeadBlock, MatchesCpuFlashTwinAndOracle) {
  OCTET_REQUIRE_GPU();
  const int64_t D = GetParam();
  auto gpu = make_cuda_backend();
  const Case cases[] = {
      {2, 2, 1, 1, false},   {2, 1, 17, 17, true},    {2, 2, 129, 129, false}, {2, 1, 1000, 1000, true},
      {4, 2, 64, 256, true}, {8, 2, 129, 300, false}, {8, 1, 300, 129, true},
  };
  // Q and K blocks × 1, 2^-6, 2, 2^-3 (logits stay O(1): the softmax stays well conditioned);
  // V blocks × 1, 2^-6, 2^5, 2^-3.
  const auto qk_factor = [](int64_t blk) {
    static constexpr int kExp[4] = {0, -6, 1, -3};
    return std::ldexp(1.0f, kExp[blk % 4]);
  };
  const auto v_factor = [](int64_t blk) {
    static constexpr int kExp[4] = {0, -6, 5, -3};
    return std::ldexp(1.0f, kExp[blk % 4]);
  };
  for (const Case& c : cases) {
    const int64_t B = c.tq <= 300 ? 2 : 1;  // batch 2 but for the longest case (the twin's time)
    const AttentionShape s = test::make_shape(B, c.h, c.g, c.tq, c.tk, D, c.causal);
    auto in = make_attention_inputs(s, AttnInputDist::Normal, 31);
    scale_blocks(in.q, c.tq, D, qk_factor);
    scale_blocks(in.k, c.tk, D, qk_factor);
    scale_blocks(in.v, c.tk, D, v_factor);
    const auto ref = run_attention_oracle(s, in);
    double residual[2] = {-1, -1};  // stale, matched
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const AttentionConfig cfg = block_config(delta);
      const std::string what = "D" + std::to_string(D) + " B" + std::to_string(B) + " H" +
                               std::to_string(c.h) + "/G" + std::to_string(c.g) + " " + std::to_string(c.tq) +
                               "x" + std::to_string(c.tk) + (c.causal ? " causal " : " ") + to_string(delta);
      const test::RunResult cpu = test::run_attention(s, cfg, in);
      const GpuRun g = run_gpu(*gpu, s, cfg, in);
      const auto ce = test::errors_of(s, in, ref, cpu);
      const auto ge =
          attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data());
      const double eo = rel_l2(g.o, cpu.o), eq = rel_l2(g.dq, cpu.dq), ek = rel_l2(g.dk, cpu.dk),
                   ev = rel_l2(g.dv, cpu.dv);
      std::printf(
          "[head-block] %-30s vs twin: O %.1e dQ %.1e dK %.1e dV %.1e | vs FP64 gpu/cpu: "
          "O %.2e/%.2e dQ %.2e/%.2e dK %.2e/%.2e | residual %.1e\n",
          what.c_str(), eo, eq, ek, ev, ge.o_rel_err, ce.o_rel_err, ge.dq_rel_err, ce.dq_rel_err,
          ge.dk_rel_err, ce.dk_rel_err, g.stats.row_residual_max);
      EXPECT_LE(eo, test::o_tol_vs_twin()) << what;
      if (!test::stale_reads_wgmma_o(delta)) {
        EXPECT_LE(eq, test::grad_tol_vs_twin(D, 128, 128)) << what;
        EXPECT_LE(ek, test::grad_tol_vs_twin(D, 128, 128)) << what;
      }
      EXPECT_LE(ev, test::dv_tol_vs_twin()) << what;
      EXPECT_LE(ge.o_rel_err, 2 * ce.o_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dq_rel_err, 2 * ce.dq_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dk_rel_err, 2 * ce.dk_rel_err + 1e-3) << what;
      EXPECT_LE(ge.dv_rel_err, 2 * ce.dv_rel_err + 1e-3) << what;
      EXPECT_TRUE(test::all_finite(g.o) && test::all_finite(g.dq) && test::all_finite(g.dk) &&
                  test::all_finite(g.dv))
          << what;
      if (delta == DeltaMode::Matched) {
        EXPECT_LE(g.stats.row_residual_max, 1e-6) << what;
      }
      residual[delta == DeltaMode::Matched] = g.stats.row_residual_max;
    }
    if (c.tk > 1) {
      EXPECT_GT(residual[0], 10 * residual[1]) << "stale must break the zero row sum";
    }
  }
}

// Every block's amax = the tensor's ⇒ the same scales: O, LSE, dV bitwise those of per-tensor
// scaling; dQ and dK to FP32 rounding (their scale is applied per tile, not once at the end).
TEST_P(QkvHeadBlock, EqualBlockAmaxesGivePerTensorResults) {
  OCTET_REQUIRE_GPU();
  const int64_t D = GetParam();
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, 4, 2, 300, 300, D, true);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 7);
  // The first element of every (head, block) is 8: above every N(0, 1) draw here (|x| < 6.5).
  for (auto* x : {&in.q, &in.k, &in.v}) {
    const int64_t heads = int64_t(x->size()) / (s.seq_q * D);  // Tq = Tk here
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t t0 = 0; t0 < s.seq_q; t0 += kQkvScaleBlock) (*x)[size_t((h * s.seq_q + t0) * D)] = 8.0f;
  }
  for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
    const GpuRun t = run_gpu(*gpu, s, block_config(delta, QkvScaling::Tensor), in);
    const GpuRun b = run_gpu(*gpu, s, block_config(delta), in);
    EXPECT_EQ(t.o, b.o) << to_string(delta);
    EXPECT_EQ(t.lse, b.lse) << to_string(delta);
    EXPECT_EQ(t.dv, b.dv) << to_string(delta);
    EXPECT_LE(rel_l2(b.dq, t.dq), 1e-5) << to_string(delta);
    EXPECT_LE(rel_l2(b.dk, t.dk), 1e-5) << to_string(delta);
    EXPECT_GT(rel_l2(b.dq, std::vector<float>(b.dq.size(), 0.0f)), 0.5) << "dQ is not zero";
  }
}

// The same call twice, with F32 and with BF16 activations (the kernels' BF16 O, dK, dV epilogues):
// every output poisoned (NaN bytes) before each run; after the first O, LSE, dQ, dK and dV all
// finite (every element written), after the second O, LSE, dK and dV the same bytes (no atomics
// feed them) and dQ within FP32 atomic order; both delta rules, GQA, causal, ragged lengths.
TEST_P(QkvHeadBlock, SameBitsRunToRun) {
  OCTET_REQUIRE_GPU();
  const int64_t D = GetParam();
  const AttentionShape s = test::make_shape(2, 4, 2, 300, 300, D, true);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 17);
  scale_qkv_blocks(in, s, [](int64_t blk) { return std::ldexp(1.0f, blk % 2 ? -4 : 1); });
  auto gpu = make_cuda_backend();
  static constexpr const char* kNames[5] = {"O", "LSE", "dK", "dV", "dQ"};
  for (DType act : {DType::F32, DType::BF16})
    for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
      const std::string what = to_string(act) + " " + to_string(delta);
      auto attn = gpu->make_attention(s, block_config(delta));
      AttnIo io(*gpu, s, act);
      io.set(*gpu, in);
      Buffer* const outs[5] = {&io.o, &io.lse, &io.dk, &io.dv, &io.dq};
      std::vector<uint8_t> first[4];
      std::vector<float> dq[2];
      for (int r = 0; r < 2; ++r) {
        for (Buffer* b : outs) {
          const std::vector<uint8_t> nan(b->tensor().bytes(), 0xFF);
          gpu->upload(b->tensor(), nan.data());
        }
        {
          const SavedAttention saved = attn->forward(io.q, io.k, io.v, io.o, io.lse);
          attn->backward(saved, io.d_o, io.dq, io.dk, io.dv, io.residual);
        }
        dq[r] = gpu->download_f32(io.dq);
        for (int t = 0; t < 4; ++t) {
          std::vector<uint8_t> now(outs[t]->tensor().bytes());
          gpu->download(now.data(), *outs[t]);
          if (r == 0) {
            for (float x : gpu->download_f32(*outs[t]))
              ASSERT_TRUE(std::isfinite(x)) << what << ": " << kNames[t];
            first[t] = std::move(now);
          } else {
            const auto at = std::mismatch(now.begin(), now.end(), first[t].begin());
            EXPECT_TRUE(at.first == now.end())
                << what << ": " << kNames[t] << " differs at byte " << (at.first - now.begin());
          }
        }
      }
      double norm = 0;
      for (float x : dq[0]) {
        ASSERT_TRUE(std::isfinite(x)) << what << ": dQ";
        norm += double(x) * x;
      }
      EXPECT_GT(norm, 0.0) << what << ": dQ must not be zero";
      EXPECT_LE(rel_l2(dq[1], dq[0]), act == DType::F32 ? 1e-5 : 1e-3) << what << ": dQ";
    }
}

// Causal, 256 tokens: the first 128 queries see only the first 128 keys, whose V (and Q, K) are
// 2^-16 of the rest. One scale per tensor puts that V at ~2^-9 (E4M3's smallest subnormal step):
// the block's O and dQ are lost; one scale per block keeps FP8's relative precision.
TEST_P(QkvHeadBlock, KeepsASmallBlockThatTensorScalingFlushes) {
  OCTET_REQUIRE_GPU();
  const int64_t D = GetParam(), T = 256, H = 2;
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, H, 1, T, T, D, true);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 5);
  const auto small_first = [](int64_t blk) { return blk == 0 ? std::ldexp(1.0f, -16) : 1.0f; };
  scale_qkv_blocks(in, s, small_first);
  const auto ref = run_attention_oracle(s, in);
  double err[2][2];  // [tensor, block][O, dQ] on the first block's rows
  for (QkvScaling q : {QkvScaling::Tensor, QkvScaling::HeadBlock}) {
    const GpuRun g = run_gpu(*gpu, s, block_config(DeltaMode::Matched, q), in);
    const test::RunResult cpu = test::run_attention(s, block_config(DeltaMode::Matched, q), in);
    const int k = q == QkvScaling::HeadBlock;
    err[k][0] = rows_rel_err(g.o, ref.o, H, T, D, 0, kQkvScaleBlock);
    err[k][1] = rows_rel_err(g.dq, ref.dq, H, T, D, 0, kQkvScaleBlock);
    const double cpu_o = rows_rel_err(cpu.o, ref.o, H, T, D, 0, kQkvScaleBlock);
    std::printf("[head-block] D%lld first block, %s scaling: O %.3e (cpu %.3e) dQ %.3e\n", (long long)D,
                k ? "block " : "tensor", err[k][0], cpu_o, err[k][1]);
    EXPECT_LE(err[k][0], 2 * cpu_o + 1e-3) << "the twin's error, on the GPU too";
  }
  EXPECT_GT(err[0][0], 0.3) << "per-tensor FP8 flushes the small block's V";
  EXPECT_LE(err[1][0], 0.1) << "per-block FP8 keeps it";
  EXPECT_GT(err[0][1], 0.3);
  EXPECT_LE(err[1][1], 0.2);
}

// A block of Q, K and V that is all zero (scale_from_amax(0) = 1) between normal ones: the twin's
// results within the flavors' tolerances, all finite, and an identity — a query of the zero block
// has logits 0, so its O is the mean of the V rows it sees.
TEST_P(QkvHeadBlock, ZeroBlockMatchesTheTwin) {
  OCTET_REQUIRE_GPU();
  const int64_t D = GetParam(), T = 300;
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(2, 4, 2, T, T, D, true);
  auto in = make_attention_inputs(s, AttnInputDist::Normal, 9);
  const auto zero_second = [](int64_t blk) { return blk == 1 ? 0.0f : 1.0f; };
  scale_qkv_blocks(in, s, zero_second);
  for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
    const AttentionConfig cfg = block_config(delta);
    const test::RunResult cpu = test::run_attention(s, cfg, in);
    const GpuRun g = run_gpu(*gpu, s, cfg, in);
    const std::string what = "D" + std::to_string(D) + " " + to_string(delta);
    EXPECT_LE(rel_l2(g.o, cpu.o), test::o_tol_vs_twin()) << what;
    if (!test::stale_reads_wgmma_o(delta)) {
      EXPECT_LE(rel_l2(g.dq, cpu.dq), test::grad_tol_vs_twin(D, 128, 128)) << what;
      EXPECT_LE(rel_l2(g.dk, cpu.dk), test::grad_tol_vs_twin(D, 128, 128)) << what;
    }
    EXPECT_LE(rel_l2(g.dv, cpu.dv), test::dv_tol_vs_twin()) << what;
    EXPECT_TRUE(test::all_finite(g.o) && test::all_finite(g.dq) && test::all_finite(g.dk) &&
                test::all_finite(g.dv))
        << what;
    // A zero query row has logits 0: O is the mean of the V rows it sees (row 200 of head 0 sees
    // keys 0..200, whose block-1 rows are 0).
    const int64_t i = 200;
    for (int64_t d = 0; d < D; d += 17) {
      double mean = 0;
      for (int64_t j = 0; j <= i; ++j) mean += in.v[size_t(j * D + d)];
      mean /= double(i + 1);
      EXPECT_NEAR(g.o[size_t(i * D + d)], mean, 0.05 * (std::fabs(mean) + 0.1)) << what << " d " << d;
    }
  }
}

// The mma.sync backward (the kernels of GPUs other than sm_90, and of tiles of 64; forced here)
// after either forward flavor, tiles of 64 and 128: the twin's tolerances of flash_backward_test.cpp
// (flash_backward_codes.h: o_tol_vs_twin, mma_sync_grad_tol_vs_twin, dv_tol_vs_twin — looser after the
// wgmma forward, whose S and O sit on the FP8 accumulator; stale_reads_wgmma_o).
TEST_P(QkvHeadBlock, MmaSyncFlavorsMatchTheTwin) {
  OCTET_REQUIRE_GPU();
  for (const char* forward : {"mma_sync", "wgmma"}) {
    if (std::string(forward) == "wgmma" && !test::device_is_sm90()) continue;
    const test::ScopedEnv fwd("OCTET_FLASH_FORWARD", forward);
    check_mma_sync_backward(GetParam(), forward);
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDim, QkvHeadBlock, ::testing::Values(int64_t(64), int64_t(128)),
                         [](const auto& info) { return "D" + std::to_string(info.param); });

// The deterministic dQ kernel (mma.sync, BackwardParams::deterministic: the kernels directly)
// applies K̂'s block scales per tile as the atomic path does — their dQ agree to FP32 summation
// order — and dK, dV are the same bits in both modes; with all block scales 1 dQ differs (the
// scales are read).
TEST(QkvHeadBlockKernels, DeterministicDqTakesTheBlockScales) {
  OCTET_REQUIRE_GPU();
  const test::BackwardDims dims{1, 4, 2, 300, 300, 64, 64, 64, true};
  test::BackwardCodes bc(dims, Format::E5M2, 3);
  cuda::flash::BackwardParams& p = bc.p;
  p.bwd_kernel = cuda::flash::BackwardKernel::MmaSync;
  p.qkv_head_block = true;
  const size_t nq = size_t(dims.B * dims.H * 3), nk = size_t(dims.B * dims.G * 3);  // ⌈300/128⌉ = 3
  std::vector<float> hq(nq), hk(nk), hv(nk);
  for (size_t i = 0; i < nq; ++i) hq[i] = std::ldexp(1.0f, int(i % 5) - 2);
  for (size_t i = 0; i < nk; ++i) {
    hk[i] = std::ldexp(1.0f, int(i % 3) - 1);
    hv[i] = std::ldexp(1.0f, 1 - int(i % 4));
  }
  test::Dev<float> qs(hq), ks(hk), vs(hv);
  p.q_scale_inv = qs.p, p.k_scale_inv = ks.p, p.v_scale_inv = vs.p;
  std::vector<float> runs[3][3];  // deterministic, atomic, deterministic with scales 1 x (dq, dk, dv)
  for (int r = 0; r < 3; ++r) {
    if (r == 2) {  // one scale per tensor, all 1
      p.qkv_head_block = false;
      p.q_scale_inv = p.k_scale_inv = p.v_scale_inv = bc.scales.p;
    }
    p.deterministic = r != 1;
    cuda::flash::run_delta(p, nullptr);
    cuda::flash::run_backward_main(p, nullptr);
    runs[r][0] = bc.dq.get(), runs[r][1] = bc.dk.get(), runs[r][2] = bc.dv.get();
  }
  const double e = rel_l2(runs[1][0], runs[0][0]);
  std::printf("[head-block] deterministic vs atomic dQ rel L2 %.1e\n", e);
  EXPECT_LE(e, 1e-5);
  EXPECT_EQ(runs[0][1], runs[1][1]) << "dK";
  EXPECT_EQ(runs[0][2], runs[1][2]) << "dV";
  EXPECT_GT(rel_l2(runs[2][0], runs[0][0]), 0.1) << "the block scales must change dQ";
  EXPECT_TRUE(test::all_finite(runs[0][0]));
}

TEST(QkvHeadBlockRefusal, UnfusedFormRefusesIt) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  AttentionShape s;
  s.head_dim = 64;
  AttentionConfig c = block_config(DeltaMode::Matched);
  EXPECT_NO_THROW(gpu->make_attention(s, c));
  c.form = AttnForm::Whole;
  try {
    gpu->make_attention(s, c);
    ADD_FAILURE() << "form whole with head-block scaling must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("form 'flash'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace octet
