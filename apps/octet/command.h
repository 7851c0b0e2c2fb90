// apps/octet/command.h — how a CLI subcommand registers itself.
//
// Each subcommand lives in its own file (cmd_<name>.cpp) and registers a setup function with
// OCTET_COMMAND; main.cpp builds the CLI11 app from the registry. A subcommand reports bad input by
// throwing octet::Error (or CLI11's errors); main prints one line and exits with code 2.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace octet::cli {

/// Adds the subcommand to `app` and sets its callback.
using SetupFn = std::function<void(CLI::App& app)>;

struct CommandEntry {
  std::string name;
  SetupFn setup;
};

std::vector<CommandEntry>& registry();

struct Registrar {
  Registrar(std::string name, SetupFn fn) { registry().push_back({std::move(name), std::move(fn)}); }
};

/// A CLI11 check that the value is a whole decimal number >= `min` (and fits int64 / uint64): its
/// message reads "--seed: must be a whole number >= 0, got '-1'", and for a whole number past
/// 64 bits "--seed: must be a whole number >= 0 that fits 64 bits, got '...'".
inline CLI::Validator whole_number_at_least(int64_t min) {
  return CLI::Validator(
      [min](std::string& v) -> std::string {
        const bool digits =
            !v.empty() && v.find_first_not_of("0123456789", v[0] == '-') == std::string::npos && v != "-";
        const bool negative = digits && v[0] == '-';
        const std::string magnitude = negative ? v.substr(1) : v;
        const size_t first = magnitude.find_first_not_of('0');  // leading zeros do not count
        const std::string m = first == std::string::npos ? "0" : magnitude.substr(first);
        const char* most = negative ? "9223372036854775808" : "18446744073709551615";
        const bool fits = m.size() < std::strlen(most) || (m.size() == std::strlen(most) && m <= most);
        if (digits && !fits)
          return "must be a whole number >= " + std::to_string(min) + " that fits 64 bits, got '" + v + "'";
        bool ok = digits;
        if (ok && negative)
          ok = min < 0 && std::stoll(v) >= min;
        else if (ok)
          ok = min <= 0 || std::stoull(v) >= uint64_t(min);
        return ok ? std::string() : "must be a whole number >= " + std::to_string(min) + ", got '" + v + "'";
      },
      "");
}

/// A CLI11 check that an integer fits the option's type (int64 for a signed option, uint64 for an
/// unsigned one), read in the base CLI11 reads it in (strtoll's base 0: 0x hexadecimal, a leading 0
/// octal, else decimal): CLI11 would store a value beyond the type as its limit. Anything that is
/// not such an integer is left to CLI11's conversion, which names it.
inline CLI::Validator integer_fits(bool is_unsigned) {
  return CLI::Validator(
      [is_unsigned](std::string& v) -> std::string {
        const bool negative = !v.empty() && v[0] == '-';
        std::string digits = v.substr(!v.empty() && (v[0] == '-' || v[0] == '+'));
        int base = 10;
        if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
          base = 16;
          digits = digits.substr(2);
        } else if (digits.size() > 1 && digits[0] == '0') {
          base = 8;
        }
        uint64_t magnitude = 0;
        const char* end = digits.data() + digits.size();
        const auto [ptr, ec] = std::from_chars(digits.data(), end, magnitude, base);
        if (digits.empty() || ptr != end) {
          if (ec != std::errc::result_out_of_range) return {};  // not an integer: CLI11 says so
        }
        const uint64_t limit = is_unsigned ? ~uint64_t(0) : negative ? uint64_t(1) << 63 : ~uint64_t(0) >> 1;
        const bool fits = ec != std::errc::result_out_of_range && magnitude <= limit &&
                          !(is_unsigned && negative && magnitude);
        return fits ? std::string()
                    : std::string("must fit a 64-bit ") + (is_unsigned ? "unsigned" : "signed") +
                          " integer, got '" + v + "'";
      },
      "");
}

/// integer_fits on every integer option of `app` and its subcommands (by CLI11's type name, INT or
/// UINT), so that no integer option silently saturates.
inline void check_integer_options(CLI::App* app) {
  for (CLI::Option* o : app->get_options()) {
    const std::string t = o->get_type_name();
    if (t.rfind("INT", 0) == 0 || t.rfind("UINT", 0) == 0) o->check(integer_fits(t.rfind("UINT", 0) == 0));
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) check_integer_options(sub);
}

/// Adds a seed option storing into `target`: a whole number in [0, 2^64), so "-1" is an error
/// instead of wrapping to 2^64 - 1 (the config key train.seed follows the same rule, >= 0).
inline CLI::Option* add_seed_option(CLI::App* cmd, const std::string& name, uint64_t& target,
                                    const std::string& what) {
  return cmd->add_option(name, target, what + " (a whole number >= 0)")->check(whole_number_at_least(0));
}

/// Adds a count option whose default (0 in `target`) means "derived" but which, when given, must be
/// >= 1: "--kv-heads 0" is an error, not a silent "same as --heads".
inline CLI::Option* add_count_option(CLI::App* cmd, const std::string& name, int64_t& target,
                                     const std::string& what) {
  return cmd->add_option(name, target, what)->check(whole_number_at_least(1));
}

/// The free arguments of a subcommand that allows extras (cast's values), in the order given: those
/// before a "--" (CLI11 keeps them as the subcommand's extras) and those after it (CLI11 hands them
/// to the main app, which main.cpp lets through only for a subcommand that allows extras).
inline std::vector<std::string> free_arguments(CLI::App* cmd) {
  std::vector<std::string> args = cmd->remaining();
  const std::vector<std::string> after = cmd->get_parent()->remaining();
  args.insert(args.end(), after.begin(), after.end());
  return args;
}

/// Thrown by a subcommand whose run failed for a reason other than bad input (exit code 1).
struct RunFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace octet::cli

#define OCTET_CONCAT_INNER(a, b) a##b
#define OCTET_CONCAT(a, b) OCTET_CONCAT_INNER(a, b)
/// OCTET_COMMAND("cast", [](CLI::App& app) { ... }) in a cmd_*.cpp file.
#define OCTET_COMMAND(name, fn) \
  static ::octet::cli::Registrar OCTET_CONCAT(octet_command_, __LINE__)(name, fn)
