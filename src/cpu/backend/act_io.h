// act_io.h — the one place where the CPU backend converts activation tensors (F32 or BF16,
// octet/tensor.h) to and from the FP32 its loops compute in. (docs/design.md §"Typed tensors")
//
// Rule (octet/backend.h "act"): an op reads every input as FP32, computes in FP32 (or double) as
// before, and rounds each output once, on store, to its tensor's dtype (round to nearest even for
// BF16: fp8.h bf16_from_float). An F32 tensor is used in place (no copy); a BF16 tensor is widened
// into a scratch vector on load and narrowed back by store(). Because the FP32 computation is the
// same whatever the dtypes, an op on BF16 tensors equals the op on F32 tensors holding the same
// values followed by a rounding of its outputs to BF16 — the CPU twin of a CUDA BF16 kernel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "octet/error.h"
#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet::cpu {

/// An input read as FP32: `data` points into the tensor (F32) or into `tmp` (BF16, widened).
struct ActIn {
  const float* data = nullptr;
  std::vector<float> tmp;
  explicit ActIn(const Tensor& t, const char* what = "activation input") {
    check_activation(t, what);
    if (t.dtype == DType::F32) {
      data = t.f32();
      return;
    }
    const uint16_t* b = t.bf16();
    tmp.resize(size_t(t.numel()));
    for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = bf16_to_float(b[i]);
    data = tmp.data();
  }
  ActIn(const ActIn&) = delete;
  ActIn& operator=(const ActIn&) = delete;
  const float& operator[](int64_t i) const { return data[i]; }
};

/// max(m, |v[i]| over n values) as float bits with unsigned order (NaN above every number): the
/// amax form of the producers' outputs and of the CUDA kernels.
inline uint32_t abs_max_bits(const float* v, int64_t n, uint32_t m = 0) {
  for (int64_t i = 0; i < n; ++i) m = std::max(m, detail::f32_bits(v[i]) & 0x7FFFFFFFu);
  return m;
}

/// amax (backend.h, optional: I32 [1] or empty) = max(amax, |y| max as stored) in abs_max_bits'
/// form: the producer's amax of the CUDA kernels. Call after y is stored.
inline void accumulate_stored_amax(const Tensor& y, const Tensor& amax, const char* what) {
  check_amax_out(amax, what);
  if (amax.empty()) return;
  uint32_t m = uint32_t(amax.i32()[0]);
  if (y.dtype == DType::BF16) {
    const uint16_t* b = y.bf16();
    for (int64_t i = 0; i < y.numel(); ++i) m = std::max(m, (uint32_t(b[i]) << 16) & 0x7FFFFFFFu);
  } else {
    m = abs_max_bits(y.f32(), y.numel(), m);
  }
  amax.i32()[0] = int32_t(m);
}

/// An output written as FP32 and stored to its tensor by store() (F32: written in place, store()
/// is a no-op; BF16: a scratch rounded once into the tensor). `load` = true first reads the current
/// values (in-place ops: axpy's y, scale, rope).
struct ActOut {
  Tensor t;
  float* data = nullptr;
  std::vector<float> tmp;
  explicit ActOut(const Tensor& tensor, const char* what = "activation output", bool load = false)
      : t(tensor) {
    check_activation(t, what);
    if (t.dtype == DType::F32) {
      data = t.f32();
      return;
    }
    tmp.assign(size_t(t.numel()), 0.0f);
    if (load) {
      const uint16_t* b = t.bf16();
      for (size_t i = 0; i < tmp.size(); ++i) tmp[i] = bf16_to_float(b[i]);
    }
    data = tmp.data();
  }
  ActOut(const ActOut&) = delete;
  ActOut& operator=(const ActOut&) = delete;
  float& operator[](int64_t i) { return data[i]; }
  /// Rounds the scratch into a BF16 tensor (round to nearest even). Idempotent for F32.
  void store() {
    if (t.dtype != DType::BF16) return;
    uint16_t* b = t.bf16();
    for (size_t i = 0; i < tmp.size(); ++i) b[i] = bf16_from_float(tmp[i]);
  }
};

/// v as a tensor of dtype `d` stores it, read back as FP32 (BF16: rounded to nearest even).
inline float act_stored(DType d, float v) { return d == DType::BF16 ? bf16_to_float(bf16_from_float(v)) : v; }

/// An optional F32 parameter/statistic pointer: null for an empty tensor, else checked F32 with
/// `numel` elements (what: the argument's name for the error).
inline float* opt_f32(const Tensor& t, int64_t numel, const char* what) {
  if (t.empty()) return nullptr;
  check_dtype(t, DType::F32, what);
  check_numel(t, numel, what);
  return t.f32();
}

/// A required F32 tensor of `numel` elements.
inline float* req_f32(const Tensor& t, int64_t numel, const char* what) {
  check_dtype(t, DType::F32, what);
  check_numel(t, numel, what);
  return t.f32();
}

/// Throws unless a and b have equal numel (elementwise ops).
inline void check_same_numel(const Tensor& a, const Tensor& b, const char* op) {
  OCTET_CHECK(a.numel() == b.numel(),
              std::string(op) + ": element counts differ: " + a.str() + " vs " + b.str());
}

}  // namespace octet::cpu
