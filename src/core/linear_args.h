// src/core/linear_args.h — the boundary check of Linear::forward's residual (octet/backend.h), shared
// by every backend's linear so that each refuses the same inputs with the same message.
#pragma once

#include "octet/error.h"
#include "octet/tensor.h"

namespace octet {

/// residual (may be empty) must be like y — same dtype and element count — and needs a y (a forward
/// without y only quantizes). Throws octet::Error naming the mismatch.
inline void check_linear_residual(const Tensor& residual, const Tensor& y) {
  if (residual.empty()) return;
  OCTET_CHECK(!y.empty(), "linear forward: a residual needs a y to add it to");
  OCTET_CHECK(residual.dtype == y.dtype && residual.numel() == y.numel(),
              "linear forward: residual must be like y " + y.str() + ", got " + residual.str());
}

}  // namespace octet
