// apps/octet/enum_option.h — a CLI option that takes one name of an enum's table (octet/names.h):
// its help lists the choices from the table and parsing checks the value against the same table,
// so a bad value fails before the subcommand runs with octet's one error line ("unknown recipe
// 'x' (expected one of: ...)", exit code 2).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <type_traits>

#include "octet/error.h"
#include "octet/names.h"

namespace octet::cli {

/// Adds `name` storing the chosen name in `target` (a std::string, or a std::vector<std::string>
/// filled from a comma-separated list); the subcommand parses it with parse_enum<E>. The help is
/// "<what>: a | b | c".
template <class E, class T>
CLI::Option* add_enum_option(CLI::App* cmd, const std::string& name, T& target, const std::string& what) {
  CLI::Validator one_of(
      [](std::string& value) -> std::string {
        parse_enum<E>(value);  // throws octet::Error naming the value and the choices
        return {};
      },
      "");
  CLI::Option* opt = cmd->add_option(name, target, what + ": " + enum_choices<E>())->check(one_of);
  if constexpr (!std::is_same_v<T, std::string>) opt->delimiter(',');
  return opt;
}

}  // namespace octet::cli
