// `octet compare`: trains the same config in several precision arms (same seed, same data order)
// and prints/writes the comparison table (summary.json) and the loss curves (curves.png); --seeds N
// repeats every arm with N seeds and tests each gap to bf16 against the noise. A non-empty
// --out is refused unless --resume (finished arms kept, the others resumed) or --overwrite.
// `--nproc N` (or a job started by torchrun/mpirun) trains every arm data parallel
// (docs/distributed.md).
#include <cstdio>

#include "octet/command.h"
#include "octet/dist.h"
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
  int nproc = 0;
};

// The arguments each rank of `--nproc N` is started with: these, without --nproc.
std::vector<std::string> rank_args(const CompareArgs& a) {
  std::vector<std::string> v{"compare", "--config", a.config, "--out", a.out};
  std::string arms;
  for (const std::string& arm : a.arms) arms += (arms.empty() ? "" : ",") + arm;
  v.insert(v.end(), {"--arms", arms});
  if (!a.device.empty()) v.insert(v.end(), {"--device", a.device});
  if (a.resume) v.push_back("--resume");
  if (a.overwrite) v.push_back("--overwrite");
  v.insert(v.end(), {"--seeds", std::to_string(a.seeds)});
  for (const std::string& s : a.sets) v.insert(v.end(), {"--set", s});
  return v;
}
}  // namespace

OCTET_COMMAND("compare", [](CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand("compare", "Train every precision arm side by side and compare them");
  cmd->add_option("--config", args->config, "TOML config file")->required();
  cmd->add_option("--set", args->sets, "override a config key (repeatable)");
  octet::cli::add_enum_option<octet::Arm>(cmd, "--arms", args->arms, "comma-separated arms")
      ->capture_default_str();
  cmd->add_option("--out", args->out, "output directory (one sub-directory per arm)")->required();
  cmd->add_option("--device", args->device, "cpu | cuda | cuda:N");
  cmd->add_option("--seeds", args->seeds,
                  "train every arm with N seeds (train.seed, +1, ...): mean ± std per arm and Welch's t-test "
                  "of each gap to bf16")
      ->capture_default_str();
  cmd->add_option("--nproc", args->nproc, "train data parallel on N ranks of this host (docs/distributed.md)")
      ->check(octet::cli::whole_number_at_least(1));
  auto* resume = cmd->add_flag("--resume", args->resume,
                               "--out holds an earlier compare: keep its finished arms, resume the others");
  cmd->add_flag("--overwrite", args->overwrite, "--out holds an earlier compare: remove its results first")
      ->excludes(resume);
  cmd->callback([args] {
    std::vector<std::string> sets = args->sets;
    if (!args->device.empty()) sets.push_back("device=" + args->device);
    const octet::DistEnv env = octet::dist_env_from_environment();
    octet::RunConfig cfg;
    // Under mpirun, a config error every rank finds reads once and the job exits without an abort.
    octet::run_job_checks(env, [&] {
      cfg = octet::load_config(args->config, sets);
      if (env.world > 1) octet::check_rank_split(cfg, env.world);
    });
    const auto mode = args->resume      ? octet::CompareMode::Resume
                      : args->overwrite ? octet::CompareMode::Overwrite
                                        : octet::CompareMode::Fresh;
    if (args->nproc > 1 && env.world == 1) {  // the launcher: config checked, tokenizer cached once
      octet::check_rank_split(cfg, args->nproc);
      octet::load_dataset(cfg);
      const int rc = octet::launch_local(args->nproc, cfg.device, rank_args(*args));
      if (rc != 0)
        throw octet::cli::RunFailure("the " + std::to_string(args->nproc) +
                                     "-rank job ended with exit status " + std::to_string(rc) +
                                     " (the ranks' messages are above)");
      return;
    }
    if (env.world == 1) {
      octet::compare_arms(cfg, args->arms, args->out, stdout, mode, args->seeds);
      return;
    }
    octet::DistSession session = octet::open_dist_session(env, cfg.device);
    octet::run_rank(*session.comm, [&] {
      octet::compare_arms(cfg, args->arms, args->out, stdout, mode, args->seeds, &session);
    });
  });
});
