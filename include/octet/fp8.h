// octet/fp8.h — the 8-bit floating-point formats and the scale-from-amax math, for host and device.
//
// Implements the OCP 8-bit Floating Point Specification (OFP8) v1.0 — E4M3 ("E4M3FN": no infinity,
// only S.1111.111 is NaN, max 448) and E5M2 (IEEE-like: infinities and NaNs, max 57344) — plus
// BF16 rounding and the E8M0 block-scale format of the OCP Microscaling (MX) Formats v1.0 spec.
// Every conversion rounds to nearest, ties to even. Casting is either saturating (finite values
// beyond the max become ±max) or not (E4M3: NaN; E5M2: ±inf), as the spec defines both.
//
// Everything here is header-only and usable from CUDA device code (OCTET_HD), so that the CPU
// reference and the GPU kernels share one definition of every rounding and every scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define OCTET_HD __host__ __device__ __forceinline__
#else
#define OCTET_HD inline
#endif

namespace octet {

/// The two OFP8 element formats.
enum class Format : uint8_t { E4M3 = 0, E5M2 = 1 };

/// Largest finite magnitude: 448 for E4M3, 57344 for E5M2 (OFP8 v1.0, table 1).
OCTET_HD float fp8_max(Format f) { return f == Format::E4M3 ? 448.0f : 57344.0f; }

namespace detail {
OCTET_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}
OCTET_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}
// Exponent bits, mantissa bits and bias of a format.
OCTET_HD int exp_bits(Format f) { return f == Format::E4M3 ? 4 : 5; }
OCTET_HD int man_bits(Format f) { return f == Format::E4M3 ? 3 : 2; }
OCTET_HD int bias(Format f) { return f == Format::E4M3 ? 7 : 15; }
}  // namespace detail

/// Rounds |x| (finite, >= 0) onto the grid of `f` with round-to-nearest-even, ignoring the max.
/// The grid spacing is 2^(e - M) in binade e and 2^(emin - M) in the subnormal range.
OCTET_HD float fp8_round_magnitude(float a, Format f) {
  const int m = detail::man_bits(f);
  const int emin = 1 - detail::bias(f);
  int e = int((detail::f32_bits(a) >> 23) & 0xFF) - 127;  // floor(log2 a) for normal floats
  if (e < emin) e = emin;                                 // subnormal range (and float subnormals)
  // 2^(e-m) built from its exponent bits (e - m + 127 >= 111 > 0: always a normal float).
  const float quantum = detail::f32_from_bits(uint32_t(e - m + 127) << 23);
  const float inv_quantum = detail::f32_from_bits(uint32_t(m - e + 127) << 23);
  // Exact: both are powers of two, so a * inv_quantum == a / quantum (no division); rintf ties to even.
  return rintf(a * inv_quantum) * quantum;
}

/// Encodes x as an FP8 code of format `f` (round to nearest even).
/// saturate=true: |x| beyond max (and ±inf) become ±max; NaN stays NaN.
/// saturate=false: values that round beyond max become NaN (E4M3) or ±inf (E5M2); ±inf become
/// NaN (E4M3) or ±inf (E5M2). NaN encodes as 0x7F/0xFF (E4M3) and 0x7F/0xFF (E5M2 quiet NaN).
/// Works on the float's bits (the result equals rounding fp8_round_magnitude's way): normal
/// results round the 23-bit mantissa to M bits in integer arithmetic (a carry moves into the
/// exponent, as it should); results below 2^emin are rounded by one FP32 addition of 2^(emin−M+23),
/// whose ulp is exactly the FP8 subnormal step (RNE, the default rounding mode).
OCTET_HD uint8_t fp8_encode(float x, Format f, bool saturate) {
  const uint32_t bits = detail::f32_bits(x);
  const uint8_t sign = uint8_t((bits >> 24) & 0x80);
  const uint32_t u = bits & 0x7FFFFFFFu;
  const int m = detail::man_bits(f);
  const int b = detail::bias(f);
  const uint32_t max_code = f == Format::E4M3 ? 0x7Eu : 0x7Bu;
  const uint8_t overflow_code = saturate ? uint8_t(max_code) : (f == Format::E4M3 ? 0x7F : 0x7C);
  // Both candidates are computed and one is selected (no data-dependent branch: loops vectorize).
  // Normal result (or overflow; inf too): RNE of the mantissa, then rebias the exponent.
  const int shift = 23 - m;
  const uint32_t normal =
      ((u + ((1u << (shift - 1)) - 1u) + ((u >> shift) & 1u)) >> shift) - (uint32_t(127 - b) << m);
  // |x| < 2^emin: the number of FP8 subnormal steps 2^(emin−m); 2^m steps give code 1<<m, the
  // min normal. (For larger |x| this is garbage that the select below discards.)
  const uint32_t magic_bits = uint32_t(1 - b - m + 23 + 127) << 23;
  const uint32_t sub =
      detail::f32_bits(detail::f32_from_bits(u) + detail::f32_from_bits(magic_bits)) - magic_bits;
  const uint32_t min_normal = uint32_t(1 - b + 127) << 23;  // 2^emin as float bits
  uint32_t code = u >= min_normal ? normal : sub;
  code = code > max_code ? overflow_code : code;
  code = u > 0x7F800000u ? 0x7Fu : code;  // NaN
  return uint8_t(sign | code);
}

