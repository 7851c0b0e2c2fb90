// Resuming a run directory with changes (docs/training.md §Resume): schedule keys are applied and
// persisted in config.toml before the first step, with a log line and a metrics event; meaning keys
// are refused; a finished run writes nothing; a checkpoint beyond train.steps is an error; an
// extended run that crashed continues to the new end; metrics.jsonl is cut back through a temporary
// file and a rename, so a failure in between leaves the original intact; only a torn last line of it
// is dropped, an unreadable line before it is refused.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;
namespace fs = std::filesystem;

namespace {

using test::error_of;
using test::snapshot;

struct RunDir {
  test::TempDir dir{"resume"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  std::string run;
  explicit RunDir(int64_t steps) {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
    cfg.train.steps = steps;
    ds = load_dataset(cfg);
    run = dir / "run";
  }
};

// Runs r to a crash in step 4, after the checkpoint of step 3: metrics.jsonl then holds step 4.
void crash_in_step_4(const RunDir& r) {
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW(train(r.cfg, r.run, false, *r.ds, nullptr, crash), std::runtime_error);
}

TEST(Resume, ScheduleChangesArePersistedLoggedAndRecorded) {
  RunDir r(3);
  train(r.cfg, r.run, false, *r.ds, nullptr);
  // Extend to 6 steps with another lr: planned, then trained.
  const ResumePlan plan = plan_resume(r.run, {"train.steps=6", "train.lr=0.02"});
  EXPECT_FALSE(plan.complete());
  EXPECT_EQ(plan.state.step, 3);
  ASSERT_EQ(plan.changes.size(), 2u);
  std::FILE* log = std::tmpfile();
  const TrainResult res = train(plan.config, r.run, true, *r.ds, log);
  EXPECT_EQ(res.train_loss.size(), 3u);
  std::rewind(log);
  std::string text(1 << 16, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), log));
  std::fclose(log);
  EXPECT_NE(text.find("resume: train.steps 3 -> 6 from step 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("resume: train.lr 0.003 -> 0.02 from step 3\n"), std::string::npos) << text;
  // config.toml holds the new values: a later plain resume keeps them (and has nothing left to do).
  const RunConfig saved = load_config(r.run + "/config.toml");
  EXPECT_EQ(saved.train.steps, 6);
  EXPECT_EQ(saved.train.lr, 0.02f);
  EXPECT_TRUE(plan_resume(r.run, {}).complete());
  // The metrics event: at the checkpoint's step, one entry per change, in config.toml's form.
  std::ifstream in(r.run + "/metrics.jsonl");
  int events = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("event")) continue;
    ++events;
    EXPECT_EQ(j["event"], "resume");
    EXPECT_EQ(j["step"], 3);
    ASSERT_EQ(j["changes"].size(), 2u);
    EXPECT_EQ(j["changes"][1], (nlohmann::json{{"key", "train.lr"}, {"from", "0.003"}, {"to", "0.02"}}));
  }
  EXPECT_EQ(events, 1);
}

TEST(Resume, ExtendedRunThatCrashedContinuesToTheNewEnd) {
  RunDir r(3);
  train(r.cfg, r.run, false, *r.ds, nullptr);
  const ResumePlan ext = plan_resume(r.run, {"train.steps=9"});
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 7) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW(train(ext.config, r.run, true, *r.ds, nullptr, crash), std::runtime_error);
  // A plain resume reads train.steps = 9 from config.toml and continues from the checkpoint at 6.
  const ResumePlan plain = plan_resume(r.run, {});
  EXPECT_EQ(plain.config.train.steps, 9);
  EXPECT_EQ(plain.state.step, 6);
  EXPECT_TRUE(plain.changes.empty());
  const TrainResult rest = train(plain.config, r.run, true, *r.ds, nullptr);
  EXPECT_EQ(rest.train_loss.size(), 3u);
  EXPECT_EQ(read_checkpoint_state(r.run).step, 9);
}

TEST(Resume, FinishedRunWritesNothing) {
  RunDir r(3);
  train(r.cfg, r.run, false, *r.ds, nullptr);
  const auto before = snapshot(r.run);
  EXPECT_TRUE(plan_resume(r.run, {}).complete());
  const TrainResult res = train(r.cfg, r.run, true, *r.ds, nullptr);
  EXPECT_TRUE(res.complete);
  EXPECT_TRUE(res.train_loss.empty());
  EXPECT_EQ(snapshot(r.run), before);
}

