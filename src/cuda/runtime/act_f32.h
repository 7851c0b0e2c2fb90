// src/cuda/runtime/act_f32.h — FP32 views of activation tensors for the kernels and GEMMs that read or write
// FP32 only (cuBLASLt outputs, the unfused attention's kernels): an F32 tensor is used in place; a
// BF16 one is widened into scratch (exact) on input, or written to FP32 scratch and rounded once
// (RNE, convert_launch) on output. (docs/design.md §"Typed tensors")
#pragma once

#include <cuda_runtime.h>

#include "cuda/runtime/buffer.h"
#include "cuda/ops/ops.h"
#include "octet/tensor.h"

namespace octet::cuda {

/// FP32 values of the act tensor t: t itself if F32, else widened into `buf` (enqueued on s).
inline const float* f32_in(const Tensor& t, DeviceBuffer<float>& buf, cudaStream_t s) {
  if (t.dtype == DType::F32) return t.f32();
  const Tensor f(buf.reserve(size_t(t.numel()), s), DType::F32, t.shape);
  convert_launch(f, t, s);
  return f.f32();
}

/// Where to write the FP32 result for the act tensor t: t itself if F32, else `buf`; call
/// f32_out_finish(t, buf, s) after the write to round it into t.
inline float* f32_out(const Tensor& t, DeviceBuffer<float>& buf, cudaStream_t s) {
  return t.dtype == DType::F32 ? t.f32() : buf.reserve(size_t(t.numel()), s);
}
inline void f32_out_finish(const Tensor& t, DeviceBuffer<float>& buf, cudaStream_t s) {
  if (t.dtype != DType::F32) convert_launch(t, Tensor(buf.get(), DType::F32, t.shape), s);
}

}  // namespace octet::cuda
