// src/cuda/buffer.h — an owning, grow-only device allocation (cudaMalloc), for scratch buffers.
//
// The CUDA backend keeps its quantized operands, GEMM workspace and attention intermediates in
// DeviceBuffers that are reused from call to call and grow only when a larger size is asked for
// (plain cudaMalloc, never managed memory). Contents are undefined after a grow.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/check.h"

namespace octet::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { reserve(n); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }

  /// Ensures room for n elements (at least 1); reallocates (losing the contents) if smaller.
  T* reserve(size_t n) {
    if (n == 0) n = 1;
    if (n > n_) {
      reset();
      OCTET_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
      n_ = n;
    }
    return p_;
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace octet::cuda
