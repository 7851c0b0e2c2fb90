// The per-layer diagnostics of an evaluation (octet/eval.h layer_diagnostics, attention_dq_bias;
// docs/training.md §Output): the sampled rows; the dQ bias along the mean key against identities
// (a row that sees one key: its whole dQ is the row-sum term under the stale delta, none of it under
// the matched one; FP64 ⇒ 0; matched ≪ stale on inputs whose keys share a mean); per-layer kurtosis
// of a known distribution; and the trainer's "layers" records in every arm (matched: residual and
// bias at rounding level in every layer; stale well above; fp32 ⇒ ~0).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/attention.h"
#include "octet/error.h"
#include "octet/eval.h"
#include "octet/train.h"
#include "train_test_util.h"

using namespace octet;

namespace {

std::vector<std::pair<int64_t, int64_t>> pairs(const std::vector<DqSampleBlock>& b) {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (const DqSampleBlock& x : b) v.emplace_back(x.begin, x.end);
  return v;
}

TEST(DqSampleBlocks, FourBlocksOfShortAndLongRows) {
  using P = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(pairs(dq_sample_blocks(1024)), (P{{248, 256}, {504, 512}, {760, 768}, {1016, 1024}}));
  EXPECT_EQ(pairs(dq_sample_blocks(4096)), (P{{1022, 1024}, {2046, 2048}, {3070, 3072}, {4094, 4096}}));
  EXPECT_EQ(pairs(dq_sample_blocks(9000)), (P{{2249, 2250}, {4499, 4500}, {6749, 6750}, {8999, 9000}}));
  EXPECT_EQ(pairs(dq_sample_blocks(16)), (P{{0, 4}, {4, 8}, {8, 12}, {12, 16}}));  // every row
  EXPECT_EQ(pairs(dq_sample_blocks(2)), (P{{0, 1}, {1, 2}}));
  EXPECT_EQ(pairs(dq_sample_blocks(1)), (P{{0, 1}}));
  EXPECT_THROW(dq_sample_blocks(0), Error);
}

// A sample of one sequence from the attention checks' inputs (keys with a non-zero mean).
AttentionSample sample_of(int64_t H, int64_t G, int64_t T, int64_t D, AttnPrecision prec, DeltaMode delta,
                          AttnInputDist dist = AttnInputDist::Normal) {
  AttentionSample s;
  s.shape.batch = 1, s.shape.n_heads = H, s.shape.n_kv_heads = G, s.shape.seq_q = s.shape.seq_k = T;
  s.shape.head_dim = D, s.shape.causal = true;
  s.config.precision = prec;
  s.config.delta = delta;
  const AttentionInputs in = make_attention_inputs(s.shape, dist, 7);
  s.q = in.q, s.k = in.k, s.v = in.v, s.d_o = in.d_o;
  return s;
}

TEST(DqBias, OneKeyRowIsAllBiasStaleAndNoneMatched) {
  // T = 1: dQ_0 = τ dŜ_00 K̂_0 and r_0 = dS_00, so b_0 = |dS_00| / |dŜ_00|: 1 up to the rounding
  // of dS (E5M2: 2^-3 relative at most). Matched: dS_00 = 0 exactly, no row to compare.
  const DqBias stale = attention_dq_bias(sample_of(2, 1, 1, 16, AttnPrecision::FP8, DeltaMode::Stale));
  ASSERT_EQ(stale.rows, 2);
  EXPECT_NEAR(stale.mean, 1.0, 0.125);
  EXPECT_NEAR(stale.norm, 1.0, 0.125);
  const DqBias matched = attention_dq_bias(sample_of(2, 1, 1, 16, AttnPrecision::FP8, DeltaMode::Matched));
  EXPECT_EQ(matched.rows, 0);
  EXPECT_EQ(matched.norm, 0.0);
}

TEST(DqBias, Fp64IsZeroMatchedIsRoundingStaleIsNot) {
  for (AttnInputDist dist : {AttnInputDist::Normal, AttnInputDist::Sink}) {
    SCOPED_TRACE(to_string(dist));
    const DqBias f64 =
        attention_dq_bias(sample_of(4, 2, 64, 32, AttnPrecision::FP64, DeltaMode::Stale, dist));
    const DqBias matched =
        attention_dq_bias(sample_of(4, 2, 64, 32, AttnPrecision::FP8, DeltaMode::Matched, dist));
    const DqBias stale =
        attention_dq_bias(sample_of(4, 2, 64, 32, AttnPrecision::FP8, DeltaMode::Stale, dist));
    EXPECT_EQ(stale.rows, 4 * 64);  // T = 64: every row sampled (4 blocks of 16), every dQ row non-zero
    EXPECT_LT(f64.norm, 1e-13);
    EXPECT_LT(f64.row_residual_mean, 1e-15);
    EXPECT_LT(matched.norm, 1e-5);
    EXPECT_LT(matched.row_residual_mean, 1e-6);
    EXPECT_GT(stale.norm, 100 * matched.norm);
    EXPECT_GT(stale.mean, 100 * matched.mean);
    EXPECT_GT(stale.row_residual_mean, 1e-4);
    EXPECT_GE(stale.max, stale.mean);
  }
}

TEST(DqBias, RejectsASampleWithoutCaptureOrOfTheWrongShape) {
  AttentionSample s = sample_of(2, 2, 8, 16, AttnPrecision::FP8, DeltaMode::Stale);
  s.d_o.clear();
  EXPECT_THROW(attention_dq_bias(s), Error);
  s = sample_of(2, 2, 8, 16, AttnPrecision::FP8, DeltaMode::Stale);
  s.k.pop_back();
  EXPECT_THROW(attention_dq_bias(s), Error);
}

struct Corpus {
  test::TempDir dir{"layerdiag"};
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  Corpus() {
    test::write_file(dir / "corpus.txt", test::synthetic_text(400));
    cfg = test::tiny_run(dir / "corpus.txt", dir / "cache");
    cfg.model.n_layer = 2;
    ds = load_dataset(cfg);
  }
};

TEST(LayerDiagnostics, KurtosisOfAKnownDistributionPerLayer) {
  // Every weight 0 but the embedding, whose rows are +1, −1, +1, ... (d even): each sublayer adds 0,
  // so every layer's output is the embedded tokens, a symmetric two-point distribution: kurtosis
  // m4 / var² = 1 exactly; the pre-norm inputs are the same values times one common rstd.
  Corpus c;
  auto be = make_backend("cpu");
  Model model(c.cfg.model, c.cfg.precision, *be, c.cfg.train.batch_size);
  std::vector<float> p(model.num_params(), 0.0f);
  const ParamInfo& wte = model.param("wte");
  for (size_t i = 0; i < wte.numel; ++i) p[wte.offset + i] = i % 2 ? -1.0f : 1.0f;
  for (const ParamInfo& info : model.params())  // norm gains 1
    if (info.shape.size() == 1 && info.name.find("weight") != std::string::npos)
      for (size_t i = 0; i < info.numel; ++i) p[info.offset + i] = 1.0f;
  model.upload_params(p);
  std::vector<int32_t> ids, targets;
  c.ds->val_batch(0, model.batch(), ids, targets);
  model.set_attention_capture(true);
  model.forward_backward(ids.data(), targets.data(), true, 1.0f);
  const std::vector<LayerReport> r = layer_diagnostics(model);
  ASSERT_EQ(r.size(), 2u);
  for (const LayerReport& l : r) {
    EXPECT_NEAR(l.diag.kurtosis_out, 1.0, 1e-12);
    EXPECT_NEAR(l.diag.kurtosis_attn_in, 1.0, 1e-6);
    EXPECT_NEAR(l.diag.kurtosis_mlp_in, 1.0, 1e-6);
    ASSERT_TRUE(l.attention && l.dq_bias.has_value());
    EXPECT_TRUE(std::isfinite(l.diag.row_residual_max) && l.diag.row_residual_max >= 0);
  }
  // Without capture in the last backward there is no dO to replay: no dq_bias; and with no
  // capturing backward since zero_grad the row residual was not measured: NaN, never 0.
  model.set_attention_capture(false);
  model.forward_backward(ids.data(), targets.data(), true, 1.0f);
  for (const LayerReport& l : layer_diagnostics(model)) EXPECT_FALSE(l.dq_bias.has_value());
  model.zero_grad();
  model.forward_backward(ids.data(), targets.data(), true, 1.0f);
  for (const LayerReport& l : layer_diagnostics(model)) {
    EXPECT_TRUE(std::isnan(l.diag.row_residual_max));
    EXPECT_TRUE(std::isnan(l.diag.row_residual_mean));
  }
}

TEST(LayerDiagnostics, EveryLayerOfEveryArmInMetrics) {
  Corpus c;
  c.cfg.train.steps = 3;
  c.cfg.train.lr = 1e-2f;
  std::map<std::string, std::vector<nlohmann::json>> last;  // arm -> layers of the last evaluation
  for (const std::string arm : {"fp32", "fp8-stale", "fp8-matched"}) {
    RunConfig cfg = c.cfg;
    cfg.precision.arm = parse_arm(arm);
    train(cfg, c.dir / arm, false, *c.ds, nullptr);
    std::ifstream in(c.dir / (arm + "/metrics.jsonl"));
    int evals = 0;
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line);
      if (!j.contains("val_loss")) continue;
      ++evals;
      ASSERT_EQ(j["layers"].size(), 2u);
      last[arm] = j["layers"].get<std::vector<nlohmann::json>>();
    }
    EXPECT_EQ(evals, 1) << arm;  // eval_every 3, steps 3
  }
  for (size_t l = 0; l < 2; ++l) {
    SCOPED_TRACE("layer " + std::to_string(l));
    const auto &f64 = last["fp32"][l], &stale = last["fp8-stale"][l], &matched = last["fp8-matched"][l];
    for (const auto* j : {&f64, &stale, &matched}) {
      EXPECT_EQ((*j)["layer"], l);
      EXPECT_EQ((*j)["mixer"], "attention");
      ASSERT_TRUE((*j)["dq_bias"].is_object());
      EXPECT_GT((*j)["dq_bias"]["rows"].get<int64_t>(), 0);
      EXPECT_GE((*j)["kurtosis_max"].get<double>(), 1.0);  // Pearson: kurtosis >= 1
    }
    EXPECT_LT(f64["row_residual_max"].get<double>(), 1e-12);
    EXPECT_LT(f64["dq_bias"]["norm"].get<double>(), 1e-12);
    EXPECT_TRUE(f64["amax"].is_null());  // FP32 linears: no quantizer
    EXPECT_LE(matched["row_residual_max"].get<double>(), 1e-6);
    EXPECT_LE(matched["dq_bias"]["row_residual_mean"].get<double>(), 1e-6);
    EXPECT_LT(matched["dq_bias"]["norm"].get<double>(), 1e-4);
    EXPECT_GT(stale["row_residual_mean"].get<double>(), 100 * matched["row_residual_mean"].get<double>());
    EXPECT_GT(stale["dq_bias"]["norm"].get<double>(), 100 * matched["dq_bias"]["norm"].get<double>());
    for (const char* op : {"x", "w", "dy"}) EXPECT_GT(stale["amax"][op].get<double>(), 0.0) << op;
    EXPECT_EQ(stale["amax"]["x"].get<double>(), std::max({stale["quant"]["qkv"]["x"]["amax"].get<double>(),
                                                          stale["quant"]["proj"]["x"]["amax"].get<double>(),
                                                          stale["quant"]["fc1"]["x"]["amax"].get<double>(),
                                                          stale["quant"]["fc2"]["x"]["amax"].get<double>()}));
  }
}

}  // namespace
