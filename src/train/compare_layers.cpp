// src/train/compare_layers.cpp — the per-layer part of `octet compare`: each run's layer
// diagnostics at its final evaluation, read back from metrics.jsonl (the "layers" records of
// docs/training.md §Output), averaged per arm over its seeds, for summary.json and the log's
// per-layer table (docs/training.md §"Several seeds").
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

using json = nlohmann::json;

namespace {

// The number at j[a][b] (or j[a] if b is null); NaN where absent or null.
double get(const json& j, const char* a, const char* b = nullptr) {
  if (!j.contains(a) || j[a].is_null()) return NAN;
  const json& x = b ? j[a] : j;
  const char* key = b ? b : a;
  return x.is_object() && x.contains(key) && x[key].is_number() ? x[key].get<double>() : double(NAN);
}

}  // namespace

const std::array<const char*, LayerFinal::kFields>& LayerFinal::names() {
  static const std::array<const char*, kFields> n = {
      "row_residual_mean", "row_residual_max", "dq_bias_norm", "dq_bias_mean", "dq_bias_max",
      "kurtosis_max",      "amax_x",           "amax_w",       "amax_dy"};
  return n;
}

std::vector<LayerFinal> final_layers_from_metrics(const std::string& dir) {
  const std::string path = dir + "/metrics.jsonl";
  std::ifstream in(path);
  OCTET_CHECK(in.good(), "no metrics in " + dir + " (missing " + path + ")");
  json last;
  for (std::string line; std::getline(in, line);) {
    try {
      json j = json::parse(line);
      if (j.contains("val_loss") && j.contains("layers")) last = std::move(j);
    } catch (const json::exception&) {  // a torn line
    }
  }
  std::vector<LayerFinal> out;
  if (last.is_null()) return out;
  for (const json& l : last["layers"]) {
    LayerFinal f;
    f.layer = l.value("layer", int64_t(out.size()));
    f.v = {get(l, "row_residual_mean"), get(l, "row_residual_max"), get(l, "dq_bias", "norm"),
           get(l, "dq_bias", "mean"),   get(l, "dq_bias", "max"),   get(l, "kurtosis_max"),
           get(l, "amax", "x"),         get(l, "amax", "w"),        get(l, "amax", "dy")};
    out.push_back(f);
  }
  return out;
}

std::vector<CompareArmLayers> compare_arm_layers(const std::vector<CompareRow>& runs,
                                                 const std::vector<std::vector<LayerFinal>>& layers) {
  OCTET_CHECK(runs.size() == layers.size(), "compare_arm_layers: one layer list per run");
  std::vector<CompareArmLayers> arms;
  std::vector<std::vector<std::array<int64_t, LayerFinal::kFields>>> counts;  // finite values summed
  for (size_t r = 0; r < runs.size(); ++r) {
    size_t a = 0;
    while (a < arms.size() && arms[a].arm != runs[r].arm) ++a;
    if (a == arms.size()) {
      arms.push_back({runs[r].arm, 0, {}});
      counts.emplace_back();
    }
    arms[a].runs += 1;
    for (const LayerFinal& l : layers[r]) {
      size_t i = 0;
      while (i < arms[a].layers.size() && arms[a].layers[i].layer != l.layer) ++i;
      if (i == arms[a].layers.size()) {
        LayerFinal zero;
        zero.layer = l.layer;
        arms[a].layers.push_back(zero);
        counts[a].push_back({});
      }
      for (size_t k = 0; k < LayerFinal::kFields; ++k)
        if (std::isfinite(l.v[k])) {
          arms[a].layers[i].v[k] += l.v[k];
          counts[a][i][k] += 1;
        }
    }
  }
  for (size_t a = 0; a < arms.size(); ++a)
    for (size_t i = 0; i < arms[a].layers.size(); ++i)
      for (size_t k = 0; k < LayerFinal::kFields; ++k) {
        double& v = arms[a].layers[i].v[k];
        v = counts[a][i][k] ? v / double(counts[a][i][k]) : double(NAN);
      }
  return arms;
}

std::string compare_layers_json(const std::vector<LayerFinal>& layers) {
  json out = json::array();
  for (const LayerFinal& l : layers) {
    json j = {{"layer", l.layer}};
    for (size_t k = 0; k < LayerFinal::kFields; ++k)
      j[LayerFinal::names()[k]] = std::isfinite(l.v[k]) ? json(l.v[k]) : json(nullptr);
    out.push_back(j);
  }
  return out.dump();
}

std::string format_compare_layers_table(const std::vector<CompareArmLayers>& arms) {
  std::string s =
      "| layer | arm | runs | row residual mean | dQ bias (norm) | dQ bias mean | kurtosis max | amax X | "
      "amax W "
      "| amax dY |\n|---|---|---|---|---|---|---|---|---|---|\n";
  auto cell = [](double v, const char* fmt) {
    if (!std::isfinite(v)) return std::string("—");
    char b[32];
    std::snprintf(b, sizeof b, fmt, v);
    return std::string(b);
  };
  using F = LayerFinal;
  for (const CompareArmLayers& a : arms)
    for (const LayerFinal& l : a.layers)
      s += "| " + std::to_string(l.layer) + " | " + a.arm + " | " + std::to_string(a.runs) + " | " +
           cell(l.v[F::RowResidualMean], "%.3e") + " | " + cell(l.v[F::DqBiasNorm], "%.3e") + " | " +
           cell(l.v[F::DqBiasMean], "%.3e") + " | " + cell(l.v[F::KurtosisMax], "%.2f") + " | " +
           cell(l.v[F::AmaxX], "%.3g") + " | " + cell(l.v[F::AmaxW], "%.3g") + " | " +
           cell(l.v[F::AmaxDy], "%.3g") + " |\n";
  return s;
}

}  // namespace octet
