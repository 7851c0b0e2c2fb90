// apps/octet/command.h — how a CLI subcommand registers itself.
//
// Each subcommand lives in its own file (cmd_<name>.cpp) and registers a setup function with
// OCTET_COMMAND; main.cpp builds the CLI11 app from the registry. A subcommand reports bad input by
// throwing octet::Error (or CLI11's errors); main prints one line and exits with code 2.
#pragma once

#include <CLI/CLI.hpp>
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
