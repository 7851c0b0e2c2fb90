// src/fp8/delayed_state.cpp — the checkpointable state of tensor-delayed scaling (quant.h's
// DelayedState): validation, the flat float layout that Linear::quant_state uses (backend.h), and
// Quantizer::delayed_state / load_delayed_state. The state is what Transformer Engine's
// DelayedScaling keeps per tensor (amax history, scale); octet stores the history most recent last.
#include <cmath>
#include <string>
#include <vector>

#include "octet/error.h"
#include "octet/quant.h"

namespace octet {

namespace {
// True if v is an integer in [lo, hi] (as a float: the layout stores counts as floats).
bool integer_in(float v, double lo, double hi) {
  return std::isfinite(v) && v == std::floor(v) && double(v) >= lo && double(v) <= hi;
}
}  // namespace

void check_delayed_state(const DelayedState& s, int history_len, const std::string& what) {
  OCTET_CHECK(int64_t(s.history.size()) <= history_len,
              what + ": amax history of " + std::to_string(s.history.size()) +
                  " entries, but amax_history_len is " + std::to_string(history_len));
  for (size_t i = 0; i < s.history.size(); ++i)
    OCTET_CHECK(std::isfinite(s.history[i]) && s.history[i] >= 0.0f,
                what + ": amax history entry " + std::to_string(i) + " is " + std::to_string(s.history[i]) +
                    " (must be finite and >= 0)");
  OCTET_CHECK(std::isfinite(s.scale) && s.scale > 0.0f,
              what + ": delayed scale " + std::to_string(s.scale) + " (must be finite and > 0)");
  OCTET_CHECK(s.overflow_count >= 0, what + ": negative overflow count " + std::to_string(s.overflow_count));
}

std::vector<float> pack_delayed_states(const std::vector<DelayedState>& slots) {
  std::vector<float> out;
  for (const DelayedState& s : slots) {
    out.push_back(float(s.history.size()));
    out.insert(out.end(), s.history.begin(), s.history.end());
    out.push_back(s.scale);
    out.push_back(float(s.overflow_count));
  }
  return out;
}

std::vector<DelayedState> unpack_delayed_states(const std::vector<float>& data, int count, int history_len) {
  std::vector<DelayedState> slots(size_t(count > 0 ? count : 0));
  size_t pos = 0;
  const std::string total = "quantizer state of " + std::to_string(data.size()) + " values";
  for (int k = 0; k < count; ++k) {
    const std::string what = total + ", slot " + std::to_string(k + 1) + " of " + std::to_string(count);
    OCTET_CHECK(pos < data.size(), what + ": missing (expected " + std::to_string(count) +
                                       " slots of [n, history, scale, overflow count])");
    OCTET_CHECK(integer_in(data[pos], 0, history_len),
                what + ": history length " + std::to_string(data[pos]) +
                    " is not an integer in [0, amax_history_len = " + std::to_string(history_len) + "]");
    const size_t n = size_t(data[pos]);
    OCTET_CHECK(data.size() - pos >= n + 3, what + ": needs " + std::to_string(n + 3) +
                                                " values from offset " + std::to_string(pos) + ", only " +
                                                std::to_string(data.size() - pos) + " left");
    DelayedState& s = slots[size_t(k)];
    s.history.assign(data.begin() + int64_t(pos + 1), data.begin() + int64_t(pos + 1 + n));
    s.scale = data[pos + 1 + n];
    const float overflow = data[pos + 2 + n];
    OCTET_CHECK(integer_in(overflow, 0, 16777216.0),
                what + ": overflow count " + std::to_string(overflow) + " is not an integer in [0, 2^24]");
    s.overflow_count = int64_t(overflow);
    check_delayed_state(s, history_len, what);
    pos += n + 3;
  }
  OCTET_CHECK(pos == data.size(), total + ": " + std::to_string(data.size() - pos) +
                                      " values left over after " + std::to_string(count) + " slots");
  return slots;
}

DelayedState Quantizer::delayed_state() const {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "quantizer: the " + to_string(config_.recipe) + " recipe keeps no delayed state");
  return {history_, delayed_scale_, overflow_count_};
}

void Quantizer::load_delayed_state(const DelayedState& state) {
  OCTET_CHECK(config_.recipe == Recipe::TensorDelayed,
              "quantizer: the " + to_string(config_.recipe) + " recipe keeps no delayed state");
  check_delayed_state(state, config_.amax_history_len, "quantizer");
  history_ = state.history;
  delayed_scale_ = state.scale;
  overflow_count_ = state.overflow_count;
  last_overflow_ = false;
  pending_amax_ = -1.0f;
}

}  // namespace octet
