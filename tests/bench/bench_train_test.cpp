// `octet bench train`'s models, batches and row fields (octet/bench.h), on the CPU backend.
//  - Parameter counts: the named models' shapes reproduce the published GPT-2 parameter counts
//    (Hugging Face's gpt2, gpt2-medium, gpt2-large: 124,439,808 / 354,823,168 / 774,030,080 with
//    vocab 50257, 1024 positions and the linear biases octet's block leaves out), 1.3b lands at
//    GPT-3 XL's 1.3B, and a Model built from each config's width has exactly the closed-form count
//    (built with 1 and 2 layers and a small vocabulary: the count is linear in both, and the full
//    models would need GBs of host memory).
//  - FLOPs per token: 6·N_matmul + 12·L·T·d (PaLM), with N_matmul by hand.
//  - bench_batch: --model-batch over --tokens-per-step (per optimizer step, divided over
//    --grad-accum micro-batches) over --batch; bad values rejected by name.
//  - bench_train on the tiny model: the row's tokens/s, TFLOP/s and MFU against both peaks follow
//    from its step time; no memory figure on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "octet/backend.h"
#include "octet/bench.h"
#include "octet/error.h"
#include "octet/model.h"

using namespace octet;

namespace {

// The closed form of octet's GPT-2 block: token and position embeddings, per layer qkv, proj, fc1,
// fc2 (no biases) and two LayerNorms (gain and bias), the final LayerNorm; the LM head is tied.
int64_t gpt2_params(const ModelConfig& c) {
  const int64_t d = c.d_model, f = c.d_ff;
  return c.vocab_size * d + c.seq_len * d + c.n_layer * (4 * d * d + 2 * d * f + 4 * d) + 2 * d;
}

TEST(BenchTrainModels, ShapesAreGpt2AndGpt3Family) {
  struct Want {
    const char* name;
    int64_t layers, d, heads, ff;
  };
  for (const Want& w : {Want{"gpt2-small", 12, 768, 12, 3072}, Want{"350m", 24, 1024, 16, 4096},
                        Want{"760m", 36, 1280, 20, 5120}, Want{"1.3b", 24, 2048, 16, 8192}}) {
    const ModelConfig c = bench_model_config(w.name, 50304, 1024);
    EXPECT_EQ(c.n_layer, w.layers) << w.name;
    EXPECT_EQ(c.d_model, w.d) << w.name;
    EXPECT_EQ(c.n_head, w.heads) << w.name;
    EXPECT_EQ(c.n_kv_head, w.heads) << w.name;
    EXPECT_EQ(c.d_ff, w.ff) << w.name;
    EXPECT_TRUE(c.head_dim() == 64 || c.head_dim() == 128) << w.name << ": the fused attention's sizes";
  }
  EXPECT_EQ(bench_model_config("1.3b", 50304, 1024).head_dim(), 128);
  EXPECT_EQ(bench_model_config("760m", 50304, 4096).seq_len, 4096);
  EXPECT_THROW(bench_model_config("7b", 50304, 1024), Error);
}

TEST(BenchTrainModels, ParameterCountsMatchPublishedGpt2) {
  // Hugging Face's GPT-2 adds biases to qkv (3d), proj (d), fc1 (4d) and fc2 (d): 9d per layer.
  const auto hf = [](const char* name) {
    const ModelConfig c = bench_model_config(name, 50257, 1024);
    return gpt2_params(c) + c.n_layer * 9 * c.d_model;
  };
  EXPECT_EQ(hf("gpt2-small"), 124439808);
  EXPECT_EQ(hf("350m"), 354823168);
  EXPECT_EQ(hf("760m"), 774030080);
  // GPT-3 XL (2048 positions): "1.3B" in Brown et al. 2020, table 2.1.
  const double xl = double(gpt2_params(bench_model_config("1.3b", 50257, 2048)));
  EXPECT_NEAR(xl / 1.3e9, 1.0, 0.02) << xl;
  // The named sizes with octet's vocabulary (50304) and no biases.
  EXPECT_EQ(gpt2_params(bench_model_config("760m", 50304, 1024)), 773675520);
  EXPECT_EQ(gpt2_params(bench_model_config("1.3b", 50304, 1024)), 1313280000);
  EXPECT_EQ(gpt2_params(bench_model_config("2.7b", 50304, 1024)), 2648314880);
  // GPT-3 2.7B (2048 positions, GPT-2's vocabulary): "2.7B" in Brown et al. 2020, table 2.1.
  const double g27 = double(gpt2_params(bench_model_config("2.7b", 50257, 2048)));
  EXPECT_NEAR(g27 / 2.7e9, 1.0, 0.03) << g27;
}

TEST(BenchTrainModels, ModelHasTheClosedFormCount) {
  auto cpu = make_backend("cpu");
  PrecisionConfig prec;
  for (const char* name : {"gpt2-small", "350m", "760m", "1.3b"}) {
    for (int64_t layers : {1, 2}) {
      ModelConfig c = bench_model_config(name, 64, 32);
      c.n_layer = layers;
      Model m(c, prec, *cpu, 1);
      EXPECT_EQ(int64_t(m.num_params()), gpt2_params(c)) << name << " with " << layers << " layer(s)";
    }
  }
  ModelConfig full = bench_model_config("gpt2-small", 50304, 1024);  // the embeddings at full size
  Model m(full, prec, *cpu, 1);
  EXPECT_EQ(int64_t(m.num_params()), gpt2_params(full));
  EXPECT_EQ(gpt2_params(full), 124392960);
}

TEST(BenchTrainModels, FlopsPerTokenByHand) {
  const ModelConfig c = bench_model_config("1.3b", 50304, 2048);
  // N_matmul = 24·(4·2048² + 2·2048·8192) + 50304·2048
  const int64_t n = 24 * (4 * 2048LL * 2048 + 2 * 2048LL * 8192) + 50304LL * 2048;
  EXPECT_EQ(n, 1310982144);
  EXPECT_EQ(matmul_params(c), n);
  EXPECT_DOUBLE_EQ(train_flops_per_token(c), 6.0 * double(n) + 12.0 * 24 * 2048 * 2048);
  const ModelConfig l = bench_model_config("760m", 50304, 1024);
  EXPECT_EQ(matmul_params(l), 36 * (4 * 1280LL * 1280 + 2 * 1280LL * 5120) + 50304LL * 1280);
}

TEST(BenchTrainBatch, ModelBatchThenTokensPerStepThenBatch) {
  TrainBenchOptions o;
  o.models = {"gpt2-small", "1.3b"};
  o.seq_len = 4096;
  o.batch = 8;
  EXPECT_EQ(bench_batch(o, "gpt2-small"), 8);
  o.tokens_per_step = 8192;
  EXPECT_EQ(bench_batch(o, "gpt2-small"), 2);
  o.model_batch["1.3b"] = 1;
  EXPECT_EQ(bench_batch(o, "1.3b"), 1);
  EXPECT_EQ(bench_batch(o, "gpt2-small"), 2);
  o.tokens_per_step = 1000;  // not a multiple of 4096
  EXPECT_THROW(bench_batch(o, "gpt2-small"), Error);
  EXPECT_EQ(bench_batch(o, "1.3b"), 1);  // its own batch wins
  o.tokens_per_step = 2048;              // half a sequence per step
  EXPECT_THROW(bench_batch(o, "gpt2-small"), Error);
  o.tokens_per_step = 0;
  o.model_batch["1.3b"] = 0;
  EXPECT_THROW(bench_batch(o, "1.3b"), Error);
  // With gradient accumulation, tokens per step count the optimizer step: micro-batches of
  // tokens / (seq · grad_accum) sequences
  o.model_batch.clear();
  o.grad_accum = 4;
  o.tokens_per_step = 262144;
  EXPECT_EQ(bench_batch(o, "gpt2-small"), 16);
  o.tokens_per_step = 8192;  // 2 sequences cannot make 4 micro-batches
  EXPECT_THROW(bench_batch(o, "gpt2-small"), Error);
}

TrainBenchOptions tiny_options() {
  TrainBenchOptions o;
  o.device = "cpu";
  o.models = {"tiny"};
  o.arms = {"bf16", "fp8-matched"};
  o.vocab_size = 256;
  o.seq_len = 32;
  o.warmup = 1;
  o.steps = 2;
  return o;
}

TEST(BenchTrainRows, SpeedFieldsFollowTheStepTime) {
  TrainBenchOptions o = tiny_options();
  o.tokens_per_step = 96;  // 3 sequences of 32
  o.peak_tflops = 100.0;
  o.peak_tflops_fp8 = 400.0;
  std::vector<TrainBenchRow> rows;
  bench_train(o, [&](const TrainBenchRow& r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 2u);
  for (const TrainBenchRow& r : rows) {
    EXPECT_EQ(r.batch, 3);
    EXPECT_EQ(r.config.seq_len, 32);
    EXPECT_GT(r.step_ms_median, 0);
    EXPECT_NEAR(r.tokens_per_s, 96.0 / (r.step_ms_median * 1e-3), 1e-9 * r.tokens_per_s);
    EXPECT_NEAR(r.tflops, r.flops_per_token * r.tokens_per_s / 1e12, 1e-12);
    EXPECT_DOUBLE_EQ(r.mfu_bf16, r.tflops / 100.0);
    EXPECT_DOUBLE_EQ(r.mfu_fp8, r.tflops / 400.0);
    EXPECT_DOUBLE_EQ(r.mfu, r.mfu_bf16);
    EXPECT_FALSE(r.peak_mem_gib.has_value()) << "no memory figure on the CPU";
    EXPECT_FALSE(r.device_mem_gib.has_value());
    EXPECT_TRUE(std::isfinite(r.loss_first) && std::isfinite(r.loss_last));
    EXPECT_NEAR(r.loss_first, std::log(256.0), 0.3) << "uniform tokens at init: ~log(vocab)";
  }
  // The arms start from the same parameters (drawn once per model) and see the same tokens.
  EXPECT_NEAR(rows[0].loss_first, rows[1].loss_first, 0.02);
}

// The benchmark trains as its PyTorch peer does (AdamW at a constant 3e-4 on a few cycled batches of
// uniform tokens): the loss falls. (With a run's default 3e-3 and no warmup it rose at 1.3B.)
TEST(BenchTrainRows, LossFallsOnTheCycledBatches) {
  TrainBenchOptions o = tiny_options();
  o.arms = {"bf16"};
  o.warmup = 2;
  o.steps = 10;
  std::vector<TrainBenchRow> rows;
  bench_train(o, [&](const TrainBenchRow& r) { rows.push_back(r); });
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_LT(rows[0].loss_last, rows[0].loss_first - 0.05)
      << rows[0].loss_first << " -> " << rows[0].loss_last;
}

TEST(BenchTrainRows, BadOptionsFailBeforeAnyWork) {
  int calls = 0;
  const auto count = [&](const TrainBenchRow&) { ++calls; };
  TrainBenchOptions o = tiny_options();
  o.models = {"tiny", "nope"};
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.model_batch["350m"] = 2;  // not among the models run
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.tokens_per_step = 33;
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.peak_tflops_fp8 = 0;
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.arms = {"bf16", "fp8-linear", "bf16"};  // the same rows twice: a typo
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.models = {"tiny", "tiny"};
  EXPECT_THROW(bench_train(o, count), Error);
  o = tiny_options();
  o.warmup = 0;  // step 0 gives loss_first
  EXPECT_THROW(bench_train(o, count), Error);
  EXPECT_EQ(calls, 0);
}

}  // namespace
