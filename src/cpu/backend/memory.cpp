// memory.cpp — the CPU backend's memory and elementwise operations, and make_cpu_backend().
//
// "Device" memory is host memory: alloc() is a zeroed, 64-byte aligned allocation (as
// octet/backend.h promises), release() frees it, upload/download are memcpy. copy() converts
// F32 <-> BF16 through act_io.h (round to nearest even); fill() writes any dtype's value. axpy and
// scale are the BLAS-1 definitions (y = y + a x, x = a x) on act or param tensors, computed in
// FP32 and rounded once on store. Follows octet/backend.h.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu/backend/act_io.h"
#include "cpu/backend/cpu_backend.h"
#include "cpu/parallel.h"
#include "octet/error.h"

namespace octet {
namespace cpu {
namespace {

constexpr size_t kAlign = 64;

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  OCTET_CHECK(dst != nullptr && src != nullptr, "cpu backend: copy with a null buffer");
  std::memmove(dst, src, bytes);
}

}  // namespace

Buffer CpuBackend::alloc(DType dtype, Shape shape) {
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  // aligned_alloc needs a size that is a multiple of the alignment (and non-zero).
  const size_t padded = (bytes + kAlign - 1) / kAlign * kAlign + (bytes == 0 ? kAlign : 0);
  void* p = std::aligned_alloc(kAlign, padded);
  if (p == nullptr)
    throw OutOfMemory("cpu backend: out of host memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, padded);
  return Buffer(this, Tensor(p, dtype, shape));
}

void CpuBackend::release(void* p) { std::free(p); }

void CpuBackend::upload(const Tensor& dst, const void* host_src) {
  copy_bytes(dst.data, host_src, dst.bytes());
}

void CpuBackend::download(void* host_dst, const Tensor& src) { copy_bytes(host_dst, src.data, src.bytes()); }

void CpuBackend::copy(const Tensor& dst, const Tensor& src) {
  check_same_numel(dst, src, "copy");
  if (dst.dtype == src.dtype) {
    OCTET_CHECK(!dst.empty() && !src.empty(), "copy: missing tensor");
    copy_bytes(dst.data, src.data, dst.bytes());
    return;
  }
  ActIn in(src, "copy src");
  ActOut out(dst, "copy dst");
  for (int64_t i = 0; i < dst.numel(); ++i) out[i] = in[i];
  out.store();
}

void CpuBackend::copy_spans(const Tensor& dst, const Tensor& src, const std::vector<CopySpan>& spans) {
  check_copy_spans(dst, src, spans);
  const size_t e = dtype_size(dst.dtype);
  for (const CopySpan& c : spans)
    if (c.count > 0)
      copy_bytes(static_cast<char*>(dst.data) + size_t(c.dst_at) * e,
                 static_cast<const char*>(src.data) + size_t(c.src_at) * e, size_t(c.count) * e);
}

void CpuBackend::fill(const Tensor& x, double value) {
  OCTET_CHECK(!x.empty(), "fill: missing tensor");
  const int64_t n = x.numel();
  switch (x.dtype) {
    case DType::F64: {
      double* p = x.f64();
      for (int64_t i = 0; i < n; ++i) p[i] = value;
      return;
    }
    case DType::I32: {
      int32_t* p = x.i32();
      for (int64_t i = 0; i < n; ++i) p[i] = int32_t(value);
      return;
    }
    case DType::F32:
    case DType::BF16: {
      ActOut out(x, "fill");
      for (int64_t i = 0; i < n; ++i) out[i] = float(value);
      out.store();
      return;
    }
    default:
      OCTET_FAIL("fill: unsupported dtype " + x.str());
  }
}

void CpuBackend::axpy(float a, const Tensor& x, const Tensor& y) {
  check_same_numel(x, y, "axpy");
  ActIn in(x, "axpy x");
  ActOut out(y, "axpy y", true);
  for (int64_t i = 0; i < y.numel(); ++i) out[i] += a * in[i];
  out.store();
}

void CpuBackend::scale(float a, const Tensor& x) {
  ActOut out(x, "scale x", true);
  for (int64_t i = 0; i < x.numel(); ++i) out[i] *= a;
  out.store();
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() {
  cpu::cpu_threads();  // an invalid OCTET_NUM_THREADS is an error here, before any work
  return std::make_unique<cpu::CpuBackend>();
}

}  // namespace octet
