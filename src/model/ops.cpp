// src/model/ops.cpp — LinearOp and NormOp (see ops.h): thin wrappers over Backend calls.
#include "model/ops.h"

#include "octet/error.h"

namespace octet::model_detail {

void LinearOp::forward(Backend& be, const Tensor& x, const Tensor& y, const Tensor& x_amax,
                       const Tensor& residual) {
  if (mult == 1.0f) {
    saved = lin->forward(x, w, y, x_amax, residual);
    return;
  }
  OCTET_CHECK(residual.empty() || residual.data != y.data,
              "linear " + name + ": with mult != 1 the residual cannot be y itself (y is scaled first)");
  saved = lin->forward(x, w, y, x_amax);
  be.scale(mult, y);
  if (!residual.empty()) be.axpy(1.0f, residual, y);
}

void LinearOp::backward(Backend& be, const Tensor& dy, const Tensor& dx, const Tensor& dy_amax) {
  // y = mult·xWᵀ ⇒ dx = (mult·dy)W and dW = (mult·dy)ᵀx.
  OCTET_CHECK(saved.state != nullptr, "linear " + name + ": backward before any forward");
  if (mult != 1.0f) be.scale(mult, dy);
  lin->backward(saved, dy, dx, dw, mult == 1.0f ? dy_amax : Tensor{});
}

void NormOp::forward(Backend& be, const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                     const Tensor& amax) {
  if (kind == NormKind::RMSNorm) {
    be.rmsnorm_forward(x, w, y, rstd, eps, amax);
  } else {
    OCTET_CHECK(!w.empty(), "LayerNorm needs a gain");
    be.layernorm_forward(x, w, b, y, mean, rstd, eps, amax);
  }
}

void NormOp::backward(Backend& be, const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& mean,
                      const Tensor& rstd, bool accumulate) {
  if (kind == NormKind::RMSNorm) {
    be.rmsnorm_backward(x, w, rstd, dy, dx, dw, accumulate);
  } else {
    be.layernorm_backward(x, w, mean, rstd, dy, dx, dw, db, accumulate);
  }
}

}  // namespace octet::model_detail
