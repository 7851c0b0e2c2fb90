// `octet version` and `octet --version`: print the version and the compiled-in backends.
#include <cstdio>
#include <string>

#include "octet/command.h"

namespace {

std::string version_line() {
#ifdef OCTET_WITH_CUDA
  return "octet 0.1.0 (backends: cpu, cuda)";
#else
  return "octet 0.1.0 (backends: cpu)";
#endif
}

}  // namespace

OCTET_COMMAND("version", [](CLI::App& app) {
  app.set_version_flag("--version", version_line(), "Print the octet version and backends");
  auto* cmd = app.add_subcommand("version", "Print the octet version and backends");
  cmd->callback([] { std::printf("%s\n", version_line().c_str()); });
});
