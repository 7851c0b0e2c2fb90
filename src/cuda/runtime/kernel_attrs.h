// src/cuda/runtime/kernel_attrs.h — the one place kernels opt into large dynamic shared memory.
//
// A kernel that takes more than 48 KiB of dynamic shared memory must be opted in by
// cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize), per function and device
// (CUDA C++ Programming Guide, "Shared Memory" of compute capability 8.x/9.x). The call costs host
// time at every launch; the attributes stay set for the process, so this sets them once per
// (kernel, device, size, carveout) and remembers it.
#pragma once

#include <cuda_runtime.h>

namespace octet::cuda {

/// Opts `kernel` (a __global__ function's address) into `bytes` of dynamic shared memory on the
/// current device, and with max_carveout also asks for the whole unified L1/shared memory as shared
/// (cudaSharedmemCarveoutMaxShared), once per (kernel, device, bytes, max_carveout); thread-safe.
/// Throws octet::Error naming the failed CUDA call (e.g. bytes beyond what the device allows).
void opt_in_shared_memory(const void* kernel, int bytes, bool max_carveout = false);

template <class Kernel>
void opt_in_shared_memory(Kernel* kernel, int bytes, bool max_carveout = false) {
  opt_in_shared_memory(reinterpret_cast<const void*>(kernel), bytes, max_carveout);
}

}  // namespace octet::cuda
