// src/core/hash.h — the one hash octet uses for content keys: FNV-1a 64 (Fowler, Noll & Vo; the
// IETF draft "The FNV Non-Cryptographic Hash Algorithm"). It names the tokenizer and token caches
// (src/train/tokenizer.cpp, dataset.cpp), checksums safetensors data (src/train/safetensors.cpp)
// and seeds each parameter's initializer by name (src/model/layout.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace octet::core {

/// FNV-1a 64 of n bytes, continuing from h (the offset basis by default): hash a sequence of
/// fields by passing each result as the next call's h.
inline uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace octet::core
