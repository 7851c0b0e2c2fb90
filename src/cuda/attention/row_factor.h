// src/cuda/attention/row_factor.h — dV's row factor f_i = 1/l_i (l_i the forward's Σ exp(S − m)):
// the flash and unfused backwards form dV's operand from dO_i · f_i, so that P̃ = exp(S − m) never
// underflows (docs/attention.md §"Backward"). One rule for every kernel that writes it (the dO
// glue, the delta pre-passes, the stale row kernel, the unfused row kernel), the CPU twin's
// (src/cpu/attention.cpp): 0 where l is not > 0 — a row that sees no key has l = 0 exactly, and a
// NaN l (non-finite inputs) gives 0 too.
#pragma once

#include "octet/fp8.h"  // OCTET_HD

namespace octet::cuda {

/// 1/l correctly rounded (IEEE division) for l > 0, else 0.
OCTET_HD float row_factor_of(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

}  // namespace octet::cuda
