// src/cuda/runtime/memory_stats.cpp — CudaBackend::memory_stats / reset_memory_stats (cuda_backend.h): the
// counters of the device's default stream-ordered memory pool (CUDA Runtime API, "Stream Ordered
// Memory Allocator": cudaMemPoolAttrUsedMemCurrent/High, ReservedMemCurrent) and cudaMemGetInfo.
// The backend allocates only from that pool, so its high-water mark is the backend's peak of
// allocated bytes; nothing is counted by hand.
#include "cuda/runtime/check.h"
#include "cuda/runtime/cuda_backend.h"

namespace octet::cuda {

namespace {
uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t v = 0;
  OCTET_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &v));
  return v;
}
}  // namespace

MemoryStats CudaBackend::memory_stats() {
  DeviceGuard g(device_);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaMemPool_t pool;
  OCTET_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  MemoryStats s;
  s.pool_used = pool_attribute(pool, cudaMemPoolAttrUsedMemCurrent);
  s.pool_used_peak = pool_attribute(pool, cudaMemPoolAttrUsedMemHigh);
  s.pool_reserved = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  size_t free_bytes = 0, total_bytes = 0;
  OCTET_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  s.device_used = total_bytes - free_bytes;
  s.device_total = total_bytes;
  return s;
}

void CudaBackend::reset_memory_stats() {
  DeviceGuard g(device_);
  OCTET_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cudaMemPool_t pool;
  OCTET_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  OCTET_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  uint64_t zero = 0;  // the only value these attributes take: the mark restarts at the current value
  OCTET_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  OCTET_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero));
}

}  // namespace octet::cuda
