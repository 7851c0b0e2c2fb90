// Data-parallel training against one process (docs/distributed.md), run by ctest under
// `mpirun -np 2` (skipped in one process): the same config — train.batch_size is the global batch —
// on 2 ranks equals 1 rank step by step (FP32 arm: to reduction-order rounding; FP8 arms: within the
// FP8 arm's own distance from FP32), delayed-scaling states are equal on both ranks, a NaN gradient
// on one rank makes both skip that step (as one process skipping it), and a checkpoint of 2 ranks
// resumes on 1 rank (to rounding) and on 2 ranks bitwise; one rank's checkpoint resumes on 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "dist_run.h"
#include "job.h"
#include "octet/train.h"
#include "train/train_test_util.h"

using namespace octet;
using test::comm;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  test::TempDir local{"dp"};  // this rank's single-process runs
  test::SharedDir shared{"dp"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  explicit Fixture(Arm arm) {
    cfg = test::shared_tiny_run(shared, arm);
    ds = load_dataset(cfg);
  }
};

std::vector<float> weights(const std::string& file) {
  const StFile f = read_safetensors(file);
  std::vector<float> all;
  for (const auto& [name, t] : f.tensors) {
    const std::vector<float> v = st_to_f32(t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

#define NEED_TWO_RANKS() \
  if (comm().size() != 2) GTEST_SKIP() << "needs 2 ranks (ctest runs it under mpirun -np 2)"

TEST(DataParallel, Fp32TwoRanksEqualOneRankToRounding) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  const TrainResult one = train(f.cfg, f.local / "one", false, *f.ds, nullptr);
  const TrainResult two = train(f.cfg, f.shared / "two", false, *f.ds, nullptr, {}, nullptr, &test::job());
  ASSERT_EQ(one.train_loss.size(), two.train_loss.size());
  // The ranks differ from one process only in where sums are split (a GEMM over 1 row per rank
  // instead of 2, the gradient sum over ranks): FP32 rounding, ~1e-7 relative per operation.
  for (size_t i = 0; i < one.train_loss.size(); ++i)
    EXPECT_NEAR(two.train_loss[i], one.train_loss[i], 1e-5 * one.train_loss[i]) << "step " << i + 1;
  EXPECT_NEAR(two.final_val_loss, one.final_val_loss, 1e-5 * one.final_val_loss);
  if (comm().rank() == 0) {  // lr 3e-3 × 6 steps: AdamW moves a weight by at most ~2e-2 in all
    EXPECT_LT(
        max_abs_diff(weights(f.local / "one/model.safetensors"), weights(f.shared / "two/model.safetensors")),
        1e-4);
  }
}

TEST(DataParallel, EveryBucketSizeEqualsOneRankAndCheckpointsTheSameState) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  f.cfg.model.n_layer = 3;   // seams between the head, three layers and the embedding
  f.cfg.model.d_model = 15;  // 3 heads of 5, no RoPE: an odd parameter count, so the top bucket pads
  f.cfg.model.n_head = 3;
  f.cfg.model.n_kv_head = 3;
  f.cfg.model.positions = PositionKind::NoPE;
  const TrainResult one = train(f.cfg, f.local / "one", false, *f.ds, nullptr);
  const StFile ck_one = read_safetensors(f.local / "one/checkpoint.safetensors");
  // 0: one bucket after the backward; 0.001 MiB = 262 floats: ~40 buckets started during the last
  // micro-batch's backward (grad_accum 2: the first micro-batch's gradients must be in them);
  // the default 25 MiB: this small model's one bucket, started when the backward is done
  for (float mb : {0.0f, 0.001f, 25.0f}) {
    RunConfig cfg = f.cfg;
    cfg.dist.bucket_mb = mb;
    const std::string dir = f.shared / ("two-" + std::to_string(mb));
    const TrainResult two = train(cfg, dir, false, *f.ds, nullptr, {}, nullptr, &test::job());
    ASSERT_EQ(one.train_loss.size(), two.train_loss.size());
    for (size_t i = 0; i < one.train_loss.size(); ++i)
      EXPECT_NEAR(two.train_loss[i], one.train_loss[i], 1e-5 * one.train_loss[i])
          << "bucket_mb " << mb << " step " << i + 1;
    if (comm().rank() != 0) continue;
    // the checkpoint gathers the sharded moments back into params() order, as one process writes them
    const StFile ck = read_safetensors(dir + "/checkpoint.safetensors");
    ASSERT_EQ(ck.tensors.size(), ck_one.tensors.size());
    for (const auto& [name, t] : ck_one.tensors) {
      if (t.dtype != "F32") continue;
      ASSERT_TRUE(ck.tensors.count(name)) << name;
      const std::vector<float> a = st_to_f32(t), b = st_to_f32(ck.tensors.at(name));
      double scale = 0;
      for (float x : a) scale = std::max(scale, double(std::fabs(x)));
      EXPECT_LE(max_abs_diff(a, b), 1e-4 * scale + 1e-12) << "bucket_mb " << mb << " " << name;
    }
  }
}

TEST(DataParallel, Fp8ArmsWithinTheirOwnDistanceFromFp32) {
  NEED_TWO_RANKS();
  for (Arm arm : {Arm::FP8Matched, Arm::FP8Linear}) {
    Fixture f(arm);
    f.cfg.precision.quant.recipe = Recipe::TensorDelayed;  // scales from the cross-rank amax max
    f.cfg.precision.quant.amax_history_len = 4;
    const TrainResult one = train(f.cfg, f.local / "one", false, *f.ds, nullptr);
    const TrainResult two = train(f.cfg, f.shared / "two", false, *f.ds, nullptr, {}, nullptr, &test::job());
    RunConfig ref_cfg = f.cfg;
    ref_cfg.precision.arm = Arm::FP32;
    const TrainResult ref = train(ref_cfg, f.local / "fp32", false, *f.ds, nullptr);
    // Stated tolerance: FP8 on 2 ranks quantizes other tensors than on 1 rank (the first step's
    // scales come from each rank's own half-batch amax; later sums split differently), so it is
    // another draw of the FP8 rounding: both runs lie within the FP8 noise |L1 - L32| of the FP32
    // run, hence within twice that of each other, |L2 - L1| <= 2 |L1 - L32| + 2e-4 (the floor for
    // steps where the FP8 and FP32 losses happen to cross). Measured: |L2 - L1| <= 5e-4 while
    // |L1 - L32| reaches 3e-4.
    for (size_t i = 0; i < one.train_loss.size(); ++i)
      EXPECT_LE(std::fabs(two.train_loss[i] - one.train_loss[i]),
                2 * std::fabs(one.train_loss[i] - ref.train_loss[i]) + 2e-4)
          << to_string(arm) << " step " << i + 1 << ": 1 rank " << one.train_loss[i] << ", 2 ranks "
          << two.train_loss[i] << ", fp32 " << ref.train_loss[i];
    // Both ranks hold the same delayed-scaling state (reduced amaxes): the checkpoint is rank 0's,
    // and rank 1's scales went into the same all-gathered weights only if they agree.
    if (comm().rank() == 0) {
      const StFile ck = read_safetensors(f.shared / "two/checkpoint.safetensors");
      size_t quant = 0;
      for (const auto& [name, t] : ck.tensors) quant += name.rfind("quant.", 0) == 0;
      EXPECT_EQ(quant, 4u) << "qkv, proj, fc1, fc2 of the one layer";
    }
  }
}

// The data order of data parallel: N ranks x batch B read the global order of 1 rank x batch N·B (the
// windows of each global batch split in rank order), batch after batch. No MPI needed.
TEST(DataParallel, RanksReadTheGlobalBatchOrderOfOneProcess) {
  Fixture f(Arm::FP32);
  std::unique_ptr<Dataset> one = load_dataset(f.cfg), r0 = load_dataset(f.cfg), r1 = load_dataset(f.cfg);
  std::vector<int32_t> ids, tg, a, ta, b, tb;
  for (int step = 0; step < 5; ++step) {
    one->next_train_batch(4, ids, tg);
    r0->next_train_batch(2, a, ta, 0, 2);
    r1->next_train_batch(2, b, tb, 1, 2);
    a.insert(a.end(), b.begin(), b.end());
    ta.insert(ta.end(), tb.begin(), tb.end());
    EXPECT_EQ(a, ids) << "batch " << step;
    EXPECT_EQ(ta, tg) << "batch " << step;
  }
  EXPECT_EQ(r0->position(), one->position());
}

// Global gradient-norm clipping: every step is clipped (clip far below the gradient norm) and
// AdamW's eps = 1 makes its update nearly linear in the gradient (with the usual eps, m/sqrt(v) would
// hide the clip's scale). A rank clipping by its own shard's norm (about 1/sqrt(2) of the global
// norm) would step like one process with a clip sqrt(2) larger: the control shows that moves the
// losses far beyond the tolerance; the ranks' summed sum of squares keeps them equal to rounding.
TEST(DataParallel, ClippingUsesTheGlobalNormOfAllRanks) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  f.cfg.train.grad_clip = 0.05f;
  f.cfg.train.lr = 1.0f;
  f.cfg.train.eps = 1.0f;
  const TrainResult one = train(f.cfg, f.local / "one", false, *f.ds, nullptr);
  const TrainResult two = train(f.cfg, f.shared / "two", false, *f.ds, nullptr, {}, nullptr, &test::job());
  RunConfig local = f.cfg;
  local.train.grad_clip = 0.05f * std::sqrt(2.0f);
  const TrainResult wrong = train(local, f.local / "wrong", false, *f.ds, nullptr);
  ASSERT_EQ(one.train_loss.size(), two.train_loss.size());
  double control = 0;
  for (size_t i = 0; i < one.train_loss.size(); ++i) {
    EXPECT_NEAR(two.train_loss[i], one.train_loss[i], 1e-5 * one.train_loss[i]) << "step " << i + 1;
    control = std::max(control, std::fabs(wrong.train_loss[i] - one.train_loss[i]) / one.train_loss[i]);
  }
  EXPECT_GT(control, 1e-4) << "test premise: a per-shard clip would be visible";
}

