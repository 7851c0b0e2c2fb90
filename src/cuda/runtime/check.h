// src/cuda/runtime/check.h — error checks for CUDA runtime and cuBLASLt calls, raising octet::Error.
//
// Every CUDA or cuBLASLt call in the CUDA backend goes through one of these macros, so that a failure
// throws octet::Error naming the failed call, the error string and the source location (the habit of
// Transformer Engine's NVTE_CHECK_CUDA / NVTE_CHECK_CUBLAS). Kernel launches are followed by
// OCTET_CUDA_LAUNCH_CHECK(), which reads cudaGetLastError() (launch-configuration errors).
// Usable from .cu (C++17) and .cpp (C++20) files.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "octet/error.h"

namespace octet::cuda {

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e != cudaSuccess)
    ::octet::throw_error(file, line,
                         std::string("CUDA call failed: ") + call + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}

inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    ::octet::throw_error(file, line,
                         std::string("cuBLASLt call failed: ") + call + ": " + cublasLtGetStatusName(s) +
                             " (" + cublasLtGetStatusString(s) + ")");
}

}  // namespace octet::cuda

#define OCTET_CUDA_CHECK(call) ::octet::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define OCTET_CUBLAS_CHECK(call) ::octet::cuda::check_cublas((call), #call, __FILE__, __LINE__)
#define OCTET_CUDA_LAUNCH_CHECK() \
  ::octet::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
