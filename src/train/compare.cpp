// src/train/compare.cpp — `octet compare`: the same model, seed and data order trained in each
// precision arm (docs/design.md §"Precision arms"), then one table: final train loss (mean of the last
// 10 steps), final validation loss, the validation-loss gap to bf16 in percent, the largest activation
// kurtosis (FOG's divergence warning, arXiv 2505.20524), the softmax-gradient row residual (the
// stale-delta error of arXiv 2609.37852; what its max means per arm: docs/training.md §Output) and
// throughput; then per layer at the final evaluation the row residual, the dQ bias along the mean key,
// kurtosis and amax (compare_layers.cpp). The rows are read back from each arm's metrics.jsonl, so an arm
// kept or resumed by
// --resume reports its whole run. An output directory is never mixed with an earlier compare's:
// docs/training.md §"Comparing arms".
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/eval.h"
#include "train/run_dir_lock.h"
#include "octet/names.h"
#include "octet/train.h"
#include "train/report_format.h"

namespace octet {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using report::fmt;
using report::sci;

// acc = max(acc, the evaluation record's value of key): a missing key counts as 0 (older
// metrics), a null one (not computed) makes acc NaN for good.
void merge_max(double& acc, const json& j, const char* key) {
  if (!j.contains(key)) return;
  acc = report::max_or_nan(acc, j[key].is_number() ? j[key].get<double>() : double(NAN));
}

bool is_empty_dir(const std::string& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec));
}

// What a compare does with one run's folder, decided before any run is removed or trained: train
// it where there is none, resume it from its checkpoint, keep it (finished without weights), or
// remove it and train it anew (why: for the log).
enum class RunPlan { Absent, Resume, Keep, Retrain };
struct PlannedRun {
  RunPlan plan = RunPlan::Absent;
  std::string why;
  std::string stamp;  // folder_stamp when planned: a folder changed since is not this plan's
};

// What a folder holds, as names, sizes and modification times of its entries (not recursive):
// equal stamps mean that no octet run was written or replaced there in between.
std::string folder_stamp(const std::string& dir) {
  std::vector<std::string> entries;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code e2;
    const auto size = e.is_regular_file(e2) ? e.file_size(e2) : 0;
    const auto when = e.last_write_time(e2).time_since_epoch().count();
    entries.push_back(e.path().filename().string() + ":" + std::to_string(size) + ":" + std::to_string(when));
  }
  std::sort(entries.begin(), entries.end());
  std::string out;
  for (const std::string& x : entries) out += x + "\n";
  return out;
}

// True when `dir` holds nothing, or only what octet's crash-safe writes leave behind (<name>.tmp
// of a run's files): an arm folder whose run never wrote its config.toml.
bool holds_no_user_files(const std::string& dir) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".tmp") != 0) return false;
  }
  return true;
}

