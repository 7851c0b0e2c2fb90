// src/fp8/lut.cpp — the decode tables of lut.h, filled from fp8_decode on first use.
#include "fp8/lut.h"

#include <array>

namespace octet::detail {
namespace {
std::array<float, 256> make_lut(Format f) {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = fp8_decode(uint8_t(c), f);
  return t;
}
}  // namespace

const float* fp8_decode_lut(Format f) {
  static const std::array<float, 256> e4m3 = make_lut(Format::E4M3);
  static const std::array<float, 256> e5m2 = make_lut(Format::E5M2);
  return f == Format::E4M3 ? e4m3.data() : e5m2.data();
}

}  // namespace octet::detail
