// src/model/layout.h — the parameter table of the transformer (names, shapes, decay flags, offsets
// into one flat FP32 buffer) and its deterministic initialization.
//
// Names follow the PyTorch twin (tests/python/test_model_twin.py) so that a safetensors file moves
// between the two unchanged. Init follows GPT-2 (Radford et al. 2019): N(0, init_std) for matrices
// and embeddings, residual-branch output projections (proj, fc2) scaled by 1/√(2·n_layer), norm
// gains 1, biases 0; with unit scaling (μnit, arXiv 2502.05967) every matrix is N(0, 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/hash.h"
#include "octet/model.h"

namespace octet::model_detail {

/// The parameter table of `config` (offsets assigned in order, contiguous).
std::vector<ParamInfo> build_param_table(const ModelConfig& config);

/// Host values of every parameter (table order), from `seed`. Each tensor draws from its own
/// stream keyed by (seed, name), so adding or removing a tensor leaves the others unchanged.
std::vector<float> init_params(const ModelConfig& config, const std::vector<ParamInfo>& table, uint64_t seed);

/// splitmix64 (Steele, Lea & Flood 2014): the one RNG step octet uses for seeds and data order.
inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// FNV-1a 64 of a byte string (src/core/hash.h).
using core::fnv1a64;

}  // namespace octet::model_detail
