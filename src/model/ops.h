// src/model/ops.h — the two building blocks the transformer composes from Backend calls: a linear
// layer with an optional static output multiplier (μnit's 1/√fan_in, arXiv 2502.05967) that keeps
// its forward's SavedLinear until the backward, and a norm (RMSNorm or LayerNorm, trainable or
// fixed gain). Parameters and gradients are F32 views into the model's flat buffers; activations
// are act tensors (F32 or BF16, octet/backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/model.h"

namespace octet::model_detail {

/// y = mult · x Wᵀ with x [m, in], W [out, in], y [m, out].
struct LinearOp {
  std::string name;
  std::unique_ptr<Linear> lin;
  Tensor w, dw;  ///< F32 [out, in] views of the parameter and its gradient
  float mult = 1.0f;
  SavedLinear saved;  ///< of the last forward (the current micro-batch)

  /// x must stay alive and unchanged until backward(). x_amax: x's amax from its producer
  /// (Linear::forward; may be empty). residual (may be empty): y = mult · x Wᵀ + residual — in the
  /// GEMM's epilogue (one rounding) when mult == 1, else the product rounded, scaled, then added
  /// (then residual must not be y: octet::Error).
  void forward(Backend& be, const Tensor& x, const Tensor& y, const Tensor& x_amax = {},
               const Tensor& residual = {});
  /// dy is scaled in place by mult (clobbered); dx overwritten (may be empty); dW accumulated.
  /// dy_amax: dy's amax from its producer (may be empty; not used with mult != 1, which rescales dy).
  void backward(Backend& be, const Tensor& dy, const Tensor& dx, const Tensor& dy_amax = {});
};

/// A norm over rows of the last dimension. Empty w is a fixed gain of 1 (FOG's non-trainable
/// QK-norm, RMSNorm only); b/db: LayerNorm only.
struct NormOp {
  NormKind kind = NormKind::RMSNorm;
  float eps = 1e-5f;
  Tensor w, b, dw, db;  ///< F32 [dim] views (or empty)

  /// mean is written for LayerNorm only (may be empty for RMSNorm); amax: y's amax (backend.h, may
  /// be empty).
  void forward(Backend& be, const Tensor& x, const Tensor& y, const Tensor& mean, const Tensor& rstd,
               const Tensor& amax = {});
  /// dx overwritten (accumulate: dx += the gradient as stored, backend.h); the gain (and bias)
  /// gradients accumulate.
  void backward(Backend& be, const Tensor& x, const Tensor& dy, const Tensor& dx, const Tensor& mean,
                const Tensor& rstd, bool accumulate = false);
};

}  // namespace octet::model_detail
