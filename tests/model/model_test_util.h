// tests/model/model_test_util.h — tiny model configurations and a fixed batch for the model tests
// (small enough to stay fast under AddressSanitizer).
#pragma once

#include <cstdint>
#include <vector>

#include "octet/model.h"

namespace octet::test {

/// L=2, d=16, 2 query heads sharing 1 KV head (GQA), F=24, vocab 32, T=8.
inline ModelConfig tiny_model() {
  ModelConfig c;
  c.n_layer = 2;
  c.d_model = 16;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.d_ff = 24;
  c.vocab_size = 32;
  c.seq_len = 8;
  c.init_std = 0.2f;  // large enough that every path carries gradient signal
  return c;
}

/// A deterministic batch of B sequences: ids and next-token targets in [0, vocab).
inline void tiny_batch(const ModelConfig& c, int64_t batch, std::vector<int32_t>& ids,
                       std::vector<int32_t>& targets, uint32_t salt = 1) {
  ids.resize(size_t(batch * c.seq_len));
  targets.resize(ids.size());
  uint32_t s = 2654435761u * salt;
  for (size_t i = 0; i < ids.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    ids[i] = int32_t((s >> 8) % uint32_t(c.vocab_size));
    s = s * 1664525u + 1013904223u;
    targets[i] = int32_t((s >> 8) % uint32_t(c.vocab_size));
  }
}

inline PrecisionConfig arm_precision(Arm arm) {
  PrecisionConfig p;
  p.arm = arm;
  return p;
}

}  // namespace octet::test
