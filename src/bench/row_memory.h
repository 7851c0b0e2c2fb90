// src/bench/row_memory.h — the device memory of one benchmark row (octet/bench.h TrainBenchRow
// peak_mem_gib, device_mem_gib): reset before the row's model is built, read after its last step.
// CUDA backends report the counters of CudaBackend::memory_stats (src/cuda/runtime/cuda_backend.h); any
// other backend (the CPU reference) reports nothing.
#pragma once

#include <optional>

#include "octet/backend.h"

namespace octet::bench_detail {

struct RowMemory {
  std::optional<double> peak_gib, device_gib;  ///< GiB (2^30 bytes); nullopt: not a CUDA backend
};

/// Starts a row: frees the memory pool's cached memory and restarts its peak (synchronizes).
void reset_row_memory(Backend& backend);
/// The row's peak of allocated bytes and the device's used memory now (synchronizes).
RowMemory read_row_memory(Backend& backend);

}  // namespace octet::bench_detail
