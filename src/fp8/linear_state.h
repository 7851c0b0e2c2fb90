// src/fp8/linear_state.h — the checkpoint state of one linear layer's three quantizer slots
// (X, W, dY), shared by the CPU and CUDA Linear (octet::Linear::quant_state / load_quant_state).
// Q is any quantizer with delayed_state() / load_delayed_state(DelayedState) (octet::Quantizer, the
// CUDA twin); the layout is pack_delayed_states' (quant.h). Only tensor-delayed has state.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "octet/error.h"
#include "octet/quant.h"

namespace octet::detail {

/// The packed state of the slots, or empty when the linear has none (`delayed` false).
/// The slot pointers may be null when the linear has no quantizers (BF16/FP32).
template <typename Q>
std::vector<float> linear_quant_state(bool delayed, const Q* x, const Q* w, const Q* dy) {
  if (!delayed) return {};
  return pack_delayed_states({x->delayed_state(), w->delayed_state(), dy->delayed_state()});
}

/// Restores what linear_quant_state() wrote. Throws octet::Error (nothing changed) on a state of
/// the wrong size or content, or a non-empty state for a linear without one.
template <typename Q>
void load_linear_quant_state(bool delayed, const std::vector<float>& state, int history_len, Q* x, Q* w,
                             Q* dy) {
  if (!delayed) {
    OCTET_CHECK(state.empty(), "linear: a quantizer state of " + std::to_string(state.size()) +
                                   " values for a linear without one (BF16/FP32 or a stateless "
                                   "recipe)");
    return;
  }
  const std::vector<DelayedState> s = unpack_delayed_states(state, 3, history_len);
  x->load_delayed_state(s[0]);
  w->load_delayed_state(s[1]);
  dy->load_delayed_state(s[2]);
}

/// The cross-rank exchange form of a recorded amax (backend.h Linear::pending_amaxes): −1 for
/// none (Quantizer::pending_amax() −1), else the float's bit pattern with the sign cleared (NaN
/// sorts above inf, so an int32 max over ranks is the float max and keeps a NaN).
inline int32_t amax_to_exchange(float pending) {
  if (pending == -1.0f) return -1;
  uint32_t bits;
  std::memcpy(&bits, &pending, 4);
  return int32_t(bits & 0x7FFFFFFFu);
}
/// The inverse (any negative value: none, −1).
inline float amax_from_exchange(int32_t v) {
  if (v < 0) return -1.0f;
  float f;
  const uint32_t bits = uint32_t(v);
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace octet::detail
