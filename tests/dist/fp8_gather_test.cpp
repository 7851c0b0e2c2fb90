// ZeRO-1's FP8 weight all-gather (octet/dist.h Fp8WeightGather, dist.allgather_fp8;
// docs/distributed.md §"FP8 all-gather"), run by ctest under `mpirun -np 2` (skipped in one process).
// Right values: the runs tile every rank's shard and cover every code weight once; gathered codes
// stand in for the whole FP32 weight bitwise (the forward's loss equals the one computed from the
// full masters, with the other ranks' pieces of the code weights poisoned on this rank); training
// with the option equals training without it bitwise (losses, checkpoints' weights), for the FP8
// arms with buckets that split weights, through a step skipped for one rank's NaN and through
// evaluations; a bf16 arm is unchanged (no-op); tensor-delayed is refused; checkpoints resume
// bitwise across the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <vector>

#include "dist_run.h"
#include "job.h"
#include "octet/dist.h"
#include "octet/error.h"
#include "octet/model.h"
#include "octet/train.h"
#include "train/train_test_util.h"

using namespace octet;
using test::comm;

namespace {

#define NEED_TWO_RANKS() \
  if (comm().size() != 2) GTEST_SKIP() << "needs 2 ranks (ctest runs it under mpirun -np 2)"

// An FP8 tensor-current model with an odd parameter count (3 heads of 5): weights straddle buckets.
ModelConfig odd_model() {
  ModelConfig m;
  m.n_layer = 2;
  m.d_model = 15;
  m.n_head = 3;
  m.n_kv_head = 3;
  m.d_ff = 40;
  m.vocab_size = 64;
  m.seq_len = 8;
  m.positions = PositionKind::NoPE;
  return m;
}
PrecisionConfig fp8(Arm arm) {
  PrecisionConfig p;
  p.arm = arm;
  p.quant.recipe = Recipe::TensorCurrent;
  return p;
}

TEST(Fp8WeightGather, RunsTileEveryShardAndCoverEveryCodeWeightOnce) {
  NEED_TWO_RANKS();
  Model model(odd_model(), fp8(Arm::FP8Matched), test::cpu(), 1);
  const std::vector<Model::CodeWeight> cw = model.code_weights();
  ASSERT_EQ(cw.size(), 8u) << "qkv, proj, fc1, fc2 of two layers";
  for (double mb : {0.0, 0.001, 25.0}) {
    const BucketPlan plan = plan_buckets(int64_t(model.num_params()), 2, bucket_elems_from_mb(mb));
    Fp8WeightGather g(model, comm(), plan);
    std::vector<int> covered(model.num_params(), 0);
    int64_t f32_total = 0, code_total = 0;
    for (int r = 0; r < 2; ++r) {
      const ShardLayout sh = plan.shard(r);
      int64_t in_shard = 0, p32 = 0, p8 = 0;
      for (const ShardPiece& p : sh.pieces) in_shard += p.size();
      int64_t runs_total = 0;
      for (const Fp8WeightGather::Run& run : g.runs(r)) {
        runs_total += run.count;
        for (int64_t i = run.flat; i < run.flat + run.count; ++i) covered[size_t(i)] += 1;
        if (run.weight >= 0) {  // inside its weight, packed in flat order
          const ParamInfo& p = *cw[size_t(run.weight)].param;
          EXPECT_GE(run.flat, int64_t(p.offset));
          EXPECT_LE(run.flat + run.count, int64_t(p.offset + p.numel));
          EXPECT_EQ(run.packed, p8);
          p8 += run.count;
        } else {
          for (const Model::CodeWeight& w : cw)  // outside every code weight
            EXPECT_TRUE(run.flat + run.count <= int64_t(w.param->offset) ||
                        run.flat >= int64_t(w.param->offset + w.param->numel));
          EXPECT_EQ(run.packed, p32);
          p32 += run.count;
        }
      }
      EXPECT_EQ(runs_total, in_shard) << "rank " << r << " bucket_mb " << mb;
      EXPECT_LE(p32, g.f32_block());
      EXPECT_LE(p8, g.code_block());
      f32_total += p32;
      code_total += p8;
    }
    for (size_t i = 0; i < covered.size(); ++i) ASSERT_EQ(covered[i], 1) << "parameter " << i << " mb " << mb;
    int64_t code_params = 0;
    for (const Model::CodeWeight& w : cw) code_params += int64_t(w.param->numel);
    EXPECT_EQ(code_total, code_params);
    EXPECT_EQ(f32_total + code_total, int64_t(model.num_params()));
    // bytes through each rank's link: 1 per code parameter (+ padding) instead of 4
    EXPECT_EQ(g.link_bytes(), 4 * g.f32_block() + g.code_block());
    EXPECT_LT(g.link_bytes(), 4 * plan.state_size);
  }
}

// The gathered codes are bitwise what the forward computes from the whole FP32 weights: this
// rank's copy of the other rank's code-weight pieces is poisoned (×3 and a huge value, which would
// change every scale) before the gather; the losses with the installed codes equal those of a model
// holding the true masters, and the FP32 parameters are gathered exactly.
TEST(Fp8WeightGather, InstalledCodesEqualTheWholeWeightsQuantization) {
  NEED_TWO_RANKS();
  for (Arm arm : {Arm::FP8Matched, Arm::FP8Linear})
    for (double mb : {0.0, 0.001}) {
      Model ref(odd_model(), fp8(arm), test::cpu(), 2), model(odd_model(), fp8(arm), test::cpu(), 2);
      ref.init(7);
      std::vector<float> truth = ref.download_params();
      for (size_t i = 0; i < truth.size(); ++i) truth[i] *= 1.0f + 0.01f * float(i % 7);  // not the init
      ref.upload_params(truth);
      const BucketPlan plan = plan_buckets(int64_t(model.num_params()), 2, bucket_elems_from_mb(mb));
      Fp8WeightGather g(model, comm(), plan);
      std::vector<float> mine = truth;  // the other rank's pieces: poisoned (code weights) or zero (rest)
      for (const Fp8WeightGather::Run& run : g.runs(1 - comm().rank()))
        for (int64_t i = run.flat; i < run.flat + run.count; ++i)
          mine[size_t(i)] = run.weight >= 0 ? (i % 5 == 0 ? 1e6f : 3 * truth[size_t(i)]) : 0.0f;
      model.upload_params(mine);
      g.gather();
      std::vector<float> after = model.download_params();
      for (const Fp8WeightGather::Run& run : g.runs(1 - comm().rank())) {
        if (run.weight >= 0) continue;
        for (int64_t i = run.flat; i < run.flat + run.count; ++i)
          ASSERT_EQ(after[size_t(i)], truth[size_t(i)]) << "FP32 parameter " << i;
      }
      std::vector<int32_t> ids(16), targets(16);
      for (size_t i = 0; i < ids.size(); ++i)
        ids[i] = int32_t((i * 7 + 3) % 64), targets[i] = int32_t((i * 5 + 1) % 64);
      for (int k = 0; k < 2; ++k) {  // the second after update_quant_scales + reinstall
        const double a = ref.step(ids.data(), targets.data(), true, 1.0f / 16);
        const double b = model.step(ids.data(), targets.data(), true, 1.0f / 16);
        EXPECT_EQ(a, b) << to_string(arm) << " mb " << mb << " pass " << k;
        if (k == 0) {
          // the same gradients: the backward's dX GEMMs read the installed Ŵᵀ
          EXPECT_EQ(ref.download_grads(), model.download_grads()) << to_string(arm) << " mb " << mb;
          ref.update_quant_scales();
          model.update_quant_scales();
          g.reinstall();
        }
      }
      // the poisoned masters are really not read: without the codes the loss differs
      model.update_quant_scales();  // drops the installed codes
      const double poisoned = model.step(ids.data(), targets.data(), false, 1.0f);
      EXPECT_NE(poisoned, ref.step(ids.data(), targets.data(), false, 1.0f)) << "test premise";
    }
}

TEST(Fp8WeightGather, RefusesAModelWithoutCodeWeightsAndTensorDelayed) {
  NEED_TWO_RANKS();
  Model bf16(odd_model(), PrecisionConfig{}, test::cpu(), 1);
  EXPECT_TRUE(bf16.code_weights().empty());
  const BucketPlan plan = plan_buckets(int64_t(bf16.num_params()), 2, 0);
  EXPECT_THROW(Fp8WeightGather(bf16, comm(), plan), Error);
  PrecisionConfig delayed = fp8(Arm::FP8Matched);
  delayed.quant.recipe = Recipe::TensorDelayed;
  Model d(odd_model(), delayed, test::cpu(), 1);
  EXPECT_TRUE(d.code_weights().empty());
  RunConfig cfg = test::tiny_run("corpus.txt", "cache");
  cfg.dist.allgather_fp8 = true;
  cfg.precision.quant.recipe = Recipe::TensorDelayed;
  try {
    cfg.validate();
    ADD_FAILURE() << "tensor-delayed with dist.allgather_fp8 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dist.allgather_fp8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor-current"), std::string::npos) << e.what();
  }
}

