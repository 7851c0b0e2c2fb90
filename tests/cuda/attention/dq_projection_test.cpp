// dq_projection_test.cpp — the dQ row-sum projection on the fused FP8 kernels (AttentionConfig::
// dq_projection; src/cuda/attention/flash/flash_bwd_rows.cu, the wgmma backward's dŜ row sums) against
// the FP64 oracle and the CPU flash twin, on the common-key case (tests/attention/dq_projection_test.cpp
// is the CPU's): keys that share a common component ~100x their spread, where rounding dS to FP8
// breaks its zero row sum and dQ = τ dŜK̂ multiplies that error by the component.
// Right values: the FP64 oracle (the projection brings dQ's error within 2x of the error without
// a common component, as on the CPU); the CPU twin with the projection (dQ to the wgmma flavor's
// tolerance); identities: dK and dV do not depend on it (bitwise), and an input without a common
// component moves only within FP8 error. Each with Q, K, V scaled per tensor and per (head,
// 128-token block) (the projection's k̄ then averages values, not codes). A config the fused path
// cannot serve is refused with octet::Error at construction.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "attention/attention_test_util.h"
#include "cuda/attention/attention_gpu_run.h"
#include "cuda/cuda_test_util.h"
#include "cuda/attention/flash/flash_backward_codes.h"
#include "octet/attention.h"
#include "octet/backend.h"
#include "octet/error.h"
#include "octet/names.h"

