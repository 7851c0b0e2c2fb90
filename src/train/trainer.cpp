// src/train/trainer.cpp — the training loop: gradient accumulation, NaN/inf step skipping, the
// optimizer (octet/optim.h: global-norm clipping, AdamW with a no-decay group), warmup + cosine LR,
// periodic validation with diagnostics, crash-safe checkpoints and bitwise-exact resume. Output
// follows karpathy/llm.c: a `| parameter | value |` table, then one line per step
// (step | loss | grad norm | lr | ms | tok/s).
//
// One optimizer step: zero_grad; forward_backward of every micro-batch (enqueued, no host wait);
// update_quant_scales (delayed scaling's update, once per step); the gradient norm and the fused
// optimizer step (clip and non-finite skip decided on the device) enqueued. No host read inside a
// step: loss and norm go to a device history read at the steps that log, evaluate or checkpoint.
// Data parallel (a DistSession of N > 1 ranks; docs/distributed.md): each rank reads its slice of
// the global batch, the amaxes are max-reduced before the scale update, the gradients are
// reduce-scattered in buckets, those of the last micro-batch's backward while it runs (the model's
// set_grad_ready_hook seam; ZeRO-1: each rank updates its shard, the shards are all-gathered), the
// gradient norm and the loss are summed over ranks (so every rank skips a non-finite step together), and only
// rank 0 writes files and the log. One rank runs exactly the single-process code.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include <sstream>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/optim.h"
#include "octet/eval.h"
#include "train/run_dir_lock.h"
#include "octet/train.h"
#include "train/report_format.h"

namespace octet {

void check_rank_split(const RunConfig& cfg, int64_t ranks) {
  // train.batch_size is the global micro-batch: each of the ranks takes an equal slice of it
  OCTET_CHECK(ranks >= 1 && cfg.train.batch_size % ranks == 0,
              "train.batch_size = " + std::to_string(cfg.train.batch_size) +
                  " sequences cannot be split evenly over " + std::to_string(ranks) +
                  " ranks (docs/distributed.md)");
}

void check_eval_split(const RunConfig& cfg, const Dataset& ds) {
  // an evaluation reads each validation window at most once (Dataset::val_batch wraps around)
  OCTET_CHECK(cfg.train.eval_batches * cfg.train.batch_size <= ds.n_val_windows(),
              "train.eval_batches x train.batch_size = " +
                  std::to_string(cfg.train.eval_batches * cfg.train.batch_size) +
                  " validation sequences, but the validation split has " +
                  std::to_string(ds.n_val_windows()) +
                  " (lower train.eval_batches, or raise data.val_fraction or the corpus size)");
}

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json quant_json(const QuantStats& q) {
  return {{"amax", q.amax},
          {"scale_min", q.scale_min},
          {"scale_max", q.scale_max},
          {"underflow", q.underflow_frac},
          {"saturated", q.saturated_frac}};
}

// JSON numbers, NaN/inf as null (JSON has neither).
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// The "layers" array of an evaluation record (docs/training.md §Output).
json layers_json(const std::vector<LayerReport>& reports) {
  json layers = json::array();
  for (size_t l = 0; l < reports.size(); ++l) {
    const LayerDiag& d = reports[l].diag;
    json q = json::object();
    double amax[3] = {0, 0, 0};  // the layer's largest X, W, dY amax over its FP8 linears
    for (const LinearDiag& ld : d.linears) {
      q[ld.name] = {{"x", quant_json(ld.x)}, {"w", quant_json(ld.w)}, {"dy", quant_json(ld.dy)}};
      amax[0] = std::max(amax[0], double(ld.x.amax));
      amax[1] = std::max(amax[1], double(ld.w.amax));
      amax[2] = std::max(amax[2], double(ld.dy.amax));
    }
    json dq = nullptr;
    if (const std::optional<DqBias>& b = reports[l].dq_bias)
      dq = {{"mean", num(b->mean)},
            {"max", num(b->max)},
            {"norm", num(b->norm)},
            {"row_residual_mean", num(b->row_residual_mean)},
            {"rows", b->rows}};
    layers.push_back(
        {{"layer", l},
         {"mixer", reports[l].attention ? "attention" : "gated_delta"},
         {"kurtosis",
          {{"attn_in", d.kurtosis_attn_in},
           {"mlp_in", d.kurtosis_mlp_in},
           {"mlp_hidden", d.kurtosis_mlp_hidden},
           {"out", d.kurtosis_out}}},
         {"kurtosis_max", d.kurtosis_max()},
         // a Gated DeltaNet layer has no softmax: no residual (null, not 0)
         {"row_residual_max", reports[l].attention ? num(d.row_residual_max) : json(nullptr)},
         {"row_residual_mean", reports[l].attention ? num(d.row_residual_mean) : json(nullptr)},
         {"dq_bias", dq},
         {"amax", d.linears.empty() ? json(nullptr) : json{{"x", amax[0]}, {"w", amax[1]}, {"dy", amax[2]}}},
         {"quant", q}});
  }
  return layers;
}

// metrics.jsonl cut back to the lines of steps <= last_step (a resumed run rewrites what came
// after): the kept text, which the writer rank puts in place by write_file_atomic (a temporary
// file, fsynced and renamed over the original, never edited in place). Only the last line may be
// unreadable (torn by a crash mid-write: dropped); an unreadable line before it is an Error naming
// the line, raised before anything is written, so that no recorded step is dropped silently.
std::string cut_back_metrics(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return {};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  std::string kept;
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      const json j = json::parse(lines[i]);
      if (j.value("step", int64_t(0)) <= last_step) kept += lines[i] + "\n";
    } catch (const json::exception&) {
      OCTET_CHECK(
          i + 1 == lines.size(),
          path + " line " + std::to_string(i + 1) + " of " + std::to_string(lines.size()) +
              " is not a JSON record (only a torn last line is dropped on --resume); repair or remove it");
    }
  }
  return kept;
}

