// octet compare and its output directory (docs/training.md §"Comparing arms"): a non-empty --out is
// refused unless Resume (finished arms kept byte for byte, unfinished ones resumed) or Overwrite
// (nothing of the earlier compare stays); a repeated arm is an error; the rows read back from
// metrics.jsonl equal what the trainer measured; the max row residual is printed only where it is a
// check (the matched delta).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "octet/error.h"
#include "octet/train.h"
#include "train/run_dir_lock.h"
#include "train_test_util.h"

using namespace octet;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  test::TempDir dir{"compare"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  Fixture() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
    cfg.train.steps = 3;
    ds = load_dataset(cfg);
  }
};

nlohmann::json summary(const std::string& out) {
  return nlohmann::json::parse(test::read_file(out + "/summary.json"));
}

TEST(Compare, RowsFromMetricsEqualWhatTheTrainerMeasured) {
  Fixture f;
  f.cfg.train.steps = 12;
  const TrainResult r = train(f.cfg, f.dir / "run", false, *f.ds, nullptr);
  const CompareRow row = compare_row_from_metrics("bf16", f.dir / "run");
  double sum = 0;
  for (size_t i = r.train_loss.size() - 10; i < r.train_loss.size(); ++i) sum += r.train_loss[i];
  EXPECT_NEAR(row.train_loss, sum / 10, 1e-12);
  EXPECT_EQ(row.val_loss, r.final_val_loss) << std::hexfloat << row.val_loss << " " << r.final_val_loss;
  EXPECT_EQ(row.kurtosis_max, r.kurtosis_max);
  EXPECT_EQ(row.row_residual_max, r.row_residual_max);
  EXPECT_EQ(row.row_residual_mean, r.row_residual_mean);
  EXPECT_NEAR(row.tokens_per_s, r.tokens_per_s, 1e-6 * r.tokens_per_s);
  EXPECT_THROW(compare_row_from_metrics("bf16", f.dir / "none"), Error);
}

TEST(Compare, RefusesRepeatsAndANonEmptyOut) {
  Fixture f;
  const std::string out = f.dir / "cmp";
  EXPECT_THROW(compare_arms(f.cfg, {"bf16", "bf16"}, out, nullptr), Error);
  EXPECT_FALSE(fs::exists(out)) << "bad input must not create output";
  compare_arms(f.cfg, {"bf16"}, out, nullptr);
  const std::string before = test::read_file(out + "/bf16/metrics.jsonl");
  try {
    compare_arms(f.cfg, {"bf16"}, out, nullptr);
    ADD_FAILURE() << "a non-empty --out must be refused";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("not empty"), std::string::npos) << m;
    EXPECT_NE(m.find("--resume"), std::string::npos) << m;
    EXPECT_NE(m.find("--overwrite"), std::string::npos) << m;
  }
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), before);
  fs::create_directories(f.dir / "empty");  // an existing empty directory is fine
  EXPECT_EQ(compare_arms(f.cfg, {"bf16"}, f.dir / "empty", nullptr).size(), 1u);
}

TEST(Compare, ResumeKeepsFinishedArmsAndResumesTheOthers) {
  Fixture f;
  const std::string out = f.dir / "cmp";
  compare_arms(f.cfg, {"bf16"}, out, nullptr);
  const std::string bf16_metrics = test::read_file(out + "/bf16/metrics.jsonl");
  const std::string bf16_model = test::read_file(out + "/bf16/model.safetensors");
  // fp8-matched was interrupted after its checkpoint at step 3 of 6.
  RunConfig longer = f.cfg;
  longer.train.steps = 6;
  RunConfig matched = longer;
  matched.precision.arm = Arm::FP8Matched;
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW(train(matched, out + "/fp8-matched", false, *f.ds, nullptr, crash), std::runtime_error);
  // bf16 ran 3 steps, the compare asks for 6: bf16 is extended (a schedule change), fp8-matched
  // resumed from step 3, fp8-linear (absent) trained.
  const auto rows =
      compare_arms(longer, {"bf16", "fp8-matched", "fp8-linear"}, out, nullptr, CompareMode::Resume);
  ASSERT_EQ(rows.size(), 3u);
  for (const char* arm : {"bf16", "fp8-matched", "fp8-linear"})
    EXPECT_EQ(read_checkpoint_state(out + "/" + arm).step, 6) << arm;
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl").rfind(bf16_metrics, 0), 0u)
      << "bf16's first 3 steps kept";
  // A second --resume finds every arm complete: nothing is retrained or rewritten.
  const std::string m2 = test::read_file(out + "/fp8-matched/metrics.jsonl"),
                    w2 = test::read_file(out + "/bf16/model.safetensors");
  EXPECT_NE(w2, bf16_model);
  const auto again =
      compare_arms(longer, {"bf16", "fp8-matched", "fp8-linear"}, out, nullptr, CompareMode::Resume);
  EXPECT_EQ(test::read_file(out + "/fp8-matched/metrics.jsonl"), m2);
  EXPECT_EQ(test::read_file(out + "/bf16/model.safetensors"), w2);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(again[i].val_loss, rows[i].val_loss) << i;
  EXPECT_EQ(summary(out).size(), 3u);
  // Resuming with a meaning change is refused before anything is trained.
  RunConfig wider = longer;
  wider.model.d_ff = 48;
  EXPECT_THROW(compare_arms(wider, {"bf16"}, out, nullptr, CompareMode::Resume), Error);
  EXPECT_EQ(test::read_file(out + "/bf16/model.safetensors"), w2);
}

