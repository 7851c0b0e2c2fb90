// src/cuda/recurrent.cpp — the recurrent mixer (Gated DeltaNet, octet/recurrent.h) on the CUDA
// backend: not implemented yet. Its CPU twin is src/cpu/backend/gated_delta.cpp; the chunked GPU
// form (issue 15) will replace this file.
#include <string>

#include "cuda/cuda_backend.h"
#include "octet/error.h"

namespace octet::cuda {
namespace {
[[noreturn]] void not_on_cuda(const char* op) {
  OCTET_FAIL(std::string(op) +
             ": the Gated DeltaNet mixer (model.mixer = hybrid) is not implemented on cuda yet; "
             "run it on the cpu backend");
}
}  // namespace

void CudaBackend::gated_delta_forward(const GatedDeltaArgs&, const Tensor&) {
  not_on_cuda("gated_delta_forward");
}
void CudaBackend::gated_delta_backward(const GatedDeltaArgs&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&) {
  not_on_cuda("gated_delta_backward");
}

}  // namespace octet::cuda
