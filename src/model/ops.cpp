// src/model/ops.cpp — LinearOp and NormOp (see ops.h): thin wrappers over Backend calls.
#include "model/ops.h"

#include "octet/error.h"

namespace octet::model_detail {

void LinearOp::forward(Backend& be, const float* x, const float* params, float* y, int64_t m) {
  lin->forward(x, params + w_off, y, m);
  if (mult != 1.0f) be.scale(mult, y, size_t(m * out));
}

void LinearOp::backward(Backend& be, const float* x, const float* params, float* dy, float* dx,
                        float* grads, int64_t m) {
  // y = mult·xWᵀ ⇒ dx = (mult·dy)W and dW = (mult·dy)ᵀx.
  if (mult != 1.0f) be.scale(mult, dy, size_t(m * out));
  lin->backward(x, params + w_off, dy, dx, grads + w_off, m);
}

void NormOp::forward(Backend& be, const float* x, float* y, float* mean, float* rstd,
                     const float* params, int64_t rows) {
  const float* w = has_weight ? params + w_off : nullptr;
  if (kind == NormKind::RMSNorm) {
    be.rmsnorm_forward(x, w, y, rstd, rows, dim, eps);
  } else {
    OCTET_CHECK(has_weight, "LayerNorm needs a gain");
    be.layernorm_forward(x, w, params + b_off, y, mean, rstd, rows, dim, eps);
  }
}

void NormOp::backward(Backend& be, const float* x, const float* dy, float* dx, const float* mean,
                      const float* rstd, const float* params, float* grads, int64_t rows) {
  const float* w = has_weight ? params + w_off : nullptr;
  float* dw = has_weight ? grads + w_off : nullptr;
  if (kind == NormKind::RMSNorm) {
    be.rmsnorm_backward(x, w, rstd, dy, dx, dw, rows, dim);
  } else {
    be.layernorm_backward(x, w, mean, rstd, dy, dx, dw, grads + b_off, rows, dim);
  }
}

}  // namespace octet::model_detail
