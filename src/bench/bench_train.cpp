// src/bench/bench_train.cpp — `octet bench train` (octet/bench.h): whole training steps of a
// GPT-2-shaped model on synthetic tokens per precision arm. One step is what the trainer
// (trainer.cpp) does per step: zero_grad, grad_accum micro-batches of forward + backward,
// update_quant_scales, the global gradient norm and the fused optimizer (octet/optim.h: clip, skip
// and AdamW with the no-decay group decided on the device), with no host synchronization. The
// timed steps run back to back and are timed by a wall clock between two synchronizations (step
// time = interval / steps). The learning rate is constant (the schedule costs nothing on the device).
#include "octet/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "octet/backend.h"
#include "octet/error.h"
#include "octet/optim.h"
#include "octet/quant.h"
#include "bench/profiling_backend.h"
#include "bench/row_memory.h"

namespace octet {

ModelConfig bench_model_config(const std::string& name, int64_t vocab_size, int64_t seq_len) {
  ModelConfig c;
  if (name == "gpt2-small") {
    c.n_layer = 12, c.d_model = 768, c.n_head = 12, c.d_ff = 3072;
  } else if (name == "350m") {
    c.n_layer = 24, c.d_model = 1024, c.n_head = 16, c.d_ff = 4096;
  } else if (name == "760m") {
    c.n_layer = 36, c.d_model = 1280, c.n_head = 20, c.d_ff = 5120;
  } else if (name == "1.3b") {
    c.n_layer = 24, c.d_model = 2048, c.n_head = 16, c.d_ff = 8192;
  } else if (name == "2.7b") {  // GPT-3 2.7B's width and depth, 20 heads of 128 (GPT-3: 32 of 80)
    c.n_layer = 32, c.d_model = 2560, c.n_head = 20, c.d_ff = 10240;
  } else if (name == "tiny") {
    c.n_layer = 2, c.d_model = 64, c.n_head = 2, c.d_ff = 256;
  } else {
    OCTET_FAIL("unknown benchmark model '" + name +
               "' (expected gpt2-small, 350m, 760m, 1.3b, 2.7b or tiny)");
  }
  c.n_kv_head = c.n_head;
  c.vocab_size = vocab_size;
  c.seq_len = seq_len;
  c.norm = NormKind::LayerNorm;
  c.norm_placement = NormPlacement::Pre;
  c.positions = PositionKind::Learned;
  c.mlp = MlpKind::GELU;
  c.tied_embeddings = true;
  c.validate();
  return c;
}

int64_t matmul_params(const ModelConfig& c) {
  const int64_t hd = c.head_dim();
  const int64_t qkv = (c.n_head + 2 * c.n_kv_head) * hd * c.d_model;
  const int64_t proj = c.d_model * c.n_head * hd;
  const int64_t fc1 = (c.mlp == MlpKind::SwiGLU ? 2 : 1) * c.d_ff * c.d_model;
  const int64_t fc2 = c.d_model * c.d_ff;
  return c.n_layer * (qkv + proj + fc1 + fc2) + c.vocab_size * c.d_model;
}

double train_flops_per_token(const ModelConfig& c) {
  const double attn = 6.0 * double(c.n_layer) * 2.0 * double(c.seq_len) * double(c.n_head * c.head_dim());
  return 6.0 * double(matmul_params(c)) + attn;
}

int64_t bench_batch(const TrainBenchOptions& opt, const std::string& model) {
  int64_t b = opt.batch;
  std::string from = "batch";
  if (auto it = opt.model_batch.find(model); it != opt.model_batch.end()) {
    b = it->second, from = "the batch of model " + model;
  } else if (opt.tokens_per_step > 0) {
    const int64_t micro = opt.seq_len * opt.grad_accum;
    OCTET_CHECK(opt.tokens_per_step % micro == 0,
                "bench train: tokens per step " + std::to_string(opt.tokens_per_step) +
                    " is not a multiple of the sequence length x micro-batches per step (" +
                    std::to_string(opt.seq_len) + " x " + std::to_string(opt.grad_accum) + ")");
    b = opt.tokens_per_step / micro, from = "tokens per step / (sequence length x micro-batches)";
  }
  OCTET_CHECK(b >= 1,
              "bench train: " + from + " must give >= 1 sequence per step (got " + std::to_string(b) + ")");
  return b;
}

void bench_train(
    const TrainBenchOptions& opt, const std::function<void(const TrainBenchRow&)>& on_row,
    const std::function<void(const TrainBenchRow&, const std::vector<TrainBenchOp>&)>& on_profile) {
  OCTET_CHECK(opt.warmup >= 1,
              "bench train needs at least one warm-up step (got " + std::to_string(opt.warmup) + ")");
  OCTET_CHECK(opt.steps >= 1,
              "bench train needs at least one timed step (got " + std::to_string(opt.steps) + ")");
  OCTET_CHECK(opt.peak_tflops > 0, "bench train: the BF16 peak TFLOP/s (--peak-tflops) must be > 0");
  OCTET_CHECK(opt.peak_tflops_fp8 > 0, "bench train: the FP8 peak TFLOP/s (--peak-tflops-fp8) must be > 0");
  OCTET_CHECK(opt.tokens_per_step >= 0, "bench train: tokens per step must be > 0 (0: use the batch)");
  OCTET_CHECK(opt.seq_len >= 1, "bench train: sequence length must be >= 1");
  OCTET_CHECK(opt.grad_accum >= 1, "bench train: micro-batches per step (--grad-accum) must be >= 1, got " +
                                       std::to_string(opt.grad_accum));
  for (const auto& [m, b] : opt.model_batch)  // a batch for a model not run is a typo
    OCTET_CHECK(std::find(opt.models.begin(), opt.models.end(), m) != opt.models.end(),
                "bench train: a batch is given for model '" + m + "', which is not among the models run");
  for (const std::string& m : opt.models) {  // reject unknown names and bad batches before any work
    bench_model_config(m, opt.vocab_size, opt.seq_len);
    bench_batch(opt, m);
  }
  for (const std::string& a : opt.arms) parse_arm(a);
  // A name given twice would run (and report) the same rows twice: a typo, not a request.
  const auto once = [](const std::vector<std::string>& names, const char* what) {
    for (size_t i = 0; i < names.size(); ++i)
      OCTET_CHECK(std::find(names.begin(), names.begin() + i, names[i]) == names.begin() + i,
                  std::string("bench train: ") + what + " '" + names[i] + "' is given twice");
  };
  once(opt.models, "model");
  once(opt.arms, "arm");
  auto backend = make_backend(opt.device);
  std::unique_ptr<ProfilingBackend> profiler;
  if (opt.profile) profiler = std::make_unique<ProfilingBackend>(*backend);
  Backend& be = opt.profile ? static_cast<Backend&>(*profiler) : *backend;

  for (const std::string& name : opt.models) {
    const ModelConfig cfg = bench_model_config(name, opt.vocab_size, opt.seq_len);
    const int64_t batch = bench_batch(opt, name);
    const int64_t tokens = batch * cfg.seq_len;
    // Synthetic tokens: uniform ids, a few distinct micro-batches cycled (targets are the next id).
    constexpr int kBatches = 4;
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(cfg.vocab_size - 1));
    std::vector<std::vector<int32_t>> ids(kBatches), targets(kBatches);
    for (int b = 0; b < kBatches; ++b) {
      std::vector<int32_t> stream(size_t(tokens + 1));
      for (auto& t : stream) t = tok(rng);
      ids[b].assign(stream.begin(), stream.end() - 1);
      targets[b].assign(stream.begin() + 1, stream.end());
    }
    std::vector<float> init;  // the initial parameters, drawn once per model (slow on the host at 1B+)
    for (const std::string& arm : opt.arms) {
      bench_detail::reset_row_memory(*backend);
      PrecisionConfig prec;
      prec.arm = parse_arm(arm);
      prec.quant.recipe = parse_recipe(opt.recipe);
      prec.quant.formats = FormatPolicy::Hybrid;
      prec.activations = be.preferred_activation_dtype();
      prec.attn_tile = opt.attn_tile;
      prec.validate();
      prec.attn_form =
          opt.attn_form == "auto" ? default_attn_form(cfg, prec, be.name()) : parse_attn_form(opt.attn_form);
      ModelMemory memory;
      memory.activation_checkpointing = opt.train.activation_checkpointing;
      Model model(cfg, prec, be, batch, memory);
      if (init.empty()) {
        model.init(opt.seed);
        init = model.download_params();
      } else {
        model.upload_params(init);  // = model.init(opt.seed): the parameter layout is the arm's too
      }
      Optimizer optimizer(model, adamw_config(opt.train));
      const int64_t accum = opt.grad_accum;
      const float grad_scale = 1.0f / float(tokens * accum);  // the trainer's: 1 / tokens per step
      TrainBenchRow row;
      row.model = name;
      row.arm = arm;
      row.attn_form = to_string(prec.attn_form);
      row.config = cfg;
      row.batch = batch;
      row.grad_accum = accum;
      row.n_params = int64_t(model.num_params());
      row.n_matmul_params = matmul_params(cfg);
      row.flops_per_token = train_flops_per_token(cfg);
      row.warmup = opt.warmup;
      row.steps = opt.steps;
      // One step as the trainer's, enqueued without a host read: the loss accumulator is reset on
      // the device, and the optimizer decides clip and skip there.
      auto enqueue_step = [&](int s) {
        model.zero_grad();
        be.fill(model.loss_sum(), 0.0);
        for (int64_t a = 0; a < accum; ++a) {
          const int64_t m = (int64_t(s) * accum + a) % kBatches;
          model.forward_backward(ids[m].data(), targets[m].data(), true, grad_scale);
        }
        model.update_quant_scales();
        optimizer.compute_grad_norm();
        optimizer.step(opt.train.lr, model.loss_sum());
      };
      auto mean_loss = [&](int s) {  // nats/token of step s, from the accumulator it left (synchronizes)
        int64_t counted = 0;
        for (int64_t a = 0; a < accum; ++a)
          for (int32_t y : targets[(int64_t(s) * accum + a) % kBatches]) counted += y >= 0;
        return model.take_loss() / double(std::max<int64_t>(counted, 1));
      };
      for (int s = 0; s < opt.warmup; ++s) {
        enqueue_step(s);
        if (s == 0) row.loss_first = mean_loss(0);
      }
      be.synchronize();
      if (profiler) profiler->reset();  // count the timed steps only
      // The timed steps: enqueued back to back, one synchronization at the end (the host runs
      // ahead of the GPU as in training), so the time is the GPU's, not a per-step round trip.
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = opt.warmup; s < opt.warmup + opt.steps; ++s) enqueue_step(s);
      be.synchronize();
      const double total_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      row.loss_last = mean_loss(opt.warmup + opt.steps - 1);
      row.step_ms_mean = total_ms / double(opt.steps);
      row.step_ms_median = row.step_ms_mean;  // one interval of N steps: no per-step times
      row.tokens_per_s = double(tokens * accum) / (row.step_ms_median * 1e-3);
      row.tflops = row.flops_per_token * row.tokens_per_s / 1e12;
      row.mfu_bf16 = row.tflops / opt.peak_tflops;
      row.mfu_fp8 = row.tflops / opt.peak_tflops_fp8;
      row.mfu = row.mfu_bf16;
      const bench_detail::RowMemory mem = bench_detail::read_row_memory(*backend);
      row.peak_mem_gib = mem.peak_gib;
      row.device_mem_gib = mem.device_gib;
      on_row(row);
      if (profiler && on_profile) {
        std::vector<TrainBenchOp> ops;
        for (const auto& [name, st] : profiler->stats())
          ops.push_back({name, double(st.calls) / opt.steps, st.seconds * 1e3 / opt.steps});
        std::sort(ops.begin(), ops.end(),
                  [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
        on_profile(row, ops);
      }
    }
  }
}

}  // namespace octet
