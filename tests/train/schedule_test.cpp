// The learning-rate schedule's edges (octet/train.h learning_rate): the last step is at the floor
// lr·min_lr_ratio for every split of steps into warmup and decay, including a decay of one step
// (steps = warmup_steps + 1); the first decay step is at the peak whenever the decay has two or more.
#include <gtest/gtest.h>

#include "octet/train.h"

using namespace octet;

namespace {

TrainConfig schedule(int64_t steps, int64_t warmup) {
  TrainConfig t;
  t.steps = steps;
  t.warmup_steps = warmup;
  t.lr = 3e-3f;
  t.min_lr_ratio = 0.1f;
  return t;
}

TEST(Schedule, OneDecayStepIsTheLastAndTakesTheFloor) {
  for (int64_t warmup : {0, 1, 2, 5, 20}) {
    const TrainConfig t = schedule(warmup + 1, warmup);
    const float floor = t.lr * t.min_lr_ratio;
    EXPECT_FLOAT_EQ(learning_rate(t, t.steps - 1), floor) << "warmup " << warmup;
    if (warmup > 0) {
      EXPECT_FLOAT_EQ(learning_rate(t, warmup - 1), t.lr) << "the warmup still ends at the peak";
    }
  }
}

TEST(Schedule, LastStepTakesTheFloorFirstDecayStepThePeak) {
  for (int64_t warmup : {0, 1, 3, 10})
    for (int64_t decay : {2, 3, 7, 100}) {
      const TrainConfig t = schedule(warmup + decay, warmup);
      const float floor = t.lr * t.min_lr_ratio;
      EXPECT_FLOAT_EQ(learning_rate(t, t.steps - 1), floor) << "warmup " << warmup << ", decay " << decay;
      EXPECT_FLOAT_EQ(learning_rate(t, warmup), t.lr) << "warmup " << warmup << ", decay " << decay;
      for (int64_t s = warmup; s + 1 < t.steps; ++s) EXPECT_GT(learning_rate(t, s), learning_rate(t, s + 1));
    }
}

TEST(Schedule, NoDecayStepsStayInTheWarmup) {
  const TrainConfig t = schedule(4, 4);  // steps == warmup: the run ends as the warmup reaches the peak
  EXPECT_FLOAT_EQ(learning_rate(t, 0), t.lr / 4);
  EXPECT_FLOAT_EQ(learning_rate(t, 3), t.lr);
}

}  // namespace
