// src/core/quant_rules.cpp — the recipe and format rules (octet/quant.h; docs/numerics.md), written
// once for the CPU and CUDA quantizers and config validation: which element format a format policy
// gives a role (e4m3 everywhere, or hybrid: E5M2 gradients, as Transformer Engine), and the limits
// of a quantizer's settings.
#include <cmath>
#include <string>

#include "octet/error.h"
#include "octet/quant.h"

namespace octet {

Format format_for(FormatPolicy policy, Role role) {
  return policy == FormatPolicy::Hybrid && role == Role::Gradient ? Format::E5M2 : Format::E4M3;
}

void QuantConfig::validate(const std::string& key_prefix) const {
  // At most 2^20 amaxes (4 MiB a tensor slot): beyond it the history is an allocation failure
  // waiting to happen, not a recipe (Transformer Engine's default is 1024).
  OCTET_CHECK(amax_history_len >= 1 && amax_history_len <= kMaxAmaxHistory,
              key_prefix + "amax_history_len must be in [1, " + std::to_string(kMaxAmaxHistory) + "], got " +
                  std::to_string(amax_history_len));
  // |margin| <= 32 keeps 2^margin and the scale finite and non-zero; a negative margin saturates
  // the largest values on purpose (the overflow tests use it).
  OCTET_CHECK(margin >= -32 && margin <= 32,
              key_prefix + "margin must be in [-32, 32], got " + std::to_string(margin));
  OCTET_CHECK(std::isfinite(unit_scale) && unit_scale > 0.0f,
              key_prefix + "unit_scale must be finite and > 0, got " + std::to_string(unit_scale));
}

}  // namespace octet
