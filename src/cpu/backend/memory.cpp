// memory.cpp — the CPU backend's memory and elementwise operations, and make_cpu_backend().
//
// "Device" memory is host memory: alloc() is calloc (zero-initialized, as octet/backend.h
// promises), release() is free, upload/download/copy are memcpy. axpy and scale are the BLAS-1
// definitions (y = y + a x, x = a x) written as plain loops. Follows octet/backend.h.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cpu/backend/cpu_backend.h"
#include "octet/error.h"

namespace octet {
namespace cpu {
namespace {

// calloc of n elements of `size` bytes; n == 0 still returns a unique pointer (release() frees it).
void* zeroed(size_t n, size_t size) {
  void* p = std::calloc(n == 0 ? 1 : n, size);
  OCTET_CHECK(p != nullptr, "cpu backend: out of host memory allocating " +
                                std::to_string(n * size) + " bytes");
  return p;
}

void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  OCTET_CHECK(dst != nullptr && src != nullptr, "cpu backend: copy with a null buffer");
  std::memmove(dst, src, bytes);
}

}  // namespace

float* CpuBackend::alloc(size_t n) { return static_cast<float*>(zeroed(n, sizeof(float))); }

int32_t* CpuBackend::alloc_i32(size_t n) {
  return static_cast<int32_t*>(zeroed(n, sizeof(int32_t)));
}

void CpuBackend::release(void* p) { std::free(p); }

void CpuBackend::upload(float* dst, const float* host_src, size_t n) {
  copy_bytes(dst, host_src, n * sizeof(float));
}

void CpuBackend::upload_i32(int32_t* dst, const int32_t* host_src, size_t n) {
  copy_bytes(dst, host_src, n * sizeof(int32_t));
}

void CpuBackend::download(float* host_dst, const float* src, size_t n) {
  copy_bytes(host_dst, src, n * sizeof(float));
}

void CpuBackend::copy(float* dst, const float* src, size_t n) {
  copy_bytes(dst, src, n * sizeof(float));
}

void CpuBackend::fill(float* x, float value, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = value;
}

void CpuBackend::axpy(float a, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void CpuBackend::scale(float a, float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

}  // namespace octet
