// src/cuda/ops/copy_spans.cu — Backend::copy_spans on the GPU: every span one buffer of CUB's
// batched memcpy (cub::DeviceMemcpy::Batched), so that gathering a few hundred row blocks is one
// upload and one copy, not one cudaMemcpyAsync each.
#include <cub/device/device_memcpy.cuh>

#include <cstdint>
#include <vector>

#include "cuda/ops/ops.h"
#include "cuda/runtime/check.h"

namespace octet::cuda {

void copy_spans_launch(void* dst, const void* src, const int64_t* src_at, const int64_t* dst_at,
                       const int64_t* bytes, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  // The table, in one device block: the source pointers, the destination pointers, the sizes.
  std::vector<uint64_t> table(size_t(3 * n));
  for (int64_t i = 0; i < n; ++i) {
    table[size_t(i)] = reinterpret_cast<uint64_t>(static_cast<const char*>(src) + src_at[i]);
    table[size_t(n + i)] = reinterpret_cast<uint64_t>(static_cast<char*>(dst) + dst_at[i]);
    table[size_t(2 * n + i)] = uint64_t(bytes[i]);
  }
  // The same iterator types in the size query as in the copy (the temp size depends on them).
  size_t temp = 0;
  OCTET_CUDA_CHECK(cub::DeviceMemcpy::Batched(nullptr, temp, static_cast<void**>(nullptr),
                                              static_cast<void**>(nullptr), static_cast<uint64_t*>(nullptr),
                                              n, s));
  const size_t table_bytes = table.size() * sizeof(uint64_t);
  const size_t at_temp = (table_bytes + 255) / 256 * 256;
  void* block = nullptr;
  OCTET_CUDA_CHECK(cudaMallocAsync(&block, at_temp + temp, s));
  auto* const t = static_cast<uint64_t*>(block);
  // Pageable host memory: cudaMemcpyAsync stages it before returning, so `table` may go.
  cudaError_t e = cudaMemcpyAsync(t, table.data(), table_bytes, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess)
    e = cub::DeviceMemcpy::Batched(static_cast<char*>(block) + at_temp, temp, reinterpret_cast<void**>(t),
                                   reinterpret_cast<void**>(t + n), t + 2 * n, n, s);
  (void)cudaFreeAsync(block, s);
  OCTET_CUDA_CHECK(e);
}

}  // namespace octet::cuda
