// ZeRO-1 with gradient buckets (octet/dist.h Zero1, docs/distributed.md §"Gradient buckets") on a model whose
// parameter count is odd, so that with 2 ranks the top bucket is padded: run as one process and by
// ctest under `mpirun -np 2`. Each rank's gradients are known integers (sums exact in FP32), so the
// reduce-scattered shard must hold exactly their sum over the ranks in every piece; an all-gather
// must give every rank every owner's update; gather_to_host must put each state slot back at its
// parameter. For no bucket size, a tiny one and the default.
#include <gtest/gtest.h>

#include <vector>

#include "job.h"
#include "octet/model.h"
#include "octet/train.h"

using namespace octet;
using test::comm;
using test::cpu;

namespace {

ModelConfig odd_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.d_model = 15;  // 3 heads of 5: every parameter count is a multiple of 15, the total odd
  m.n_head = 3;
  m.n_kv_head = 3;
  m.d_ff = 32;
  m.vocab_size = 256;
  m.seq_len = 8;
  m.positions = PositionKind::NoPE;  // RoPE needs an even head_dim
  return m;
}

// The seam (Model::set_grad_ready_hook): at each call, the gradients at offsets >= f already hold
// their final values of the micro-batch (CPU ops complete when they return), the frontier only falls,
// and it reaches every layer — for tied and untied heads, learned positions, post-norm and the
// hybrid model's recurrent layers.
TEST(Zero1, GradReadyHookReportsOnlyFinalGradients) {
  if (comm().rank() != 0) GTEST_SKIP() << "one process";
  for (int variant = 0; variant < 3; ++variant) {
    ModelConfig m;
    m.n_layer = 4;
    m.d_model = 32;
    m.n_head = 2;
    m.n_kv_head = 2;
    m.d_ff = 64;
    m.vocab_size = 64;
    m.seq_len = 8;
    if (variant == 1) {
      m.tied_embeddings = false;
      m.positions = PositionKind::Learned;
      m.norm_placement = NormPlacement::Post;
    }
    if (variant == 2) m.mixer = MixerKind::Hybrid;
    Model model(m, PrecisionConfig{}, cpu(), 2);
    model.init(7);
    const int64_t n = int64_t(model.num_params());
    std::vector<int32_t> ids(16), targets(16);
    for (int i = 0; i < 16; ++i) ids[size_t(i)] = (i * 7) % 64, targets[size_t(i)] = (i * 5 + 3) % 64;
    std::vector<std::pair<int64_t, std::vector<float>>> seen;
    model.set_grad_ready_hook([&](int64_t f) { seen.emplace_back(f, model.download_grads()); });
    model.zero_grad();
    model.forward_backward(ids.data(), targets.data(), true, 1.0f / 16);
    model.set_grad_ready_hook({});
    const std::vector<float> final_grads = model.download_grads();
    ASSERT_EQ(seen.size(), size_t(m.n_layer + 1)) << "norm_f, then every layer";
    int64_t prev = n;
    for (const auto& [f, g] : seen) {
      EXPECT_LT(f, prev) << "variant " << variant;
      EXPECT_GT(f, 0) << "the embedding is final only at the end";
      for (int64_t i = f; i < n; ++i)
        ASSERT_EQ(g[size_t(i)], final_grads[size_t(i)]) << "variant " << variant << " f " << f << " i " << i;
      prev = f;
    }
    EXPECT_EQ(seen.back().first, int64_t(model.param("h.0.norm1.weight").offset));
  }
}

float grad_of(int rank, int64_t i) { return float((rank + 1) * (i % 97)); }

TEST(Zero1, BucketsReduceGatherAndRestoreEveryShard) {
  const int R = comm().size(), me = comm().rank();
  Model model(odd_model(), PrecisionConfig{}, cpu(), 1);
  const int64_t n = int64_t(model.num_params());
  ASSERT_EQ(n % 2, 1) << "the test wants an odd parameter count (a padded bucket on 2 ranks)";
  for (double mb : {0.0, 0.001, 25.0}) {
    Zero1 z(model, comm(), mb);
    const BucketPlan& plan = z.plan();
    if (mb == 0.001) {
      EXPECT_GT(plan.buckets.size(), 10u);
    }
    std::vector<float> g(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) g[size_t(i)] = grad_of(me, i);
    cpu().upload(model.grad_data(), g.data());
    // the backward's seams, top down, as Model::forward_backward reports them
    z.grads_final_from(int64_t(model.param("norm_f.weight").offset));
    z.grads_final_from(int64_t(model.param("h.1.norm1.weight").offset));
    z.grads_final_from(int64_t(model.param("h.0.norm1.weight").offset));
    const Tensor summed = z.reduce_gradients();
    ASSERT_EQ(summed.numel(), plan.state_size);
    std::vector<float> s(size_t(plan.state_size));
    cpu().download(s.data(), summed);
    const ShardLayout mine = z.shard();
    std::vector<bool> used(s.size(), false);
    for (const ShardPiece& p : mine.pieces)
      for (int64_t i = 0; i < p.size(); ++i) {
        float want = 0;
        for (int r = 0; r < R; ++r) want += grad_of(r, p.begin + i);
        ASSERT_EQ(s[size_t(p.state + i)], want) << "bucket_mb " << mb << " parameter " << p.begin + i;
        used[size_t(p.state + i)] = true;
      }
    for (size_t k = 0; k < s.size(); ++k)
      if (!used[k]) {
        ASSERT_EQ(s[k], 0.0f) << "padding slot " << k;
      }

    // every rank writes its own pieces (1000·(rank + 1) + i), the all-gather spreads them
    std::vector<float> w(size_t(n), -1.0f);
    cpu().upload(model.param_data(), w.data());
    for (const ShardPiece& p : mine.pieces)
      for (int64_t i = p.begin; i < p.end; ++i) w[size_t(i)] = float(1000 * (me + 1) + i % 1000);
    cpu().upload(model.param_data(), w.data());
    z.gather_params();
    const std::vector<float> got = model.download_params();
    for (int r = 0; r < R; ++r)
      for (const ShardPiece& p : plan.shard(r).pieces)
        for (int64_t i = p.begin; i < p.end; ++i)
          ASSERT_EQ(got[size_t(i)], float(1000 * (r + 1) + i % 1000))
              << "bucket_mb " << mb << " parameter " << i;

    // a state vector whose slots hold their parameter's index comes back in params() order
    std::vector<float> st(size_t(plan.state_size), -1.0f);
    for (const ShardPiece& p : mine.pieces)
      for (int64_t i = 0; i < p.size(); ++i) st[size_t(p.state + i)] = float(p.begin + i);
    Buffer sb = cpu().alloc(DType::F32, {plan.state_size});
    cpu().upload(sb, st.data());
    const std::vector<float> full = z.gather_to_host(sb);
    ASSERT_EQ(int64_t(full.size()), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(full[size_t(i)], float(i)) << "bucket_mb " << mb;
  }
}

}  // namespace
