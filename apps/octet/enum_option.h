// apps/octet/enum_option.h — a CLI option that takes one name of an enum's table (octet/names.h):
// its help lists the choices from the table and parsing checks the value against the same table,
// so a bad value fails before the subcommand runs with octet's one error line ("unknown recipe
// 'x' (expected one of: ...)", exit code 2).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "octet/error.h"
#include "octet/names.h"

namespace octet::cli {

/// Adds `name` storing the chosen name in `target` (a std::string, or a std::vector<std::string>
/// filled from comma-separated lists: `--arms bf16,fp8-matched` or `--arms bf16 fp8-matched`); the
/// subcommand parses it with parse_enum<E>. The help is "<what>: a | b | c". An empty item of a
/// list ("bf16," or "bf16,,fp8-matched") is refused like an unknown name, not skipped.
template <class E, class T>
CLI::Option* add_enum_option(CLI::App* cmd, const std::string& name, T& target, const std::string& what) {
  const std::string help = what + ": " + enum_choices<E>();
  if constexpr (std::is_same_v<T, std::string>) {
    CLI::Validator one_of(
        [](std::string& value) -> std::string {
          parse_enum<E>(value);  // throws octet::Error naming the value and the choices
          return {};
        },
        "");
    return cmd->add_option(name, target, help)->check(one_of);
  } else {
    std::string shown;  // the default list, as the help prints it
    for (const std::string& v : target) shown += (shown.empty() ? "" : ",") + v;
    auto store = [&target](const std::vector<std::string>& given) {
      target.clear();
      for (const std::string& arg : given) {
        std::size_t begin = 0;
        while (true) {  // every item between commas, empty ones included (CLI11's split drops them)
          const std::size_t end = arg.find(',', begin);
          target.push_back(arg.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
          parse_enum<E>(target.back());  // throws octet::Error naming the value and the choices
          if (end == std::string::npos) break;
          begin = end + 1;
        }
      }
    };
    return cmd->add_option_function<std::vector<std::string>>(name, store, help)->default_str(shown);
  }
}

}  // namespace octet::cli
