// `octet train`: trains one model from a TOML config (or resumes a run directory), printing the
// settings table and one line per step; `--dump-grads DIR` instead writes the initial weights, the
// first training batch and the gradients of one forward/backward (the PyTorch twin's input).
// `--nproc N` (or a job started by torchrun/mpirun) trains data parallel (docs/distributed.md): the
// launcher checks the config and prepares the tokenizer once, then starts the ranks.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "octet/command.h"
#include "octet/dist.h"
#include "octet/enum_option.h"
#include "octet/error.h"
#include "octet/eval.h"
#include "octet/train.h"

namespace {

namespace fs = std::filesystem;

struct TrainArgs {
  std::string config, out, resume, device, arm, dump_grads;
  std::vector<std::string> sets;
  int nproc = 0;
};

// The arguments each rank of `--nproc N` is started with: these, without --nproc.
std::vector<std::string> rank_args(const TrainArgs& a) {
  std::vector<std::string> v{"train"};
  auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) v.insert(v.end(), {flag, value});
  };
  add("--config", a.config);
  add("--out", a.out);
  add("--resume", a.resume);
  add("--device", a.device);
  add("--arm", a.arm);
  for (const std::string& s : a.sets) add("--set", s);
  return v;
}

octet::StTensor st_i32(const std::vector<int64_t>& shape, const std::vector<int32_t>& v) {
  octet::StTensor t;
  t.dtype = "I32";
  t.shape = shape;
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

void dump_grads(const octet::RunConfig& run_cfg, octet::Dataset& ds, const std::string& dir) {
  using namespace octet;
  auto be = make_backend(run_cfg.device);
  RunConfig cfg = run_cfg;
  resolve_run_config(cfg, *be);  // "auto" -> the backend's dtype, recorded in config.toml
  Model model(cfg.model, cfg.precision, *be, cfg.train.batch_size);
  create_output_dir(dir, "--dump-grads");  // only once the backend and the model exist
  model.init(cfg.train.seed);
  std::vector<int32_t> ids, targets;
  ds.next_train_batch(cfg.train.batch_size, ids, targets);
  int64_t counted = 0;
  model.zero_grad();
  const int64_t ntok = cfg.train.batch_size * cfg.model.seq_len;
  const double loss = model.step(ids.data(), targets.data(), true, 1.0f / float(ntok), &counted);
  save_weights(dir + "/model.safetensors", model);
  StFile batch;
  batch.tensors["ids"] = st_i32({cfg.train.batch_size, cfg.model.seq_len}, ids);
  batch.tensors["targets"] = st_i32({cfg.train.batch_size, cfg.model.seq_len}, targets);
  write_safetensors(dir + "/batch.safetensors", batch);
  StFile grads;
  const std::vector<float> g = model.download_grads();
  for (const ParamInfo& p : model.params()) grads.tensors[p.name] = st_f32(p.shape, g.data() + p.offset);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", loss / double(counted));
  grads.metadata["loss"] = buf;
  write_safetensors(dir + "/grads.safetensors", grads);
  std::ofstream(dir + "/config.toml") << to_toml(cfg);
  std::printf("loss %.6f; wrote %s/{model,batch,grads}.safetensors and config.toml\n", loss / double(counted),
              dir.c_str());
}

void run_train(const TrainArgs& a) {
  using namespace octet;
  const DistEnv env = dist_env_from_environment();
  std::vector<std::string> sets = a.sets;
  if (!a.device.empty()) sets.push_back("device=" + a.device);
  if (!a.arm.empty()) sets.push_back("precision.arm=" + a.arm);
  std::string out = a.out;
  RunConfig cfg;
  std::unique_ptr<Dataset> ds;
  std::string desc;
  bool complete = false;
  // Everything checked before a rank's first collective: under mpirun, a config error every rank
  // finds reads once, from one rank, and the job exits without an abort (run_job_checks).
  run_job_checks(env, [&] {
    OCTET_CHECK(a.dump_grads.empty() || a.out.empty(),
                "--dump-grads DIR writes only DIR (no run): drop --out");
    OCTET_CHECK(a.dump_grads.empty() || a.resume.empty(),
                "--dump-grads starts from a new model's weights, not a run's checkpoint: drop --resume");
    if (!a.resume.empty()) {
      OCTET_CHECK(a.config.empty(), "--resume takes its config from the run directory; drop --config");
      OCTET_CHECK(a.out.empty() || (fs::exists(a.out) && fs::equivalent(a.out, a.resume)),
                  "--resume DIR writes to DIR; drop --out");
      // Schedule keys may change, meaning keys may not; a finished run writes nothing (docs/training.md
      // §Resume).
      const ResumePlan plan = plan_resume(a.resume, sets);
      if (plan.complete()) {
        if (env.rank == 0)
          std::printf(
              "run %s is complete at step %lld of %lld (nothing to do; extend with --set train.steps=...)\n",
              a.resume.c_str(), static_cast<long long>(plan.state.step),
              static_cast<long long>(plan.config.train.steps));
        complete = true;
        return;
      }
      cfg = plan.config;
      out = a.resume;
    } else {
      OCTET_CHECK(!a.config.empty() || !sets.empty(), "give --config FILE (and/or --set key=value)");
      try {
        cfg = load_config(a.config, sets);
      } catch (const octet::Error& e) {
        if (!a.config.empty()) throw;
        // --set alone starts from the built-in defaults, which are no whole run: say where one is.
        const std::string tiny = octet_home() + "/configs/tiny.toml";
        throw octet::Error(
            std::string(e.what()) +
            " (no --config given: the built-in defaults with these --set keys are no "
            "whole run; start from a config, e.g. --config " +
            (fs::exists(tiny) ? tiny : std::string("configs/tiny.toml of octet's source tree")) + ")");
      }
      if (a.dump_grads.empty()) {
        OCTET_CHECK(!out.empty(), "give --out DIR (or --resume DIR)");
        require_directory_path(out, "--out");  // a file, or a link to nothing, named first
        OCTET_CHECK(!fs::exists(out + "/checkpoint.safetensors"),
                    out + " already holds a run (checkpoint.safetensors): resume it with --resume " + out +
                        " or choose another --out");
        // A run that ended before its first checkpoint (or any other run log) is not overwritten either.
        OCTET_CHECK(
            !fs::exists(out + "/metrics.jsonl"),
            out +
                " already holds a run's metrics.jsonl (no checkpoint to resume): choose another --out "
                "or remove that folder");
        // Anything else there is not a run's, and a run would replace its config.toml or
        // model.safetensors: a new run gets a new or empty directory (docs/cli.md). Checked by a lone
        // process or the --nproc launcher, before any rank writes (ranks of a job would race rank 0).
        if (env.world == 1) {
          // a run stopped in its first moments may have left only a temporary file: that folder
          // is new again
          remove_interrupted_writes(out, {"config.toml", "metrics.jsonl", "checkpoint.safetensors",
                                          "model.safetensors", kRunTokenizerFile});
          require_empty_or_new_dir(out, "--out");
        }
      }
    }
    OCTET_CHECK(a.dump_grads.empty() || (a.nproc <= 1 && env.world == 1), "--dump-grads runs in one process");
    if (!a.dump_grads.empty()) require_empty_or_new_dir(a.dump_grads, "--dump-grads");
    // the launcher builds the tokenizer cache once for the ranks; a resume encodes with the run's
    // own tokenizer.model
    try {
      ds = load_dataset(cfg, &desc, a.resume.empty() ? std::string() : run_tokenizer_model(a.resume));
    } catch (const Error& e) {  // a resume whose corpus moved: say how to give its new place
      const std::string what = e.what();
      bool path_given = false;  // this resume already gives one: nothing to add
      for (const std::string& s : a.sets) path_given = path_given || s.rfind("data.path=", 0) == 0;
      if (a.resume.empty() || path_given || what.rfind("corpus not found: ", 0) != 0) throw;
      throw Error(what + " (if the corpus moved, resume with --set data.path=<its new place>)");
    }
    const int ranks = a.nproc > 1 && env.world == 1 ? a.nproc : env.world;
    if (ranks > 1) {  // what train() would refuse on every rank
      check_rank_split(cfg, ranks);
      check_eval_split(cfg, *ds);
    }
    if (!a.resume.empty())  // the tokens the run trained on: before any rank starts
      check_run_tokens(peek_checkpoint_state(a.resume), *ds, a.resume, "resume",
                       "restore the corpus or start a new run");
    // The --nproc launcher's ranks share this host: their memory together.
    if (cfg.device == "cpu" && a.dump_grads.empty())
      check_cpu_train_memory(cfg.model, cfg.train.batch_size / ranks,
                             a.nproc > 1 && env.world == 1 ? a.nproc : 1);
  });
  if (complete) return;
  const bool launcher = a.nproc > 1 && env.world == 1;
  if (env.rank == 0 && !launcher) std::printf("%s\n", desc.c_str());  // once: by rank 0 of a job
  if (!a.dump_grads.empty()) return dump_grads(cfg, *ds, a.dump_grads);
  if (launcher) {  // everything above is checked; start the ranks
    std::fflush(stdout);
    const int rc = launch_local(a.nproc, cfg.device, rank_args(a));
    if (rc != 0)
      throw cli::RunFailure("the " + std::to_string(a.nproc) + "-rank job ended with exit status " +
                            std::to_string(rc) + " (the ranks' messages are above)");
    return;
  }
  TrainResult r;
  if (env.world > 1) {  // one rank of a job (docs/distributed.md)
    std::string stopped;
    {
      DistSession session = open_dist_session(env, cfg.device);
      run_rank(*session.comm, [&] {
        try {
          r = train(cfg, out, !a.resume.empty(), *ds, stdout, {}, nullptr, &session);
        } catch (const TrainingStopped& e) {  // every rank stops alike: no abort needed
          stopped = e.what();
        }
      });
    }  // the session ends in order on every rank (no rank takes it for a crash)
    if (!stopped.empty() && env.rank == 0) throw TrainingStopped(stopped);
    if (!stopped.empty()) std::exit(1);
    if (env.rank != 0) return;
  } else {
    r = train(cfg, out, !a.resume.empty(), *ds, stdout);
  }
  const std::string weights = cfg.train.save_weights ? "weights in " + out + "/model.safetensors"
                                                     : "no weights (train.save_weights = false)";
  std::printf("done: final val loss %.4f (unigram entropy %.4f), %lld skipped steps, %.0f tok/s; %s\n",
              r.final_val_loss, ds->unigram_entropy(), static_cast<long long>(r.skipped_steps),
              r.tokens_per_s, weights.c_str());
  // A run whose model ends non-finite failed, even when fewer than train.max_bad_steps steps in a
  // row were skipped (a short run): exit 1, its files kept for inspection.
  if (!std::isfinite(r.final_val_loss))
    throw cli::RunFailure("the final validation loss is " +
                          std::string(std::isnan(r.final_val_loss) ? "NaN" : "inf") + " (" +
                          std::to_string(r.skipped_steps) +
                          " steps skipped): the run diverged; its metrics and checkpoint are in " + out);
}

}  // namespace

OCTET_COMMAND("train", [](CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train", "Train a GPT in one precision arm (or resume a run)");
  cmd->add_option("--config", args->config, "TOML config file (configs/*.toml)");
  cmd->add_option("--set", args->sets, "override a config key: --set model.n_layer=4 (repeatable)");
  cmd->add_option("--out", args->out, "run directory (config.toml, metrics.jsonl, checkpoints)");
  cmd->add_option("--resume", args->resume, "continue the run in this directory from its checkpoint");
  cmd->add_option("--device", args->device, "cpu | cuda | cuda:N (default: the config's, cpu)");
  octet::cli::add_enum_option<octet::Arm>(cmd, "--arm", args->arm, "precision arm (fp32: the reference)");
  cmd->add_option("--nproc", args->nproc,
                  "train data parallel on N ranks of this host (cpu: mpirun; cuda: one GPU each; "
                  "docs/distributed.md)")
      ->check(octet::cli::whole_number_at_least(1));
  cmd->add_option("--dump-grads", args->dump_grads,
                  "write initial weights, the first batch and its gradients to DIR (oracle tests)");
  cmd->callback([args] { run_train(*args); });
});
