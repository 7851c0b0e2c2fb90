// src/core/name_table.h — the one table form that maps CLI/config names to enum values and back
// (docs/design.md §"One vocabulary"): a constexpr std::array of {name, value} pairs per enum,
// declared once in src/core/names.cpp. Parsing an unknown name raises octet::Error naming the bad
// value and listing every accepted one; the CLI builds its choices and help text from the same
// table (octet/names.h).
#pragma once

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "octet/error.h"

namespace octet::detail {

template <typename E, size_t N>
using NameTable = std::array<std::pair<const char*, E>, N>;

/// "a, b, c" (sep ", ") or "a | b | c" (sep " | "): every name of `table`, in table order.
template <typename E, size_t N>
std::string join_names(const NameTable<E, N>& table, const char* sep) {
  std::string out;
  for (auto& entry : table) out += (out.empty() ? "" : sep) + std::string(entry.first);
  return out;
}

/// The enum named `s` in `table`; throws "unknown <what> 's' (expected one of: a, b, c)".
template <typename E, size_t N>
E parse_name(const NameTable<E, N>& table, const std::string& s, const char* what) {
  for (auto& [name, value] : table)
    if (s == name) return value;
  OCTET_FAIL("unknown " + std::string(what) + " '" + s + "' (expected one of: " + join_names(table, ", ") +
             ")");
}

/// The name of `v` in `table`, "?" if absent (an enum value without a name is a bug of the table).
template <typename E, size_t N>
std::string name_of(const NameTable<E, N>& table, E v) {
  for (auto& [name, value] : table)
    if (value == v) return name;
  return "?";
}

/// Every name of `table`, in table order.
template <typename E, size_t N>
std::vector<std::string> names_in(const NameTable<E, N>& table) {
  std::vector<std::string> out;
  for (auto& entry : table) out.emplace_back(entry.first);
  return out;
}

}  // namespace octet::detail