namespace octet {
namespace {

using test::fused_config;
using test::rel_l2;

/// q: Q, K, V scaled per tensor or per (head, 128-token block) — the projection's k̄ is then a
/// mean of values (each code × its block's 1/sk), dQ's accumulator's units.
AttentionConfig projection_config(DeltaMode delta, bool projection, QkvScaling q = QkvScaling::Tensor) {
  AttentionConfig c = fused_config(delta);  // form flash, FP8, 128 x 128 dS tiles: the wgmma backward
  c.dq_projection = projection;
  c.qkv_scaling = q;
  return c;
}

double dq_error(Backend& gpu, const AttentionShape& s, const AttentionInputs& in, const AttentionOracle& ref,
                DeltaMode delta, bool projection, QkvScaling q) {
  const GpuRun g = run_gpu(gpu, s, projection_config(delta, projection, q), in);
  return attention_errors(s, in, ref, g.o.data(), g.lse.data(), g.dq.data(), g.dk.data(), g.dv.data())
      .dq_rel_err;
}

TEST(CudaDqProjection, RemovesTheCommonKeyComponentsError) {
  OCTET_REQUIRE_SM90();
  auto gpu = make_cuda_backend();
  for (QkvScaling q : {QkvScaling::Tensor, QkvScaling::HeadBlock})
    for (int64_t d : {64, 128}) {
      const AttentionShape s = test::make_shape(1, 2, 2, 192, 192, d, false);
      const AttentionInputs plain = test::common_key_inputs(s, false, 11);
      const AttentionInputs common = test::common_key_inputs(s, true, 11);
      const auto ref_plain = run_attention_oracle(s, plain), ref_common = run_attention_oracle(s, common);
      const double base = dq_error(*gpu, s, plain, ref_plain, DeltaMode::Matched, false, q);
      const double base_on = dq_error(*gpu, s, plain, ref_plain, DeltaMode::Matched, true, q);
      const double off = dq_error(*gpu, s, common, ref_common, DeltaMode::Matched, false, q);
      const double on = dq_error(*gpu, s, common, ref_common, DeltaMode::Matched, true, q);
      const double stale_off = dq_error(*gpu, s, common, ref_common, DeltaMode::Stale, false, q);
      const double stale_on = dq_error(*gpu, s, common, ref_common, DeltaMode::Stale, true, q);
      std::printf(
          "[dq projection] d%lld %s: dQ rel err vs FP64, no common component %.3g "
          "(projection %.3g); common component: matched %.3g, matched + projection %.3g, "
          "stale %.3g, stale + projection %.3g\n",
          (long long)d, enum_name(q).c_str(), base, base_on, off, on, stale_off, stale_on);
      EXPECT_GT(off, 10 * base) << "d" << d << ": the case must show the common component's error";
      EXPECT_LE(on, 2 * base) << "d" << d << ": projection within 2x of the no-common-component error";
      EXPECT_LE(base_on, 1.5 * base) << "d" << d << ": without a common component, FP8 error only";
      EXPECT_LT(stale_on, stale_off) << "d" << d;
    }
}

TEST(CudaDqProjection, MatchesTheCpuTwinAndLeavesDkDvAlone) {
  OCTET_REQUIRE_SM90();
  auto gpu = make_cuda_backend();
  struct Case {
    int64_t h, g, tq, tk, d;
    bool causal;
    int64_t tile;  // the dS scale tile (block_q = block_k): 128 or 64, the two wgmma main kernels
  };
  for (const Case& c : {Case{2, 2, 192, 192, 64, false, 128}, Case{4, 2, 150, 300, 64, true, 128},
                        Case{4, 1, 129, 129, 128, true, 128}, Case{4, 2, 150, 300, 64, true, 64},
                        Case{4, 1, 129, 129, 128, true, 64}}) {
    const AttentionShape s = test::make_shape(1, c.h, c.g, c.tq, c.tk, c.d, c.causal);
    const AttentionInputs in = test::common_key_inputs(s, true, 3);
    for (QkvScaling q : {QkvScaling::Tensor, QkvScaling::HeadBlock})
      for (DeltaMode delta : {DeltaMode::Matched, DeltaMode::Stale}) {
        const std::string what = "H" + std::to_string(c.h) + "/G" + std::to_string(c.g) + " " +
                                 std::to_string(c.tq) + "x" + std::to_string(c.tk) + " d" +
                                 std::to_string(c.d) + (c.causal ? " causal " : " ") + to_string(delta) +
                                 " " + enum_name(q) + " tile " + std::to_string(c.tile);
        AttentionConfig on = projection_config(delta, true, q), off = projection_config(delta, false, q);
        on.block_q = on.block_k = off.block_q = off.block_k = c.tile;
        const test::RunResult cpu = test::run_attention(s, on, in);
        const GpuRun g_on = run_gpu(*gpu, s, on, in), g_off = run_gpu(*gpu, s, off, in);
        const double eq = rel_l2(g_on.dq, cpu.dq);
        std::printf("[dq projection] %-46s vs twin: dQ %.2e\n", what.c_str(), eq);
        if (!test::stale_reads_wgmma_o(delta)) {  // else the forward's O differs from the twin's
          EXPECT_LE(eq, test::kGradTolTwinWgmma) << what;
        }
        EXPECT_EQ(g_on.dk, g_off.dk) << what << ": dK must not depend on the projection";
        EXPECT_EQ(g_on.dv, g_off.dv) << what << ": dV must not depend on the projection";
        EXPECT_TRUE(test::all_finite(g_on.dq)) << what;
      }
  }
}

TEST(CudaDqProjection, RefusesWhatTheFusedPathCannotServe) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const AttentionShape s = test::make_shape(1, 2, 2, 64, 64, 64, false);
  AttentionConfig whole = test::make_config(AttnPrecision::FP8, AttnForm::Whole, DeltaMode::Matched);
  whole.dq_projection = true;
  try {
    gpu->make_attention(s, whole);
    ADD_FAILURE() << "dq_projection with form whole accepted on CUDA";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dQ row-sum projection"), std::string::npos) << e.what();
  }
  // BF16 in form flash would be cuDNN's SDPA, which has no projection: refused, not dropped
  AttentionConfig bf16 = test::make_config(AttnPrecision::BF16, AttnForm::Flash, DeltaMode::Stale);
  bf16.dq_projection = true;
  EXPECT_THROW(gpu->make_attention(s, bf16), Error);
  AttentionConfig small_tiles = projection_config(DeltaMode::Matched, true);
  small_tiles.block_q = 64;  // 64 x 128 tiles: the mma.sync backward, no row sums
  if (test::device_is_sm90()) {
    EXPECT_THROW(gpu->make_attention(s, small_tiles), Error);
  }
}

}  // namespace
}  // namespace octet
