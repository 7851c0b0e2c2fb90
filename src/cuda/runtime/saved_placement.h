// src/cuda/runtime/saved_placement.h — where the buffers of a CUDA attention's or FP8 linear's saved
// state go (octet/backend.h Attention:: and Linear::saved_bytes, forward_to, saved_from): new
// memory of the backend, or views into one block of caller memory, one region after another at
// 256-byte boundaries. Both state their size as terms (octet/saved_size.h) and check each
// placement against them; counting mode gives the bytes of a fixed part (the linear's Ŵᵀ).
#pragma once

#include <cstdint>
#include <string>

#include "cuda/runtime/cuda_backend.h"
#include "octet/error.h"
#include "octet/tensor.h"

namespace octet::cuda {

class SavedPlacement {
 public:
  static constexpr int64_t kAlign = 256;

  /// Takes nothing, counts the bytes that a placement into memory would need.
  static SavedPlacement counting() { return SavedPlacement(nullptr, nullptr, 0); }
  /// Each take() is new memory of `backend`: zero-filled (Backend::alloc), or not
  /// (alloc_uninitialized: for buffers the forward overwrites entirely).
  static SavedPlacement allocating(CudaBackend& backend, bool zeroed = true) {
    SavedPlacement at(&backend, nullptr, 0);
    at.zeroed_ = zeroed;
    return at;
  }
  /// Each take() views the next region of `memory` (device memory of at least `need` bytes,
  /// kAlign-aligned; `what` names it in the octet::Error thrown otherwise).
  static SavedPlacement into(const Tensor& memory, int64_t need, const std::string& what) {
    OCTET_CHECK(!memory.empty(), what + ": no memory given");
    OCTET_CHECK(int64_t(memory.bytes()) >= need, what + ": " + std::to_string(memory.bytes()) +
                                                     " bytes given, the saved state needs " +
                                                     std::to_string(need));
    OCTET_CHECK(reinterpret_cast<uintptr_t>(memory.data) % kAlign == 0,
                what + ": the memory must be " + std::to_string(kAlign) + "-byte aligned");
    return SavedPlacement(nullptr, static_cast<char*>(memory.data), int64_t(memory.bytes()));
  }

  /// The next buffer of `dtype` and `shape`: owning (allocating), a non-owning view (into), or
  /// empty (counting).
  Buffer take(DType dtype, Shape shape) {
    const Tensor t(nullptr, dtype, shape);
    const int64_t at = used_;
    used_ += (int64_t(t.bytes()) + kAlign - 1) / kAlign * kAlign;
    if (backend_)
      return zeroed_ ? backend_->alloc(dtype, shape) : backend_->alloc_uninitialized(dtype, shape);
    if (!base_) return Buffer();
    OCTET_CHECK(used_ <= size_, "saved placement: past the end of the memory (a layout bug)");
    return Buffer(nullptr, Tensor(base_ + at, dtype, shape));
  }
  /// Bytes taken so far, each region rounded up to kAlign.
  int64_t bytes() const { return used_; }

 private:
  SavedPlacement(CudaBackend* backend, char* base, int64_t size)
      : backend_(backend), base_(base), size_(size) {}
  CudaBackend* backend_;
  char* base_;
  int64_t size_;
  int64_t used_ = 0;
  bool zeroed_ = true;
};

}  // namespace octet::cuda