/// Decodes an FP8 code of format `f` to its exact value (NaN codes give NaN; E5M2 inf codes ±inf).
/// E4M3: 0x7F and 0xFF are NaN (never 480); E5M2: S.11111.00 is ±inf, S.11111.{01,10,11} NaN.
OCTET_HD float fp8_decode(uint8_t c, Format f) {
  const int m = detail::man_bits(f);
  const int b = detail::bias(f);
  const int emask = (1 << detail::exp_bits(f)) - 1;
  const float sign = (c & 0x80) ? -1.0f : 1.0f;
  const int e = (c >> m) & emask;
  const int mant = c & ((1 << m) - 1);
  if (f == Format::E4M3 && e == emask && mant == (1 << m) - 1) return NAN;
  if (f == Format::E5M2 && e == emask) return mant == 0 ? sign * INFINITY : NAN;
  if (e == 0) return sign * ldexpf(float(mant), 1 - b - m);
  return sign * ldexpf(float((1 << m) | mant), e - b - m);
}

/// True if |v| rounds beyond fp8_max, i.e. a saturating cast clamps it and a non-saturating one
/// gives NaN (E4M3) or inf (E5M2): |v| > 464 for E4M3 (464 ties down to 448, the even neighbour),
/// |v| >= 61440 for E5M2 (61440 ties up to 2^16). ±inf: true; NaN: false.
OCTET_HD bool fp8_overflows(float v, Format f) {
  const float a = fabsf(v);
  return f == Format::E4M3 ? a > 464.0f : a >= 61440.0f;
}

/// Quantize-dequantize: the value x becomes after an FP8 round trip (saturating).
OCTET_HD float fp8_round(float x, Format f) { return fp8_decode(fp8_encode(x, f, true), f); }

/// Rounds a float to the nearest BF16 value (ties to even), returned as float. NaN stays NaN.
/// On the GPU (sm_80+) one cvt.rn.bf16.f32 (PTX ISA: round to nearest even, subnormals kept), the
/// same bits as the integer form: the integer form cost GELU and the norms a third of their
/// instructions.
OCTET_HD float bf16_round(float x) {
  if (x != x) return x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint16_t r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(x));
  return detail::f32_from_bits(uint32_t(r) << 16);
#else
  uint32_t u = detail::f32_bits(x);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return detail::f32_from_bits(u & 0xFFFF0000u);
#endif
}

/// BF16 storage: the 16 high bits of bf16_round(x) (NaN stays a quiet NaN), the layout of
/// __nv_bfloat16 and torch.bfloat16.
OCTET_HD uint16_t bf16_from_float(float x) {
  if (x != x) return uint16_t((detail::f32_bits(x) >> 16) | 0x0040u);
  return uint16_t(detail::f32_bits(bf16_round(x)) >> 16);
}
/// The FP32 value of a BF16 bit pattern (exact).
OCTET_HD float bf16_to_float(uint16_t bits) { return detail::f32_from_bits(uint32_t(bits) << 16); }

