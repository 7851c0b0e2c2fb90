// src/cuda/quantize/fp8_device.cuh — device-side forms of octet/fp8.h's rules shared by the CUDA kernels
// (quantize.cu, glue/glue.cu, unfused/unfused_rows.cu): the saturating FP8 cast through the
// hardware instruction, bitwise equal to fp8_encode(y, f, /*saturate=*/true); the amax decoded
// from its |x| bit pattern; the BF16 bits of bf16_round.
//
// cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (PTX ISA §"cvt", sm_89+; cuda_fp8.h __nv_cvt_float_to_fp8)
// rounds to nearest even and saturates finite overflow and ±inf to ±max, as fp8_encode does
// (tests/fp8/cuda_oracle_test.cpp checks cuda_fp8.h's conversion against fp8_encode for every code,
// every midpoint and a sweep of all floats). The one difference is NaN: the hardware returns the
// canonical 0x7F, octet keeps the sign of the input, restored here (OCP OFP8 v1.0 allows both).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "octet/fp8.h"

namespace octet::cuda {

/// fp8_encode(y, f, true) in one conversion instruction (plus the NaN sign select).
__device__ __forceinline__ uint8_t fp8_encode_sat(float y, Format f) {
  const uint8_t c = __nv_cvt_float_to_fp8(y, __NV_SATFINITE, f == Format::E4M3 ? __NV_E4M3 : __NV_E5M2);
  return y != y ? uint8_t(((__float_as_uint(y) >> 24) & 0x80u) | 0x7Fu) : c;
}

/// FP8 codes of (x0, x1), x0 in the low byte, in one cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: RNE, |x|
/// beyond max and ±inf saturate to ±max — fp8_encode(x, f, true) bit for bit for every non-NaN
/// input (tests/fp8/cuda_oracle_test.cpp); a NaN gives the canonical code 0x7F (0xFF for −NaN),
/// where fp8_encode_sat keeps the input's sign. A constant e5m2 folds to the one instruction.
__device__ __forceinline__ uint32_t fp8x2(float x0, float x1, bool e5m2) {
  return uint32_t(
      __nv_cvt_float2_to_fp8x2(make_float2(x0, x1), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3));
}

/// The amax whose |x| bit pattern is b (the unsigned-max reduction's result): NaN above inf.
__device__ __forceinline__ float amax_from_bits(unsigned b) {
  return b > 0x7F800000u ? NAN : __uint_as_float(b);
}

/// FP16 bits of two FP8 codes (E5M2 if kE5M2, else E4M3; the low byte's value in the low half):
/// exact, every FP8 value is an FP16 value (cvt.rn.f16x2.{e4m3x2,e5m2x2}, PTX ISA §"cvt", sm_89+).
template <bool kE5M2>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint16_t codes) {
  uint32_t h;
  if constexpr (kE5M2)
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;\n" : "=r"(h) : "h"(codes));
  else
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"(codes));
  return h;
}

/// The 16 high bits of bf16_round(x) (a NaN keeps its high bits, unlike bf16_from_float: the
/// attention kernels' rule since their first version).
__device__ __forceinline__ uint16_t bf16_bits(float x) {
  return uint16_t(__float_as_uint(bf16_round(x)) >> 16);
}

}  // namespace octet::cuda
