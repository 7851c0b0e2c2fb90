// src/dist/nccl.h — the NCCL session (src/dist/cuda/nccl.cpp), built only with CUDA
// (OCTET_WITH_NCCL): the CUDA backend on GPU env.local_rank and an NCCL communicator on its stream.
#pragma once

#include "octet/dist.h"

namespace octet::dist_detail {

/// Throws octet::Error naming the failed step (no such GPU, rendezvous, ncclCommInitRank).
DistSession open_nccl_session(const DistEnv& env);

}  // namespace octet::dist_detail