/// E8M0 (OCP MX v1.0 §5.4): value 2^(code-127); 0xFF is NaN; there is no zero.
OCTET_HD float e8m0_decode(uint8_t code) {
  if (code == 0xFF) return NAN;
  return ldexpf(1.0f, int(code) - 127);
}

/// Encodes a power of two 2^k (k in [-127, 127]) as E8M0; any other positive value is rounded
/// down to a power of two first; NaN, inf and non-positive values give 0xFF (NaN).
OCTET_HD uint8_t e8m0_encode(float pow2) {
  if (!(pow2 > 0.0f) || pow2 == INFINITY) return 0xFF;
  int e = int((detail::f32_bits(pow2) >> 23) & 0xFF) - 127;
  if (e < -127) e = -127;
  return uint8_t(e + 127);
}

/// Largest power of two <= x (x finite, > 0), by clearing the mantissa bits: exact powers of two
/// are unchanged. Float subnormals are returned unchanged.
OCTET_HD float pow2_round_down(float x) {
  const uint32_t u = detail::f32_bits(x);
  if ((u & 0x7F800000u) == 0) return x;
  return detail::f32_from_bits(u & 0xFF800000u);
}

/// Smallest power of two >= x (x finite, > 0): exact powers unchanged, 1.5 -> 2.
OCTET_HD float pow2_round_up(float x) {
  const uint32_t u = detail::f32_bits(x);
  if ((u & 0x7F800000u) == 0) return x;
  if ((u & 0x007FFFFFu) == 0) return x;
  return detail::f32_from_bits((u & 0xFF800000u) + 0x00800000u);
}

/// The largest scale octet ever uses: 2^126, so that scale_inv = 2^-126 stays a normal float.
constexpr float kMaxScale = 8.5070591730234616e37f;  // 2^126

/// Scale s from an amax, so that q = cast(x * s) uses the range of `f` (Transformer Engine's
/// DelayedScaling formula): s = fp8_max / amax / 2^margin.
/// Rules for degenerate amax, one each:
///  - amax NaN or ±inf: returns NaN (callers decide: delayed scaling keeps its previous scale,
///    the per-block recipes store the NaN so that the block visibly carries it);
///  - amax == 0: returns 1 (all codes are 0 and dequantize to 0);
///  - amax so small that s would exceed 2^126: s = 2^126 (finite, scale_inv normal).
/// pow2=true rounds s down to a power of two (scale_inv rounded up), so amax*s never exceeds max.
OCTET_HD float scale_from_amax(float amax, Format f, int margin = 0, bool pow2 = false) {
  if (!(amax == amax) || amax == INFINITY || amax == -INFINITY) return NAN;
  if (amax == 0.0f) return 1.0f;
  float s = fp8_max(f) / fabsf(amax);
  s = ldexpf(s, -margin);
  if (!(s <= kMaxScale)) s = kMaxScale;
  if (pow2) s = pow2_round_down(s);
  return s;
}

/// Exponent of the largest power of two in the element format (OCP MX v1.0 §6.3 "emax_elem"):
/// 8 for E4M3 (448 = 1.75·2^8), 15 for E5M2 (57344 = 1.75·2^15).
OCTET_HD int fp8_emax(Format f) { return f == Format::E4M3 ? 8 : 15; }

/// The MX shared scale of a block as an E8M0 code (OCP MX v1.0 §6.3): X = 2^(floor(log2 amax) −
/// emax_elem); the elements are then cast (saturating) as x / X. floor(log2 amax) is read from the
/// exponent bits (bit-exact). Rules: amax 0 gives X = 1 (code 127); NaN or inf gives 0xFF (NaN);
/// X is clamped to [2^-126, 2^127] so that the scale 1/X never exceeds kMaxScale (tiny amax,
/// float subnormals included).
OCTET_HD uint8_t mx_scale_e8m0(float amax, Format f) {
  const float a = fabsf(amax);
  if (!(a == a) || a == INFINITY) return 0xFF;
  if (a == 0.0f) return 127;
  int x = int((detail::f32_bits(a) >> 23) & 0xFF) - 127 - fp8_emax(f);  // subnormals: <= -127-emax
  if (x < -126) x = -126;
  return uint8_t(x + 127);  // x <= 127 - emax_elem: never 0xFF
}

}  // namespace octet