// An arm folder without a checkpoint, for compare --resume. Its config.toml must be the same run
// as `c` (resume_changes: a changed meaning key is an octet::Error) and the tokens its last
// evaluation recorded (tokens_hash) the corpus's (`data`): other tokens are an octet::Error, as for
// a run with a checkpoint (check_resume), whether it would be kept or trained anew. Kept when its
// metrics hold the evaluation of step c.train.steps, it kept no weights and still keeps none, and
// of the schedule keys only those that leave the trained bits alone differ (a moved data.path only
// where a recorded tokens_hash vouches for the corpus there); else trained anew.
PlannedRun plan_run_without_checkpoint(const std::string& dir, const RunConfig& c, const Dataset& data,
                                       const std::string& arm) {
  std::error_code ec;
  if (!fs::exists(dir + "/config.toml", ec)) {
    OCTET_CHECK(holds_no_user_files(dir), "compare --resume: " + dir +
                                              " holds files but no octet run (no config.toml); move them "
                                              "away, or use another --out");
    return {RunPlan::Retrain, "its run never wrote its config.toml"};
  }
  const std::vector<ConfigChange> changes = resume_changes(load_config(dir + "/config.toml"), c, dir);
  bool finished = false;
  std::string trained_on;  // the tokens_hash of its last evaluation that records one
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);  // a torn line is skipped
    if (!j.is_object() || !j.contains("val_loss")) continue;
    finished = finished || j.value("step", int64_t(-1)) == c.train.steps;
    if (j.contains("tokens_hash") && j["tokens_hash"].is_string())
      trained_on = j["tokens_hash"].get<std::string>();
  }
  const std::string now = tokens_hash_hex(data);
  OCTET_CHECK(trained_on.empty() || trained_on == now,
              "compare --resume: arm " + arm + " (" + dir + ") trained on other tokens (tokens_hash " +
                  trained_on + ") than the corpus at data.path gives (" + now +
                  "): restore that corpus, or use --overwrite or another --out");
  if (!finished)
    return {RunPlan::Retrain,
            "it holds no checkpoint and no evaluation of step " + std::to_string(c.train.steps)};
  if (c.train.save_weights)
    return {RunPlan::Retrain, "it kept no weights, and train.save_weights is now true"};
  static const std::set<std::string> same_bits = {
      "train.checkpoint_every",         "train.log_every", "train.max_bad_steps",
      "train.activation_checkpointing", "device",          "data.cache_dir"};
  for (const ConfigChange& ch : changes) {
    OCTET_CHECK(ch.key != "data.path" || !trained_on.empty(),
                "compare --resume: arm " + arm + " (" + dir +
                    ") records no tokens_hash to check the corpus at " + ch.to + " against (it trained on " +
                    ch.from + "): restore data.path, or use --overwrite");
    if (ch.key != "data.path" && !same_bits.count(ch.key))  // e.g. another learning rate: trained again
      return {RunPlan::Retrain,
              ch.key + " changed (" + ch.from + " -> " + ch.to + ") and it kept no checkpoint"};
  }
  return {RunPlan::Keep, ""};
}

// Removes what a compare writes into out_dir (every arm's folder, summary.json, curves.png).
void remove_earlier_compare(const std::string& out_dir) {
  std::vector<std::string> names = enum_names<Arm>();
  // Every run directory to go (an arm's folder and its seed-N folders) locked first: one that an
  // octet process is training is refused before anything is removed.
  std::vector<std::unique_ptr<train_detail::RunDirLock>> locks;
  for (const std::string& n : names) {
    const fs::path arm = fs::path(out_dir) / n;
    std::error_code ec;
    if (!fs::is_directory(arm, ec)) continue;
    locks.push_back(std::make_unique<train_detail::RunDirLock>(arm.string()));
    for (const auto& e : fs::directory_iterator(arm, ec))
      if (e.is_directory(ec)) locks.push_back(std::make_unique<train_detail::RunDirLock>(e.path().string()));
  }
  for (const char* f : {"summary.json", "curves.png"}) names.emplace_back(f);
  for (const std::string& n : names) {
    std::error_code ec;
    fs::remove_all(fs::path(out_dir) / n, ec);
    OCTET_CHECK(!ec, "cannot remove " + (fs::path(out_dir) / n).string() + ": " + ec.message());
  }
}

}  // namespace

std::string format_compare_table(const std::vector<CompareRow>& rows) {
  std::string s =
      "| arm | train loss | val loss | gap to bf16 | max kurtosis | max attn row residual | mean attn row "
      "residual "
      "| tokens/s |\n"
      "|---|---|---|---|---|---|---|---|\n";
  char buf[320];
  bool several_seeds = false;
  for (const CompareRow& r : rows) several_seeds = several_seeds || r.seed != rows.front().seed;
  for (const CompareRow& r : rows) {
    const std::string name = several_seeds ? r.arm + " (seed " + std::to_string(r.seed) + ")" : r.arm;
    // The max is a check only with the matched delta; with the stale delta it saturates near 1.
    const std::string rmax = r.matched_delta ? sci(r.row_residual_max) : "n/a";
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %.4f | %+.2f%% | %s | %s | %s | %.0f |\n", name.c_str(),
                  r.train_loss, r.val_loss, r.gap_pct, fmt(r.kurtosis_max, "%.2f").c_str(), rmax.c_str(),
                  sci(r.row_residual_mean).c_str(), r.tokens_per_s);
    s += buf;
  }
  return s;
}

