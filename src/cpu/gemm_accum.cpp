// src/cpu/gemm_accum.cpp — the limited-precision accumulator of gemm_accum.h.
#include "cpu/gemm_accum.h"

#include <cstring>
#include <string>

#include "octet/error.h"

namespace octet {
namespace {
// Truncates a double to `bits` mantissa bits (toward zero), as a narrow accumulator does.
inline double truncate_mantissa(double v, int bits) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  u &= ~((uint64_t(1) << (52 - bits)) - 1);
  std::memcpy(&v, &u, 8);
  return v;
}
}  // namespace

LimitedAccumulator::LimitedAccumulator(const GemmOptions& o)
    : bits_(o.accum_mantissa_bits), interval_(o.promote_interval) {
  OCTET_CHECK(bits_ >= 1 && bits_ <= 23,
              "accum_mantissa_bits must be in [1, 23], got " + std::to_string(bits_));
  OCTET_CHECK(interval_ >= 0, "promote_interval must be >= 0, got " + std::to_string(interval_));
}

float LimitedAccumulator::dot(const float* a, const float* b, int64_t n, float scale) const {
  float fp32 = 0.0f;
  double run = 0.0;  // holds at most bits_+1 significant bits: exact in float after truncation
  int64_t since = 0;
  for (int64_t k = 0; k < n; ++k) {
    run = truncate_mantissa(run + double(a[k]) * double(b[k]), bits_);
    if (++since == interval_) {
      fp32 += float(run) * scale;
      run = 0.0;
      since = 0;
    }
  }
  if (since > 0) fp32 += float(run) * scale;
  return fp32;
}

}  // namespace octet