// train.save_weights = false: a finished arm leaves no checkpoint, and --resume keeps it all the same
// (its metrics reach the last step, its config is the same run) instead of training it again; an
// arm cut before its end resumes from its periodic checkpoint.
TEST(Compare, ResumeKeepsArmsFinishedWithoutWeights) {
  Fixture f;
  f.cfg.train.save_weights = false;
  f.cfg.train.steps = 4;
  f.cfg.train.checkpoint_every = 2;
  const std::string out = f.dir / "cmp";
  RunConfig matched = f.cfg;
  matched.precision.arm = Arm::FP8Matched;
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 3) throw std::runtime_error("simulated crash");
  };
  compare_arms(f.cfg, {"bf16"}, out, nullptr);
  EXPECT_THROW(train(matched, out + "/fp8-matched", false, *f.ds, nullptr, crash), std::runtime_error);
  EXPECT_FALSE(fs::exists(out + "/bf16/checkpoint.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/bf16/model.safetensors"));
  EXPECT_EQ(read_checkpoint_state(out + "/fp8-matched").step, 2);  // the periodic one
  const std::string bf16_metrics = test::read_file(out + "/bf16/metrics.jsonl");
  RunConfig again = f.cfg;
  again.train.checkpoint_every = 1;  // a schedule key that leaves the trained bits alone
  const auto rows = compare_arms(again, {"bf16", "fp8-matched"}, out, nullptr, CompareMode::Resume);
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), bf16_metrics) << "kept, not trained again";
  EXPECT_FALSE(fs::exists(out + "/fp8-matched/checkpoint.safetensors")) << "finished: no weights stay";
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(std::isfinite(rows[0].val_loss) && std::isfinite(rows[1].val_loss));
  // the resumed arm equals an uninterrupted one
  RunConfig whole = matched;
  train(whole, f.dir / "whole", false, *f.ds, nullptr);
  EXPECT_EQ(rows[1].val_loss, compare_row_from_metrics("fp8-matched", f.dir / "whole").val_loss);
  // a meaning change is still refused
  RunConfig wider = f.cfg;
  wider.model.d_ff = 48;
  EXPECT_THROW(compare_arms(wider, {"bf16"}, out, nullptr, CompareMode::Resume), Error);
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), bf16_metrics);
}

// A compare of bf16 alone into `out` that keeps no weights; its metrics.jsonl.
std::string compare_without_weights(Fixture& f, const std::string& out) {
  f.cfg.train.save_weights = false;
  compare_arms(f.cfg, {"bf16"}, out, nullptr);
  return test::read_file(out + "/bf16/metrics.jsonl");
}

// run() must throw octet::Error with `words` in its message.
template <class F>
void expect_error_naming(F run, const std::string& words) {
  try {
    run();
    ADD_FAILURE() << "no error; expected one naming '" << words << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

// A moved corpus (data.path changed): an arm finished without weights is kept when the text there
// gives the tokens its last evaluation recorded (tokens_hash); other text, at a new path or edited in
// place, is refused before anything is removed or trained (its row would sit in one table with arms
// trained on the new tokens), whatever the order of the arms.
TEST(Compare, ResumeKeepsArmsFinishedWithoutWeightsWhereTheCorpusMoved) {
  Fixture f;
  const std::string out = f.dir / "cmp";
  const std::string metrics = compare_without_weights(f, out);
  EXPECT_NE(metrics.find("\"tokens_hash\""), std::string::npos) << "the evaluation records its corpus";
  const std::string moved_path = f.dir / "moved/corpus.txt";
  fs::create_directories(f.dir / "moved");
  fs::rename(f.dir / "corpus.txt", moved_path);
  RunConfig moved = f.cfg;
  moved.data.path = moved_path;
  compare_arms(moved, {"bf16"}, out, nullptr, CompareMode::Resume);
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), metrics) << "kept, not trained again";
  // other text: refused, and the arm listed first is not trained
  test::write_file(moved_path, test::synthetic_text(400) + " and more");
  expect_error_naming(
      [&] {
        compare_arms(moved, {"fp8-linear", "bf16"}, out, nullptr, CompareMode::Resume);
      },
      "other tokens");
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), metrics) << "nothing removed";
  EXPECT_FALSE(fs::exists(out + "/fp8-linear")) << "nothing trained before the refusal";
}

