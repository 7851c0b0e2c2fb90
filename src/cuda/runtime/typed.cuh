// src/cuda/runtime/typed.cuh — element types of activation tensors in the CUDA kernels, and the one
// dispatch helper that turns runtime dtypes (F32 or BF16, octet/tensor.h) into kernel template
// arguments. (docs/design.md §"Typed tensors")
//
// Every act tensor of an operation may be F32 or BF16 independently. A kernel templated on its
// tensors' element types loads each element as FP32 (ld), computes in FP32 (or double, as its
// CPU twin) and rounds once on store (st): round to nearest even for BF16, fp8.h bf16_from_float,
// the same function the CPU twin uses, so both backends store the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <utility>

#include "octet/error.h"
#include "octet/fp8.h"
#include "octet/tensor.h"

namespace octet::cuda {

/// A BF16 element in memory: the 16 high bits of the FP32 pattern (tensor.h).
struct Bf16 {
  uint16_t bits;
};

__device__ __forceinline__ float ld(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float ld(const Bf16* p, int64_t i) { return bf16_to_float(p[i].bits); }
__device__ __forceinline__ void st(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void st(Bf16* p, int64_t i, float v) { p[i].bits = bf16_from_float(v); }

/// |v| as float bits after the rounding st() applies for the element type (the value a later reader
/// of the tensor sees): for amaxes computed by the kernel that writes the tensor.
__device__ __forceinline__ unsigned stored_abs_bits(const float*, float v) {
  return __float_as_uint(v) & 0x7FFFFFFFu;
}
__device__ __forceinline__ unsigned stored_abs_bits(const Bf16*, float v) {
  return (uint32_t(bf16_from_float(v)) << 16) & 0x7FFFFFFFu;
}

/// v as st() stores it, read back as FP32 (v itself for F32; v rounded to BF16 for BF16): what a
/// later reader of the tensor sees, for kernels that add a result to what a tensor holds with the
/// bits of writing it first and adding after.
__device__ __forceinline__ float stored_value(const float*, float v) { return v; }
__device__ __forceinline__ float stored_value(const Bf16*, float v) {
  return bf16_to_float(bf16_from_float(v));
}

/// Eight consecutive elements loaded as FP32 / stored with one rounding (as ld/st): one 16-byte
/// access for BF16, two for F32. The address must be 16-byte aligned (callers check vec_ok).
__device__ __forceinline__ void ld8(const float* p, float v[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void ld8(const Bf16* p, float v[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  for (int j = 0; j < 4; ++j) {
    v[2 * j] = __uint_as_float(w[j] << 16);
    v[2 * j + 1] = __uint_as_float(w[j] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void st8(float* p, const float v[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void st8(Bf16* p, const float v[8]) {
  uint32_t w[4];
  for (int j = 0; j < 4; ++j)
    w[j] = uint32_t(bf16_from_float(v[2 * j])) | (uint32_t(bf16_from_float(v[2 * j + 1])) << 16);
  *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

/// True if every pointer is 16-byte aligned: then ld8/st8 may be used at element offsets that are
/// multiples of 8.
inline bool vec_ok(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

namespace detail {
template <class... Done>
struct ActDispatch {
  template <class F>
  static void run(F&& f) {
    f(static_cast<Done*>(nullptr)...);
  }
  template <class F, class... Rest>
  static void run(F&& f, DType t, Rest... rest) {
    if (t == DType::BF16)
      ActDispatch<Done..., Bf16>::run(std::forward<F>(f), rest...);
    else if (t == DType::F32)
      ActDispatch<Done..., float>::run(std::forward<F>(f), rest...);
    else
      OCTET_FAIL("cuda: an activation tensor must be f32 or bf16, got " + to_string(t));
  }
};
}  // namespace detail

/// Calls f(T1* tag, T2* tag, ...) with Ti = float for F32 and Bf16 for BF16 dtypes (null pointers
/// that carry the types): `dispatch_act(f, x.dtype, y.dtype)`. Throws for other dtypes.
template <class F, class... D>
void dispatch_act(F&& f, D... dtypes) {
  detail::ActDispatch<>::run(std::forward<F>(f), dtypes...);
}

/// The typed device pointer of an act tensor, for a type tag from dispatch_act.
template <class T>
T* typed(const Tensor& t, T*) {
  return static_cast<T*>(t.data);
}

}  // namespace octet::cuda
