// apps/octet/main.cpp — the `octet` command line: builds the CLI11 app from the registered
// subcommands (command.h) and maps errors to exit codes: 2 for bad input (one line naming the
// problem), 1 for a run that failed.
#include <algorithm>
#include <cstdio>

#include "octet/command.h"
#include "octet/error.h"

namespace octet::cli {
std::vector<CommandEntry>& registry() {
  static std::vector<CommandEntry> r;
  return r;
}
}  // namespace octet::cli

int main(int argc, char** argv) {
  CLI::App app{"octet: native FP8 training of LLMs, with Delta-Matching FP8 attention"};
  app.require_subcommand(1);
  auto& reg = octet::cli::registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  for (auto& c : reg) c.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "octet: error: %s\n", e.what());
    return 2;
  } catch (const octet::Error& e) {
    std::fprintf(stderr, "octet: error: %s\n", e.what());
    return 2;
  } catch (const octet::cli::RunFailure& e) {
    std::fprintf(stderr, "octet: failed: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "octet: failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
