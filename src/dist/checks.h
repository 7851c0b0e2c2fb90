// src/dist/checks.h — the argument checks every Communicator runs once at its boundary (octet/dist.h):
// dtypes and the size relations of reduce_scatter and all_gather.
#pragma once

#include "octet/dist.h"

namespace octet::dist_detail {

/// F32/F64 with Sum or Max, I32 with Max; non-empty.
void check_all_reduce(const Tensor& x, ReduceOp op);
/// F32 in [world·n], out [n].
void check_reduce_scatter(const Tensor& in, const Tensor& out, int world);
/// F32, E4M3 or E5M2 (FP8 codes, moved as bytes) in [n], out of the same dtype [world·n].
void check_all_gather(const Tensor& in, const Tensor& out, int world);
/// "<transport> <call> on rank r of n" — the prefix of every collective's error message.
std::string where(const char* transport, const char* call, int rank, int world);

}  // namespace octet::dist_detail
