// src/dist/env.cpp — where this process sits in a job (octet/dist.h DistEnv), read from the
// launcher's variables: torchrun's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT (which
// `octet --nproc` on CUDA sets too) or Open MPI's OMPI_COMM_WORLD_*; and ZeRO-1's shard ranges.
// (docs/distributed.md §Launch)
#include <algorithm>
#include <cstdlib>
#include <string>

#include "octet/dist.h"
#include "octet/error.h"

namespace octet {

namespace {

// The integer value of variable `name`, or `fallback` when unset; throws naming the variable.
int env_int(const char* name, int fallback, bool* present = nullptr) {
  const char* v = std::getenv(name);
  if (present) *present = v != nullptr;
  if (!v) return fallback;
  try {
    size_t used = 0;
    const long x = std::stol(v, &used);
    OCTET_CHECK(used == std::string(v).size() && x >= 0 && x <= 1 << 30, "");
    return int(x);
  } catch (...) {
    OCTET_FAIL(std::string("environment variable ") + name + "=" + v + " is not a non-negative integer");
  }
}

}  // namespace

DistEnv dist_env_from_environment() {
  DistEnv e;
  bool torch = false, mpi = false;
  e.world = env_int("WORLD_SIZE", 1, &torch);
  if (torch) {
    e.rank = env_int("RANK", 0);
    e.local_rank = env_int("LOCAL_RANK", e.rank);
  } else {
    e.world = env_int("OMPI_COMM_WORLD_SIZE", 1, &mpi);
    e.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
    e.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", e.rank);
  }
  e.mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  if (const char* a = std::getenv("MASTER_ADDR")) e.master_addr = a;
  bool has_port = false;
  e.master_port = env_int("MASTER_PORT", 0, &has_port);
  OCTET_CHECK(e.world >= 1, "WORLD_SIZE must be >= 1, got " + std::to_string(e.world));
  OCTET_CHECK(e.rank < e.world, "RANK " + std::to_string(e.rank) +
                                    " is outside [0, WORLD_SIZE = " + std::to_string(e.world) + ")");
  OCTET_CHECK(!has_port || (e.master_port >= 1 && e.master_port <= 65535),
              "MASTER_PORT must be in [1, 65535], got " + std::to_string(e.master_port));
  return e;
}

}  // namespace octet