CompareRow compare_row_from_metrics(const std::string& arm, const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  OCTET_CHECK(in.good(), "no metrics in " + dir + " (missing " + path + ")");
  CompareRow row;
  row.arm = arm;
  std::vector<double> losses;
  double tokens = 0, seconds = 0;
  int64_t steps = 0;
  std::string line;
  while (std::getline(in, line)) {
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      continue;  // a torn line
    }
    if (j.contains("val_loss")) {  // an evaluation
      row.val_loss = j["val_loss"].is_number() ? j["val_loss"].get<double>() : double(NAN);
      merge_max(row.kurtosis_max, j, "kurtosis_max");
      merge_max(row.row_residual_max, j, "row_residual_max");
      merge_max(row.row_residual_mean, j, "row_residual_mean");
    } else if (j.contains("tokens_per_s") && j.contains("ms")) {  // a step
      ++steps;
      const double s = j["ms"].get<double>() * 1e-3;
      tokens += j["tokens_per_s"].get<double>() * s;
      seconds += s;
      if (j["loss"].is_number()) losses.push_back(j["loss"].get<double>());
    }
  }
  OCTET_CHECK(steps > 0, "no training steps in " + path);
  double sum = 0;
  int n = 0;
  for (size_t i = losses.size(); i > 0 && n < 10; --i, ++n) sum += losses[i - 1];
  row.train_loss = n ? sum / n : NAN;
  row.tokens_per_s = seconds > 0 ? tokens / seconds : 0;
  return row;
}

