// src/cuda/runtime/kernel_attrs.cpp — opt_in_shared_memory, check_register_split (kernel_attrs.h).
#include "cuda/runtime/kernel_attrs.h"

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "cuda/runtime/check.h"
#include "octet/error.h"

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

void check_register_split(const void* kernel, int threads, int split_regs, const char* what) {
  static std::mutex mutex;
  static std::map<const void*, int> regs_of;  // the kernel's registers per thread (cudaFuncGetAttributes)
  int regs = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    auto it = regs_of.find(kernel);
    if (it == regs_of.end()) {
      cudaFuncAttributes attr{};
      OCTET_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
      it = regs_of.emplace(kernel, attr.numRegs).first;
    }
    regs = it->second;
  }
  OCTET_CHECK(split_regs <= threads * regs,
              std::string(what) + ": the kernel was built with " + std::to_string(regs) +
                  " registers per thread; its setmaxnreg split needs at least " +
                  std::to_string(split_regs / threads));
}

}  // namespace octet::cuda
