// src/capi/backend.cpp — the C ABI's version, last error and backend handles
// (include/octet/c_api.h): octet_backend_new_cpu / _cuda wrap make_cpu_backend and
// make_cuda_backend(CudaOptions{device, stream}) (octet/backend.h; docs/pytorch.md).
#include <memory>
#include <string>

#include "capi/capi_impl.h"

namespace octet::capi {
namespace {
thread_local std::string last_error;
}  // namespace

void set_last_error(const std::string& message) { last_error = message; }

DType dtype_of(int32_t c_dtype, const char* what) {
  switch (c_dtype) {
    case OCTET_C_F64:
      return DType::F64;
    case OCTET_C_F32:
      return DType::F32;
    case OCTET_C_BF16:
      return DType::BF16;
    default:
      OCTET_FAIL(std::string(what) + ": unknown dtype code " + std::to_string(c_dtype) +
                 " (expected 0 = f64, 1 = f32, 2 = bf16)");
  }
}

}  // namespace octet::capi

using octet::capi::guarded;

extern "C" {

int octet_c_api_version(void) { return OCTET_C_API_VERSION; }

const char* octet_last_error(void) { return octet::capi::last_error.c_str(); }

octet_c_backend* octet_backend_new_cpu(void) {
  octet_c_backend* out = nullptr;
  guarded([&] {
    auto handle = std::make_unique<octet_c_backend>();
    handle->backend = octet::make_cpu_backend();
    out = handle.release();
  });
  return out;
}

octet_c_backend* octet_backend_new_cuda(int device, void* stream) {
  octet_c_backend* out = nullptr;
  guarded([&] {
    octet::CudaOptions options;
    options.device = device;
    options.stream = stream;
    auto handle = std::make_unique<octet_c_backend>();
    handle->backend = octet::make_cuda_backend(options);
    out = handle.release();
  });
  return out;
}

void octet_backend_free(octet_c_backend* backend) { delete backend; }

int octet_backend_synchronize(octet_c_backend* backend) {
  return guarded([&] {
    octet::capi::require(backend, "octet_backend_synchronize: backend");
    backend->backend->synchronize();
  });
}

}  // extern "C"