std::vector<CompareRow> compare_arms(const RunConfig& cfg, const std::vector<std::string>& arms,
                                     const std::string& out_dir, FILE* log_in, CompareMode mode,
                                     int64_t seeds, DistSession* dist) {
  // ranks (docs/distributed.md): rank 0 checks out_dir, writes and logs; every rank trains every arm
  const bool writer = !dist || dist->comm->rank() == 0;
  FILE* log = writer ? log_in : nullptr;
  // Everything is checked before the first write: every arm's config, repeats, the device, out_dir.
  OCTET_CHECK(!arms.empty(), "compare needs at least one arm");
  OCTET_CHECK(seeds >= 1 && seeds <= 1000, "--seeds must be in [1, 1000], got " + std::to_string(seeds));
  OCTET_CHECK(cfg.train.seed <= uint64_t(INT64_MAX) - uint64_t(seeds - 1),
              "train.seed + --seeds - 1 must stay <= 2^63 - 1 (a seed a config can hold)");
  // The run of (arm, k-th seed): its config and directory (one seed: out_dir/<arm>, as before).
  auto run_config = [&](const std::string& arm, int64_t k) {
    RunConfig c = cfg;
    c.precision.arm = parse_arm(arm);
    c.train.seed = cfg.train.seed + uint64_t(k);
    return c;
  };
  auto run_dir = [&](const std::string& arm, int64_t k) {
    return seeds == 1 ? out_dir + "/" + arm
                      : out_dir + "/" + arm + "/seed-" + std::to_string(cfg.train.seed + uint64_t(k));
  };
  if (writer) require_directory_path(out_dir, "--out");  // one sub-directory per arm
  std::set<std::string> seen;
  for (const std::string& arm : arms) {
    OCTET_CHECK(seen.insert(arm).second, "--arms lists " + arm + " twice (each arm trains once)");
    RunConfig c = cfg;
    c.precision.arm = parse_arm(arm);
    c.validate();
  }
  std::unique_ptr<Backend> own_backend;
  if (!dist) own_backend = make_backend(cfg.device);  // throws if the device is not available
  Backend& backend = dist ? *dist->backend : *own_backend;
  RunConfig base = cfg;  // the table printed once; each arm then prints what differs
  resolve_run_config(base, backend);
  OCTET_CHECK(!writer || mode != CompareMode::Fresh || is_empty_dir(out_dir),
              "--out " + out_dir +
                  " is not empty: give --resume to keep its finished arms and resume the others, "
                  "--overwrite to replace its results, or another --out");
  if (writer && mode == CompareMode::Resume)  // one layout per --out: out/<arm>/ or out/<arm>/seed-<seed>/
    for (const std::string& arm : arms) {
      const fs::path dir = fs::path(out_dir) / arm;
      bool per_seed = false;
      std::error_code ec;
      if (fs::is_directory(dir, ec))
        for (const auto& e : fs::directory_iterator(dir, ec))
          per_seed = per_seed || e.path().filename().string().rfind("seed-", 0) == 0;
      const bool one_seed = fs::exists(dir / "metrics.jsonl", ec);
      OCTET_CHECK(seeds == 1 ? !per_seed : !one_seed,
                  "compare --resume: --out " + out_dir + " holds arm " + arm + " trained with " +
                      (one_seed ? "one seed" : "--seeds > 1") +
                      "; give the same --seeds, --overwrite or another --out");
      if (seeds > 1 && per_seed)  // every seed folder there must be one of this compare's seeds
        for (const auto& e : fs::directory_iterator(dir, ec)) {
          const std::string name = e.path().filename().string();
          bool ours = false;
          for (int64_t k = 0; k < seeds; ++k)
            ours = ours || name == fs::path(run_dir(arm, k)).filename().string();
          OCTET_CHECK(ours || name.rfind("seed-", 0) != 0,
                      "compare --resume: --out " + out_dir + " holds " + arm + "/" + name +
                          ", which --seeds " + std::to_string(seeds) + " from train.seed " +
                          std::to_string(cfg.train.seed) +
                          " does not include; give the same --seeds (a larger one adds seeds), --overwrite "
                          "or another --out");
        }
    }
  std::string desc;
  auto ds = load_dataset(cfg, &desc);
  // What --resume does with each run, decided (and every run checked) before any is removed or
  // trained: resume it from its checkpoint, keep it (finished without weights), or train it anew.
  std::map<std::string, PlannedRun> plans;  // by run directory; absent: no folder there
  for (int64_t k = 0; mode == CompareMode::Resume && k < seeds; ++k)
    for (const std::string& arm : arms) {
      const std::string dir = run_dir(arm, k);
      std::error_code ec;
      for (const fs::path& p :
           {fs::path(dir).parent_path(), fs::path(dir)}) {  // out/<arm>, then its seed folder
        if (p == fs::path(out_dir) || !fs::exists(fs::symlink_status(p, ec))) continue;
        OCTET_CHECK(fs::is_directory(p, ec), "compare --resume: " + p.string() +
                                                 " is not an arm folder (not a directory); move it away, "
                                                 "or use another --out");
      }
      if (!fs::exists(fs::symlink_status(dir, ec))) continue;
      if (writer) train_detail::RunDirLock in_use(dir);  // one another octet process trains is refused now
      RunConfig c = run_config(arm, k);
      resolve_run_config(c, backend);  // per arm: attn_form "auto" depends on the arm (train() checks again)
      if (!fs::exists(dir + "/checkpoint.safetensors", ec)) {
        plans[dir] = plan_run_without_checkpoint(dir, c, *ds, arm);
        plans[dir].stamp = folder_stamp(dir);
        continue;
      }
      // A run to resume must be the same run, on the same tokens. The learning-rate schedule may
      // change when one run resumes, not across the arms of one comparison: arms kept finished, or
      // resumed from other steps, would sit in one table trained under different schedules.
      const TrainState st = read_checkpoint_state(dir);
      for (const ConfigChange& ch : check_resume(dir, c, st))
        OCTET_CHECK(ch.key != "train.lr" && ch.key != "train.min_lr_ratio" && ch.key != "train.warmup_steps",
                    "compare --resume cannot change " + ch.key + " (" + ch.from + " -> " + ch.to +
                        " for arm " + arm +
                        "): its arms would be compared under different schedules; use --overwrite or "
                        "another --out");
      OCTET_CHECK(st.tokens_hash.empty() || st.tokens_hash == tokens_hash_hex(*ds),
                  "compare --resume: arm " + arm + " (" + dir + ") trained on other tokens (tokens_hash " +
                      st.tokens_hash + ") than the corpus at data.path gives (" + tokens_hash_hex(*ds) +
                      "): restore that corpus, or use --overwrite or another --out");
      plans[dir] = {RunPlan::Resume, ""};
    }
  if (writer && mode == CompareMode::Overwrite) remove_earlier_compare(out_dir);
  if (log) {
    std::fprintf(log, "%s\n", desc.c_str());
    std::fprintf(log, "unigram entropy of the corpus: %.4f nats/token (the loss of a context-free model)\n",
                 ds->unigram_entropy());
    std::vector<ConfigRow> rows = config_rows(base);
    std::string all;
    for (const std::string& arm : arms) all += (all.empty() ? "" : ", ") + arm;
    for (ConfigRow& r : rows) {
      if (r.key == "precision.arm") r.value = all + (seeds == 1 ? " (one run each)" : " (one run per seed)");
      if (r.key == "train.seed" && seeds > 1)
        r.value = std::to_string(cfg.train.seed) + " .. " +
                  std::to_string(cfg.train.seed + uint64_t(seeds - 1)) + " (" + std::to_string(seeds) +
                  " seeds)";
    }
    std::fprintf(log, "\n");
    print_config_table(log, rows);
  }

  // One run: fresh (its directory cleared) or resumed, then its row read back from metrics.jsonl.
  auto train_run = [&](const std::string& arm, int64_t k, Dataset& data) {
    const RunConfig c = run_config(arm, k);
    const std::string dir = run_dir(arm, k);
    const auto at = plans.find(dir);
    const PlannedRun plan = at == plans.end() ? PlannedRun{} : at->second;
    const std::string name = seeds == 1 ? arm : arm + ", seed " + std::to_string(c.train.seed);
    if (log) std::fprintf(log, "\n=== arm %s ===\n", name.c_str());
    std::error_code ec;
    // A folder that was not there when the compare began (another process wrote it since) is not
    // this compare's to remove or resume.
    const bool changed = plan.plan == RunPlan::Absent   ? fs::exists(fs::symlink_status(dir, ec))
                         : plan.plan == RunPlan::Resume ? false  // train() checks its checkpoint again
                                                        : folder_stamp(dir) != plan.stamp;
    // with --seeds, a one-seed run written at <out>/<arm> since: not this compare's to write into
    const bool run_at_arm = seeds > 1 && fs::exists(fs::path(dir).parent_path() / "config.toml", ec);
    OCTET_CHECK(!writer || (!changed && !run_at_arm),
                "compare: " + (run_at_arm ? fs::path(dir).parent_path().string() : dir) +
                    " changed after this compare checked --out (another process wrote there); it is left "
                    "as it is: compare it with --resume, or use another --out");
    if (writer && plan.plan == RunPlan::Retrain) {  // a fresh run: nothing stale stays
      if (log) std::fprintf(log, "arm %s is trained again: %s\n", name.c_str(), plan.why.c_str());
      train_detail::RunDirLock in_use(dir);  // never remove a folder another octet process trains in
      fs::remove_all(dir, ec);
      OCTET_CHECK(!ec, "cannot remove " + dir + ": " + ec.message());
    }
    const bool resume = plan.plan == RunPlan::Resume, kept = plan.plan == RunPlan::Keep;
    bool stopped = false;
    try {
      if (kept) {
        if (log) std::fprintf(log, "arm %s is complete (kept; it saved no weights)\n", name.c_str());
      } else {
        const TrainResult r = train(c, dir, resume, data, log, {}, &base, dist);
        if (log && r.complete) std::fprintf(log, "arm %s is complete (kept)\n", name.c_str());
      }
    } catch (const TrainingStopped& e) {
      if (log) std::fprintf(log, "arm %s stopped: %s\n", name.c_str(), e.what());
      stopped = true;
    }
    if (!writer) return CompareRow{};  // the table is rank 0's
    CompareRow row = compare_row_from_metrics(arm, dir);
    row.matched_delta = attention_config(c.precision).delta == DeltaMode::Matched;
    if (stopped) row.train_loss = row.val_loss = NAN;
    row.seed = c.train.seed;
    return row;
  };
  std::vector<CompareRow> rows;
  std::vector<std::string> dirs;
  for (int64_t k = 0; k < seeds; ++k) {  // seed by seed, so that each finished seed compares all arms
    if (k > 0) ds = load_dataset(run_config(arms.front(), k));  // this seed's data order
    for (const std::string& arm : arms) {
      CompareRow row = train_run(arm, k, *ds);
      if (!writer) continue;
      rows.push_back(row);
      dirs.push_back(run_dir(arm, k));
    }
  }
  if (!writer) return rows;
  for (CompareRow& r : rows) {  // the gap to bf16 of the same seed
    double base_loss = NAN;
    for (const CompareRow& b : rows)
      if (b.arm == "bf16" && b.seed == r.seed) base_loss = b.val_loss;
    r.gap_pct = std::isfinite(base_loss) ? 100.0 * (r.val_loss - base_loss) / base_loss : NAN;
  }
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json summary = json::array();
  const std::vector<CompareArmStats> stats = compare_arm_stats(rows);
  // per layer at the final evaluation: each run's, and per arm the mean over its seeds (compare_layers.cpp)
  std::vector<std::vector<LayerFinal>> run_layers;
  for (const std::string& d : dirs) run_layers.push_back(final_layers_from_metrics(d));
  const std::vector<CompareArmLayers> arm_layers = compare_arm_layers(rows, run_layers);
  auto layers_of = [&](const std::string& arm) {
    for (const CompareArmLayers& a : arm_layers)
      if (a.arm == arm) return json::parse(compare_layers_json(a.layers));
    return json::array();
  };
  if (seeds > 1)
    for (const CompareArmStats& a : stats) {
      json losses = json::array();
      for (double v : a.val_losses) losses.push_back(num(v));
      json test = nullptr;
      if (a.tested)
        test = {{"name", "Welch's t-test, two-sided"},
                {"alpha", 0.05},
                {"t", num(a.vs_bf16.t)},
                {"dof", num(a.vs_bf16.dof)},
                {"p", num(a.vs_bf16.p)},
                {"vs_bf16", a.vs_bf16.outside_noise ? "outside noise" : "inside noise"}};
      summary.push_back({{"arm", a.arm},
                         {"seeds", a.seeds},
                         {"val_losses", losses},
                         {"val_loss", num(a.val_mean)},
                         {"val_loss_std", num(a.val_std)},
                         {"gap_pct", num(a.gap_pct)},
                         {"test", test},
                         {"kurtosis_max", num(a.kurtosis_max)},
                         {"row_residual_max", num(a.row_residual_max)},
                         {"row_residual_mean", num(a.row_residual_mean)},
                         {"tokens_per_s", num(a.tokens_per_s)},
                         {"delta", a.matched_delta ? "matched" : "stale"},
                         {"layers", layers_of(a.arm)}});
    }
  for (CompareRow& r : rows) {
    if (seeds > 1) break;
    summary.push_back({{"arm", r.arm},
                       {"train_loss", num(r.train_loss)},
                       {"val_loss", num(r.val_loss)},
                       {"gap_pct", num(r.gap_pct)},
                       {"kurtosis_max", num(r.kurtosis_max)},
                       {"row_residual_max", num(r.row_residual_max)},
                       {"tokens_per_s", num(r.tokens_per_s)},
                       {"row_residual_mean", num(r.row_residual_mean)},
                       {"delta", r.matched_delta ? "matched" : "stale"},
                       {"layers", layers_of(r.arm)}});
  }
  write_file_atomic(out_dir + "/summary.json", {summary.dump(2) + "\n"});
  std::string png = out_dir + "/curves.png";
  try {
    plot_runs(dirs, png, "octet compare: train (thin) and validation (thick) loss");
  } catch (const Error& e) {  // a missing plotter costs the picture, not the results
    std::fprintf(stderr, "octet: warning: no curves.png: %s\n", e.what());
    png = "(none)";
  }
  if (log) {
    std::fprintf(log, "\n%s", format_compare_table(rows).c_str());
    if (seeds > 1)
      std::fprintf(log,
                   "\nover %lld seeds (Welch's t-test of each arm's validation losses against bf16's, "
                   "two-sided, 95%%):\n%s",
                   static_cast<long long>(seeds), format_compare_seeds_table(stats).c_str());
    std::fprintf(log, "\nper layer at the final evaluation (%s; docs/training.md §Output):\n%s",
                 seeds > 1 ? "mean over the seeds" : "one run each",
                 format_compare_layers_table(arm_layers).c_str());
    std::fprintf(log,
                 "max attn row residual: n/a for the arms with the stale delta: rows whose delta "
                 "nearly cancels drive it to 1 in any long run; the mean is the stale delta's error "
                 "(docs/training.md)\n");
    std::fprintf(log, "unigram entropy %.4f nats/token; summary: %s/summary.json; curves: %s\n",
                 ds->unigram_entropy(), out_dir.c_str(), png.c_str());
    std::fflush(log);
  }
  return rows;
}

}  // namespace octet
