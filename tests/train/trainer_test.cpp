// The trainer end to end on a tiny byte-level run: determinism (same seed and config ⇒ identical
// losses), bitwise resume after a crash, NaN/inf step skipping and the stop after max_bad_steps with
// the last good checkpoint intact, corrupt checkpoints rejected, the metrics file, and compare.
// Resume is tested for a stateless FP8 recipe and for tensor-delayed scaling (amax histories saved).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  test::TempDir dir{"trainer"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  Fixture() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
    ds = load_dataset(cfg);
  }
};

std::vector<nlohmann::json> read_metrics(const std::string& run) {
  std::vector<nlohmann::json> v;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

TEST(Trainer, DeterministicAndLearns) {
  Fixture f;
  f.cfg.train.steps = 12;
  f.cfg.train.lr = 1e-2f;
  const TrainResult a = train(f.cfg, f.dir / "a", false, *f.ds, nullptr);
  const TrainResult b = train(f.cfg, f.dir / "b", false, *f.ds, nullptr);
  ASSERT_EQ(a.train_loss.size(), 12u);
  EXPECT_EQ(a.train_loss, b.train_loss);  // bitwise
  EXPECT_EQ(a.val_loss, b.val_loss);
  EXPECT_LT(a.train_loss.back(), a.train_loss.front() - 1.0) << "loss must drop from ~ln 256";
  // metrics.jsonl: one line per step with the documented keys, eval lines with per-layer data.
  const auto m = read_metrics(f.dir / "a");
  int steps = 0, evals = 0;
  for (const auto& j : m) {
    if (j.contains("val_loss")) {
      ++evals;
      ASSERT_EQ(j["layers"].size(), 1u);
      EXPECT_TRUE(j["layers"][0].contains("kurtosis"));
      EXPECT_TRUE(j["layers"][0].contains("row_residual_max"));
    } else {
      ++steps;
      for (const char* k : {"step", "loss", "grad_norm", "lr", "tokens_per_s"})
        EXPECT_TRUE(j.contains(k)) << k;
    }
  }
  EXPECT_EQ(steps, 12);
  EXPECT_EQ(evals, 4);  // every 3 steps
  EXPECT_TRUE(fs::exists(f.dir / "a/model.safetensors"));
  EXPECT_TRUE(fs::exists(f.dir / "a/config.toml"));
}

// One run into dir_a, then `key = value`, and the same run into dir_b: both must train the same
// losses bit for bit (keys that change what is kept, not what is computed). Returns the second run.
TrainResult expect_same_run_with(Fixture& f, int64_t steps, const char* key, const char* value,
                                 const char* dir_a, const char* dir_b) {
  f.cfg.train.steps = steps;
  const TrainResult a = train(f.cfg, f.dir / dir_a, false, *f.ds, nullptr);
  set_config_value(f.cfg, key, value);
  const TrainResult b = train(f.cfg, f.dir / dir_b, false, *f.ds, nullptr);
  EXPECT_EQ(a.train_loss, b.train_loss);
  EXPECT_EQ(a.val_loss, b.val_loss);
  return b;
}

// train.save_weights = false: the same run, its metrics and config written, no weights or checkpoint.
TEST(Trainer, SaveWeightsFalseWritesMetricsOnly) {
  Fixture f;
  expect_same_run_with(f, 4, "train.save_weights", "false", "kept", "metrics-only");
  EXPECT_FALSE(f.cfg.train.save_weights);
  EXPECT_TRUE(fs::exists(f.dir / "kept/model.safetensors"));
  EXPECT_TRUE(fs::exists(f.dir / "kept/checkpoint.safetensors"));
  // the fixture's periodic checkpoints were written during the run and removed at its end
  EXPECT_GT(f.cfg.train.checkpoint_every, 0);
  EXPECT_FALSE(fs::exists(f.dir / "metrics-only/model.safetensors"));
  EXPECT_FALSE(fs::exists(f.dir / "metrics-only/checkpoint.safetensors"));
  EXPECT_EQ(read_metrics(f.dir / "metrics-only").size(), read_metrics(f.dir / "kept").size());
  EXPECT_TRUE(fs::exists(f.dir / "metrics-only/config.toml"));
  // A run with weights extended with save_weights = false: its earlier model.safetensors (step 4's
  // weights, not the run's result) does not stay either.
  RunConfig longer = f.cfg;  // save_weights already false
  longer.train.steps = 6;
  train(longer, f.dir / "kept", true, *f.ds, nullptr);
  EXPECT_FALSE(fs::exists(f.dir / "kept/model.safetensors"));
  EXPECT_FALSE(fs::exists(f.dir / "kept/checkpoint.safetensors"));
}

// train.activation_checkpointing (model.h ModelMemory): the run is bitwise the one without it; its
// evaluation records carry no per-layer diagnostics (they need every layer's activations).
TEST(Trainer, ActivationCheckpointingIsBitwiseTheSameRun) {
  Fixture f;
  const TrainResult b =
      expect_same_run_with(f, 6, "train.activation_checkpointing", "true", "keep", "recompute");
  EXPECT_TRUE(f.cfg.train.activation_checkpointing);
  EXPECT_TRUE(load_config(f.dir / "recompute/config.toml").train.activation_checkpointing);
  int evals = 0;
  for (const auto& j : read_metrics(f.dir / "recompute"))
    if (j.contains("val_loss")) {  // not computed: null, never a 0 that reads as measured
      ++evals;
      EXPECT_TRUE(j["layers"].empty());
      EXPECT_TRUE(j["kurtosis_max"].is_null());
      EXPECT_TRUE(j["row_residual_max"].is_null());
      EXPECT_EQ(j["layer_diagnostics"], "off (activation checkpointing)");
    }
  EXPECT_TRUE(std::isnan(b.kurtosis_max));
  const CompareRow row = compare_row_from_metrics("fp8-matched", f.dir / "recompute");
  EXPECT_TRUE(std::isnan(row.kurtosis_max) && std::isnan(row.row_residual_max));
  EXPECT_NE(format_compare_table({row}).find("| n/a |"), std::string::npos);
  EXPECT_EQ(evals, 2);
  EXPECT_THROW(set_config_value(f.cfg, "train.activation_checkpointing", "maybe"), Error);
}

// Runs cfg uninterrupted in <dir>/full and crashed at step 4 in <dir>/crashed (checkpoint of step 3
// kept, copied to <dir>/step3), resumes the crashed run and expects its losses and metrics to equal the full
// run's bitwise.
void expect_bitwise_resume(const RunConfig& cfg, Dataset& ds, const test::TempDir& dir) {
  const TrainResult full = train(cfg, dir / "full", false, ds, nullptr);
  TrainHooks crash;
  crash.after_backward = [](int64_t step, Model&) {
    if (step == 4) throw std::runtime_error("simulated crash");
  };
  EXPECT_THROW(train(cfg, dir / "crashed", false, ds, nullptr, crash), std::runtime_error);
  fs::create_directories(dir / "step3");  // a copy of the checkpoint the resume starts from
  fs::copy_file(dir / "crashed/checkpoint.safetensors", dir / "step3/checkpoint.safetensors");
  const TrainResult rest = train(cfg, dir / "crashed", true, ds, nullptr);
  ASSERT_EQ(rest.train_loss.size(), 3u);  // steps 4..6 after the checkpoint at step 3
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest.train_loss[i], full.train_loss[3 + i]) << i;
  EXPECT_EQ(rest.final_val_loss, full.final_val_loss);
  // The metrics of the resumed run read like the uninterrupted one, plus the resume's event record.
  const auto a = read_metrics(dir / "full");
  auto b = read_metrics(dir / "crashed");
  const auto ev = std::find_if(b.begin(), b.end(), [](const auto& j) { return j.contains("event"); });
  ASSERT_NE(ev, b.end());
  EXPECT_EQ((*ev)["event"], "resume");
  EXPECT_EQ((*ev)["step"], 3);
  EXPECT_TRUE((*ev)["changes"].empty());
  b.erase(ev);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].value("loss", 0.0), b[i].value("loss", 0.0)) << i;
}