TEST(DataParallel, NaNOnOneRankSkipsTheStepOnBoth) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  auto poison = [](bool here) {
    TrainHooks h;
    h.after_backward = [here](int64_t step, Model& m) {
      if (step == 1 && here) {
        std::vector<float> nan(1, NAN);
        m.backend().upload(m.grad_data().slice(0, 1), nan.data());
      }
    };
    return h;
  };
  const TrainResult one = train(f.cfg, f.local / "one", false, *f.ds, nullptr, poison(true));
  const TrainResult two = train(f.cfg, f.shared / "two", false, *f.ds, nullptr, poison(comm().rank() == 1),
                                nullptr, &test::job());
  EXPECT_EQ(two.skipped_steps, 1);
  ASSERT_EQ(two.train_loss.size(), one.train_loss.size());
  EXPECT_TRUE(std::isnan(two.train_loss[1]));
  for (size_t i = 0; i < one.train_loss.size(); ++i)
    if (i != 1) {
      EXPECT_NEAR(two.train_loss[i], one.train_loss[i], 1e-5 * one.train_loss[i]) << "step " << i + 1;
    }
  // every rank holds the same weights afterwards: rank 0's broadcast equals rank 1's bitwise
  std::vector<float> w =
      comm().rank() == 0 ? weights(f.shared / "two/model.safetensors") : std::vector<float>();
  int32_t n = int32_t(w.size());
  comm().broadcast(Tensor(&n, DType::I32, {1}), 0);
  w.resize(size_t(n));
  comm().broadcast(Tensor(w.data(), DType::F32, {n}), 0);
  comm().barrier();
  if (comm().rank() == 1) {
    EXPECT_EQ(w, weights(f.shared / "two/model.safetensors"));
  }
}

