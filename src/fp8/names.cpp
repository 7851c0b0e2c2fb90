// src/fp8/names.cpp — the CLI/config names of formats, format policies and scaling recipes.
#include <array>
#include <utility>

#include "fp8/name_table.h"
#include "octet/error.h"
#include "octet/quant.h"

namespace octet {
namespace {
using detail::name_of;
using detail::parse_name;

constexpr std::array<std::pair<const char*, Recipe>, 6> kRecipes{{
    {"tensor-delayed", Recipe::TensorDelayed},
    {"tensor-current", Recipe::TensorCurrent},
    {"row", Recipe::Row},
    {"block", Recipe::Block},
    {"mx", Recipe::MX},
    {"unit", Recipe::Unit},
}};
constexpr std::array<std::pair<const char*, FormatPolicy>, 2> kPolicies{{
    {"e4m3", FormatPolicy::E4M3},
    {"hybrid", FormatPolicy::Hybrid},
}};
constexpr std::array<std::pair<const char*, Format>, 2> kFormats{{
    {"e4m3", Format::E4M3},
    {"e5m2", Format::E5M2},
}};
}  // namespace

Recipe parse_recipe(const std::string& s) { return parse_name(kRecipes, s, "recipe"); }
std::string to_string(Recipe r) { return name_of(kRecipes, r); }
FormatPolicy parse_format_policy(const std::string& s) {
  return parse_name(kPolicies, s, "format policy");
}
std::string to_string(FormatPolicy p) { return name_of(kPolicies, p); }
Format parse_format(const std::string& s) { return parse_name(kFormats, s, "format"); }
std::string to_string(Format f) { return name_of(kFormats, f); }

Format format_for(FormatPolicy policy, Role role) {
  return policy == FormatPolicy::Hybrid && role == Role::Gradient ? Format::E5M2 : Format::E4M3;
}

}  // namespace octet
