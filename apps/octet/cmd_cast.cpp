// `octet cast`: encodes values as FP8 codes (OFP8 v1.0, round to nearest even, saturating unless
// --no-saturate) and decodes them back, for inspecting the formats of fp8.h by hand or from a
// test oracle. --json prints one object per value: {"input", "code", "value"}; "code" is a hex
// string like "0x7e" and "value" the decoded number, or "nan" / "inf" / "-inf" as strings.
// --decode takes codes instead of values (every code of a format, for the ml_dtypes oracle).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>

#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/fp8.h"
#include "octet/quant.h"

namespace {

struct CastOptions {
  std::string format = "e4m3";
  bool no_saturate = false, json = false, decode = false;
};

// A whole-string float: decimal or hex, "nan", "inf", "-inf", "infinity" (strtof's grammar).
float parse_value(const std::string& s) {
  char* end = nullptr;
  const float v = s.empty() ? 0.0f : std::strtof(s.c_str(), &end);
  OCTET_CHECK(!s.empty() && end == s.c_str() + s.size(),
              "cast: malformed number '" + s + "' (expected e.g. 1.5, -3, 1e-3, nan, inf, -inf)");
  return v;
}

// A code: 0x00..0xff (hex) or 0..255 (decimal).
uint8_t parse_code(const std::string& s) {
  char* end = nullptr;
  const long v = s.empty() ? -1 : std::strtol(s.c_str(), &end, 0);
  OCTET_CHECK(!s.empty() && end == s.c_str() + s.size() && v >= 0 && v <= 255,
              "cast: malformed code '" + s + "' (expected 0x00..0xff or 0..255)");
  return uint8_t(v);
}

nlohmann::json number_or_name(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return double(v);
}

std::string hex_code(uint8_t c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

}  // namespace

OCTET_COMMAND("cast", [](CLI::App& app) {
  auto o = std::make_shared<CastOptions>();
  auto* cmd = app.add_subcommand("cast", "Encode values as FP8 codes and decode them back (OFP8 v1.0, RNE)");
  octet::cli::add_enum_option<octet::Format>(cmd, "--format", o->format, "element format (e4m3: OCP E4M3FN)")
      ->capture_default_str();
  cmd->add_flag("--no-saturate", o->no_saturate,
                "out-of-range values become NaN (e4m3) or inf (e5m2) instead of ±max");
  cmd->add_flag("--json", o->json, "one JSON object per value: input, code, value");
  cmd->add_flag("--decode", o->decode, "the arguments are codes (0x7e or 126): decode them");
  cmd->allow_extras();  // the values, in order; "-inf" and "-3" included, "--" before them allowed
  cmd->footer(
      "VALUES (after the options; a \"--\" may precede them): decimal or hex floats, nan, inf, -inf\n"
      "  e.g. octet cast --format e4m3 464 -inf 1e-3;  octet cast --format e4m3 -- -1;  "
      "octet cast --decode 0x7e 0x7f");
  cmd->callback([cmd, o] {
    const octet::Format f = octet::parse_format(o->format);
    const std::vector<std::string> args = octet::cli::free_arguments(cmd);
    OCTET_CHECK(!args.empty(), "cast: no values given (e.g. octet cast --format e4m3 448 464)");
    std::vector<uint8_t> codes;  // all arguments are checked before any output
    for (const auto& a : args)
      codes.push_back(o->decode ? parse_code(a) : octet::fp8_encode(parse_value(a), f, !o->no_saturate));
    for (size_t i = 0; i < codes.size(); ++i) {
      const uint8_t code = codes[i];
      const float back = octet::fp8_decode(code, f);
      if (o->json) {
        nlohmann::json j = {{"input", args[i]}, {"code", hex_code(code)}, {"value", number_or_name(back)}};
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%-14s %s -> %s  %.9g\n", args[i].c_str(), o->format.c_str(), hex_code(code).c_str(),
                    double(back));
      }
    }
  });
});