// --resume checks every arm before it removes or trains any: a meaning change in an arm listed
// last, a file where an arm's folder goes, and an arm folder another octet process holds are refused
// with nothing trained or removed.
TEST(Compare, ResumeChecksEveryArmBeforeTrainingAny) {
  Fixture f;
  const std::string out = f.dir / "cmp";
  const std::string metrics = compare_without_weights(f, out);
  RunConfig wider = f.cfg;
  wider.model.d_ff = 48;
  EXPECT_THROW(compare_arms(wider, {"fp8-linear", "bf16"}, out, nullptr, CompareMode::Resume), Error);
  EXPECT_FALSE(fs::exists(out + "/fp8-linear")) << "a meaning change: nothing trained";
  wider.train.steps += 2;  // with a change that trains the finished arm anew: still refused
  EXPECT_THROW(compare_arms(wider, {"fp8-linear", "bf16"}, out, nullptr, CompareMode::Resume), Error);
  EXPECT_FALSE(fs::exists(out + "/fp8-linear")) << "a meaning change beside more steps: nothing trained";
  test::write_file(out + "/fp8-matched", "my notes");
  expect_error_naming(
      [&] {
        compare_arms(f.cfg, {"bf16", "fp8-matched"}, out, nullptr, CompareMode::Resume);
      },
      "not an arm folder");
  EXPECT_EQ(test::read_file(out + "/fp8-matched"), "my notes");
  fs::remove(out + "/fp8-matched");
  fs::create_directories(out + "/fp8-matched");  // a folder of the user's, no run in it
  test::write_file(out + "/fp8-matched/notes.txt", "mine");
  expect_error_naming(
      [&] {
        compare_arms(f.cfg, {"bf16", "fp8-matched"}, out, nullptr, CompareMode::Resume);
      },
      "holds files but no octet run");
  EXPECT_EQ(test::read_file(out + "/fp8-matched/notes.txt"), "mine");
  fs::remove_all(out + "/fp8-matched");
  {
    // an unfinished arm (no checkpoint, no final evaluation) that another process holds: --resume
    // would train it anew, and must not remove it under that process
    fs::create_directories(out + "/fp8-stale");
    test::write_file(out + "/fp8-stale/config.toml", test::read_file(out + "/bf16/config.toml"));
    train_detail::RunDirLock held(out + "/fp8-stale");
    expect_error_naming(
        [&] {
          compare_arms(f.cfg, {"fp8-linear", "fp8-stale"}, out, nullptr, CompareMode::Resume);
        },
        "in use");
    EXPECT_TRUE(fs::exists(out + "/fp8-stale/config.toml")) << "not removed";
    EXPECT_FALSE(fs::exists(out + "/fp8-linear")) << "nothing trained";
  }
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl"), metrics);
  // with --seeds: a file where an arm's folder of seed folders goes
  const std::string seeds_out = f.dir / "seeds";
  compare_arms(f.cfg, {"bf16"}, seeds_out, nullptr, CompareMode::Fresh, 2);
  test::write_file(seeds_out + "/fp8-linear", "my notes");
  expect_error_naming(
      [&] {
        compare_arms(f.cfg, {"fp8-stale", "fp8-linear"}, seeds_out, nullptr, CompareMode::Resume, 2);
      },
      "not an arm folder");
  EXPECT_FALSE(fs::exists(seeds_out + "/fp8-stale")) << "nothing trained";
}

TEST(Compare, OverwriteKeepsNothingStale) {
  Fixture f;
  const std::string out = f.dir / "cmp";
  compare_arms(f.cfg, {"bf16", "fp8-stale"}, out, nullptr);
  test::write_file(out + "/notes.txt", "mine");
  compare_arms(f.cfg, {"bf16"}, out, nullptr, CompareMode::Overwrite);
  EXPECT_FALSE(fs::exists(out + "/fp8-stale")) << "an earlier arm's folder must not stay";
  EXPECT_EQ(summary(out).size(), 1u);
  EXPECT_TRUE(fs::exists(out + "/notes.txt")) << "only what compare writes is removed";
  EXPECT_EQ(test::read_file(out + "/bf16/metrics.jsonl").find("\"event\""), std::string::npos)
      << "a fresh run, not a resume";
}

// docs/training.md §Output: the max row residual is a check with the matched delta only.
TEST(Compare, TablePrintsMaxResidualOnlyForTheMatchedDelta) {
  CompareRow stale, matched;
  stale.arm = "fp8-stale", stale.row_residual_max = 0.99, stale.row_residual_mean = 2e-2;
  matched.arm = "fp8-matched", matched.row_residual_max = 3e-7, matched.matched_delta = true;
  const std::string t = format_compare_table({stale, matched});
  EXPECT_NE(t.find("| fp8-stale | 0.0000 | 0.0000 | +0.00% | 0.00 | n/a | 2.000e-02 |"), std::string::npos)
      << t;
  EXPECT_NE(t.find("| 3.000e-07 |"), std::string::npos) << t;
}

}  // namespace