TEST(Trainer, ActivationsAutoResolvesToTheBackendsDtypeAndBf16Trains) {
  Fixture f;
  EXPECT_EQ(f.cfg.activations, "auto");
  const TrainResult a = train(f.cfg, f.dir / "auto", false, *f.ds, nullptr);
  // config.toml records the resolved value (the CPU backend prefers f32), and it reloads.
  EXPECT_EQ(load_config(f.dir / "auto/config.toml").precision.activations, DType::F32);
  EXPECT_EQ(load_config(f.dir / "auto/config.toml").activations, "f32");
  set_config_value(f.cfg, "precision.activations", "bf16");
  EXPECT_EQ(f.cfg.precision.activations, DType::BF16);
  const TrainResult b = train(f.cfg, f.dir / "bf16", false, *f.ds, nullptr);
  EXPECT_EQ(load_config(f.dir / "bf16/config.toml").precision.activations, DType::BF16);
  ASSERT_EQ(a.train_loss.size(), b.train_loss.size());
  EXPECT_NE(a.train_loss.back(), b.train_loss.back());  // BF16 storage rounds
  EXPECT_NEAR(b.train_loss[0], a.train_loss[0], 1e-2 * a.train_loss[0]);
  EXPECT_LT(b.train_loss.back(), b.train_loss[0]);
  EXPECT_THROW(set_config_value(f.cfg, "precision.activations", "e4m3"), Error);
}

