// src/cuda/runtime/kernel_attrs.h — the one place kernels opt into large dynamic shared memory, and
// where warp-specialized kernels check that their launch allocates the registers their setmaxnreg
// split hands out.
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

/// For a kernel whose warpgroups re-split their registers with setmaxnreg (PTX ISA "setmaxnreg"):
/// `split_regs` registers in all after the split (e.g. 128·24 + 256·240), launched with `threads`
/// threads. The launch allocates the kernel's register count per thread; with fewer than
/// split_regs / threads the consumers' setmaxnreg.inc would wait forever. Throws octet::Error
/// "<what>: the kernel was built with N registers per thread; its setmaxnreg split needs at least
/// M" then; reads the count once per kernel (thread-safe).
void check_register_split(const void* kernel, int threads, int split_regs, const char* what);

template <class Kernel>
void check_register_split(Kernel* kernel, int threads, int split_regs, const char* what) {
  check_register_split(reinterpret_cast<const void*>(kernel), threads, split_regs, what);
}

}  // namespace octet::cuda
