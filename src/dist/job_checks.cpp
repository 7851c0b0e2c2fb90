// src/dist/job_checks.cpp — run_job_checks (octet/dist.h): the checks that every rank of an mpirun
// job makes before its first collective (the config, the data) fail alike on every rank; the ranks
// agree on the outcome over MPI_COMM_WORLD so that one rank reports it and all of them exit cleanly
// (MPI_Finalize at exit), instead of one line per rank or an MPI_Abort. (docs/distributed.md §Failures)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "dist/mpi_init.h"
#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

void run_job_checks(const DistEnv& env, const std::function<void()>& checks) {
  if (env.world == 1 || !env.mpi) return checks();
  int status = 0;
  std::string line;
  try {
    checks();
  } catch (const OutOfMemory& e) {  // as main.cpp reports it: a run that failed
    status = 1;
    line = std::string("octet: failed: out of memory (") + e.what() + ")";
  } catch (const Error& e) {
    status = 2;
    line = std::string("octet: error: ") + e.what();
  } catch (const std::exception& e) {
    status = 1;
    line = std::string("octet: failed: ") + e.what();
  }
  dist_detail::ensure_mpi();
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int mine = status != 0 ? rank : world, first = world;  // the lowest rank that failed, or world
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == world) return;
  MPI_Bcast(&status, 1, MPI_INT, first, MPI_COMM_WORLD);  // every rank exits with the reporter's status
  if (rank == first) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
  std::fflush(stdout);
  MPI_Barrier(MPI_COMM_WORLD);  // no rank ends the job before the line is out
  std::exit(status);
}

}  // namespace octet
