// Resuming a run whose config.toml was edited by hand (docs/training.md §Resume): a meaning key
// changed in the file is refused as the same change through --set is, with one error naming the key
// (also for a key that changes a shape, before any shape error), and nothing is written; a schedule
// key changed in the file is a resume like --set; a checkpoint that records no meaning keys (written
// before octet recorded them) still resumes.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;
namespace fs = std::filesystem;

namespace {

using test::error_of;
using test::snapshot;

// config.toml with the line `name = ...` (one TOML table's key) set to `name = value`.
void edit_config(const std::string& run, const std::string& name, const std::string& value) {
  const std::string path = run + "/config.toml";
  const std::string text = test::read_file(path);
  const std::regex line("(^|\n)" + name + " = [^\n]*");
  ASSERT_TRUE(std::regex_search(text, line)) << name;
  test::write_file(path, std::regex_replace(text, line, "$1" + name + " = " + value));
}

struct FinishedRun {
  test::TempDir dir{"resume-edited"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  std::string run;
  FinishedRun() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
    cfg.train.steps = 3;
    ds = load_dataset(cfg);
    run = dir / "run";
    train(cfg, run, false, *ds, nullptr);
  }
};

TEST(ResumeEditedConfig, AMeaningKeyEditedInConfigTomlIsRefusedNamingTheKey) {
  // (key, value in the file): values that change what the run computes without changing a shape
  for (const auto& [key, name, value] :
       {std::tuple<std::string, std::string, std::string>{"train.beta2", "beta2", "0.5"},
        {"model.rope_theta", "rope_theta", "500.0"},
        {"precision.arm", "arm", "\"fp8-matched\""}}) {
    FinishedRun fresh;
    edit_config(fresh.run, name, value);
    const auto before = snapshot(fresh.run);
    const std::string planned = error_of([&] { plan_resume(fresh.run, {"train.steps=6"}); });
    EXPECT_NE(planned.find("cannot resume " + fresh.run + " with " + key + " = "), std::string::npos)
        << planned;
    EXPECT_NE(planned.find("checkpoint was trained with " + key + " = "), std::string::npos) << planned;
    // The library path (train with the edited file's config) refuses it too, before any write.
    RunConfig edited = load_config(fresh.run + "/config.toml", {"train.steps=6"});
    const std::string trained = error_of([&] { train(edited, fresh.run, true, *fresh.ds, nullptr); });
    EXPECT_NE(trained.find(key), std::string::npos) << trained;
    EXPECT_EQ(snapshot(fresh.run), before) << key;
  }
}

TEST(ResumeEditedConfig, AShapeKeyEditedInConfigTomlIsNamedNotAShapeError) {
  FinishedRun r;
  edit_config(r.run, "d_model", std::to_string(r.cfg.model.d_model * 2));
  RunConfig edited = load_config(r.run + "/config.toml", {"train.steps=6"});
  const std::string e = error_of([&] { train(edited, r.run, true, *r.ds, nullptr); });
  EXPECT_NE(e.find("model.d_model"), std::string::npos) << e;
  EXPECT_EQ(e.find("shape"), std::string::npos) << e;
}

TEST(ResumeEditedConfig, AScheduleKeyEditedInConfigTomlResumes) {
  FinishedRun r;
  edit_config(r.run, "steps", "5");
  const ResumePlan plan = plan_resume(r.run, {});
  EXPECT_FALSE(plan.complete());
  EXPECT_EQ(plan.config.train.steps, 5);
  train(plan.config, r.run, true, *r.ds, nullptr);
  EXPECT_EQ(read_checkpoint_state(r.run).step, 5);
}

TEST(ResumeEditedConfig, ACheckpointRecordingNoMeaningKeysStillResumes) {
  FinishedRun r;
  const std::string file = r.run + "/checkpoint.safetensors";
  StFile f = read_safetensors(file);
  nlohmann::json state = nlohmann::json::parse(f.metadata.at("octet_state"));
  ASSERT_TRUE(state.contains("meaning"));
  EXPECT_EQ(state["meaning"].at("train.beta2"), meaning_values(r.cfg).at("train.beta2"));
  EXPECT_EQ(state["meaning"].count("train.lr"), 0u) << "a schedule key is not recorded";
  state.erase("meaning");
  f.metadata["octet_state"] = state.dump();
  write_safetensors(file, f);
  EXPECT_TRUE(peek_checkpoint_state(r.run).meaning.empty());
  const ResumePlan plan = plan_resume(r.run, {"train.steps=4"});
  train(plan.config, r.run, true, *r.ds, nullptr);
  EXPECT_EQ(read_checkpoint_state(r.run).step, 4);
  EXPECT_FALSE(read_checkpoint_state(r.run).meaning.empty()) << "the new checkpoint records them";
}

}  // namespace

// --set precision.attn_form=auto (or activations=auto) on a resume keeps the run's own resolution
// (config.toml records it): no change is reported and nothing is refused.
TEST(ResumeEditedConfig, AutoOnAResumeKeepsTheRunsResolution) {
  FinishedRun r;
  const ResumePlan plan =
      plan_resume(r.run, {"precision.attn_form=auto", "precision.activations=auto", "train.steps=4"});
  EXPECT_NE(plan.config.attn_form, "auto");
  EXPECT_NE(plan.config.activations, "auto");
  ASSERT_EQ(plan.changes.size(), 1u);
  EXPECT_EQ(plan.changes[0].key, "train.steps");
}
