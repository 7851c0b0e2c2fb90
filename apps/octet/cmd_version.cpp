// `octet version`: prints the version and the compiled-in backends.
#include <cstdio>

#include "octet/command.h"

OCTET_COMMAND("version", [](CLI::App& app) {
  auto* cmd = app.add_subcommand("version", "Print the octet version and backends");
  cmd->callback([] {
#ifdef OCTET_WITH_CUDA
    std::printf("octet 0.1.0 (backends: cpu, cuda)\n");
#else
    std::printf("octet 0.1.0 (backends: cpu)\n");
#endif
  });
});
