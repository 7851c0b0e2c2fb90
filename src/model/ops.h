// src/model/ops.h — the two building blocks the transformer composes from Backend calls: a linear
// layer with an optional static output multiplier (μnit's 1/√fan_in, arXiv 2502.05967) and a norm
// (RMSNorm or LayerNorm, trainable or fixed gain) with its saved statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "octet/backend.h"
#include "octet/model.h"

namespace octet::model_detail {

/// y = mult · x Wᵀ with x [m, in], W [out, in] at params + w_off, y [m, out].
struct LinearOp {
  std::string name;
  std::unique_ptr<Linear> lin;
  size_t w_off = 0;
  int64_t in = 0, out = 0;
  float mult = 1.0f;

  void forward(Backend& be, const float* x, const float* params, float* y, int64_t m);
  /// dy is scaled in place by mult (clobbered); dx overwritten (may be null); dW accumulated.
  void backward(Backend& be, const float* x, const float* params, float* dy, float* dx,
                float* grads, int64_t m);
};

/// A norm over rows of width dim. w_off / b_off index the flat parameter buffer; has_weight=false is
/// a fixed gain of 1 (FOG's non-trainable QK-norm, RMSNorm only).
struct NormOp {
  NormKind kind = NormKind::RMSNorm;
  int64_t dim = 0;
  float eps = 1e-5f;
  bool has_weight = true;
  size_t w_off = 0, b_off = 0;  // b_off: LayerNorm only

  /// mean is written for LayerNorm only (may be null for RMSNorm).
  void forward(Backend& be, const float* x, float* y, float* mean, float* rstd, const float* params,
               int64_t rows);
  /// dx overwritten; the gain (and bias) gradients accumulate into grads.
  void backward(Backend& be, const float* x, const float* dy, float* dx, const float* mean,
                const float* rstd, const float* params, float* grads, int64_t rows);
};

}  // namespace octet::model_detail
