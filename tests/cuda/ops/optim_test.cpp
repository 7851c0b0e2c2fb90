// The fused optimizer step on the GPU (backend.h adamw_prepare/adamw_apply, src/cuda/ops/optim.cu):
// (1) the Optimizer over a tiny model equals the per-tensor path it replaced on the same GPU bit for
// bit, whole and as a ZeRO-1-like shard, with clipped steps and a NaN-gradient step that the device
// skips and counts (the host reads nothing before the step); (2) one fused step over 1M+ elements
// and 301 decay segments equals the CPU twin: the decisions (norm, clip, skip, t, corrections)
// bitwise, params/moments within 2 ulp (the GPU contracts double mul+add into FMA). Prints the max ulp
// distance per tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "model/model_test_util.h"
#include "octet/adamw_rule.h"
#include "train/optimizer_reference.h"

using namespace octet;

namespace {

// The CPU tests' tiny model widened for the GPU: the CUDA attention's tensor-core GEMMs need a
// head_dim that is a multiple of 16 (the CPU model's is 8) and the FP8 GEMMs inner sizes that are
// multiples of 16 (d_ff 24 is not): head_dim 16, d_ff 64.
ModelConfig gpu_tiny_model() {
  ModelConfig c = test::tiny_model();
  c.d_model = 32;
  c.d_ff = 64;
  return c;
}

TEST(CudaFusedOptimizer, EqualsPerTensorPathBitwiseWithClipAndSkip) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  PrecisionConfig p = test::arm_precision(Arm::FP8Linear);
  p.activations = DType::BF16;
  test::expect_fused_equals_reference(*gpu, gpu_tiny_model(), p, nullptr, 8, 3);
}

TEST(CudaFusedOptimizer, EqualsPerTensorPathBitwiseOnAShard) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const ModelConfig cfg = gpu_tiny_model();
  Model probe(cfg, test::arm_precision(Arm::BF16), *gpu, 2);
  const int64_t n = int64_t(probe.num_params());
  ShardLayout shard;
  shard.pieces = {{0, n / 3, 0}, {n / 2, n, n / 3 + 5}};
  shard.state_size = n / 3 + 5 + (n - n / 2) + 3;
  test::expect_fused_equals_reference(*gpu, cfg, test::arm_precision(Arm::BF16), &shard, 6, 2);
}

int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(int64_t(ia) - int64_t(ib));
}

TEST(CudaFusedOptimizer, OneStepEqualsTheCpuTwin) {
  OCTET_REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  auto cpu = make_cpu_backend();
  const int64_t n = (1 << 20) + 4099;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const size_t un = static_cast<size_t>(n);
  std::vector<float> p(un), g(un), m(un), v(un);
  for (int64_t i = 0; i < n; ++i) {
    p[size_t(i)] = nd(rng), g[size_t(i)] = 0.01f * nd(rng), m[size_t(i)] = 0.001f * nd(rng);
    v[size_t(i)] = 1e-5f * std::fabs(nd(rng));
  }
  std::vector<double> seg;  // 301 segments of uneven length, alternating decay
  for (int k = 1; k <= 301; ++k)
    seg.insert(seg.end(), {k == 301 ? double(n) : double(k * 3481 + (k % 7) * 13), double(k % 2)});
  double norm_sq = 0;
  for (float x : g) norm_sq += double(x) * x;
  std::vector<double> state(kOptStateSlots, 0.0), table;
  state[kOptSteps] = 6;
  for (int t = 1; t <= 8; ++t)
    table.insert(table.end(), {adamw_bias_correction(0.9f, t), adamw_bias_correction(0.95f, t)});
  struct Out {
    std::vector<float> p, m, v;
    std::vector<double> state;
  };
  auto run = [&](Backend& be) {
    auto put = [&](auto& h, DType d, Shape s) {
      Buffer b = be.alloc(d, s);
      be.upload(b, h.data());
      return b;
    };
    Buffer bp = put(p, DType::F32, {n}), bg = put(g, DType::F32, {n}), bm = put(m, DType::F32, {n});
    Buffer bv = put(v, DType::F32, {n}), bs = put(seg, DType::F64, {301, 2}),
           bst = put(state, DType::F64, {kOptStateSlots});
    Buffer bt = put(table, DType::F64, {8, 2}), bn = be.alloc(DType::F64, {1});
    be.upload(bn, &norm_sq);
    be.adamw_prepare(bn, {}, bt, bst, 0.5f);  // norm ≈ 10 > 0.5: clipped
    be.adamw_apply(bp, bg, bm, bv, bs, bst, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f);
    Out o{be.download_f32(bp), be.download_f32(bm), be.download_f32(bv), std::vector<double>(kOptStateSlots)};
    be.download(o.state.data(), bst);
    return o;
  };
  const Out a = run(*cpu), b = run(*gpu);
  for (int s = 0; s < kOptStateSlots; ++s)
    EXPECT_EQ(a.state[size_t(s)], b.state[size_t(s)]) << "state slot " << s;
  EXPECT_LT(a.state[kOptClip], 1.0);
  for (auto [x, y, name] : {std::tuple{&a.p, &b.p, "param"}, {&a.m, &b.m, "m"}, {&a.v, &b.v, "v"}}) {
    int64_t worst = 0, moved = 0;
    for (size_t i = 0; i < x->size(); ++i) {
      worst = std::max(worst, ulps((*x)[i], (*y)[i]));
      moved += (*x)[i] != (name[0] == 'p' ? p[i] : name[0] == 'm' ? m[i] : v[i]);
    }
    std::printf("fused adamw GPU vs CPU, %s: max %lld ulp over %lld elements (%lld changed)\n", name,
                static_cast<long long>(worst), static_cast<long long>(n), static_cast<long long>(moved));
    EXPECT_LE(worst, 2) << name;  // expected 0-1 (one FMA-contracted double rounding); 2 leaves slack
    EXPECT_GT(moved, n / 2) << name << ": the step did not run";
  }
}

}  // namespace
