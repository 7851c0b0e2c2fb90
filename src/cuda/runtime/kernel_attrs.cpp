// src/cuda/runtime/kernel_attrs.cpp — opt_in_shared_memory (kernel_attrs.h).
#include "cuda/runtime/kernel_attrs.h"

#include <mutex>
#include <set>
#include <tuple>

#include "cuda/runtime/check.h"

namespace octet::cuda {

void opt_in_shared_memory(const void* kernel, int bytes, bool max_carveout) {
  static std::mutex mutex;
  static std::set<std::tuple<const void*, int, int, bool>> done;  // (kernel, device, bytes, carveout)
  int dev = 0;
  OCTET_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(kernel, dev, bytes, max_carveout);
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.count(key)) return;
  OCTET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  if (max_carveout)
    OCTET_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                          cudaSharedmemCarveoutMaxShared));
  done.insert(key);
}

}  // namespace octet::cuda