TEST(Resume, CannotShortenOrChangeMeaning) {
  RunDir r(6);
  train(r.cfg, r.run, false, *r.ds, nullptr);
  const auto before = snapshot(r.run);
  std::string e = error_of([&] { plan_resume(r.run, {"train.steps=4"}); });
  EXPECT_NE(e.find("checkpoint is at step 6"), std::string::npos) << e;
  EXPECT_NE(e.find("cannot be shortened"), std::string::npos) << e;
  RunConfig shorter = r.cfg;
  shorter.train.steps = 4;
  EXPECT_THROW(train(shorter, r.run, true, *r.ds, nullptr), Error);
  e = error_of([&] { plan_resume(r.run, {"model.n_layer=2"}); });
  EXPECT_NE(e.find("model.n_layer"), std::string::npos) << e;
  RunConfig other_arm = r.cfg;
  other_arm.precision.arm = Arm::FP8Matched;
  other_arm.train.steps = 12;
  e = error_of([&] { train(other_arm, r.run, true, *r.ds, nullptr); });
  EXPECT_NE(e.find("precision.arm"), std::string::npos) << e;
  EXPECT_EQ(snapshot(r.run), before);
}

TEST(Resume, MetricsAreCutBackThroughATemporaryFile) {
  RunDir r(6);
  crash_in_step_4(r);
  const std::string metrics = r.run + "/metrics.jsonl";
  const std::string original = test::read_file(metrics);
  ASSERT_NE(original.find("\"step\":4"), std::string::npos) << "metrics beyond the checkpoint at 3";
  // The temporary path is taken by a directory: the cut fails and leaves everything as it was.
  fs::create_directories(metrics + ".tmp");
  const auto before = snapshot(r.run);
  const std::string e = error_of([&] { train(r.cfg, r.run, true, *r.ds, nullptr); });
  EXPECT_NE(e.find("metrics.jsonl.tmp"), std::string::npos) << e;
  EXPECT_EQ(snapshot(r.run), before);
  EXPECT_EQ(test::read_file(metrics), original);
  // Once the path is free, the resume cuts the lines after step 3 and continues.
  fs::remove(metrics + ".tmp");
  train(r.cfg, r.run, true, *r.ds, nullptr);
  std::ifstream in(metrics);
  int64_t last = 0, steps = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      EXPECT_EQ(j["step"].get<int64_t>(), last + 1) << "every step once, in order";
      last = j["step"].get<int64_t>();
      ++steps;
    }
  }
  EXPECT_EQ(steps, 6);
  EXPECT_FALSE(fs::exists(metrics + ".tmp"));
}

TEST(Resume, OnlyATornLastMetricsLineIsDropped) {
  RunDir r(6);
  crash_in_step_4(r);
  const std::string metrics = r.run + "/metrics.jsonl";
  const std::string original = test::read_file(metrics);
  // An unreadable line before the last: refused, naming the line, nothing written.
  const size_t first_end = original.find('\n');
  ASSERT_NE(first_end, std::string::npos);
  test::write_file(metrics,
                   original.substr(0, first_end + 1) + "{bad json\n" + original.substr(first_end + 1));
  const auto before = snapshot(r.run);
  const std::string e = error_of([&] { train(r.cfg, r.run, true, *r.ds, nullptr); });
  EXPECT_NE(e.find("line 2 of"), std::string::npos) << e;
  EXPECT_NE(e.find("not a JSON record"), std::string::npos) << e;
  EXPECT_EQ(snapshot(r.run), before);
  // A torn last line (a crash mid-write) is dropped, and the run continues with every step once.
  test::write_file(metrics, original + "{\"step\":5,\"lo");
  train(r.cfg, r.run, true, *r.ds, nullptr);
  std::ifstream in(metrics);
  int64_t last = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);  // every kept line is JSON
    if (j.contains("loss")) {
      EXPECT_EQ(j["step"].get<int64_t>(), last + 1) << "every step once, in order";
      last = j["step"].get<int64_t>();
    }
  }
  EXPECT_EQ(last, 6);
}

}  // namespace
