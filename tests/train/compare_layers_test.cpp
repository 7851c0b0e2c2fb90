// The per-layer part of `octet compare` (compare_layers.cpp): the last evaluation's layers read
// back from metrics.jsonl (absent numbers as NaN), their mean per arm over seeds (NaN left out),
// the JSON and the table; and a two-seed compare whose summary.json carries them per arm.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;

namespace {

TEST(CompareLayers, LastEvaluationReadBackAndAveragedPerArm) {
  test::TempDir dir("cmplayers");
  // run a: two evaluations (the last one counts), a torn line; run b: no dq_bias and no amax
  test::write_file(
      dir / "a/metrics.jsonl",
      R"({"step": 1, "loss": 5, "ms": 1, "tokens_per_s": 1})"
      "\n"
      R"({"step": 1, "val_loss": 5, "layers": [{"layer": 0, "row_residual_mean": 9}]})"
      "\n"
      R"({"step": 2, "val_loss": 4, "layers": [{"layer": 0, "row_residual_mean": 0.25, "row_residual_max": 1,)"
      R"( "dq_bias": {"norm": 0.5, "mean": 0.4, "max": 2}, "kurtosis_max": 3, "amax": {"x": 1, "w": 2, "dy": 3}}]})"
      "\n"
      R"({"step": 3, "val_lo)");
  test::write_file(
      dir / "b/metrics.jsonl",
      R"({"step": 2, "val_loss": 4, "layers": [{"layer": 0, "row_residual_mean": 0.75, "dq_bias": null,)"
      R"( "kurtosis_max": 5, "amax": null}]})"
      "\n");
  const std::vector<LayerFinal> a = final_layers_from_metrics(dir / "a"),
                                b = final_layers_from_metrics(dir / "b");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].v[LayerFinal::RowResidualMean], 0.25);
  EXPECT_EQ(a[0].v[LayerFinal::DqBiasNorm], 0.5);
  EXPECT_EQ(a[0].v[LayerFinal::AmaxDy], 3.0);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_TRUE(std::isnan(b[0].v[LayerFinal::DqBiasNorm]));
  EXPECT_TRUE(std::isnan(b[0].v[LayerFinal::AmaxX]));

  CompareRow ra, rb;
  ra.arm = rb.arm = "fp8-stale";
  const std::vector<CompareArmLayers> arms = compare_arm_layers({ra, rb}, {a, b});
  ASSERT_EQ(arms.size(), 1u);
  EXPECT_EQ(arms[0].runs, 2);
  const LayerFinal& m = arms[0].layers.at(0);
  EXPECT_DOUBLE_EQ(m.v[LayerFinal::RowResidualMean], 0.5);  // (0.25 + 0.75) / 2
  EXPECT_DOUBLE_EQ(m.v[LayerFinal::KurtosisMax], 4.0);
  EXPECT_DOUBLE_EQ(m.v[LayerFinal::DqBiasNorm], 0.5);  // b has none: the mean of what there is
  const auto j = nlohmann::json::parse(compare_layers_json(arms[0].layers));
  EXPECT_EQ(j[0]["layer"], 0);
  EXPECT_EQ(j[0]["dq_bias_norm"], 0.5);
  EXPECT_EQ(j[0].size(), 1 + LayerFinal::kFields);
  const std::string table = format_compare_layers_table(arms);
  EXPECT_NE(table.find("| 0 | fp8-stale | 2 | 5.000e-01 | 5.000e-01 |"), std::string::npos) << table;
  EXPECT_THROW(compare_arm_layers({ra}, {a, b}), Error);
  EXPECT_THROW(final_layers_from_metrics(dir / "none"), Error);
}

TEST(CompareLayers, SeedsSummaryHoldsTheMeanPerArmAndLayer) {
  test::TempDir dir("cmplayers-seeds");
  test::write_file(dir / "corpus.txt", test::synthetic_text(400));
  RunConfig cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
  cfg.train.steps = 3;
  const auto rows =
      compare_arms(cfg, {"fp8-stale", "fp8-matched"}, dir / "cmp", nullptr, CompareMode::Fresh, 2);
  ASSERT_EQ(rows.size(), 4u);
  std::ifstream in(dir / "cmp/summary.json");
  const auto s = nlohmann::json::parse(in);
  ASSERT_EQ(s.size(), 2u);
  for (size_t a = 0; a < 2; ++a) {
    const std::string arm = s[a]["arm"];
    ASSERT_EQ(s[a]["layers"].size(), 1u) << arm;
    double sum = 0;  // the mean of the two seeds' final row residual means
    for (uint64_t seed : {cfg.train.seed, cfg.train.seed + 1})
      sum += final_layers_from_metrics(dir / ("cmp/" + arm + "/seed-" + std::to_string(seed)))
                 .at(0)
                 .v[LayerFinal::RowResidualMean];
    EXPECT_DOUBLE_EQ(s[a]["layers"][0]["row_residual_mean"].get<double>(), sum / 2) << arm;
  }
  EXPECT_GT(s[0]["layers"][0]["dq_bias_norm"].get<double>(),
            100 * s[1]["layers"][0]["dq_bias_norm"].get<double>());
}

}  // namespace
