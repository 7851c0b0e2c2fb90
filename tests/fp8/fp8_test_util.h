// Shared by the fp8 tests: input generators that hit the zero, subnormal, normal and overflow
// ranges of a format on purpose (TE's habit), and the per-element rounding bound of a quantizer.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "octet/fp8.h"

namespace octet::test {

/// n values, deterministic in `seed`: 15% zeros, 30% log-uniform magnitudes in [2^-40, 2]
/// (under scaling they land in the subnormal and underflow ranges of both formats), 45% N(0,1),
/// 5% outliers in ±[500, 70000] (beyond fp8_max when a static scale of 1 is used), 5% float
/// subnormals and exact powers of two.
inline std::vector<float> mixed_range(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    const double p = u(rng);
    const float sign = u(rng) < 0.5 ? -1.0f : 1.0f;
    if (p < 0.15)
      v = 0.0f;
    else if (p < 0.45)
      v = sign * float(std::exp2(-40.0 + 41.0 * u(rng)));
    else if (p < 0.90)
      v = normal(rng);
    else if (p < 0.95)
      v = sign * float(500.0 + 69500.0 * u(rng));
    else if (p < 0.975)
      v = sign * 1e-40f;
    else
      v = sign * std::ldexp(1.0f, int(u(rng) * 20) - 10);
  }
  return x;
}

/// n values N(0, 1), deterministic in `seed`.
inline std::vector<float> normal_values(int64_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  return x;
}

/// Largest |x − decode(q)·scale_inv| a saturating quantizer with this scale_inv may produce:
/// half a step of the FP8 grid relative to |x| (2^-(M+1)), half the subnormal step in absolute
/// terms, or the clamp |x| − max·scale_inv; plus 2^-21·|x| for the FP32 roundings of x·s and
/// decode·scale_inv (s not a power of two).
inline double elem_bound(double x, double scale_inv, Format f) {
  const int mb = f == Format::E4M3 ? 3 : 2, emin = f == Format::E4M3 ? -6 : -14;
  const double a = std::fabs(x);
  const double rel = std::ldexp(a, -(mb + 1));
  const double sub = std::ldexp(scale_inv, emin - mb - 1);
  const double clamp = a - double(fp8_max(f)) * scale_inv;
  return std::fmax(std::fmax(rel, sub), clamp) + std::ldexp(a, -21);
}

}  // namespace octet::test
