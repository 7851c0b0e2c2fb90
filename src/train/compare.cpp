// src/train/compare.cpp — `octet compare`: the same model, seed and data order trained in each
// precision arm (docs/design.md §"Precision arms"), then one table: final train loss (mean of the last
// 10 steps), final validation loss, the validation-loss gap to bf16 in percent, the largest activation
// kurtosis (FOG's divergence warning, arXiv 2505.20524), the softmax-gradient row residual (the
// stale-delta error of arXiv 2609.37852; what its max means per arm: docs/training.md §Output) and
// throughput. The rows are read back from each arm's metrics.jsonl, so an arm kept or resumed by
// --resume reports its whole run. An output directory is never mixed with an earlier compare's:
// docs/training.md §"Comparing arms".
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "octet/dist.h"
#include "octet/error.h"
#include "octet/names.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

bool is_empty_dir(const std::string& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec));
}

// Removes what a compare writes into out_dir (every arm's folder, summary.json, curves.png).
void remove_earlier_compare(const std::string& out_dir) {
  std::vector<std::string> names = enum_names<Arm>();
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
      "| arm | train loss | val loss | gap to bf16 | max kurtosis | max attn row residual | mean attn row residual "
      "| tokens/s |\n"
      "|---|---|---|---|---|---|---|---|\n";
  char buf[320];
  for (const CompareRow& r : rows) {
    // The max is a check only with the matched delta; with the stale delta it saturates near 1.
    const std::string rmax = r.matched_delta ? sci(r.row_residual_max) : "n/a";
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %.4f | %+.2f%% | %.2f | %s | %.3e | %.0f |\n", r.arm.c_str(),
                  r.train_loss, r.val_loss, r.gap_pct, r.kurtosis_max, rmax.c_str(), r.row_residual_mean,
                  r.tokens_per_s);
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
      row.kurtosis_max = std::max(row.kurtosis_max, j.value("kurtosis_max", 0.0));
      row.row_residual_max = std::max(row.row_residual_max, j.value("row_residual_max", 0.0));
      row.row_residual_mean = std::max(row.row_residual_mean, j.value("row_residual_mean", 0.0));
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
                                     DistSession* dist) {
  // ranks (docs/distributed.md): rank 0 checks out_dir, writes and logs; every rank trains every arm
  const bool writer = !dist || dist->comm->rank() == 0;
  FILE* log = writer ? log_in : nullptr;
  // Everything is checked before the first write: every arm's config, repeats, the device, out_dir.
  OCTET_CHECK(!arms.empty(), "compare needs at least one arm");
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
              "--out " + out_dir + " is not empty: give --resume to keep its finished arms and resume the others, "
              "--overwrite to replace its results, or another --out");
  if (writer && mode == CompareMode::Resume)  // an arm to resume must be the same run (train() checks again)
    for (const std::string& arm : arms) {
      const std::string dir = out_dir + "/" + arm;
      if (!fs::exists(dir + "/checkpoint.safetensors")) continue;
      RunConfig c = cfg;
      c.precision.arm = parse_arm(arm);
      resolve_run_config(c, backend);  // per arm: attn_form "auto" depends on the arm
      // The learning-rate schedule may change when one run resumes, not across the arms of one
      // comparison: arms kept finished, or resumed from other steps, would sit in one table trained
      // under different schedules.
      for (const ConfigChange& ch : check_resume(dir, c, read_checkpoint_state(dir).step))
        OCTET_CHECK(ch.key != "train.lr" && ch.key != "train.min_lr_ratio" && ch.key != "train.warmup_steps",
                    "compare --resume cannot change " + ch.key + " (" + ch.from + " -> " + ch.to + " for arm " +
                        arm + "): its arms would be compared under different schedules; use --overwrite or "
                        "another --out");
    }
  std::string desc;
  auto ds = load_dataset(cfg, &desc);
  if (writer && mode == CompareMode::Overwrite) remove_earlier_compare(out_dir);
  if (log) {
    std::fprintf(log, "%s\n", desc.c_str());
    std::fprintf(log, "unigram entropy of the corpus: %.4f nats/token (the loss of a context-free model)\n",
                 ds->unigram_entropy());
    std::vector<ConfigRow> rows = config_rows(base);
    std::string all;
    for (const std::string& arm : arms) all += (all.empty() ? "" : ", ") + arm;
    for (ConfigRow& r : rows)
      if (r.key == "precision.arm") r.value = all + " (one run each)";
    std::fprintf(log, "\n");
    print_config_table(log, rows);
  }

  std::vector<CompareRow> rows;
  std::vector<std::string> dirs;
  for (const std::string& arm : arms) {
    RunConfig c = cfg;
    c.precision.arm = parse_arm(arm);
    const std::string dir = out_dir + "/" + arm;
    const bool resume = mode == CompareMode::Resume && fs::exists(dir + "/checkpoint.safetensors");
    if (writer && !resume) {  // a fresh run: nothing stale of an unfinished earlier one stays
      std::error_code ec;
      fs::remove_all(dir, ec);
      OCTET_CHECK(!ec, "cannot remove " + dir + ": " + ec.message());
    }
    if (log) std::fprintf(log, "\n=== arm %s ===\n", arm.c_str());
    bool stopped = false;
    try {
      const TrainResult r = train(c, dir, resume, *ds, log, {}, &base, dist);
      if (log && r.complete) std::fprintf(log, "arm %s is complete (kept)\n", arm.c_str());
    } catch (const TrainingStopped& e) {
      if (log) std::fprintf(log, "arm %s stopped: %s\n", arm.c_str(), e.what());
      stopped = true;
    }
    if (!writer) continue;  // the table is rank 0's
    CompareRow row = compare_row_from_metrics(arm, dir);
    row.matched_delta = attention_config(c.precision).delta == DeltaMode::Matched;
    if (stopped) row.train_loss = row.val_loss = NAN;
    rows.push_back(row);
    dirs.push_back(dir);
  }
  if (!writer) return rows;
  double base_loss = NAN;
  for (const CompareRow& r : rows)
    if (r.arm == "bf16") base_loss = r.val_loss;
  json summary = json::array();
  for (CompareRow& r : rows) {
    r.gap_pct = std::isfinite(base_loss) ? 100.0 * (r.val_loss - base_loss) / base_loss : NAN;
    auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
    summary.push_back({{"arm", r.arm}, {"train_loss", num(r.train_loss)}, {"val_loss", num(r.val_loss)},
                       {"gap_pct", num(r.gap_pct)}, {"kurtosis_max", num(r.kurtosis_max)},
                       {"row_residual_max", num(r.row_residual_max)}, {"tokens_per_s", num(r.tokens_per_s)},
                       {"row_residual_mean", num(r.row_residual_mean)},
                       {"delta", r.matched_delta ? "matched" : "stale"}});
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
    std::fprintf(log, "max attn row residual: n/a for the arms with the stale delta: rows whose delta "
                      "nearly cancels drive it to 1 in any long run; the mean is the stale delta's error "
                      "(docs/training.md)\n");
    std::fprintf(log, "unigram entropy %.4f nats/token; summary: %s/summary.json; curves: %s\n",
                 ds->unigram_entropy(), out_dir.c_str(), png.c_str());
    std::fflush(log);
  }
  return rows;
}

}  // namespace octet