TEST(DataParallel, CheckpointOfTwoRanksResumesOnOneAndBitwiseOnTwo) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");  // on both ranks
  };
  const TrainResult full = train(f.cfg, f.shared / "full", false, *f.ds, nullptr, {}, nullptr, &test::job());
  EXPECT_THROW(train(f.cfg, f.shared / "a", false, *f.ds, nullptr, crash, nullptr, &test::job()),
               std::runtime_error);
  EXPECT_THROW(train(f.cfg, f.shared / "b", false, *f.ds, nullptr, crash, nullptr, &test::job()),
               std::runtime_error);
  comm().barrier();
  // 2 → 2: bitwise
  const TrainResult again = train(f.cfg, f.shared / "a", true, *f.ds, nullptr, {}, nullptr, &test::job());
  ASSERT_EQ(again.train_loss.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again.train_loss[i], full.train_loss[3 + i]) << i;
  // 2 → 1: the full optimizer state is in the checkpoint; one process continues to rounding
  if (comm().rank() == 0) {
    const TrainResult one = train(f.cfg, f.shared / "b", true, *f.ds, nullptr);
    ASSERT_EQ(one.train_loss.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(one.train_loss[i], full.train_loss[3 + i], 1e-5 * full.train_loss[3 + i]);
    EXPECT_EQ(test::read_file(f.shared / "a/model.safetensors"),
              test::read_file(f.shared / "full/model.safetensors"));
    EXPECT_LT(
        max_abs_diff(weights(f.shared / "b/model.safetensors"), weights(f.shared / "full/model.safetensors")),
        1e-4);
  }
  comm().barrier();
}

// The other direction: a checkpoint written by one process resumes on two ranks (the sharded
// optimizer state is cut from the full one in the checkpoint), to rounding of the 2-rank run.
TEST(DataParallel, CheckpointOfOneRankResumesOnTwo) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP32);
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");
  };
  const TrainResult full =
      train(f.cfg, f.shared / "full-2", false, *f.ds, nullptr, {}, nullptr, &test::job());
  if (comm().rank() == 0) {
    EXPECT_THROW(train(f.cfg, f.shared / "one", false, *f.ds, nullptr, crash), std::runtime_error);
  }
  comm().barrier();
  const TrainResult two = train(f.cfg, f.shared / "one", true, *f.ds, nullptr, {}, nullptr, &test::job());
  ASSERT_EQ(two.train_loss.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(two.train_loss[i], full.train_loss[3 + i], 1e-5 * full.train_loss[3 + i]);
  comm().barrier();
  if (comm().rank() == 0) {
    EXPECT_LT(max_abs_diff(weights(f.shared / "one/model.safetensors"),
                           weights(f.shared / "full-2/model.safetensors")),
              1e-4);
  }
  comm().barrier();
}

}  // namespace