// The settings table: every key (or, with `base`, the keys whose values differ from it), then the
// backend, the parameter count and the tokens per optimizer step.
void print_table(FILE* log, const RunConfig& cfg, const Model& model, const std::string& backend,
                 const RunConfig* base, int world) {
  if (!log) return;
  std::vector<ConfigRow> base_rows;
  if (base) base_rows = config_rows(*base);
  print_config_table(log, config_rows(cfg), base_rows);
  std::fprintf(log, "| backend | %s | |\n", backend.c_str());
  std::fprintf(log, "| parameters | %zu | |\n", model.num_params());
  const long long tokens = cfg.train.batch_size * cfg.train.grad_accum * cfg.model.seq_len;
  if (world > 1) {
    std::fprintf(
        log,
        "| ranks | %d | data parallel, ZeRO-1; batch_size / ranks sequences each (docs/distributed.md) |\n",
        world);
  }
  std::fprintf(log, "| tokens per step | %lld | batch_size x grad_accum x seq_len |\n", tokens);
  std::fflush(log);
}

}  // namespace

std::vector<ConfigChange> check_resume(const std::string& dir, const RunConfig& requested,
                                       const TrainState& checkpoint) {
  std::vector<ConfigChange> changes = resume_changes(load_config(dir + "/config.toml"), requested, dir);
  check_recorded_meaning(checkpoint.meaning, requested, dir);  // config.toml itself may have been edited
  for (const ConfigChange& c : changes)  // a moved corpus: only where the tokens can be checked
    OCTET_CHECK(c.key != "data.path" || !checkpoint.tokens_hash.empty(),
                "cannot resume " + dir + " with data.path = " + c.to + " (it was " + c.from +
                    "): its checkpoint records no tokens_hash to check the corpus there against; "
                    "restore data.path");
  const int64_t checkpoint_step = checkpoint.step;
  OCTET_CHECK(checkpoint_step <= requested.train.steps,
              "cannot resume " + dir + " with train.steps = " + std::to_string(requested.train.steps) +
                  ": its checkpoint is at step " + std::to_string(checkpoint_step) +
                  " (a run cannot be shortened; give train.steps >= " + std::to_string(checkpoint_step) +
                  ")");
  return changes;
}

