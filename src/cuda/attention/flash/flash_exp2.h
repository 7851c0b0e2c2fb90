// src/cuda/attention/flash/flash_exp2.h — 2^x without the SFU: the flash forward's second source
// of exponentials, for host and device (the CPU tests check the host build; a GPU test checks that
// the device build gives the same bits).
//
// The Hopper forward's softmax needs one exponential per score, and the SFU (MUFU.EX2) delivers 16
// per clock per SM — as many cycles per 128 × 128 tile as the FP8 tensor core's two products at
// head_dim 128 (docs/attention.md §"What limits them"). FlashAttention-4 (Zadouri et al., 2025)
// computes part of its exponentials with a polynomial on the FMA units instead, which have 8× the
// SFU's rate. exp2_poly is that second source: 2^x = 2^⌊x⌋ · p(x − ⌊x⌋) with
//   p(f) = 1 + a1 f + a2 f² + a3 f³ + a4 f⁴,   f ∈ [0, 1),
// the minimax fit of relative error with p(0) = 1 (tools/fit_exp2_poly.py prints these FP32
// coefficients): at most 3.0e-6 relative error against 2^x (Horner with FMAs), exact at every
// integer x; the SFU's ex2.approx has 2^-22 ≈ 2.4e-7. An E4M3 P̃ (3 mantissa bits) rounds to the
// same code unless the value lies within 3e-6 relative of a rounding boundary; l sums the same
// values (the forward test's 1e-5 bound on l covers it).
// Instructions (device): a NaN-keeping clamp, ⌊x⌋ by one FADD rounding down onto a magic number
// (1.5·2^23 + 127: the sum's low mantissa bits are ⌊x⌋ + 127, which shifted by 23 are 2^⌊x⌋'s
// exponent field), two FADDs for f, four FFMAs, one shift and one FMUL: eight FMA-pipe and two
// integer operations against one SFU operation.
// Edge values, as ex2.approx.ftz: x in (−127, −126) gives 0 or a subnormal below 2^-126 (the flush
// gives 0; either is 0 after E4M3 and nothing in l ≥ 1), x ≤ −127 and −inf give +0, x ≥ 128 and
// +inf give +inf, NaN gives NaN. (The forward's arguments are at most log2(p_scale) + a few ulp.)
#pragma once

#include <cmath>
#include <cstdint>

#include "octet/fp8.h"

namespace octet::cuda::flash {

/// p(f)'s coefficients a1..a4 (tools/fit_exp2_poly.py --degree 4).
struct Exp2Poly {
  static constexpr float kA1 = 0.6930448412895203f;
  static constexpr float kA2 = 0.2412802129983902f;
  static constexpr float kA3 = 0.052242446690797806f;
  static constexpr float kA4 = 0.013426700606942177f;
  /// 1.5·2^23 + 127: RD(x + kMagic) = kMagic + ⌊x⌋ exactly for |x| < 2^22, an integer whose low
  /// mantissa bits hold ⌊x⌋ + 127 (the 1.5 keeps the sum in [2^23, 2^24): one unit per ulp).
  static constexpr float kMagic = 12583039.0f;
};

/// 2^x on the FMA units (file comment: error bound, edge values). Host and device compute the
/// same bits: ⌊x⌋ and f are exact, and each FMA rounds once on both.
OCTET_HD float exp2_poly(float x) {
  x = x < -127.0f ? -127.0f : x;  // NaN compares false and stays NaN
  x = x > 128.0f ? 128.0f : x;    // 2^128 is +inf: ⌊x⌋ + 127 stays within the 8 exponent bits
#if defined(__CUDA_ARCH__)
  const float r = __fadd_rd(x, Exp2Poly::kMagic);  // kMagic + ⌊x⌋
#else
  const float r = Exp2Poly::kMagic + std::floor(x);  // exact: an integer below 2^24
#endif
  // x − ⌊x⌋ ∈ [0, 1]: exact, except for a small negative x, where 1 − |x| rounds once (to 1 when
  // |x| < 2^-25: p(1) ≈ 2 times 2^-1, within the bound) — the same rounding on host and device.
  const float f = x - (r - Exp2Poly::kMagic);
  float p = fmaf(Exp2Poly::kA4, f, Exp2Poly::kA3);
  p = fmaf(p, f, Exp2Poly::kA2);
  p = fmaf(p, f, Exp2Poly::kA1);
  p = fmaf(p, f, 1.0f);
  // 2^⌊x⌋ from r's low 8 bits (⌊x⌋ + 127 ∈ [0, 255]: 0 gives +0, the flush of 2^-127; 255 gives
  // +inf). For a NaN x, p is NaN and the product stays NaN whatever the shifted bits are.
  const float scale = detail::f32_from_bits(detail::f32_bits(r) << 23);
  return p * scale;
}

}  // namespace octet::cuda::flash
