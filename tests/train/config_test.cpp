// Run configuration: TOML sections and --set overrides reach the right fields; unknown keys, wrong
// types and out-of-range values are rejected with a message naming the key; to_toml round-trips.
#include <gtest/gtest.h>

#include "octet/error.h"
#include "octet/names.h"
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

// The one p_scale rule (attention.h, validate_p_scale): a power of two in [1, 256], since P = 1
// times p_scale must stay below E4M3's 448. 512 used to pass the config and fail in the model.
TEST(Config, PScaleIsAPowerOfTwoInOneTo256) {
  for (const char* ok : {"1", "2", "128", "256"})
    EXPECT_EQ(error_of([&] { load_config("", {"data.tokenizer=byte", std::string("precision.p_scale=") + ok}); }), "") << ok;
  for (const char* bad : {"512", "448", "100", "0.5", "0", "-256"})
    EXPECT_NE(error_of([&] { load_config("", {std::string("precision.p_scale=") + bad}); })
                  .find("precision.p_scale must be a power of two in [1, 256]"),
              std::string::npos)
        << bad;
  AttentionConfig a;
  a.p_scale = 512.0f;
  EXPECT_NE(error_of([&] { a.validate(); }).find("p_scale must be a power of two"), std::string::npos);
}

// What the model would reject only when built is rejected by RunConfig::validate, with the same
// rules (validate_model_precision): a zero batch, a bad quantizer setting, an attention shape.
TEST(Config, ModelPrecisionCrossChecksRunUpFront) {
  EXPECT_NE(error_of([&] { load_config("", {"train.batch_size=0"}); }).find("train.batch_size"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"precision.amax_history_len=0"}); })
                .find("precision.amax_history_len must be >= 1"),
            std::string::npos);
  EXPECT_NE(error_of([&] { load_config("", {"precision.margin=40"}); }).find("precision.margin"),
            std::string::npos);
  RunConfig c = load_config("", {"data.tokenizer=byte", "model.n_head=4", "model.n_kv_head=2"});
  const AttentionShape shape = attention_shape(c.model, c.train.batch_size);
  EXPECT_EQ(shape.n_heads, 4);
  EXPECT_EQ(shape.n_kv_heads, 2);
  EXPECT_EQ(shape.head_dim, c.model.d_model / 4);
  EXPECT_EQ(shape.batch, c.train.batch_size);
  EXPECT_TRUE(shape.causal);
  c.precision.p_scale = 1024.0f;  // set behind the parser's back: validate() still catches it
  EXPECT_NE(error_of([&] { c.validate(); }).find("p_scale"), std::string::npos);
}

// Enum keys print and parse through the one name table: every name round-trips through TOML.
TEST(Config, EnumKeysRoundTripEveryName) {
  for (const std::string& arm : enum_names<Arm>())
    for (const std::string& recipe : enum_names<Recipe>()) {
      const RunConfig c =
          load_config("", {"data.tokenizer=byte", "precision.arm=" + arm, "precision.recipe=" + recipe});
      EXPECT_EQ(enum_name(c.precision.arm), arm);
      EXPECT_EQ(enum_name(c.precision.quant.recipe), recipe);
    }
  for (const std::string& algo : enum_names<AmaxAlgo>())
    EXPECT_EQ(enum_name(load_config("", {"data.tokenizer=byte", "precision.amax_algo=" + algo}).precision.quant.amax_algo), algo);
  for (const std::string& q : enum_names<QkvScaling>())
    EXPECT_EQ(enum_name(load_config("", {"data.tokenizer=byte", "precision.qkv_scaling=" + q}).precision.qkv_scaling), q);
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
