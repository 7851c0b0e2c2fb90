// src/cuda/runtime/buffer.h — an owning, grow-only, stream-ordered device allocation, for scratch buffers.
//
// The CUDA backend keeps its scratch (GEMM workspace, quantized operands of the current call,
// attention intermediates) in DeviceBuffers that are reused from call to call and grow only when
// a larger size is asked for. Allocation and release are stream-ordered (cudaMallocAsync /
// cudaFreeAsync on the stream of the reserve() call), so a grow never synchronizes: work already
// enqueued on that stream finishes with the old memory before it is reused. Contents are undefined
// after a grow. Memory a forward hands to its backward (saved state) uses octet::Buffer instead
// (Backend::alloc), one allocation per forward.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "cuda/runtime/check.h"

namespace octet::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)), s_(o.s_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
      s_ = o.s_;
    }
    return *this;
  }

  /// Ensures room for n elements (at least 1) in the order of `stream`; reallocates (losing the
  /// contents) if smaller. Every use of the memory must be on `stream`.
  T* reserve(size_t n, cudaStream_t stream) {
    if (n == 0) n = 1;
    if (n > n_) {
      reset();
      s_ = stream;
      OCTET_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), n * sizeof(T), stream));
      n_ = n;
    }
    return p_;
  }
  /// Frees in stream order (errors ignored: also called from destructors).
  void reset() {
    if (p_) (void)cudaFreeAsync(p_, s_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
  cudaStream_t s_ = nullptr;
};

}  // namespace octet::cuda