struct Fixture {
  test::SharedDir shared{"fp8ag"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  explicit Fixture(Arm arm) {
    cfg = test::shared_tiny_run(shared, arm);
    cfg.precision.quant.recipe = Recipe::TensorCurrent;
    cfg.model.d_model = 15;  // an odd parameter count: the top bucket pads
    cfg.model.n_head = 3;
    cfg.model.n_kv_head = 3;
    cfg.model.positions = PositionKind::NoPE;
    cfg.dist.bucket_mb = 0.001f;  // ~262 floats: weights straddle buckets and ranks
    ds = load_dataset(cfg);
  }
  TrainResult run(const RunConfig& c, const std::string& dir, bool resume = false, const TrainHooks& h = {}) {
    return train(c, shared / dir, resume, *ds, nullptr, h, nullptr, &test::job());
  }
};

RunConfig with(RunConfig c, bool on) {
  c.dist.allgather_fp8 = on;
  return c;
}

void expect_same_losses(const TrainResult& a, const TrainResult& b, const std::string& what) {
  ASSERT_EQ(a.train_loss.size(), b.train_loss.size()) << what;
  for (size_t i = 0; i < a.train_loss.size(); ++i)
    EXPECT_TRUE(a.train_loss[i] == b.train_loss[i] ||
                (std::isnan(a.train_loss[i]) && std::isnan(b.train_loss[i])))
        << what << " step " << i + 1 << ": " << a.train_loss[i] << " vs " << b.train_loss[i];
  EXPECT_EQ(a.final_val_loss, b.final_val_loss) << what;
}

TEST(Fp8WeightGather, TrainingEqualsTheFp32GatherBitwise) {
  NEED_TWO_RANKS();
  for (Arm arm : {Arm::FP8Matched, Arm::FP8Linear, Arm::BF16}) {  // bf16: the option is a no-op
    Fixture f(arm);
    f.cfg.train.checkpoint_every = 0;  // the step-3 evaluation is not followed by a master gather
    const TrainResult off = f.run(with(f.cfg, false), "off");
    const TrainResult on = f.run(with(f.cfg, true), "on");
    expect_same_losses(off, on, to_string(arm));
    if (comm().rank() == 0) {  // the weights written after gathering the masters, and the checkpoint
      EXPECT_EQ(test::read_file(f.shared / "on/model.safetensors"),
                test::read_file(f.shared / "off/model.safetensors"))
          << to_string(arm);
      EXPECT_EQ(test::read_file(f.shared / "on/checkpoint.safetensors"),
                test::read_file(f.shared / "off/checkpoint.safetensors"))
          << to_string(arm);
    }
    comm().barrier();
  }
}

TEST(Fp8WeightGather, NaNOnOneRankSkipsTheStepAndKeepsTheCodes) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP8Matched);
  TrainHooks h;
  h.after_backward = [here = comm().rank() == 1](int64_t step, Model& m) {
    if (step == 1 && here) {
      std::vector<float> nan(1, NAN);
      m.backend().upload(m.grad_data().slice(0, 1), nan.data());
    }
  };
  const TrainResult off = f.run(with(f.cfg, false), "off", false, h);
  const TrainResult on = f.run(with(f.cfg, true), "on", false, h);
  EXPECT_EQ(on.skipped_steps, 1);
  EXPECT_TRUE(std::isnan(on.train_loss[1]));
  expect_same_losses(off, on, "skip");
}

TEST(Fp8WeightGather, CheckpointsResumeBitwiseAcrossTheOption) {
  NEED_TWO_RANKS();
  Fixture f(Arm::FP8Matched);
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");  // on both ranks, after the step-3 checkpoint
  };
  const TrainResult full = f.run(with(f.cfg, false), "full");
  for (bool first : {true, false}) {  // written with the option, resumed without it; and vice versa
    const std::string dir = first ? "on-off" : "off-on";
    EXPECT_THROW(f.run(with(f.cfg, first), dir, false, crash), std::runtime_error);
    comm().barrier();
    const TrainResult again = f.run(with(f.cfg, !first), dir, true);
    ASSERT_EQ(again.train_loss.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again.train_loss[i], full.train_loss[3 + i]) << dir << " " << i;
    if (comm().rank() == 0) {
      EXPECT_EQ(test::read_file(f.shared / (dir + "/model.safetensors")),
                test::read_file(f.shared / "full/model.safetensors"))
          << dir;
    }
    comm().barrier();
  }
}

}  // namespace
