// `octet quantize`: quantizes a generated tensor with one scaling recipe (quant.h) and reports
// what the recipe did to it: amax, the range of its scales, the relative L2 error of the
// dequantized tensor, and the fractions of values that underflowed to zero or saturated.
// --format is the format policy (e4m3 | hybrid) or e5m2, which is hybrid with --role gradient (so
// --format e5m2 with another --role is an error; docs/cli.md). --margin follows the trainer's rule
// (QuantConfig::validate, the same check as precision.margin).
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/names.h"
#include "octet/quant.h"

namespace {

struct QuantizeOptions {
  std::string recipe, format = "e4m3", shape, dist = "normal", role = "activation";
  uint64_t seed = 0;
  int margin = 0;
  float unit_scale = 1.0f;
  bool pow2 = false, no_saturate = false, json = false;
};

std::pair<int64_t, int64_t> parse_shape(const std::string& s) {
  const size_t x = s.find('x');
  auto digits = [](const std::string& d) {
    return !d.empty() && d.size() <= 9 && d.find_first_not_of("0123456789") == std::string::npos;
  };
  OCTET_CHECK(x != std::string::npos && digits(s.substr(0, x)) && digits(s.substr(x + 1)),
              "quantize: malformed shape '" + s + "' (expected ROWSxCOLS, e.g. 256x1024)");
  const int64_t rows = std::stoll(s.substr(0, x)), cols = std::stoll(s.substr(x + 1));
  OCTET_CHECK(rows >= 1 && cols >= 1, "quantize: empty shape '" + s + "' (rows and cols must be >= 1)");
  OCTET_CHECK(rows * cols <= (int64_t(1) << 28),
              "quantize: shape '" + s + "' is too large (max 2^28 elements)");
  return {rows, cols};
}

// normal: N(0,1); zeros; outlier: N(0,1) with one value in 1000 scaled by 1000 (massive activations).
std::vector<float> generate(const std::string& dist, int64_t n, uint64_t seed) {
  std::vector<float> x(size_t(n), 0.0f);
  if (dist == "zeros") return x;
  OCTET_CHECK(dist == "normal" || dist == "outlier",
              "quantize: unknown dist '" + dist + "' (expected one of: normal, zeros, outlier)");
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 999);
  for (auto& v : x) {
    v = normal(rng);
    if (dist == "outlier" && pick(rng) == 0) v *= 1000.0f;
  }
  return x;
}

}  // namespace

OCTET_COMMAND("quantize", [](CLI::App& app) {
  auto o = std::make_shared<QuantizeOptions>();
  auto* cmd = app.add_subcommand("quantize",
                                 "Quantize a generated tensor with one scaling recipe and report the error");
  octet::cli::add_enum_option<octet::Recipe>(cmd, "--recipe", o->recipe, "scaling recipe")->required();
  cmd->add_option("--format", o->format,
                  "e4m3 | hybrid (E5M2 for --role gradient) | e5m2 (= hybrid, gradient)")
      ->capture_default_str();
  cmd->add_option("--shape", o->shape, "ROWSxCOLS, e.g. 256x1024")->required();
  cmd->add_option("--dist", o->dist, "normal | zeros | outlier")->capture_default_str();
  auto* role_opt = octet::cli::add_enum_option<octet::Role>(cmd, "--role", o->role,
                                                            "tensor role (block shape, hybrid format)")
                       ->capture_default_str();
  octet::cli::add_seed_option(cmd, "--seed", o->seed, "generator seed")->capture_default_str();
  cmd->add_option("--margin", o->margin, "scale = fp8_max / amax / 2^margin, in [-32, 32]")
      ->capture_default_str();
  cmd->add_option("--unit-scale", o->unit_scale, "unit recipe: the static scale")->capture_default_str();
  cmd->add_flag("--pow2", o->pow2, "round scales to powers of two");
  cmd->add_flag("--no-saturate", o->no_saturate, "non-saturating cast");
  cmd->add_flag("--json", o->json, "one JSON object");
  cmd->callback([o, role_opt] {
    octet::QuantConfig cfg;
    cfg.recipe = octet::parse_recipe(o->recipe);
    octet::Role role = octet::parse_enum<octet::Role>(o->role);
    OCTET_CHECK(o->format == "e4m3" || o->format == "hybrid" || o->format == "e5m2",
                "quantize: unknown format '" + o->format + "' (expected one of: e4m3, hybrid, e5m2)");
    if (o->format == "e5m2") {  // E5M2 elements: the hybrid policy's gradient format
      OCTET_CHECK(role_opt->count() == 0 || role == octet::Role::Gradient,
                  "quantize: --format e5m2 is the gradient format (hybrid policy, role gradient); "
                  "--role " +
                      o->role + " would quantize to E4M3 (use --format hybrid --role " + o->role +
                      ", or drop --role)");
      cfg.formats = octet::FormatPolicy::Hybrid;
      role = octet::Role::Gradient;
    } else {
      cfg.formats = octet::parse_format_policy(o->format);
    }
    cfg.margin = o->margin;
    cfg.pow2_scales = o->pow2;
    cfg.unit_scale = o->unit_scale;
    cfg.saturate = !o->no_saturate;
    cfg.validate();  // every input checked before any output
    const auto [rows, cols] = parse_shape(o->shape);
    const std::vector<float> x = generate(o->dist, rows * cols, o->seed);

    octet::Quantizer qz(cfg, role);
    octet::QTensor q;
    qz.quantize(x.data(), rows, cols, q);
    std::vector<float> y(x.size());
    octet::dequantize(q, y.data());

    double err2 = 0.0, ref2 = 0.0;
    int64_t nonzero = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err2 += (double(y[i]) - x[i]) * (double(y[i]) - x[i]);
      ref2 += double(x[i]) * x[i];
      nonzero += x[i] != 0.0f;
    }
    float smin = INFINITY, smax = -INFINITY;
    for (float si : q.scale_inv) {
      smin = std::fmin(smin, 1.0f / si);
      smax = std::fmax(smax, 1.0f / si);
    }
    const double rel_err = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
    nlohmann::json j = {
        {"recipe", octet::to_string(cfg.recipe)},
        {"format", octet::to_string(q.format)},
        {"role", o->format == "e5m2" ? "gradient" : o->role},
        {"shape", o->shape},
        {"dist", o->dist},
        {"block", std::to_string(q.block.rows) + "x" + std::to_string(q.block.cols)},
        {"n_scales", q.scale_inv.size()},
        {"amax", q.amax},
        {"scale_min", smin},
        {"scale_max", smax},
        {"rel_err", rel_err},
        {"underflow_frac", nonzero ? double(q.n_underflow) / double(nonzero) : 0.0},
        {"saturated_frac", double(q.n_saturated) / double(x.size())},
    };
    if (o->json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      for (auto& [k, v] : j.items()) std::printf("%-15s %s\n", k.c_str(), v.dump().c_str());
    }
  });
});
