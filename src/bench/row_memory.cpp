// src/bench/row_memory.cpp — row_memory.h: CudaBackend's memory counters in GiB, nothing elsewhere.
#include "bench/row_memory.h"

#ifdef OCTET_WITH_CUDA
#include "cuda/runtime/cuda_backend.h"
#endif

namespace octet::bench_detail {

void reset_row_memory(Backend& backend) {
#ifdef OCTET_WITH_CUDA
  if (auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend)) cuda->reset_memory_stats();
#else
  (void)backend;
#endif
}

RowMemory read_row_memory(Backend& backend) {
  RowMemory m;
#ifdef OCTET_WITH_CUDA
  if (auto* cuda = dynamic_cast<cuda::CudaBackend*>(&backend)) {
    constexpr double kGiB = double(1ull << 30);
    const cuda::MemoryStats s = cuda->memory_stats();
    m.peak_gib = double(s.pool_used_peak) / kGiB;
    m.device_gib = double(s.device_used) / kGiB;
  }
#else
  (void)backend;
#endif
  return m;
}

}  // namespace octet::bench_detail
