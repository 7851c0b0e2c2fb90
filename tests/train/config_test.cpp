// Run configuration: TOML sections and --set overrides reach the right fields; unknown keys, wrong
// types and out-of-range values are rejected with a message naming the key; to_toml round-trips.
#include <gtest/gtest.h>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Config, TomlSectionsAndOverrides) {
  test::TempDir dir("config");
  test::write_file(dir / "c.toml",
                   "device = \"cpu\"\n[model]\nn_layer = 3\nnorm = \"layernorm\"\nqk_norm = true\n"
                   "[precision]\narm = \"fp8-stale\"\nrecipe = \"block\"\nformats = \"hybrid\"\n"
                   "[train]\nlr = 0.002\nsteps = 7\n[data]\npath = \"x.txt\"\ntokenizer = \"byte\"\n");
  const RunConfig c = load_config(dir / "c.toml", {"model.d_model=64", "train.lr=1e-3"});
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_EQ(c.model.norm, NormKind::LayerNorm);
  EXPECT_TRUE(c.model.qk_norm);
  EXPECT_EQ(c.precision.arm, Arm::FP8Stale);
  EXPECT_EQ(c.precision.quant.recipe, Recipe::Block);
  EXPECT_EQ(c.precision.quant.formats, FormatPolicy::Hybrid);
  EXPECT_FLOAT_EQ(c.train.lr, 1e-3f);  // the override wins
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.data.path, "x.txt");
}

TEST(Config, RoundTripsThroughToml) {
  test::TempDir dir("config-rt");
  RunConfig c = load_config("", {"model.n_layer=5", "precision.arm=fp8-matched", "data.path=a b\"c",
                                 "train.lr=0.00123", "model.positions=nope", "data.tokenizer=byte"});
  test::write_file(dir / "rt.toml", to_toml(c));
  const RunConfig d = load_config(dir / "rt.toml");
  EXPECT_EQ(config_rows(c), config_rows(d));
}

TEST(Config, RejectsBadInputNamingTheKey) {
  test::TempDir dir("config-bad");
  test::write_file(dir / "unknown.toml", "[model]\nn_layers = 2\n");
  EXPECT_NE(error_of([&] { load_config(dir / "unknown.toml"); }).find("model.n_layers"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"model.n_layer=two"}); }).find("model.n_layer"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"model.n_head=5"}); }).find("n_head"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"model.n_kv_head=3"}); }).find("n_kv_head"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"model.seq_len=0"}); }).find("seq_len"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"train.lr=-1"}); }).find("train.lr"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"precision.arm=fp4"}); }).find("fp4"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"data.tokenizer=byte", "model.vocab_size=100"}); })
                .find("vocab_size"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"novalue"}); }).find("key=value"), std::string::npos);
  test::write_file(dir / "syntax.toml", "[model\nn_layer = 2\n");
  EXPECT_NE(error_of([&] { load_config(dir / "syntax.toml"); }).find("cannot parse"), std::string::npos);
  EXPECT_NE(error_of([&] { load_config(dir / "missing.toml"); }), "");
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  TrainConfig t;
  t.steps = 100;
  t.warmup_steps = 10;
  t.lr = 1.0f;
  t.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(learning_rate(t, 0), 0.1f);
  EXPECT_FLOAT_EQ(learning_rate(t, 9), 1.0f);
  EXPECT_FLOAT_EQ(learning_rate(t, 10), 1.0f);
  EXPECT_NEAR(learning_rate(t, 99), 0.1f, 1e-6);
  // Midpoint of the cosine: (lr + floor) / 2.
  EXPECT_NEAR(learning_rate(t, 10 + 89 / 2), 0.55, 0.02);
  for (int64_t s = 10; s < 99; ++s) EXPECT_GE(learning_rate(t, s), learning_rate(t, s + 1));
}

}  // namespace
