// src/cuda/runtime/kernel_image.cu — whether this build's kernels can run on a device: the library is
// compiled for the architectures of CMAKE_CUDA_ARCHITECTURES (90a by default: sm_90 only, as
// arch-specific images run on no other), and a device without an image of them fails every launch
// with cudaErrorNoKernelImageForDevice. CudaBackend's constructor asks first (checked_cuda_device).
#include <cuda_runtime.h>

#include "cuda/runtime/cuda_backend.h"

namespace octet::cuda {
namespace {

// Compiled with every other kernel of the library, for the same architectures.
__global__ void image_probe_kernel() {}

}  // namespace

bool kernel_image_runs_on(int device) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) return false;
  if (prev != device && cudaSetDevice(device) != cudaSuccess) return false;
  cudaFuncAttributes attrs{};
  const cudaError_t e = cudaFuncGetAttributes(&attrs, image_probe_kernel);
  if (prev != device) (void)cudaSetDevice(prev);
  (void)cudaGetLastError();  // a failed query leaves no sticky error behind
  return e == cudaSuccess;
}

}  // namespace octet::cuda
