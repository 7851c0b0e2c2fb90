// `octet bench comm`: all-reduce, reduce-scatter and all-gather bus bandwidth through octet's
// communicator (octet/bench.h bench_comm) on the ranks of a job — `--nproc N` starts N ranks on this
// host as `octet train --nproc` does (cuda: one GPU each, NCCL; cpu: mpirun, MPI), torchrun/mpirun
// may start them too. Rank 0 prints one line per (op, size): a table, or JSON with the GPU, the
// transport library's version and the date. docs/distributed.md uses the bus bandwidth.
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "octet/bench_output.h"
#include "octet/command.h"
#include "octet/dist.h"
#include "octet/error.h"

namespace {

struct CommArgs {
  bool json = false;
  std::string device = "cuda";
  int nproc = 0;
  double min_mb = 1, max_mb = 1024;
  octet::CommBenchOptions o;
};

// The arguments each rank of `--nproc N` is started with: these, without --nproc.
std::vector<std::string> rank_args(const CommArgs& a) {
  auto exact = [](double x) {  // round-trips: the ranks parse the value this process checked
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", x);
    return std::string(buf);
  };
  std::vector<std::string> v{"bench",    "comm",
                             "--device", a.device,
                             "--min-mb", exact(a.min_mb),
                             "--max-mb", exact(a.max_mb),
                             "--reps",   std::to_string(a.o.reps),
                             "--warmup", std::to_string(a.o.warmup)};
  std::string ops;
  for (const std::string& op : a.o.ops) ops += (ops.empty() ? "" : ",") + op;
  v.insert(v.end(), {"--ops", ops});
  if (a.json) v.push_back("--json");
  return v;
}

void run_comm(CommArgs a) {
  using namespace octet;
  OCTET_CHECK(a.device == "cpu" || a.device == "cuda",
              "--device: expected cpu or cuda, got '" + a.device + "'");
  // 1 KiB floor: every rank's part of the smallest buffer must hold at least one FP32 (4 bytes x ranks),
  // checked here, before any rank starts, for the ranks --nproc would launch (at most 256 on a host).
  OCTET_CHECK(a.min_mb >= 1.0 / 1024 && a.max_mb >= a.min_mb && a.max_mb <= 1 << 16,
              "--min-mb and --max-mb: need 1/1024 (1 KiB) <= min <= max <= 65536 MiB");
  a.o.min_bytes = int64_t(a.min_mb * double(1 << 20));
  a.o.max_bytes = int64_t(a.max_mb * double(1 << 20));
  const DistEnv env = dist_env_from_environment();
  if (a.nproc > 1 && env.world == 1) {
    const int rc = launch_local(a.nproc, a.device, rank_args(a));
    if (rc != 0)
      throw cli::RunFailure("the " + std::to_string(a.nproc) + "-rank job ended with exit status " +
                            std::to_string(rc) + " (the ranks' messages are above)");
    return;
  }
  DistSession session = open_dist_session(env, a.device);
  Communicator& comm = *session.comm;
  run_rank(comm, [&] {
    nlohmann::json head = {{"gpu", "cpu"}, {"date", cli::utc_now()}};
#ifdef OCTET_WITH_CUDA
    if (a.device == "cuda") head = cli::env_json();
#endif
    head.update({{"bench", "comm"}, {"transport", comm.name()}, {"library", comm.library_version()}});
    const bool print = comm.rank() == 0;
    if (print && !a.json)
      std::printf("%-15s %5s %12s %6s %10s %12s %12s   (%s)\n", "op", "ranks", "bytes", "iters", "ms",
                  "algbw GB/s", "busbw GB/s", (comm.name() + " " + comm.library_version()).c_str());
    bench_comm(comm, *session.backend, a.o, [&](const CommBenchRow& r) {
      if (!print) return;
      nlohmann::json j = head;
      j.update({{"op", r.op},
                {"ranks", r.ranks},
                {"bytes", r.bytes},
                {"iters", r.iters},
                {"reps", r.reps},
                {"ms", r.ms},
                {"algbw_gbs", r.algbw_gbs},
                {"busbw_gbs", r.busbw_gbs}});
      char line[160];
      std::snprintf(line, sizeof line, "%-15s %5d %12lld %6d %10.4f %12.2f %12.2f", r.op.c_str(), r.ranks,
                    static_cast<long long>(r.bytes), r.iters, r.ms, r.algbw_gbs, r.busbw_gbs);
      cli::emit(a.json, j, line);
    });
  });
}

}  // namespace

namespace octet::cli {

void add_bench_comm(CLI::App* bench) {
  static CommArgs c;
  auto* comm = bench->add_subcommand(
      "comm", "all-reduce / reduce-scatter / all-gather bus bandwidth on N ranks (NCCL; cpu: MPI)");
  comm->add_flag("--json", c.json, "one JSON object per line");
  comm->add_option("--device", c.device, "cuda (NCCL, one GPU per rank) | cpu (MPI ranks)")
      ->capture_default_str();
  comm->add_option("--nproc", c.nproc, "ranks to start on this host (docs/distributed.md)")
      ->check(whole_number_at_least(1));
  comm->add_option("--min-mb", c.min_mb, "smallest size, MiB")->capture_default_str();
  comm->add_option("--max-mb", c.max_mb, "largest size, MiB (sizes double from --min-mb)")
      ->capture_default_str();
  comm->add_option("--ops", c.o.ops, "all_reduce, reduce_scatter, all_gather")
      ->delimiter(',')
      ->check(CLI::IsMember({"all_reduce", "reduce_scatter", "all_gather"}));
  comm->add_option("--reps", c.o.reps, "timed batches (median reported)")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  comm->add_option("--warmup", c.o.warmup, "untimed calls per size")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->capture_default_str();
  comm->callback([] { run_comm(c); });
}

}  // namespace octet::cli