TEST(Trainer, ResumeAfterCrashIsBitwiseIdentical) {
  Fixture f;
  f.cfg.precision.arm = Arm::FP8Matched;  // stateless FP8 recipe (tensor-current) + FP8 attention
  expect_bitwise_resume(f.cfg, *f.ds, f.dir);
  // A stateless recipe keeps no quantizer state: the checkpoint has no "quant." tensors.
  for (const auto& [name, t] : read_safetensors(f.dir / "step3/checkpoint.safetensors").tensors)
    EXPECT_NE(name.rfind("quant.", 0), 0u) << name;
}

TEST(Trainer, ResumeWithDelayedScalingIsBitwiseIdentical) {
  Fixture f;
  f.cfg.precision.arm = Arm::FP8Linear;
  f.cfg.precision.quant.recipe = Recipe::TensorDelayed;
  f.cfg.precision.quant.formats = FormatPolicy::Hybrid;
  // Full by the checkpoint of step 3: one update per optimizer step (3) plus one after the
  // evaluation at step 3 (X and W only: an evaluation has no backward).
  f.cfg.precision.quant.amax_history_len = 3;
  expect_bitwise_resume(f.cfg, *f.ds, f.dir);

  // The checkpoint holds each FP8 linear's three slots [n, history, scale, overflow count].
  const std::string ck = f.dir / "step3/checkpoint.safetensors";
  StFile file = read_safetensors(ck);
  for (const char* lin : {"qkv", "proj", "fc1", "fc2"}) {
    const std::string key = std::string("quant.h.0.") + (lin[0] == 'f' ? "mlp." : "attn.") + lin;
    ASSERT_TRUE(file.tensors.count(key)) << key;
    const std::vector<float> q = st_to_f32(file.tensors[key]);
    ASSERT_EQ(q.size(), 3u * (3 + 3)) << key;  // every history is full
    for (size_t slot = 0; slot < 3; ++slot) EXPECT_EQ(q[slot * 6], 3.0f) << key << " slot " << slot;
  }

  // The test has teeth: the same checkpoint without its quantizer states (what resume did before
  // they were saved) restarts the histories and continues differently.
  test::TempDir stripped{"stripped"};
  for (auto it = file.tensors.begin(); it != file.tensors.end();)
    it = it->first.rfind("quant.", 0) == 0 ? file.tensors.erase(it) : std::next(it);
  file.metadata.erase("octet_checksum");
  write_safetensors(stripped / "checkpoint.safetensors", file);
  fs::copy_file(f.dir / "full/config.toml", stripped / "config.toml");
  const TrainResult fresh = train(f.cfg, stripped.str(), true, *f.ds, nullptr);
  const TrainResult full = train(f.cfg, f.dir / "full2", false, *f.ds, nullptr);
  ASSERT_EQ(fresh.train_loss.size(), 3u);
  bool differs = false;
  for (size_t i = 0; i < 3; ++i) differs |= fresh.train_loss[i] != full.train_loss[3 + i];
  EXPECT_TRUE(differs) << "restarted histories must change the resumed losses";

  // A checkpoint of another recipe, or with a wrong-sized state, does not load.
  auto be = make_cpu_backend();
  Model m(f.cfg.model, f.cfg.precision, *be, f.cfg.train.batch_size);
  std::vector<float> am, av;
  PrecisionConfig current = f.cfg.precision;
  current.quant.recipe = Recipe::TensorCurrent;
  Model stateless(f.cfg.model, current, *be, f.cfg.train.batch_size);
  EXPECT_THROW(load_checkpoint(f.dir / "step3", stateless, am, av), Error);
  file = read_safetensors(ck);
  std::vector<float> q = st_to_f32(file.tensors["quant.h.0.mlp.fc1"]);
  q.push_back(0.0f);
  file.tensors["quant.h.0.mlp.fc1"] = st_f32({int64_t(q.size())}, q.data());
  file.metadata.erase("octet_checksum");
  write_safetensors(stripped / "checkpoint.safetensors", file);
  try {
    load_checkpoint(stripped.str(), m, am, av);
    ADD_FAILURE() << "a wrong-sized quantizer state must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("h.0.mlp.fc1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("left over"), std::string::npos) << e.what();
  }
}