ResumePlan plan_resume(const std::string& dir, const std::vector<std::string>& overrides) {
  const std::string conf = dir + "/config.toml";
  OCTET_CHECK(fs::exists(conf), "cannot resume " + dir + ": no config.toml there");
  OCTET_CHECK(fs::exists(dir + "/checkpoint.safetensors"),
              "cannot resume " + dir + ": no checkpoint.safetensors there");
  ResumePlan plan;
  plan.config = load_config(conf, overrides);
  // "auto" on a resume keeps what the run resolved it to (its config.toml holds the resolution):
  // the choice is the run's, not the new device's.
  const RunConfig saved = load_config(conf);
  if (plan.config.attn_form == "auto") set_config_value(plan.config, "precision.attn_form", saved.attn_form);
  if (plan.config.activations == "auto")
    set_config_value(plan.config, "precision.activations", saved.activations);
  plan.state = read_checkpoint_state(dir);
  plan.changes = check_resume(dir, plan.config, plan.state);
  return plan;
}

TrainResult train(const RunConfig& run_cfg, const std::string& out_dir, bool resume, Dataset& ds,
                  FILE* log_in, const TrainHooks& hooks, const RunConfig* table_base, DistSession* dist) {
  run_cfg.validate();
  check_eval_split(run_cfg, ds);
  std::unique_ptr<Backend> own_backend;
  if (!dist) own_backend = make_backend(run_cfg.device);
  Backend& be = dist ? *dist->backend : *own_backend;
  // comm is null for one rank: the single-process code runs unchanged (bitwise)
  Communicator* comm = dist && dist->comm->size() > 1 ? dist->comm.get() : nullptr;
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->size() : 1;
  const bool writer = rank == 0;  // files and the log: rank 0 only
  FILE* log = writer ? log_in : nullptr;
  RunConfig cfg = run_cfg;
  resolve_run_config(cfg, be);
  const TrainConfig& t = cfg.train;
  check_rank_split(cfg, world);
  const int64_t rank_batch = t.batch_size / world;
  ModelMemory memory;
  memory.activation_checkpointing = t.activation_checkpointing;
  if (be.name() == "cpu") check_cpu_train_memory(cfg.model, rank_batch);  // before the model, the folder
  Model model(cfg.model, cfg.precision, be, rank_batch, memory);
  std::unique_ptr<Zero1> zero;
  if (comm) zero = std::make_unique<Zero1>(model, *comm, cfg.dist.bucket_mb);
  // dist.allgather_fp8: the FP8 linears' weights gathered as codes (a no-op without such weights).
  // The other ranks' FP32 masters of those weights are then stale here until gather_masters().
  std::unique_ptr<Fp8WeightGather> fp8_gather;
  if (zero && cfg.dist.allgather_fp8 && !model.code_weights().empty())
    fp8_gather = std::make_unique<Fp8WeightGather>(model, *comm, zero->plan());
  bool masters_stale = false;
  auto gather_masters = [&]() {  // a collective: every rank, before param_data() is read whole
    if (masters_stale) zero->gather_params();
    masters_stale = false;
  };
  Optimizer opt(model, adamw_config(t),
                zero ? zero->shard() : ShardLayout::whole(int64_t(model.num_params())));
  std::optional<train_detail::RunDirLock> lock;
  if (writer) {
    std::error_code ec;  // the run directory only once the backend and the model exist
    fs::create_directories(out_dir, ec);
    OCTET_CHECK(!ec, "cannot create output directory " + out_dir + ": " + ec.message());
    lock.emplace(out_dir);
  }

  const std::string metrics_path = out_dir + "/metrics.jsonl";
  TrainState st;
  std::vector<ConfigChange> changes;
  if (resume) {  // everything checked before the first write (docs/training.md §Resume)
    // before a checkpoint shape error: a meaning key changed by --set, or by an edit of config.toml
    resume_changes(load_config(out_dir + "/config.toml"), cfg, out_dir);
    const TrainState recorded = peek_checkpoint_state(out_dir);
    check_recorded_meaning(recorded.meaning, cfg, out_dir);
    check_run_tokens(recorded, ds, out_dir, "resume",
                     "restore the corpus or start a new run");  // the same text, the same token ids
    std::vector<float> hm, hv;
    st = load_checkpoint(out_dir, model, hm, hv);
    changes = check_resume(out_dir, cfg, st);
    if (st.step == t.steps) {
      TrainResult done;
      done.complete = true;
      done.skipped_steps = st.skipped_steps;
      return done;
    }
    const std::string kept_metrics = cut_back_metrics(metrics_path, st.step);  // every rank checks
    opt.load(hm, hv, st.adam_step);
    if (writer) {
      if (std::filesystem::exists(metrics_path)) write_file_atomic(metrics_path, {kept_metrics});
      if (!changes.empty()) write_file_atomic(out_dir + "/config.toml", {to_toml(cfg)});  // before step one
    }
  } else {
    model.init(t.seed);
    if (writer) write_file_atomic(out_dir + "/config.toml", {to_toml(cfg)});
  }
  if (writer) keep_run_tokenizer(out_dir, ds);
  st.meaning = meaning_values(cfg);      // every checkpoint records what the run computes
  st.tokens_hash = tokens_hash_hex(ds);  // and the data it trains on
  std::optional<MetricsLog> metrics_log;
  if (writer) metrics_log.emplace(metrics_path, resume);
  auto write_metrics = [&](const json& j) {
    if (metrics_log) metrics_log->write(j.dump());
  };
  std::unique_ptr<EvalSampler> sampler;  // the eval-time sample (train.sample_tokens > 0)
  if (t.sample_tokens > 0 && log) sampler = std::make_unique<EvalSampler>(cfg, model, ds);
  ds.set_position(st.data_position);
  print_table(log, cfg, model, be.name(), table_base, world);
  if (resume) {
    json record = {{"step", st.step}, {"event", "resume"}, {"changes", json::array()}};
    for (const ConfigChange& c : changes) {
      record["changes"].push_back({{"key", c.key}, {"from", c.from}, {"to", c.to}});
      if (log)
        std::fprintf(log, "resume: %s %s -> %s from step %lld\n", c.key.c_str(), c.from.c_str(), c.to.c_str(),
                     static_cast<long long>(st.step));
    }
    write_metrics(record);
    if (log)
      std::fprintf(log, "resuming %s at step %lld\n", out_dir.c_str(), static_cast<long long>(st.step));
  }

  const int64_t tokens_per_micro = t.batch_size * cfg.model.seq_len;  // over all ranks
  const int64_t tokens_per_step = tokens_per_micro * t.grad_accum;
  const float grad_scale = 1.0f / float(tokens_per_step);
  std::vector<int32_t> ids, targets;
  TrainResult result;
  double total_seconds = 0;
  int64_t total_tokens = 0;

  // Delayed scaling's update; with ranks, after the max of their amaxes (the same scales on all).
  auto update_scales = [&]() {
    if (comm) reduce_pending_amaxes(model, *comm);
    model.update_quant_scales();
    if (fp8_gather) fp8_gather->reinstall();  // the weights did not change: the same codes
  };
  // Validation loss (nats/token); ranks evaluate their slices of the validation batches (the loss
  // summed over ranks). Its forwards record amaxes as any forward does: under tensor-delayed
  // scaling they would enter the history and change every step after it, so that how often a run
  // evaluates (a schedule key) would change what it computes. The amaxes pending before it (none
  // after a step's update) are put back afterwards.
  const int64_t amax_slots = model.amax_slots();
  Buffer eval_amaxes = amax_slots > 0 ? be.alloc(DType::I32, {amax_slots}) : Buffer();
  auto evaluate = [&]() {
    if (amax_slots > 0) model.pending_amaxes(eval_amaxes);
    const double loss = evaluate_validation(model, ds, t.eval_batches, comm);  // octet/eval.h
    if (amax_slots > 0) model.set_pending_amaxes(eval_amaxes);
    return loss;
  };

  // The steps that end in an evaluation keep a sample of each attention layer's dO for the
  // per-layer dQ-bias replay (layer_diagnostics, octet/eval.h); the others pay nothing.
  auto evaluates_after = [&](int64_t s) { return s % t.eval_every == 0 || s == t.steps; };
  // Nothing inside a step reads the device: the optimizer decides clip and skip there
  // (octet/optim.h), and each step's summed loss and Σg² are copied into a device history that the
  // host reads at the steps that log, evaluate or checkpoint (and when it is full). The records of
  // those steps are then written in order; their ms is the window's mean.
  struct Pending {
    int64_t step;
    float lr;
    int64_t counted;
  };
  std::vector<Pending> pending;
  const int64_t window = std::min<int64_t>(t.log_every, 256);
  Buffer history = be.alloc(DType::F64, {2 * window});  // {loss_sum, Σg²} per pending step
  auto window_t0 = std::chrono::steady_clock::now();
  bool bad = false;  // the last read step's
  auto read_pending = [&]() {
    if (pending.empty()) return;
    const size_t n = pending.size();
    std::vector<double> h(2 * n), counted(n);
    be.download(h.data(), history.tensor().slice(0, int64_t(2 * n)));  // the sync
    for (size_t i = 0; i < n; ++i) counted[i] = double(pending[i].counted);
    if (comm) all_reduce_host_sum(*comm, be, counted.data(), int64_t(n));  // the loss is summed on the device
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - window_t0).count() / double(n);
    st.adam_step = opt.steps();
    for (size_t i = 0; i < n; ++i) {
      const Pending& p = pending[i];
      const int64_t done = p.step + 1;
      const double loss = h[2 * i] / std::max(counted[i], 1.0), gnorm = std::sqrt(h[2 * i + 1]);
      bad =
          !std::isfinite(loss) || !std::isfinite(gnorm);  // the device's decision (adamw_rule.h decide_step)
      st.skipped_steps += bad;
      st.bad_in_a_row = bad ? st.bad_in_a_row + 1 : 0;
      total_seconds += seconds;
      total_tokens += tokens_per_step;
      const double tok_s = double(tokens_per_step) / seconds;
      result.train_loss.push_back(bad ? NAN : loss);
      json line = {{"step", done},
                   {"loss", bad ? json(nullptr) : json(loss)},
                   {"grad_norm", std::isfinite(gnorm) ? json(gnorm) : json(nullptr)},
                   {"lr", p.lr},
                   {"tokens_per_s", tok_s},
                   {"ms", seconds * 1e3}};
      if (bad) line["skipped"] = true;
      write_metrics(line);
      if (log && (bad || done % t.log_every == 0 || done == t.steps)) {
        if (bad)
          std::fprintf(log,
                       "step %5lld/%lld | non-finite loss or gradient (loss %g, grad norm %g): "
                       "step skipped (%lld in a row, %lld in all)\n",
                       static_cast<long long>(done), static_cast<long long>(t.steps), loss, gnorm,
                       static_cast<long long>(st.bad_in_a_row), static_cast<long long>(st.skipped_steps));
        else
          std::fprintf(log,
                       "step %5lld/%lld | loss %.4f | grad norm %.4f | lr %.3e | %7.1f ms | %6.0f tok/s\n",
                       static_cast<long long>(done), static_cast<long long>(t.steps), loss, gnorm,
                       double(p.lr), seconds * 1e3, tok_s);
        std::fflush(log);
      }
      if (bad && st.bad_in_a_row >= t.max_bad_steps) {
        std::string msg = std::to_string(st.bad_in_a_row) +
                          " steps in a row had a non-finite loss or gradient "
                          "(train.max_bad_steps = " +
                          std::to_string(t.max_bad_steps) + "); stopping at step " + std::to_string(done) +
                          ". ";
        msg += fs::exists(out_dir + "/checkpoint.safetensors")
                   ? "The last good checkpoint is " + out_dir + "/checkpoint.safetensors."
                   : "No checkpoint was written yet.";
        throw TrainingStopped(msg);
      }
    }
    pending.clear();
  };
  for (int64_t step = st.step; step < t.steps; ++step) {
    if (pending.empty()) window_t0 = std::chrono::steady_clock::now();
    // per-layer diagnostics need every layer's activations: none under activation checkpointing
    const bool layer_diags = writer && !t.activation_checkpointing;
    model.set_attention_capture(layer_diags && evaluates_after(step + 1));
    model.zero_grad();
    int64_t counted = 0;
    for (int64_t a = 0; a < t.grad_accum; ++a) {
      ds.next_train_batch(rank_batch, ids, targets, rank, world);
      for (int32_t y : targets) counted += y >= 0;
      // the last micro-batch's backward starts each finished gradient bucket's reduce-scatter
      // (docs/distributed.md §"Gradient buckets"); not under an after_backward hook, which may change them
      const bool overlap = zero && a + 1 == t.grad_accum && !hooks.after_backward;
      if (overlap) model.set_grad_ready_hook([&z = *zero](int64_t f) { z.grads_final_from(f); });
      model.forward_backward(ids.data(), targets.data(), true, grad_scale);
      if (overlap) model.set_grad_ready_hook({});
    }
    update_scales();
    if (hooks.after_backward) hooks.after_backward(step, model);
    if (zero) opt.use_gradients(zero->reduce_gradients());  // the rest, then all: this rank's shard
    opt.compute_grad_norm();
    if (comm) {  // a NaN anywhere reaches every rank: all skip together
      comm->all_reduce(opt.grad_norm_sq(), ReduceOp::Sum);
      comm->all_reduce(model.loss_sum(), ReduceOp::Sum);
    }
    const float lr = learning_rate(t, step);
    opt.step(lr, model.loss_sum());
    if (fp8_gather) {  // after a skipped step: the unchanged shards' codes again
      fp8_gather->gather();
      masters_stale = true;
    } else if (zero) {
      zero->gather_params();  // after a skipped step: the unchanged shards
    }
    const int64_t slot = int64_t(pending.size());
    be.copy(history.tensor().slice(2 * slot, 1), model.loss_sum());
    be.copy(history.tensor().slice(2 * slot + 1, 1), opt.grad_norm_sq());
    be.fill(model.loss_sum(), 0.0);
    pending.push_back({step, lr, counted});
    st.step = step + 1;
    st.data_position = ds.position();
    const bool checkpoints = t.checkpoint_every > 0 && st.step % t.checkpoint_every == 0;
    if (st.step % t.log_every == 0 || st.step == t.steps || evaluates_after(st.step) || checkpoints ||
        int64_t(pending.size()) == window)
      read_pending();
    else
      continue;  // the host runs ahead: the next step is enqueued at once

    const bool last = st.step == t.steps;
    if (evaluates_after(st.step)) {
      if (t.sample_tokens > 0) gather_masters();  // rank 0's sampler reads the FP32 weights
      std::vector<LayerReport> diags;  // before eval overwrites activations; only rank 0 reports them
      if (layer_diags) diags = layer_diagnostics(model);
      const double val = evaluate();
      result.val_loss.emplace_back(st.step, val);
      result.final_val_loss = val;
      // The row residual: max over the attention layers that measured it; NaN (null in the record,
      // "n/a" in the log) when none did (cuDNN's SDPA keeps dS inside; LayerDiag), and then NaN
      // for the run too, as compare's merge of the records.
      // The dQ bias likewise: NaN (null, "n/a") when no layer replayed one (no attention layer).
      double kmax = 0, rmax = NAN, rmean = NAN, bnorm = NAN;
      auto fold = [](double& acc, double x) { acc = std::isnan(acc) ? x : std::max(acc, x); };
      for (const LayerReport& r : diags) {
        const LayerDiag& d = r.diag;
        kmax = std::max(kmax, d.kurtosis_max());
        if (r.attention && !std::isnan(d.row_residual_max)) {
          fold(rmax, d.row_residual_max);
          fold(rmean, d.row_residual_mean);
        }
        if (r.dq_bias) fold(bnorm, r.dq_bias->norm);
      }
      result.kurtosis_max = std::max(result.kurtosis_max, kmax);
      result.row_residual_max = report::max_or_nan(result.row_residual_max, rmax);
      result.row_residual_mean = report::max_or_nan(result.row_residual_mean, rmean);
      json ev = {{"step", st.step},
                 {"val_loss", val},
                 {"kurtosis_max", kmax},
                 {"row_residual_max", num(rmax)},
                 {"row_residual_mean", num(rmean)},
                 {"dq_bias_norm", num(bnorm)},
                 {"layers", layers_json(diags)}};
      // The corpus it was evaluated on: compare --resume keeps a finished run without weights
      // whose data.path moved when the corpus there has this hash.
      if (!st.tokens_hash.empty()) ev["tokens_hash"] = st.tokens_hash;
      if (!layer_diags) {  // not computed (activation checkpointing): null, never a 0 that reads as measured
        for (const char* k : {"kurtosis_max", "row_residual_max", "row_residual_mean", "dq_bias_norm"})
          ev[k] = nullptr;
        ev["layer_diagnostics"] = "off (activation checkpointing)";
        result.kurtosis_max = result.row_residual_max = result.row_residual_mean = NAN;
      }
      write_metrics(ev);
      if (log && !layer_diags) {
        std::fprintf(log,
                     "eval step %lld | val loss %.4f | layer diagnostics off (activation checkpointing)\n",
                     static_cast<long long>(st.step), val);
      } else if (log) {
        using report::sci;
        std::fprintf(log,
                     "eval step %lld | val loss %.4f | kurtosis max %.3f | attention row residual max %s, "
                     "mean %s | dQ bias (norm) max %s\n",
                     static_cast<long long>(st.step), val, kmax, sci(rmax).c_str(), sci(rmean).c_str(),
                     sci(bnorm).c_str());
        if (sampler) std::fprintf(log, "sample: %s\n", sampler->sample().c_str());
        std::fflush(log);
      }
    }
    // Periodic checkpoints make a run resumable; the last step's is the run's result, which
    // train.save_weights = false does not keep (nor an earlier one: removed below).
    const bool periodic = t.checkpoint_every > 0 && st.step % t.checkpoint_every == 0;
    if (!bad && (last ? t.save_weights : periodic)) {
      gather_masters();
      if (zero) {  // the full optimizer state (every rank takes part), written once by rank 0
        const std::vector<float> m = zero->gather_to_host(opt.m()), v = zero->gather_to_host(opt.v());
        if (writer) save_checkpoint(out_dir, model, m, v, st);
      } else {
        save_checkpoint(out_dir, model, opt.download_m(), opt.download_v(), st);
      }
    }
  }
  gather_masters();
  if (writer && t.save_weights)
    save_weights(out_dir + "/model.safetensors", model, st.tokens_hash, st.meaning);
  if (writer && !t.save_weights && st.step == t.steps) {  // finished: no weights stay behind
    // (model.safetensors too: an earlier end of a run extended with save_weights = false wrote it,
    // and its weights are not this run's result)
    for (const char* f : {"/checkpoint.safetensors", "/model.safetensors"}) {
      std::error_code ec;
      fs::remove(out_dir + f, ec);
      OCTET_CHECK(!ec, "cannot remove " + out_dir + f + ": " + ec.message());
    }
  }
  result.skipped_steps = st.skipped_steps;
  result.tokens_per_s = total_seconds > 0 ? double(total_tokens) / total_seconds : 0;
  if (result.val_loss.empty() && st.step == t.steps) result.final_val_loss = evaluate();
  return result;
}

}  // namespace octet
