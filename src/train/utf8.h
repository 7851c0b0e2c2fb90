// src/train/utf8.h — UTF-8 validation after RFC 3629 (no overlongs, no surrogates, <= U+10FFFF),
// shared by the corpus reader (counting invalid bytes) and the BPE tokenizer (replacing them).
#pragma once

#include <cstddef>
#include <string>

namespace octet::train_detail {

/// Length (1-4) of the valid UTF-8 sequence starting at p[i], or 0 if the byte there starts none.
inline int utf8_seq_len(const unsigned char* p, size_t i, size_t n) {
  const unsigned c = p[i];
  int len = 0;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF)
    len = 2;
  else if (c == 0xE0)
    len = 3, lo = 0xA0;
  else if (c >= 0xE1 && c <= 0xEC)
    len = 3;
  else if (c == 0xED)
    len = 3, hi = 0x9F;
  else if (c >= 0xEE && c <= 0xEF)
    len = 3;
  else if (c == 0xF0)
    len = 4, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3)
    len = 4;
  else if (c == 0xF4)
    len = 4, hi = 0x8F;
  else
    return 0;
  if (i + size_t(len) > n) return 0;
  for (int k = 1; k < len; ++k) {
    const unsigned b = p[i + size_t(k)];
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
  }
  return len;
}

/// s with every byte that starts no valid sequence replaced by U+FFFD.
inline std::string utf8_sanitize(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_seq_len(p, i, s.size());
    if (len == 0) {
      o += "\xEF\xBF\xBD";
      ++i;
    } else {
      o.append(s, i, size_t(len));
      i += size_t(len);
    }
  }
  return o;
}

}  // namespace octet::train_detail