TEST(Trainer, SkipsNonFiniteStepsAndStopsAfterTooMany) {
  Fixture f;
  TrainHooks poison_once;
  poison_once.after_backward = [](int64_t step, Model& m) {
    if (step == 1) {
      std::vector<float> nan(1, NAN);
      m.backend().upload(m.grad_data().slice(0, 1), nan.data());
    }
  };
  const TrainResult r = train(f.cfg, f.dir / "once", false, *f.ds, nullptr, poison_once);
  EXPECT_EQ(r.skipped_steps, 1);
  EXPECT_TRUE(std::isnan(r.train_loss[1]));
  EXPECT_TRUE(std::isfinite(r.final_val_loss));

  f.cfg.train.max_bad_steps = 2;
  TrainHooks poison_late;
  poison_late.after_backward = [](int64_t step, Model& m) {
    if (step >= 3) {
      std::vector<float> inf(1, INFINITY);
      m.backend().upload(m.grad_data().slice(0, 1), inf.data());
    }
  };
  EXPECT_THROW(train(f.cfg, f.dir / "stop", false, *f.ds, nullptr, poison_late), TrainingStopped);
  // The checkpoint of step 3 is intact and resumable.
  auto be = make_cpu_backend();
  Model m(f.cfg.model, f.cfg.precision, *be, f.cfg.train.batch_size);
  std::vector<float> am, av;
  const TrainState st = load_checkpoint(f.dir / "stop", m, am, av);
  EXPECT_EQ(st.step, 3);
  EXPECT_EQ(st.skipped_steps, 0);
}

TEST(Trainer, CorruptCheckpointIsRejected) {
  Fixture f;
  f.cfg.train.steps = 3;
  train(f.cfg, f.dir / "run", false, *f.ds, nullptr);
  const std::string ck = f.dir / "run/checkpoint.safetensors";
  const auto size = fs::file_size(ck);
  {
    std::fstream io(ck, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(std::streamoff(size - 100));
    const int byte = io.get();  // flip every bit: a fixed value could equal the byte already there
    io.seekp(std::streamoff(size - 100));
    io.put(char(byte ^ 0xFF));
  }
  EXPECT_THROW(train(f.cfg, f.dir / "run", true, *f.ds, nullptr), Error);
  fs::resize_file(ck, size / 2);
  EXPECT_THROW(train(f.cfg, f.dir / "run", true, *f.ds, nullptr), Error);
  // A checkpoint of another architecture does not load either.
  train(f.cfg, f.dir / "other", false, *f.ds, nullptr);
  RunConfig wider = f.cfg;
  wider.model.d_ff = 48;
  EXPECT_THROW(train(wider, f.dir / "other", true, *f.ds, nullptr), Error);
}

TEST(Compare, ArmsSideBySide) {
  Fixture f;
  f.cfg.train.steps = 3;
  const auto rows = compare_arms(f.cfg, {"bf16", "fp8-matched"}, f.dir / "cmp", nullptr);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].gap_pct, 0.0);
  EXPECT_NEAR(rows[1].gap_pct, 100.0 * (rows[1].val_loss - rows[0].val_loss) / rows[0].val_loss, 1e-9);
  std::ifstream in(f.dir / "cmp/summary.json");
  const auto s = nlohmann::json::parse(in);
  ASSERT_EQ(s.size(), 2u);
  for (const char* k :
       {"arm", "train_loss", "val_loss", "gap_pct", "kurtosis_max", "row_residual_max", "tokens_per_s"})
    EXPECT_TRUE(s[1].contains(k)) << k;
  EXPECT_EQ(s[1]["arm"], "fp8-matched");
  EXPECT_TRUE(fs::file_size(f.dir / "cmp/curves.png") > 1000);
  EXPECT_THROW(compare_arms(f.cfg, {"bf16", "fp9"}, f.dir / "cmp2", nullptr), Error);
  EXPECT_FALSE(fs::exists(f.dir / "cmp2")) << "bad input must not create output";
}

}  // namespace
