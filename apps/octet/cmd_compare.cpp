// `octet compare`: trains the same config in several precision arms (same seed, same data order)
// and prints/writes the comparison table (summary.json) and the loss curves (curves.png); --seeds N
// repeats every arm with N seeds and tests each gap to bf16 against the noise. A non-empty
// --out is refused unless --resume (finished arms kept, the others resumed) or --overwrite.
#include <cstdio>

#include "octet/command.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/train.h"

namespace {
struct CompareArgs {
  std::string config, out, device;
  bool resume = false, overwrite = false;
  int64_t seeds = 1;
  std::vector<std::string> arms{"bf16", "fp8-linear", "fp8-stale", "fp8-matched"};
  std::vector<std::string> sets;
};
}  // namespace

OCTET_COMMAND("compare", [](CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare", "Train every precision arm side by side and compare them");
  cmd->add_option("--config", args->config, "TOML config file")->required();
  cmd->add_option("--set", args->sets, "override a config key (repeatable)");
  octet::cli::add_enum_option<octet::Arm>(cmd, "--arms", args->arms, "comma-separated arms")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "output directory (one sub-directory per arm)")->required();
  cmd->add_option("--device", args->device, "cpu | cuda");
  cmd->add_option("--seeds", args->seeds,
                  "train every arm with N seeds (train.seed, +1, ...): mean ± std per arm and Welch's t-test "
                  "of each gap to bf16")
      ->capture_default_str();
  auto* resume = cmd->add_flag("--resume", args->resume,
                               "--out holds an earlier compare: keep its finished arms, resume the others");
  cmd->add_flag("--overwrite", args->overwrite, "--out holds an earlier compare: remove its results first")
      ->excludes(resume);
  cmd->callback([args] {
    std::vector<std::string> sets = args->sets;
    if (!args->device.empty()) sets.push_back("device=" + args->device);
    const octet::RunConfig cfg = octet::load_config(args->config, sets);
    const auto mode = args->resume      ? octet::CompareMode::Resume
                      : args->overwrite ? octet::CompareMode::Overwrite
                                        : octet::CompareMode::Fresh;
    octet::compare_arms(cfg, args->arms, args->out, stdout, mode, args->seeds);
  });
});
