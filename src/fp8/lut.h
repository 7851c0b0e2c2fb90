// src/fp8/lut.h — 256-entry decode tables (code -> exact float value, unscaled) for the host loops
// that decode many codes: dequantize() and the emulated FP8 GEMM. Built once from fp8_decode.
#pragma once

#include <cstdint>

#include "octet/fp8.h"

namespace octet::detail {

/// The table of fp8_decode(c, f) for c = 0..255 (NaN codes hold NaN, E5M2 inf codes ±inf).
const float* fp8_decode_lut(Format f);

}  // namespace octet::detail
