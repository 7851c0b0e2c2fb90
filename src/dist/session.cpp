// src/dist/session.cpp — open_dist_session (octet/dist.h): picks the transport for a device and a
// launch — one rank without a transport, MPI for CPU ranks, NCCL for GPU ranks — and builds the
// backend the communicator works on. (docs/distributed.md §Launch)
#include "octet/dist.h"
#include "octet/error.h"

#ifdef OCTET_WITH_NCCL
#include "dist/nccl.h"
#endif

namespace octet {

DistSession open_dist_session(const DistEnv& env, const std::string& device) {
  DistSession s;
  if (env.world == 1) {  // one rank: the single-process trainer's own backend, bitwise as before
    s.backend = make_backend(device);
    s.comm = make_single_communicator(*s.backend);
    return s;
  }
  end_with_launcher();
  if (device.rfind("cuda", 0) == 0) {
#ifdef OCTET_WITH_NCCL
    OCTET_CHECK(device == "cuda", "device " + device + " with " + std::to_string(env.world) +
                                      " ranks: give device cuda (each rank uses GPU LOCAL_RANK)");
    return dist_detail::open_nccl_session(env);
#else
    OCTET_FAIL("training on " + std::to_string(env.world) + " GPUs needs octet built with CUDA (NCCL)");
#endif
  }
  OCTET_CHECK(env.mpi, "CPU ranks communicate over MPI: start the " + std::to_string(env.world) +
                           " ranks with mpirun (or octet --nproc), not with torchrun");
  s.backend = make_backend(device);
  s.comm = make_mpi_communicator(*s.backend);
  OCTET_CHECK(s.comm->size() == env.world && s.comm->rank() == env.rank,
              "MPI reports rank " + std::to_string(s.comm->rank()) + " of " + std::to_string(s.comm->size()) +
                  ", the environment rank " + std::to_string(env.rank) + " of " + std::to_string(env.world));
  return s;
}

}  // namespace octet
