// tests/model/generate_test.cpp — the KV-cache decoder (generate.h) against the training forward
// (model.h) on the CPU: the logits of every position, fed one token at a time through the cache,
// give the same cross-entropy as Model::step in the FP32 reference arm (FP32 linears, FP64
// attention), for every model option; feeding the whole prompt at once equals feeding it one token
// at a time; and the sampler's rules (greedy, top-k, top-p, seed) hold.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "model/model_test_util.h"
#include "octet/error.h"
#include "octet/generate.h"

namespace octet {
namespace {

double nll(const float* logits, int64_t V, int32_t target) {
  double m = -INFINITY, s = 0;
  for (int64_t i = 0; i < V; ++i) m = std::max(m, double(logits[i]));
  for (int64_t i = 0; i < V; ++i) s += std::exp(double(logits[i]) - m);
  return m + std::log(s) - double(logits[target]);
}

const std::map<std::string, std::function<void(ModelConfig&)>>& variants() {
  static const std::map<std::string, std::function<void(ModelConfig&)>> v = {
      {"llama_gqa", [](ModelConfig&) {}},
      {"untied_mha", [](ModelConfig& c) { c.tied_embeddings = false, c.n_kv_head = 2; }},
      {"learned_gelu_layernorm",
       [](ModelConfig& c) {
         c.positions = PositionKind::Learned, c.mlp = MlpKind::GELU, c.norm = NormKind::LayerNorm;
       }},
      {"nope_qknorm", [](ModelConfig& c) { c.positions = PositionKind::NoPE, c.qk_norm = true; }},
      {"fog",
       [](ModelConfig& c) {
         c.norm_placement = NormPlacement::Output, c.qk_norm = true, c.qk_norm_trainable = false;
       }},
      {"hybrid_gated_deltanet",
       [](ModelConfig& c) { c.mixer = MixerKind::Hybrid, c.n_layer = 4, c.gdn_chunk = 3; }},
      {"post_norm_unit",
       [](ModelConfig& c) {
         c.norm_placement = NormPlacement::Post, c.unit_scaling = true, c.init_std = 1.0f;
       }},
  };
  return v;
}

TEST(Generate, CachedDecodeEqualsTrainingForwardForEveryOption) {
  auto be = make_cpu_backend();
  for (const auto& [name, tweak] : variants()) {
    SCOPED_TRACE(name);
    ModelConfig c = test::tiny_model();
    tweak(c);
    Model model(c, test::arm_precision(Arm::FP32), *be, 1);
    model.init(7);
    std::vector<int32_t> ids, targets;
    test::tiny_batch(c, 1, ids, targets);
    Generator gen(model, DecodePrecision::FP32);
    const int64_t V = c.vocab_size;
    for (int64_t t = 0; t < c.seq_len; ++t) {
      const std::vector<float> logits = gen.feed({ids[size_t(t)]});  // one position, the rest cached
      ASSERT_EQ(int64_t(logits.size()), V);
      std::vector<int32_t> only(targets.size(), -1);  // the training forward's loss at position t
      only[size_t(t)] = targets[size_t(t)];
      const double want = model.step(ids.data(), only.data(), false, 1.0f);
      EXPECT_NEAR(nll(logits.data(), V, targets[size_t(t)]), want, 2e-5 * std::max(1.0, want)) << "t=" << t;
    }
    EXPECT_EQ(gen.length(), c.seq_len);
    EXPECT_THROW(gen.feed({0}), Error);  // the context is full
  }
}

TEST(Generate, PrefillEqualsOneTokenAtATime) {
  auto be = make_cpu_backend();
  for (DecodePrecision p : {DecodePrecision::FP32, DecodePrecision::BF16}) {
    SCOPED_TRACE(to_string(p));
    const ModelConfig c = test::tiny_model();
    Model model(c, test::arm_precision(Arm::BF16), *be, 2);  // any batch and arm: only the weights count
    model.init(3);
    std::vector<int32_t> ids, targets;
    test::tiny_batch(c, 1, ids, targets, 5);
    Generator gen(model, p);
    const std::vector<float> all = gen.feed(ids);
    gen.reset();
    const int64_t V = c.vocab_size;
    for (int64_t t = 0; t < c.seq_len; ++t) {
      const std::vector<float> one = gen.feed({ids[size_t(t)]});
      for (int64_t i = 0; i < V; ++i) {
        const float want = all[size_t(t * V + i)];
        // BF16 rounds activations per op: the two orders agree to its unit roundoff, scaled.
        const float tol = p == DecodePrecision::FP32 ? 1e-5f : 2e-2f;
        ASSERT_NEAR(one[size_t(i)], want, tol * std::max(1.0f, std::fabs(want))) << "t=" << t << " i=" << i;
      }
    }
  }
}

TEST(Generate, GreedyIsDeterministicAndStopsAtTheContext) {
  auto be = make_cpu_backend();
  const ModelConfig c = test::tiny_model();
  Model model(c, test::arm_precision(Arm::FP32), *be, 1);
  model.init(11);
  Generator gen(model, DecodePrecision::FP32);
  SampleOptions opt;
  opt.temperature = 0.0f;
  opt.max_new_tokens = 100;
  std::vector<int32_t> streamed;
  const std::vector<int32_t> a = generate(gen, {1, 2, 3}, opt, [&](int32_t t) { streamed.push_back(t); });
  const std::vector<int32_t> b = generate(gen, {1, 2, 3}, opt);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, streamed);
  EXPECT_EQ(int64_t(a.size()), c.seq_len - 3 + 1);  // the last token is sampled, not fed
  // Each greedy token is the argmax of a full forward over the prompt and the tokens before it.
  std::vector<int32_t> seq = {1, 2, 3};
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    gen.reset();
    const std::vector<float> lg = gen.feed(seq);
    const float* last = lg.data() + (seq.size() - 1) * size_t(c.vocab_size);
    EXPECT_EQ(a[i], int32_t(std::max_element(last, last + c.vocab_size) - last));
    seq.push_back(a[i]);
  }
  EXPECT_THROW(generate(gen, std::vector<int32_t>(size_t(c.seq_len + 1), 0), opt), Error);
  EXPECT_THROW(generate(gen, {}, opt), Error);
  EXPECT_THROW(gen.feed({int32_t(c.vocab_size)}), Error);
}

