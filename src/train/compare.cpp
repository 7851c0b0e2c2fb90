// src/train/compare.cpp — `octet compare`: the same model, seed and data order trained in each
// precision arm (docs/design.md §"Precision arms"), then one table: final train loss (mean of the last 10 steps), final
// validation loss, the validation-loss gap to bf16 in percent, the largest activation kurtosis (FOG's
// divergence warning, arXiv 2505.20524), the largest softmax-gradient row residual (the stale-delta
// error of arXiv 2609.37852) and throughput.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;

std::string format_compare_table(const std::vector<CompareRow>& rows) {
  std::string s =
      "| arm | train loss | val loss | gap to bf16 | max kurtosis | max attn row residual | mean attn row residual "
      "| tokens/s |\n"
      "|---|---|---|---|---|---|---|---|\n";
  char buf[256];
  for (const CompareRow& r : rows) {
    std::snprintf(buf, sizeof buf, "| %s | %.4f | %.4f | %+.2f%% | %.2f | %.3e | %.3e | %.0f |\n", r.arm.c_str(),
                  r.train_loss, r.val_loss, r.gap_pct, r.kurtosis_max, r.row_residual_max, r.row_residual_mean,
                  r.tokens_per_s);
    s += buf;
  }
  return s;
}

std::vector<CompareRow> compare_arms(const RunConfig& cfg, const std::vector<std::string>& arms,
                                     const std::string& out_dir, FILE* log) {
  OCTET_CHECK(!arms.empty(), "compare needs at least one arm");
  for (const std::string& arm : arms) {  // every arm's config, before the first arm starts
    RunConfig c = cfg;
    c.precision.arm = parse_arm(arm);
    c.validate();
  }
  std::string desc;
  auto ds = load_dataset(cfg, &desc);
  if (log) {
    std::fprintf(log, "%s\n", desc.c_str());
    std::fprintf(log, "unigram entropy of the corpus: %.4f nats/token (the loss of a context-free model)\n",
                 ds->unigram_entropy());
  }
  std::vector<CompareRow> rows;
  std::vector<std::string> dirs;
  for (const std::string& arm : arms) {
    RunConfig c = cfg;
    c.precision.arm = parse_arm(arm);
    const std::string dir = out_dir + "/" + arm;
    if (log) std::fprintf(log, "\n=== arm %s ===\n", arm.c_str());
    CompareRow row;
    row.arm = arm;
    try {
      const TrainResult r = train(c, dir, false, *ds, log);
      double sum = 0;
      int n = 0;
      for (size_t i = r.train_loss.size(); i > 0 && n < 10; --i)
        if (std::isfinite(r.train_loss[i - 1])) sum += r.train_loss[i - 1], ++n;
      row.train_loss = n ? sum / n : NAN;
      row.val_loss = r.final_val_loss;
      row.kurtosis_max = r.kurtosis_max;
      row.row_residual_max = r.row_residual_max;
      row.row_residual_mean = r.row_residual_mean;
      row.tokens_per_s = r.tokens_per_s;
    } catch (const TrainingStopped& e) {
      if (log) std::fprintf(log, "arm %s stopped: %s\n", arm.c_str(), e.what());
      row.train_loss = row.val_loss = NAN;
    }
    rows.push_back(row);
    dirs.push_back(dir);
  }
  double base = NAN;
  for (const CompareRow& r : rows)
    if (r.arm == "bf16") base = r.val_loss;
  nlohmann::json summary = nlohmann::json::array();
  for (CompareRow& r : rows) {
    r.gap_pct = std::isfinite(base) ? 100.0 * (r.val_loss - base) / base : NAN;
    auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
    summary.push_back({{"arm", r.arm}, {"train_loss", num(r.train_loss)}, {"val_loss", num(r.val_loss)},
                       {"gap_pct", num(r.gap_pct)}, {"kurtosis_max", num(r.kurtosis_max)},
                       {"row_residual_max", num(r.row_residual_max)}, {"tokens_per_s", num(r.tokens_per_s)},
                       {"row_residual_mean", num(r.row_residual_mean)}});
  }
  {
    // train() made out_dir/<arm> once its backend and model existed; out_dir exists by now.
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    OCTET_CHECK(!ec, "cannot create output directory " + out_dir + ": " + ec.message());
    std::ofstream out(out_dir + "/summary.json", std::ios::trunc);
    out << summary.dump(2) << "\n";
    OCTET_CHECK(out.good(), "cannot write " + out_dir + "/summary.json");
  }
  const std::string png = out_dir + "/curves.png";
  plot_runs(dirs, png, "octet compare: train (thin) and validation (thick) loss");
  if (log) {
    std::fprintf(log, "\n%s", format_compare_table(rows).c_str());
    std::fprintf(log, "unigram entropy %.4f nats/token; summary: %s/summary.json; curves: %s\n",
                 ds->unigram_entropy(), out_dir.c_str(), png.c_str());
    std::fflush(log);
  }
  return rows;
}

}  // namespace octet
