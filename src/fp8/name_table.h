// src/fp8/name_table.h — the one helper that maps CLI/config names to enums and back, used by every
// parse_*/to_string pair (formats, recipes, attention modes). Unknown names raise octet::Error
// listing the accepted ones.
#pragma once

#include <array>
#include <string>
#include <utility>

#include "octet/error.h"

namespace octet::detail {

template <typename E, size_t N>
using NameTable = std::array<std::pair<const char*, E>, N>;

/// The enum named `s` in `table`; throws "unknown <what> 's' (expected one of: ...)".
template <typename E, size_t N>
E parse_name(const NameTable<E, N>& table, const std::string& s, const char* what) {
  std::string options;
  for (auto& [name, value] : table) {
    if (s == name) return value;
    options += (options.empty() ? "" : ", ") + std::string(name);
  }
  OCTET_FAIL("unknown " + std::string(what) + " '" + s + "' (expected one of: " + options + ")");
}

/// The name of `v` in `table`, "?" if absent.
template <typename E, size_t N>
std::string name_of(const NameTable<E, N>& table, E v) {
  for (auto& [name, value] : table)
    if (value == v) return name;
  return "?";
}

}  // namespace octet::detail