TEST(Sample, TopKTopPAndSeed) {
  const std::vector<float> logits = {0.0f, 3.0f, 2.0f, 1.0f, -1.0f};
  SampleOptions opt;
  opt.temperature = 0.0f;
  std::mt19937_64 rng(1);
  EXPECT_EQ(sample_token(logits.data(), 5, opt, rng), 1);
  opt.temperature = 1.0f;
  opt.top_k = 1;  // top-1 is greedy whatever the temperature
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits.data(), 5, opt, rng), 1);
  opt.top_k = 2;
  std::map<int32_t, int> seen;
  for (int i = 0; i < 400; ++i) seen[sample_token(logits.data(), 5, opt, rng)]++;
  EXPECT_EQ(seen.size(), 2u);   // only ids 1 and 2
  EXPECT_GT(seen[1], seen[2]);  // p(1)/p(2) = e
  opt.top_k = 0;
  opt.top_p = 0.5f;  // p(1) = 0.64 > 0.5: the nucleus is {1}
  for (int i = 0; i < 20; ++i) EXPECT_EQ(sample_token(logits.data(), 5, opt, rng), 1);
  opt.top_p = 1.0f;
  std::mt19937_64 r1(42), r2(42);
  for (int i = 0; i < 20; ++i)
    EXPECT_EQ(sample_token(logits.data(), 5, opt, r1), sample_token(logits.data(), 5, opt, r2));
  opt.top_p = 0.0f;
  EXPECT_THROW(opt.validate(), Error);
  opt.top_p = 1.0f, opt.temperature = -1.0f;
  EXPECT_THROW(opt.validate(), Error);
}

}  // namespace
}  // namespace octet
